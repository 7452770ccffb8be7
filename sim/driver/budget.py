"""A play's retraining budget: each flag of `run` and `compare` given, else the settings'."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.settings import retraining_settings
from pipelines.task import load_task
from sim.driver.play_defaults import fill_budget_defaults, play_defaults
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
    """The simulation's options from the flags `run` and `compare` share (those not given: the
    task's `replay:` section, sim.driver.play_defaults), and `more`. The first
    model, trained at the end of the bootstrap days on the labels back by then (not yet those of
    the last day), holds out its validation and test days and trains on at least one more: a
    shorter bootstrap is refused here rather than failing its first retraining."""
    try:
        fill_budget_defaults(args, play_defaults(load_task()))
    except ValueError as e:
        raise UsageError(str(e)) from None
    budget = retraining_budget(args)
    held_out = budget["FLYWHEEL_VALIDATION_DAYS"] + budget["FLYWHEEL_TEST_DAYS"]
    if args.bootstrap_days < held_out + 2:
        raise UsageError(
            f"--bootstrap-days {args.bootstrap_days} leaves the first model "
            f"{args.bootstrap_days - 1} labelled days, too few for {held_out} held out "
            f"(validation {budget['FLYWHEEL_VALIDATION_DAYS']}, test "
            f"{budget['FLYWHEEL_TEST_DAYS']}) and one to train on: at least {held_out + 2} "
            "bootstrap days, or shorter --validation-days and --test-days"
        )
    return RunOptions(
        bootstrap_days=args.bootstrap_days,
        trials=budget["FLYWHEEL_TRIALS"],
        max_epochs=budget["FLYWHEEL_MAX_EPOCHS"],
        members=budget["FLYWHEEL_MEMBERS"],
        drift=args.drift,
        validation_days=budget["FLYWHEEL_VALIDATION_DAYS"],
        test_days=budget["FLYWHEEL_TEST_DAYS"],
        label_budget=args.label_budget,
        **more,
    )
