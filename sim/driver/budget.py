"""A play's retraining budget: each flag of `run` and `compare` given, else the settings'."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.settings import retraining_settings
from sim.driver.simulation import RunOptions, UsageError

FLAGS = {
    "FLYWHEEL_TRIALS": "trials",
    "FLYWHEEL_MAX_EPOCHS": "max_epochs",
    "FLYWHEEL_MEMBERS": "members",
    "FLYWHEEL_VALIDATION_DAYS": "validation_days",
    "FLYWHEEL_TEST_DAYS": "test_days",
}


def retraining_budget(args: argparse.Namespace) -> dict[str, int]:
    """The retraining settings of the run: each flag given, else the environment's or default.

    In process the flags rule; through the daemon, the code location's settings (the stack's
    environment) decide every retraining the sensors request, so a flag must agree with them.
    """
    try:
        settings = retraining_settings()
    except ValueError as e:
        raise UsageError(str(e)) from None
    for name, attribute in FLAGS.items():
        flag = getattr(args, attribute)
        if flag is None or flag == settings[name]:
            continue
        if getattr(args, "daemon", False):
            option = "--" + attribute.replace("_", "-")
            raise UsageError(
                f"{option} {flag} differs from the stack's {name}={settings[name]}, which its "
                f"sensors' retrainings use: start the stack with {name}={flag} (make stack-down; "
                f"{name}={flag} make stack-up) or drop {option}"
            )
        settings[name] = flag
    return settings


def play_options(args: argparse.Namespace, **more: Any) -> RunOptions:
    """The simulation's options from the flags `run` and `compare` share, and `more`."""
    budget = retraining_budget(args)
    return RunOptions(
        bootstrap_days=args.bootstrap_days,
        trials=budget["FLYWHEEL_TRIALS"],
        max_epochs=budget["FLYWHEEL_MAX_EPOCHS"],
        members=budget["FLYWHEEL_MEMBERS"],
        drift=args.drift,
        validation_days=budget["FLYWHEEL_VALIDATION_DAYS"],
        test_days=budget["FLYWHEEL_TEST_DAYS"],
        **more,
    )
