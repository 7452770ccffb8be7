"""Settings of the code location beyond the environment switch, read when the definitions are
built: a deployment sets them in the code server's environment (the stack passes on those of the
shell that starts it), so every run the daemon launches uses the same.

- `FLYWHEEL_TRIALS`, `FLYWHEEL_MAX_EPOCHS`, `FLYWHEEL_VALIDATION_DAYS`, `FLYWHEEL_TEST_DAYS`: the
  retraining job's budget and held-out windows (its run config; a run may override them),
  default 1 trial of 12 epochs, 7 and 7 days. The one trial is the `ml` defaults, early-stopped
  on the validation week; more trials add configurations drawn by the sampler and picked on that
  week, which on the 2013 main job did not pay for their time (README, Benchmarks).
- `FLYWHEEL_MEMBERS`: networks in each challenger, trained side by side from their own
  initialisations and averaged (a deep ensemble; the trials train one each), default 3.
- `FLYWHEEL_TUNING_WORKERS`: worker processes tuning each challenger's study together (default
  1, in the training step's own process); more need an RDB study storage
  (`FLYWHEEL_OPTUNA_STORAGE`) for their heartbeats.
- `FLYWHEEL_SENSOR_INTERVAL_S`: the least seconds between two evaluations of every sensor
  (default: each sensor's own, 30 or 60 s).
- `FLYWHEEL_TASK`: the task the code location serves, a name under `pipelines/tasks/` or a
  YAML file's path (default `flights`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Each setting of the retraining job: (op, config field, default).
RETRAINING_SETTINGS = {
    "FLYWHEEL_TRIALS": ("challenger_model", "n_trials", 1),
    "FLYWHEEL_MAX_EPOCHS": ("challenger_model", "max_epochs", 12),
    "FLYWHEEL_MEMBERS": ("challenger_model", "members", 3),
    "FLYWHEEL_VALIDATION_DAYS": ("training_dataset", "validation_days", 7),
    "FLYWHEEL_TEST_DAYS": ("training_dataset", "test_days", 7),
    "FLYWHEEL_TUNING_WORKERS": ("challenger_model", "workers", 1),
}
SENSOR_INTERVAL = "FLYWHEEL_SENSOR_INTERVAL_S"
TASK = "FLYWHEEL_TASK"
# The label exchange (pipelines/resources.py: label_exchange).
LABELING_SETTINGS = (
    "FLYWHEEL_LABELING",
    "FLYWHEEL_LABEL_STUDIO_URL",
    "FLYWHEEL_LABEL_STUDIO_TOKEN",
    "FLYWHEEL_LABEL_STUDIO_PROJECT",
)
# What the shell that starts a deployment may set for the code location.
SETTINGS = (*RETRAINING_SETTINGS, SENSOR_INTERVAL, TASK, *LABELING_SETTINGS)


def positive_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """Environment variable `name` as a whole number >= 1, None when unset; an error naming it
    otherwise."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name}={value!r}: expected a whole number >= 1")
    return int(value)


def retraining_settings(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Each retraining setting's value: from the environment, else its default."""
    return {
        name: value if (value := positive_int(name, environ)) is not None else default
        for name, (_, _, default) in RETRAINING_SETTINGS.items()
    }


def retraining_run_config(values: Mapping[str, int] | None = None) -> dict:
    """The retraining job's run config of setting `values` (default: the environment's)."""
    ops: dict[str, dict] = {}
    for name, value in (values or retraining_settings()).items():
        op, field, _ = RETRAINING_SETTINGS[name]
        ops.setdefault(op, {"config": {}})["config"][field] = value
    return {"ops": ops}


def sensor_interval_s(environ: Mapping[str, str] | None = None) -> int | None:
    """The least seconds between two evaluations of every sensor, or None for their own."""
    return positive_int(SENSOR_INTERVAL, environ)
