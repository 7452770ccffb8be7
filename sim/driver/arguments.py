"""The flags of `flywheel-sim`'s commands that `run` and `compare` share, and their types."""

from __future__ import annotations

import argparse
from datetime import date

from pipelines.settings import retraining_default
from sim.driver.budget import FLAGS
from sim.driver.policies import POLICIES
from sim.driver.simulation import RunOptions
from sim.world.drift import SYNTAX, PlantedDrift, parse_drift


def whole(minimum: int):
    """A whole number of at least `minimum`, as argparse's `type`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    return parse


positive_int, non_negative_int = whole(1), whole(0)


def iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date as YYYY-MM-DD, got {text!r}") from None


def drift(text: str) -> PlantedDrift:
    try:
        return parse_drift(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def policy_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: name each policy once, of {', '.join(POLICIES)}"
        )
    return names


# The retraining budget's flags (sim.driver.budget.FLAGS: a setting of the same meaning each).
RETRAINING_HELP = {
    "trials": "tuning trials per retraining",
    "max_epochs": "epochs per trial",
    "members": "networks averaged in each challenger",
    "validation_days": "latest labelled days each retraining holds out to validate on, before "
    "its test; the task's replay.validation_days, else",
    "test_days": "latest labelled days each retraining holds out to test on; the task's "
    "replay.test_days, else",
}


def play_arguments(parser: argparse.ArgumentParser) -> None:
    """What `run` and `compare` share: the days, the first model and the retraining budget."""
    parser.add_argument(
        "--days", type=positive_int, help="how many days (default: the task's replay.days)"
    )
    parser.add_argument(
        "--bootstrap-days",
        type=positive_int,
        help="days before the first model (default: the task's replay.bootstrap_days, else "
        f"{RunOptions.bootstrap_days})",
    )
    parser.add_argument(
        "--drift",
        type=drift,
        help=f"plant a break from a day on, {SYNTAX}: e.g. celsius@2013-11-01 (weather in "
        "Celsius), concept@2013-11-01 (B6 late more often), reschedule:EV+3@2013-11-01 (EV "
        "departs 3 hours later)",
    )
    parser.add_argument(
        "--label-budget",
        type=non_negative_int,
        help="examples sent to labeling per partition (default: the task's labels.budget)",
    )
    for setting, attribute in FLAGS.items():
        parser.add_argument(
            "--" + attribute.replace("_", "-"),
            type=positive_int,
            help=f"{RETRAINING_HELP[attribute]} ({setting}, {retraining_default(setting)})",
        )


# Examples shown under `--help`, each a command a newcomer runs as it is.
EXAMPLES = {
    "flywheel-sim": """examples:
  flywheel-sim run --start 2013-04-01 --days 275 --bootstrap-days 21   # what `make flywheel` plays
  flywheel-sim run --days 7                        # the first week of the task's play
  flywheel-sim compare --start 2013-11-25 --days 21 --policies every-7d,flywheel --seeds 3
  flywheel-sim status                              # the clock and the landing zone
  FLYWHEEL_TASK=movielens flywheel-sim run --start 1999-01-01 --days 72 --bootstrap-days 12

`flywheel-sim COMMAND --help` shows a command's flags and their defaults.""",
    "run": """examples:
  flywheel-sim run --start 2013-04-01 --days 275 --bootstrap-days 21
  flywheel-sim run --start 2013-10-15 --days 45 --drift concept@2013-11-15 --policy every-7d
  flywheel-sim run --days 30 --trials 4 --label-budget 300 --seed 2
  FLYWHEEL_HOME=.flywheel-b flywheel-sim run --start 2013-09-01 --days 60   # another state folder

A killed run resumes after the last day it finished: run the same command again.""",
    "new-task": """examples:
  flywheel-sim new-task emails --from data/samples/emails.csv --time time --label spam
  flywheel-sim new-task visits --from visits.parquet --time visited_at --label returned \\
      --positive yes --cadence weekly --budget 200

Then play it: make flywheel TASK=<name>. The task's YAML and models are yours to edit.""",
    "compare": """examples:
  flywheel-sim compare --start 2013-11-25 --days 21 --policies every-7d,flywheel --seeds 3
  flywheel-sim compare --start 2013-10-15 --days 45 --bootstrap-days 16 \\
      --policies flywheel,every-7d --seeds 3 --drift celsius@2013-11-15
  flywheel-sim compare --report-only --out .flywheel/compare   # judge a finished comparison again

Each play resumes after a kill; the report is written once every play is done.""",
}


def with_examples(command: str) -> dict:
    """`add_parser`'s (or `ArgumentParser`'s) keywords that show `command`'s examples."""
    return {"epilog": EXAMPLES[command], "formatter_class": argparse.RawDescriptionHelpFormatter}
