"""Benchmark: which training set serves production best, replayed on a finished run's labels?

    python -m bench.training_sets --home DIR [--every-days 28] [--exponents 0,0.5,1]
                                  [--half-lives 60,120] [--windows 90,180] [--seeds 3]
                                  [--members 2,3]

Reads a finished simulation's warehouse (its FLYWHEEL_HOME): the labels it bought, each with why it
was picked, and every flight it played. On a cut day every `--every-days` days, the labels known
before that day train the network (fixed settings: the ml defaults, `--max-epochs` epochs, early
stopping on the last 7 labelled days; `--seeds` seeds, their AUCs averaged) and a
HistGradientBoosting, once per variant of the training set:

- each importance exponent (`pipelines.labeling.selection.importance_weights`: 0 weighs every
  label alike, 1 is the Horvitz-Thompson weighting of the audit labels);
- each recency half-life in days (a label `age` days before the cut weighs 0.5^(age/half-life));
- each window in days (only the labels of that many days before the cut);
- each number of networks averaged in the model (`ml.config.ModelConfig`'s `members`: trained
  side by side from their own initialisations; the GBDT is the same for every count).

The network trains on those labels but the last 7 labelled days (its early stopping's), the
GBDT on all of them; variants are compared model by model. Each model then scores every flight
of the 14 days from the cut day, whose outcomes only the simulator knows. It prints the AUC and
log loss per cut day and variant, their means (and `ens_auc`, the AUC of the seeds' networks'
mean probability: what averaging independently trained networks gives), each variant's mean
difference from the first with how many cut days it won, and the GBDT's AUC on the uniformly
drawn labels alone.

The labels were picked by the run's own models, so this replays the training sets, not the
loop: a model trained otherwise would also have picked other flights.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from bench import quiet_lightning
from ml.config import FeatureConfig, ModelConfig, TrainConfig
from ml.metrics import auroc, logloss

HORIZON_DAYS = 14
VALIDATION_DAYS = 7


def load(home: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's labelled examples and every flight it played (with its outcome)."""
    import duckdb

    from sim.world.nycflights import is_late

    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        examples = con.sql("select * from fct_labelled_flights").df()
        flights = con.sql("select * from fct_flight_features").df()
    flights["is_late"] = [is_late(f) for f in flights.flight_id]
    for frame in (examples, flights):
        frame["flight_date"] = pd.to_datetime(frame.flight_date).dt.date
    return examples, flights


def cut_days(examples: pd.DataFrame, flights: pd.DataFrame, every: int) -> list:
    """Cut days from five weeks after the first label to the last one with 14 days after it."""
    first = pd.Timestamp(examples.flight_date.min()) + pd.Timedelta(days=35)
    last = pd.Timestamp(flights.flight_date.max()) - pd.Timedelta(days=HORIZON_DAYS - 1)
    return [d.date() for d in pd.date_range(first, last, freq=f"{every}D")]


def network_scores(
    train: pd.DataFrame,
    val: pd.DataFrame,
    scored: pd.DataFrame,
    features: FeatureConfig,
    epochs: int,
    seed: int,
    members: int = 1,
) -> np.ndarray:
    """Fit the network on `train` (early stopping on `val`); its probabilities for `scored`."""
    from ml.data import TabularDataModule
    from ml.inference import load_predictor
    from ml.training import train as fit

    datamodule = TabularDataModule(train, val, features=features, seed=seed, min_steps_per_epoch=32)
    with tempfile.TemporaryDirectory() as checkpoints:
        config = TrainConfig(
            batch_size=datamodule.batch_size,
            max_epochs=epochs,
            seed=seed,
            early_stopping_patience=3,
            checkpoint_dir=checkpoints,
        )
        result = fit(datamodule, ModelConfig(members=members), config)
        return load_predictor(result.best_checkpoint).predict_proba(scored)


def boosting_scores(
    train: pd.DataFrame, scored: pd.DataFrame, features: FeatureConfig, weights: np.ndarray | None
) -> np.ndarray:
    """The reference's HistGradientBoosting (sim.judge.reference) fitted on `train` with `weights`;
    its probabilities for `scored`."""
    from sim.judge.reference import encode, fit_predict

    x_train, x_scored, categorical = encode(train, scored, features)
    y = train[features.label].to_numpy(np.int64)
    return fit_predict(x_train, y, x_scored, categorical, seed=0, sample_weight=weights)


@dataclass(frozen=True)
class Variant:
    """One way to weigh or cut the labels known on a cut day."""

    name: str
    exponent: float = 0.0
    half_life: float | None = None
    window: int | None = None
    members: int = 1  # networks in the model (ModelConfig.members), trained side by side

    def weights(self, known: pd.DataFrame, cut, day_sizes: pd.Series) -> np.ndarray:
        from pipelines.labeling.selection import REASON_COLUMN, importance_weights

        weights = importance_weights(
            known[REASON_COLUMN], known.flight_date, day_sizes, self.exponent
        )
        age = np.array([(cut - day).days for day in known.flight_date], dtype=float)
        if self.half_life is not None:
            weights = weights * 0.5 ** (age / self.half_life)
        if self.window is not None:
            weights = weights * (age <= self.window)
        return weights


def variants(args: argparse.Namespace) -> list[Variant]:
    """The variants the arguments name, the first exponent's first (the one others are set
    against)."""
    exponents = [float(e) for e in args.exponents.split(",")]
    chosen = [Variant(f"exponent {e:g}", exponent=e) for e in exponents]
    chosen += [
        Variant(f"{m:g} members", exponent=exponents[0], members=int(m))
        for m in _numbers(args.members)
    ]
    chosen += [
        Variant(f"half-life {h:g} d", exponent=exponents[0], half_life=float(h))
        for h in _numbers(args.half_lives)
    ]
    chosen += [
        Variant(f"window {w:g} d", exponent=exponents[0], window=int(w))
        for w in _numbers(args.windows)
    ]
    return chosen


def _numbers(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a finished run's FLYWHEEL_HOME")
    parser.add_argument("--every-days", type=int, default=28)
    parser.add_argument("--exponents", default="0,0.5,1", help="importance exponents")
    parser.add_argument("--half-lives", default="60,120", help="recency half-lives, days")
    parser.add_argument("--windows", default="90,180", help="training windows, days")
    parser.add_argument("--members", default="", help="networks per model, trained side by side")
    parser.add_argument("--max-epochs", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=3, help="network fits per cut and variant")
    args = parser.parse_args()
    quiet_lightning()
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", message=".*treespec.*")

    from pipelines.labeling.selection import REASON_COLUMN, UNIFORM_REASONS, WEIGHT_COLUMN
    from pipelines.task import load_task

    spec = load_task().model
    weighted = replace(spec.features, weight=WEIGHT_COLUMN)
    examples, flights = load(args.home)
    day_sizes = flights.groupby("flight_date").size()
    print(
        f"{len(examples)} labels ({examples[REASON_COLUMN].value_counts().to_dict()}), "
        f"{len(flights)} flights played",
        flush=True,
    )
    rows, uniform_only = [], []
    chosen = variants(args)
    for cut in cut_days(examples, flights, args.every_days):
        known = examples[pd.to_datetime(examples.label_known_at) < pd.Timestamp(cut)]
        end = cut + pd.Timedelta(days=HORIZON_DAYS)
        scored = flights[(flights.flight_date >= cut) & (flights.flight_date < end)]
        y = scored.is_late.to_numpy(int)
        audit = known[known[REASON_COLUMN].isin(UNIFORM_REASONS)]
        uniform_only.append(auroc(y, boosting_scores(audit, scored, spec.features, None)))
        for variant in chosen:
            start = time.perf_counter()
            frame = known.assign(**{WEIGHT_COLUMN: variant.weights(known, cut, day_sizes)})
            frame = frame[frame[WEIGHT_COLUMN] > 0]
            val_start = max(frame.flight_date) - pd.Timedelta(days=VALIDATION_DAYS - 1)
            train = frame[frame.flight_date < val_start]
            val = frame[frame.flight_date >= val_start]
            nets = [
                network_scores(
                    train,
                    val,
                    scored,
                    weighted,
                    args.max_epochs,
                    seed,
                    variant.members,
                )
                for seed in range(args.seeds)
            ]
            weights = frame[WEIGHT_COLUMN].to_numpy()
            gbdt = boosting_scores(frame, scored, spec.features, weights / weights.mean())
            row = {"cut": cut, "variant": variant.name, "labels": len(frame)}
            row |= {
                "net_auc": np.mean([auroc(y, net) for net in nets]),
                "net_logloss": np.mean([logloss(y, net) for net in nets]),
                "ens_auc": auroc(y, np.mean(nets, axis=0)),
            }
            row |= {"gbdt_auc": auroc(y, gbdt), "gbdt_logloss": logloss(y, gbdt)}
            rows.append(row)
            print(
                f"{cut} {variant.name}: {len(frame)} labels, network AUC {row['net_auc']:.4f} "
                f"log loss {row['net_logloss']:.4f}, GBDT AUC {row['gbdt_auc']:.4f} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    table = pd.DataFrame(rows)
    metrics = ["net_auc", "net_logloss", "ens_auc", "gbdt_auc", "gbdt_logloss"]
    order = [v.name for v in chosen]
    print(f"\nMeans over {table.cut.nunique()} cut days ({HORIZON_DAYS} days scored after each):")
    means = table.groupby("variant")[metrics].mean().loc[order]
    print(means.to_string(float_format="%.4f"))
    print(
        f"GBDT on the uniformly drawn labels alone (audit, random): AUC {np.mean(uniform_only):.4f}"
    )
    base = table[table.variant == order[0]].set_index("cut")
    for name in order[1:]:
        other = table[table.variant == name].set_index("cut")
        diff = other.net_auc - base.net_auc
        print(
            f"{name} vs {order[0]}: network AUC {diff.mean():+.4f} "
            f"(better on {(diff > 0).sum()} of {len(diff)} cut days), GBDT AUC "
            f"{(other.gbdt_auc - base.gbdt_auc).mean():+.4f}"
        )


if __name__ == "__main__":
    main()
