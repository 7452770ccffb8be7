"""Benchmarks that print figures (docs/benchmarks.md: the current ones, each with its command)."""

from __future__ import annotations

import logging


def quiet_lightning(level: int = logging.ERROR) -> None:
    """Keep Lightning's log lines below `level` (its banners, once per fit) out of a benchmark's
    figures."""
    import lightning.pytorch  # noqa: F401  (its import sets its loggers' levels: set them after)

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(level)
