"""`flywheel-sim compare`: replay the same days under several retraining policies and seeds.

Each policy plays the simulation from nothing once per seed, in a state folder of its own (its
warehouse, registry, Dagster instance and landing zone under `<out>/<policy>/seed-<seed>`), in a
process of its own, with only its retraining triggers requesting, or its fixed cadence
(sim.driver.policies). The same days land and the first model trains on the same bootstrap days;
a seed draws the tuning sampler, the networks' initialisations and the label export's audit and
random samples, the same for every policy. What differs within a seed is when each policy retrains.
The plays share one folder of trained challengers (`<out>/models`, ml.model_cache): a
retraining on a dataset version another play already trained on, with the same seed and
settings, reuses that model (the first model of a seed, trained on the same random labels by
every policy, trains once).
The comparison then reads every play's report tables and writes one report
(sim.judge.policies): per policy over its seeds, its regret against the best fixed cadence in
hindsight, and paired weekly differences with their intervals. `--report-only` writes that
report again from a finished comparison's folder, replaying nothing (sim.driver.rejudge).

Plays run `jobs` at a time, each pinned to its share of the machine's cores (its training's
threads too), the first model of every seed first: a seed's later plays find it in the shared
folder rather than training it again side by side.

A play whose simulation was killed resumes where it stopped when the same comparison is asked
for again, more seeds or policies added; a folder holding a comparison of other days is
refused, never mixed in.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from pipelines.settings import REPO_ROOT, flywheel_home
from sim.driver.budget import play_options
from sim.driver.console import say
from sim.driver.policies import CADENCES, POLICIES
from sim.driver.simulation import STATE_PATHS, RunOptions, UsageError, days_to_play, own_state
from sim.judge.policies import Play, read_play, write

STATE = "compare.json"
# The challengers every play trains, shared: a model trained on the same dataset version with
# the same seed and settings is the same model, whichever policy asked for it (ml.model_cache).
MODELS = "models"


class PolicyFailedError(Exception):
    """A policy's simulation failed, or left no report to compare."""


@dataclass(frozen=True)
class Comparison:
    """What every play shares: the same days, first model and retraining budget; `layout`
    names the folders' layout, so that a folder of an older comparison is refused."""

    start: str
    days: int
    bootstrap_days: int
    trials: int
    max_epochs: int
    members: int
    validation_days: int
    test_days: int
    drift: str | None
    layout: str = "policy/seed"


def home_of(out: Path, policy: str, seed: int) -> Path:
    """The state folder of `policy`'s play with `seed`."""
    return out / policy / f"seed-{seed}"


def comparison_of(start: date, days: int, options: RunOptions) -> Comparison:
    return Comparison(
        start.isoformat(),
        days,
        options.bootstrap_days,
        options.trials,
        options.max_epochs,
        options.members,
        options.validation_days,
        options.test_days,
        str(options.drift) if options.drift else None,
    )


def _state(out: Path, comparison: Comparison) -> dict:
    """The folder's comparison record: created, or checked to be this comparison's."""
    path = out / STATE
    if path.exists():
        state = json.loads(path.read_text())
        if state["comparison"] != asdict(comparison):
            raise UsageError(
                f"{out} holds a comparison of other settings ({state['comparison']}); "
                "remove it or pass another --out"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        state = {"comparison": asdict(comparison), "wall_s": {}}
        path.write_text(json.dumps(state, indent=1))
    return state


def _arguments(
    comparison: Comparison, policy: str, seed: int, report: Path, baselines: bool, models: Path
) -> list[str]:
    args = ["run", "--policy", policy, "--seed", str(seed), "--model-cache", str(models)]
    args += ["--start", comparison.start, "--days", str(comparison.days)]
    args += ["--bootstrap-days", str(comparison.bootstrap_days)]
    args += ["--trials", str(comparison.trials), "--max-epochs", str(comparison.max_epochs)]
    args += ["--members", str(comparison.members)]
    args += ["--validation-days", str(comparison.validation_days)]
    args += ["--test-days", str(comparison.test_days), "--report-dir", str(report), "--brief"]
    if comparison.drift:
        args += ["--drift", comparison.drift]
    return args if baselines else [*args, "--no-baselines"]


THREAD_POOLS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def environment(home: Path, cores: list[int] | None = None) -> dict[str, str]:
    """The environment of a policy's simulation: this one, with a state of its own under `home`;
    with `cores`, the thread pools (OpenMP, BLAS) sized to them."""
    inherited = {k: v for k, v in os.environ.items() if k not in STATE_PATHS}
    pools = {name: str(len(cores)) for name in THREAD_POOLS} if cores else {}
    return {**inherited, **own_state(home), **pools}


def machine_cores() -> list[int]:
    """The cores this process may run on (a cpuset, taskset), else all of the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def core_slots(jobs: int, cores: list[int] | None = None) -> list[list[int]]:
    """The cores of each of `jobs` plays running at once: an equal share each, the remainder
    to the first; with more plays than cores, plays share a core each in turn."""
    cores = cores if cores is not None else machine_cores()
    if jobs >= len(cores):
        return [[cores[i % len(cores)]] for i in range(jobs)]
    size, extra = divmod(len(cores), jobs)
    slots, at = [], 0
    for i in range(jobs):
        width = size + (1 if i < extra else 0)
        slots.append(cores[at : at + width])
        at += width
    return slots


def default_jobs() -> int:
    """Plays at once by default: one per core, at most four (each play holds its own
    warehouse, Dagster instance and models in memory)."""
    return max(1, min(4, len(machine_cores())))


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int, cores: list[int] | None) -> Callable[[], None]:
    """In the child, before it runs the simulation: pin it to `cores`, and ask Linux to kill it
    when its parent dies. A compare killed with SIGKILL would otherwise leave its policy's
    simulation running, and the same command run again would start a second one on the same
    state. (Linux sends that signal when the thread that started the child ends: each play's
    thread waits for its child.)"""

    def arm() -> None:
        if cores:
            os.sched_setaffinity(0, cores)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the request was in place
            os._exit(1)

    return arm


def play(
    comparison: Comparison,
    policy: str,
    seed: int,
    out: Path,
    baselines: bool,
    cores: list[int] | None = None,
) -> float:
    """Play `policy`'s simulation with `seed` in its own process and state folder (on `cores`,
    if given); its day lines are shown prefixed by the policy (and the seed, if not 0). Returns
    its wall seconds; raises naming the policy if it fails."""
    home = home_of(out, policy, seed)
    args = _arguments(comparison, policy, seed, home / "report", baselines, out / MODELS)
    prefix = policy if seed == 0 else f"{policy} seed {seed}"
    command = [sys.executable, "-m", "sim", *args]
    began = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=environment(home, cores),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        preexec_fn=_die_with_parent(os.getpid(), cores) if sys.platform == "linux" else None,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            say(f"{prefix}: {line.rstrip()}")
    if process.returncode != 0:
        raise PolicyFailedError(
            f"policy {policy!r}, seed {seed}: the simulation exited with {process.returncode} "
            f"(its lines above; its state is in {home}: run the same compare command again to "
            "resume it)"
        )
    return time.monotonic() - began


def read_result(out: Path, policy: str, seed: int, wall_s: float) -> Play:
    """The play's report tables; PolicyFailedError if its simulation wrote none."""
    found = read_play(home_of(out, policy, seed) / "report", policy, seed, wall_s)
    if isinstance(found, str):
        raise PolicyFailedError(
            f"policy {policy!r}, seed {seed} wrote {found}: its simulation reported no "
            "production period (more --days, or fewer --bootstrap-days)"
        )
    return found


def _intro(out: Path, comparison: Comparison, policies: list[str], seeds: list[int]) -> str:
    plays = "; ".join(f"{p}: {POLICIES[p].describe()}" for p in policies)
    return (
        f"The same {comparison.days} days from {comparison.start}, each policy from nothing "
        f"with each of the seeds {', '.join(map(str, seeds))}, every play in its own state "
        f"folder under {out}: the first model after {comparison.bootstrap_days} days, then "
        f"only the policy's retraining ({plays}). A seed draws the tuning sampler, the "
        "networks' initialisations and the label export's audit and random samples, the same "
        f"for every policy. Tuning budget {comparison.trials} trials x "
        f"{comparison.max_epochs} epochs, challengers of {comparison.members} networks; "
        f"planted drift: {comparison.drift or 'none'}. Each play's own report: "
        "`<policy>/seed-<seed>/report/flywheel_report.md`; its runs and assets in the Dagster "
        f"UI: `make dev FLYWHEEL_HOME={out}/<policy>/seed-<seed>`."
    )


def order_of_play(policies: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """Policy by policy, each with every seed: plays running side by side then hold different
    seeds, so each seed's first model trains once, in the first of its plays, and the seed's
    later plays take it from the shared folder."""
    return [(policy, seed) for policy in policies for seed in seeds]


def compare(
    days: int,
    start: date,
    options: RunOptions,
    policies: list[str],
    out: Path,
    seeds: Iterable[int] = (0,),
    jobs: int = 1,
) -> tuple[Path, pd.DataFrame]:
    """Play every policy with every seed, `jobs` plays at a time (each resumed where a killed
    run stopped), then write the report; the report and its summary table. The baselines are
    trained once, in the seed 0 play of the flywheel policy (else of the first). A failed play
    lets the running ones finish, starts no other, and is raised."""
    comparison = comparison_of(start, days, options)
    state = _state(out, comparison)
    seeds = list(seeds)
    trains_baselines = "flywheel" if "flywheel" in policies else policies[0]
    order = order_of_play(policies, seeds)
    jobs = max(1, min(jobs, len(order)))
    slots: queue.Queue[list[int] | None] = queue.Queue()
    for cores in core_slots(jobs) if jobs > 1 else [None]:
        slots.put(cores)
    lock = threading.Lock()
    started = iter(range(1, len(order) + 1))

    def one(policy: str, seed: int) -> Play:
        cores = slots.get()
        try:
            with lock:
                number = next(started)
            say(
                f"play {number}/{len(order)}: {policy}, seed {seed} "
                f"({POLICIES[policy].describe()})" + (f" on cores {cores}" if cores else "")
            )
            baselines = policy == trains_baselines and seed == seeds[0]
            seconds = play(comparison, policy, seed, out, baselines, cores)
        finally:
            slots.put(cores)
        key = f"{policy}/{seed}"
        with lock:
            state["wall_s"][key] = state["wall_s"].get(key, 0.0) + seconds
            (out / STATE).write_text(json.dumps(state, indent=1))
            total = state["wall_s"][key]
        return read_result(out, policy, seed, total)

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="play") as pool:
        futures = {pool.submit(one, policy, seed): (policy, seed) for policy, seed in order}
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            for future in pending:
                future.cancel()
            wait(pending)
            raise failed[0].exception()  # type: ignore[misc]
    results = {futures[f]: f.result() for f in futures}
    plays = [results[(policy, seed)] for seed in seeds for policy in policies]
    cadences = [p for p in policies if p in CADENCES]
    worth = {s: labels_worth(out, s) for s in seeds} if "flywheel" in policies else None
    broken = planted_break(out, comparison, plays) if comparison.drift else None
    return write(out, _intro(out, comparison, policies, seeds), plays, cadences, worth, broken)


def planted_break(out: Path, comparison: Comparison, plays: list[Play]) -> tuple[str, pd.DataFrame]:
    """The planted break judged over the plays (sim.judge.breaks), and the task's feed checks
    over the replayed year: the text and the table by policy."""
    from pipelines.task import task_name
    from sim.judge.breaks import break_summary, describe_year, feed_checks_over_the_year
    from sim.world.clock import read_progress
    from sim.world.drift import parse_drift

    drift = parse_drift(str(comparison.drift))
    starts = [read_progress(home_of(out, p.policy, p.seed))[1] for p in plays]
    production = min(s for s in starts if s is not None)
    say(f"the planted break: {drift}, and the feed checks over the replayed year")
    year = describe_year(feed_checks_over_the_year(task_name(), drift.kind))
    text = (
        f"{drift} planted in every play; production from {production}. Per policy over its "
        "plays: `caught`, plays whose checks failed on the break within a day; "
        "`worst_check_delay_days`; `false_check_days`, days a check failed on before the break; "
        "the drift and performance alarms before it and the production days per false alarm; "
        "`alarm_delay_days`, from the break to the first alarm's retraining (mean); "
        "`promoted_gain`, the first model promoted on or after the break against the champion "
        "it replaced, production AUC over the next 14 days, mean with its 95% interval over "
        f"the plays, and `not_worse`, in how many it was not below the champion.\n\n{year}"
    )
    return text, break_summary(plays, drift.start, production)


def labels_worth(out: Path, seed: int) -> pd.DataFrame:
    """The flywheel play's labels'-worth table (sim.judge.labels_worth), fitted in the play's
    environment unless its report already holds one newer than its weekly table."""
    from sim.judge.labels_worth import FILE

    home = home_of(out, "flywheel", seed)
    table, weekly = home / "report" / FILE, home / "report" / "weekly.csv"
    if not table.exists() or table.stat().st_mtime < weekly.stat().st_mtime:
        say(f"flywheel seed {seed}: the references at multiples of its labels")
        command = [sys.executable, "-m", "sim.judge.labels_worth", "--seed", str(seed)]
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=environment(home), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise PolicyFailedError(
                f"the labels' worth of the flywheel play with seed {seed} failed:\n{done.stderr}"
            )
        say(f"flywheel seed {seed}: {done.stdout.strip()}")
    return pd.read_csv(table, parse_dates=["week"])


def compare_command(args: argparse.Namespace) -> int:
    """`flywheel-sim compare`: every policy's simulation, then the comparison's report."""
    if args.start is None or args.days is None:
        raise UsageError("compare plays --start and --days (or --report-only judges --out again)")
    options = play_options(args)
    days_to_play(args.days, args.start)  # a start outside the task is a usage error
    out = (args.out or flywheel_home() / "compare").resolve()
    try:
        jobs = args.jobs or default_jobs()
        markdown, summary = compare(
            args.days, args.start, options, args.policies, out, range(args.seeds), jobs
        )
    except PolicyFailedError as e:
        say(f"error: {e}", error=True)
        return 1
    say(summary.to_markdown(index=False, floatfmt=".3f"))
    say(f"report: {markdown} and {markdown.parent / 'weekly_auc.png'}")
    say(f"see a play's runs and assets: make dev FLYWHEEL_HOME={out}/<policy>/seed-<seed>")
    return 0
