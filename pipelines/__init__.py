"""The flywheel's Dagster code location (`pipelines.definitions`) and what it is built from."""

import warnings

# The partitioned assets declare single-run backfills (one run per backfill, not one per day), a
# parameter Dagster marks beta; chosen knowingly, so its warning is not repeated by every process
# that loads the code location. Any other beta or preview warning still shows.
warnings.filterwarnings(
    "ignore", message="Parameter `backfill_policy` of function", module="dagster"
)
