"""Tuning trials per device-hour with K trials at once on one device (K worker processes).

The same N trial configurations (a fixed spread over the search space, as a study would draw
them) are split over K processes that train at once on the one device, as `TuneConfig.workers`
tuning workers do; K = 1 runs them one after another. The K workers start their trials
together, once all have started up. Trials per hour count from that start to the last trial's
end (process start-up, which a long study pays once, is left out and shown apart). The GPU's
busy share is sampled through NVML over the same span. With NVIDIA's MPS daemon running
(``nvidia-cuda-mps-control -d``) the K processes' kernels can run at the same time; without it
they take turns.

Needs only ``ml/``, torch, lightning, numpy, pandas, pyarrow (and the NVML bindings), so it runs
as is on a GPU machine:

    python -m bench.trials_per_gpu_hour --k 1 2 4 8 --trials 16 --rows 200000 --epochs 5
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from dataclasses import asdict

import torch

from bench.train_throughput import BusySampler
from ml.config import ModelConfig, SearchSpace, TrainConfig
from ml.data import TabularDataModule
from ml.synthetic import FEATURES, make_table
from ml.training import share_cores, train


def trial_configs(n: int) -> list[tuple[ModelConfig, float]]:
    """N (model, learning rate) pairs spread over the search space; the same for every K."""
    space, rng = SearchSpace(), random.Random(0)
    return [
        (
            ModelConfig(
                arch=rng.choice(space.arch),
                width=rng.choice(space.width),
                depth=rng.randint(*space.depth),
                dropout=rng.uniform(*space.dropout),
            ),
            10 ** rng.uniform(-4, -1.5),
        )
        for _ in range(n)
    ]


def worker(args: argparse.Namespace) -> None:
    """Train this worker's share of the trials; one JSON line per trial on standard output."""
    if args.device == "cpu" or not args.all_cores:
        share_cores(args.workers)  # as ml.tuning.run_worker does
    logging.basicConfig(level=logging.ERROR)
    dm = TabularDataModule(
        make_table(args.rows, seed=0),
        make_table(max(args.rows // 5, 1000), seed=1, unseen=True),
        features=FEATURES,
        batch_size=args.batch_size,
    )
    print(json.dumps({"ready": time.time()}), flush=True)
    # Every worker's first trial starts together: the parent answers once all are ready.
    sys.stdin.readline()
    for number, (model, lr) in enumerate(trial_configs(args.trials)):
        if number % args.workers != args.index:
            continue
        config = TrainConfig(
            lr=lr,
            batch_size=args.batch_size,
            max_epochs=args.epochs,
            accelerator=args.device,
            early_stopping_patience=None,
            seed=number,
            step=args.step,
        )
        if args.device == "gpu":
            torch.cuda.reset_peak_memory_stats()  # each trial's own peak
        start = time.time()
        result = train(dm, model, config)
        peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "gpu" else None
        line = {
            "trial": number,
            "start": start,
            "end": time.time(),
            "val_logloss": result.best_metrics.get("val/logloss"),
            "peak_mib": peak,
            "model": asdict(model),
        }
        print(json.dumps(line), flush=True)


def run_k(k: int, args: argparse.Namespace, sampler: BusySampler) -> dict[str, float | None]:
    """Start K workers on the trials, wait for them; their throughput."""
    began = time.time()
    command = [sys.executable, "-m", "bench.trials_per_gpu_hour", "--worker"]
    options = [
        *("--workers", str(k), "--trials", str(args.trials), "--rows", str(args.rows)),
        *("--epochs", str(args.epochs), "--batch-size", str(args.batch_size)),
        *("--device", args.device, "--step", args.step),
        *(["--all-cores"] if args.all_cores else []),
    ]
    # Standard error to files: a full pipe would stall a worker while another one is read.
    with ExitStack() as files:
        errs = [files.enter_context(tempfile.TemporaryFile()) for _ in range(k)]
        with sampler.sampling() as busy:
            procs = [
                subprocess.Popen(
                    [*command, str(i), *options],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
                for i, err in enumerate(errs)
            ]
            # Each worker's first line says it is ready (b"" if it died starting up); then all go.
            firsts = [p.stdout.readline() for p in procs]
            go = time.time()
            started = all(firsts)
            for proc in procs:
                if not started:
                    proc.kill()  # one failed to start: the others are not run for nothing
                    continue
                with suppress(BrokenPipeError):  # one that died just now: its error follows
                    proc.stdin.write(b"go\n")
                    proc.stdin.flush()
            outputs = [p.communicate()[0] for p in procs]
        for proc, err, first in zip(procs, errs, firsts, strict=True):
            if proc.returncode != 0 and (started or not first):
                err.seek(0)
                tail = err.read().decode()[-3000:]
                raise SystemExit(f"a worker failed ({proc.returncode}):\n{tail}")
    texts = [first + out for first, out in zip(firsts, outputs, strict=True)]
    lines = [json.loads(x) for out in texts for x in out.decode().splitlines() if x.strip()]
    trials = [x for x in lines if "trial" in x]
    ready = max(x["ready"] for x in lines if "ready" in x)
    first, last = go, max(t["end"] for t in trials)
    inside = [v for t, v in busy if first <= t <= last]
    peaks = [t["peak_mib"] for t in trials if t["peak_mib"] is not None]
    return {
        "k": k,
        "trials": len(trials),
        "seconds": last - first,
        "startup_s": ready - began,
        "trials_per_hour": 3600 * len(trials) / (last - first),
        "busy": statistics.fmean(inside) if inside else None,
        "peak_mib": max(peaks) if peaks else None,
        "best_logloss": min(t["val_logloss"] for t in trials),
    }


def _mps() -> str:
    """Whether NVIDIA's MPS control daemon is running (its pipe directory's control file)."""
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return "on" if os.path.exists(os.path.join(pipes, "control")) else "off"


def main() -> None:
    """Run every K and print trials per hour beside K = 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--device", default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--step", choices=["auto", "graphed", "plain"], default="auto")
    parser.add_argument(
        "--all-cores",
        action="store_true",
        help="on a GPU, each worker takes a thread per core, not its share as tuning workers do "
        "(CPU: always its share)",
    )
    parser.add_argument("--worker", type=int, dest="index", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.device = "gpu" if args.device in ("cuda", "gpu") else args.device
    if args.index is not None:
        worker(args)
        return
    device = torch.cuda.get_device_name() if args.device == "gpu" else f"cpu x{os.cpu_count()}"
    sampler = BusySampler(args.device, clock=time.time)  # the workers' clock
    results = []
    for k in args.k:
        print(f"K={k}: {args.trials} trials ...", flush=True)
        results.append(run_k(k, args, sampler))
    base = results[0]["trials_per_hour"]
    print(
        f"\ndevice={device} rows={args.rows:,} epochs={args.epochs} batch={args.batch_size} "
        f"trials={args.trials} step={args.step} mps={_mps()} all_cores={args.all_cores}\n"
    )
    print("| K | trials | s (start to last end) | trials per hour | x K=1 | GPU busy % |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        busy = f"{r['busy']:.0f}" if r["busy"] is not None else "n/a"
        print(
            f"| {r['k']} | {r['trials']} | {r['seconds']:.1f} | {r['trials_per_hour']:,.0f} | "
            f"{r['trials_per_hour'] / base:.2f} | {busy} |"
        )
    print("\nworker start-up (imports, data, to the first trial), s:", end=" ")
    print(", ".join(f"K={r['k']}: {r['startup_s']:.1f}" for r in results))
    peaks = [f"K={r['k']}: {r['peak_mib']:,.0f}" for r in results if r["peak_mib"] is not None]
    if peaks:
        print("peak MiB allocated by one trial (the largest):", ", ".join(peaks))


if __name__ == "__main__":
    main()
