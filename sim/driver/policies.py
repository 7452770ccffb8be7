"""The simulation's retraining policies: what retrains once the first model is trained.

A policy reaches the pipeline by one mechanism, the deployed one: its triggers become
FLYWHEEL_RETRAIN_ON, which stands in for the task's `monitoring.retrain_on`
(pipelines.task.thresholds). Every sensor and the schedule tick as the daemon would tick them;
those the setting leaves out watch and log what they would have requested. A fixed cadence turns
every trigger off and retrains on the simulated calendar instead, every N days, as a team's cron
job would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipelines.settings import RETRAIN_ON
from pipelines.task.thresholds import Trigger


@dataclass(frozen=True)
class Policy:
    name: str
    # The triggers that request a retraining; None: the task's own `monitoring.retrain_on`, as
    # deployed.
    triggers: tuple[Trigger, ...] | None
    # The simulated calendar retrains every `cadence_days` days of production.
    cadence_days: int | None = None
    # The label export's uniform audit share, the rest of the budget spent on targeted picks
    # (drifted segments and the least sure examples); None: every label uniform.
    audit_share: float | None = None

    @property
    def retrain_on(self) -> str | None:
        """FLYWHEEL_RETRAIN_ON's value under this policy (`none` for no trigger); None where the
        task's own setting plays."""
        if self.triggers is None:
            return None
        return ",".join(self.triggers) or "none"

    def describe(self) -> str:
        """What retrains under this policy once the first model is trained, in words."""
        if self.cadence_days is not None:
            return f"a retraining every {self.cadence_days} days"
        on = self.triggers
        if on is None:
            from pipelines.task import load_task

            on = load_task().monitoring.retrain_on
        triggers = ", ".join(t.definition_name for t in Trigger if t in on)
        if self.triggers is None:
            triggers = triggers or "none"
        elif not triggers:
            return "no retraining"
        share = self.audit_share
        return triggers + (f"; labels {share:.0%} audit, the rest targeted" if share else "")


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("static", ()),
        Policy("weekly", (Trigger.SCHEDULE,)),
        *(Policy(f"every-{n}d", (), cadence_days=n) for n in (3, 7, 14, 28)),
        Policy("excess-loss", (Trigger.EXCESS_LOSS,)),
        Policy("drift", (Trigger.DRIFT,)),
        Policy("performance", (Trigger.PERFORMANCE,)),
        # The pipeline as deployed.
        Policy("flywheel", None),
        Policy("targeted-labels", None, audit_share=0.4),
    )
}
CADENCES: dict[str, int] = {n: p.cadence_days for n, p in POLICIES.items() if p.cadence_days}
# What `flywheel-sim compare` plays by default: every policy but `weekly`, which `every-7d` plays
# without the schedule's cooldown, and those that change the labels, played when named.
DEFAULT_COMPARED = tuple(n for n, p in POLICIES.items() if n != "weekly" and p.audit_share is None)


def apply(name: str) -> None:
    """Set the policy `name` for the code location this process is about to load: its triggers
    stand in for the task's `monitoring.retrain_on` (an as-deployed policy leaves it as set)."""
    if (value := POLICIES[name].retrain_on) is not None:
        os.environ[RETRAIN_ON.name] = value


def check_applied(name: str, daemon: bool) -> None:
    """Refuse to play `name` where the pipeline would not apply it: the code location was set
    up with other triggers, or a stack's code server applies its own task file's."""
    policy = POLICIES[name]
    if daemon and policy.triggers is not None:
        raise ValueError(
            f"policy {name!r}: on a stack, the code server's own monitoring.retrain_on decides "
            f"what retrains; play {name!r} in process, or set retrain_on in the task file and "
            "play `flywheel`"
        )
    if policy.triggers is None:
        return
    from pipelines.task import load_task

    on = load_task().monitoring.retrain_on
    if set(on) != set(policy.triggers):
        raise ValueError(
            f"policy {name!r} retrains on {[str(t) for t in policy.triggers]}, but the code "
            f"location's monitoring.retrain_on is {[str(t) for t in on]}: set "
            f"{RETRAIN_ON.name}={policy.retrain_on} before it loads (`flywheel-sim run --policy` "
            "does)"
        )
