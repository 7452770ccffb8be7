"""The datamodule serves full, disjoint, seeded batches from in-memory tensors."""

from pathlib import Path

import pandas as pd
import pytest
import torch

from ml.data import EpochOrder, TabularDataModule, training_batch_size
from ml.synthetic import FEATURES


def test_batch_shapes_and_dtypes(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(
        splits["train"], splits["val"], splits["test"], features=FEATURES, batch_size=512
    )
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert len(batches) == len(dm.train_dataloader()) == 6  # ceil(3000 / 512)
    categorical, numeric, y = batches[0]
    assert categorical.shape == (512, 7) and categorical.dtype == torch.int64
    assert numeric.shape == (512, 44) and numeric.dtype == torch.float32
    assert y.shape == (512,) and y.dtype == torch.float32
    assert batches[-1][0].shape[0] == 3000 - 5 * 512
    assert sum(b[0].shape[0] for b in dm.val_dataloader()) == 1000
    assert sum(b[0].shape[0] for b in dm.test_dataloader()) == 1000


def test_the_features_come_from_the_caller_or_a_fitted_preprocessor(
    splits: dict[str, pd.DataFrame],
) -> None:
    with pytest.raises(ValueError, match="give the features"):
        TabularDataModule(splits["train"], splits["val"])
    fitted = TabularDataModule(splits["train"], splits["val"], features=FEATURES).preprocessor
    reused = TabularDataModule(splits["val"], splits["test"], preprocessor=fitted)
    assert reused.preprocessor is fitted and reused.preprocessor.features == FEATURES


def test_epoch_covers_every_row_once_in_a_seeded_order(splits: dict[str, pd.DataFrame]) -> None:
    # Tag each row with its position in a numeric column to recover the order from batches.
    train = splits["train"].assign(distance=range(len(splits["train"])))
    dm = TabularDataModule(train, splits["val"], features=FEATURES, batch_size=256, seed=7)
    j = dm.preprocessor.features.numeric.index("distance")

    def rows(epoch: int) -> torch.Tensor:
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(epoch)
        scaled = torch.cat([b[1][:, j] for b in loader]).double()
        mean, std = dm.preprocessor.means[j], dm.preprocessor.stds[j]
        return torch.round(scaled * std + mean).long()

    epoch0, epoch1 = rows(0), rows(1)
    assert torch.equal(torch.sort(epoch0).values, torch.arange(len(train)))
    assert torch.equal(torch.sort(epoch1).values, torch.arange(len(train)))
    assert not torch.equal(epoch0, epoch1)
    assert torch.equal(epoch0, rows(0))  # a resumed run replays the same order


def test_ranks_take_disjoint_equal_shards() -> None:
    shards = [EpochOrder(10, shuffle=True, seed=3, rank=r, world_size=4) for r in range(4)]
    for shard in shards:
        shard.set_epoch(2)
    indices = [shard.indices() for shard in shards]
    assert {len(i) for i in indices} == {3} and all(len(s) == 3 for s in shards)
    assert set(torch.cat(indices).tolist()) == set(range(10))
    evaluation = [EpochOrder(10, shuffle=False, seed=3, rank=r, world_size=4) for r in range(4)]
    assert sorted(torch.cat([e.indices() for e in evaluation]).tolist()) == list(range(10))


def test_several_streams_each_take_every_row_in_their_own_order() -> None:
    one = EpochOrder(10, shuffle=True, seed=3)
    three = EpochOrder(10, shuffle=True, seed=3, streams=3)
    for order in (one, three):
        order.set_epoch(4)
    orders = three.indices()
    assert orders.shape == (3, 10)
    assert all(sorted(row.tolist()) == list(range(10)) for row in orders)
    assert torch.equal(orders[0], one.indices())  # the first stream is the single order
    assert not torch.equal(orders[1], orders[0]) and not torch.equal(orders[2], orders[1])
    shards = [EpochOrder(10, True, 3, rank=r, world_size=4, streams=2) for r in range(4)]
    for shard in shards:
        shard.set_epoch(4)
    stacked = torch.cat([shard.indices() for shard in shards], dim=1)
    assert stacked.shape == (2, 12)  # 3 rows a rank, two of them repeated to even the shards
    assert all(set(row.tolist()) == set(range(10)) for row in stacked)
    with pytest.raises(ValueError, match="streams must be 1, or more with shuffle"):
        EpochOrder(10, shuffle=False, seed=3, streams=2)


def test_an_ensembles_members_get_their_own_batches(splits: dict[str, pd.DataFrame]) -> None:
    train = splits["train"].assign(distance=range(len(splits["train"])))
    dm = TabularDataModule(train, splits["val"], features=FEATURES, batch_size=512, seed=7)
    j = dm.preprocessor.features.numeric.index("distance")

    class Ensemble:  # what the loader reads of the module it trains
        row_orders = 3

    dm.trainer = type("Trainer", (), {"lightning_module": Ensemble, "global_rank": 0})()
    dm.trainer.world_size = 1
    batches = list(dm.train_dataloader())
    assert len(batches) == 6 and batches[-1][0].shape == (3, 3000 - 5 * 512, 7)
    categorical, numeric, y = batches[0]
    assert categorical.shape == (3, 512, 7) and numeric.shape == (3, 512, 44)
    assert y.shape == (3, 512)
    scaled = torch.cat([b[1][..., j] for b in batches], dim=1).double()
    mean, std = dm.preprocessor.means[j], dm.preprocessor.stds[j]
    rows = torch.round(scaled * std + mean).long()
    for member in rows:  # every member sees every row once, each in its own order
        assert torch.equal(torch.sort(member).values, torch.arange(len(train)))
    assert not torch.equal(rows[0], rows[1])
    # The labels travel with their rows.
    labels = torch.cat([b[2] for b in batches], dim=1)
    truth = torch.as_tensor(train["is_late"].to_numpy(), dtype=torch.float32)
    assert torch.equal(labels[1], truth[rows[1]])


def test_reads_parquet_paths(parquet_splits: dict[str, Path], splits: dict[str, pd.DataFrame]):
    from_paths = TabularDataModule(
        parquet_splits["train"], parquet_splits["val"], features=FEATURES
    )
    from_frames = TabularDataModule(splits["train"], splits["val"], features=FEATURES)
    assert from_paths.preprocessor == from_frames.preprocessor
    for a, b in zip(from_paths.splits["val"], from_frames.splits["val"], strict=True):
        assert torch.equal(a, b)


def test_a_small_training_split_takes_smaller_batches(splits: dict[str, pd.DataFrame]) -> None:
    assert training_batch_size(3000, 1024, 32) == 94
    assert training_batch_size(100_000, 1024, 32) == 1024
    assert training_batch_size(10, 1024, 32) == 1
    assert training_batch_size(3000, 1024) == 1024  # one step an epoch is all it asks
    with pytest.raises(ValueError, match="min_steps_per_epoch must be 1 or more"):
        training_batch_size(3000, 1024, 0)

    dm = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=1024, min_steps_per_epoch=32
    )

    assert (dm.batch_size, dm.requested_batch_size) == (94, 1024)
    assert len(dm.train_dataloader()) == 32
    assert dm.eval_batch_size == 4096  # evaluation batches are not what an epoch's steps count


def test_the_final_fit_trains_on_the_validation_rows_too(splits: dict[str, pd.DataFrame]) -> None:
    dm = TabularDataModule(
        splits["train"], splits["val"], features=FEATURES, batch_size=1024, min_steps_per_epoch=32
    )
    merged = dm.with_validation_in_training()
    both = pd.concat([splits["train"], splits["val"]], ignore_index=True)
    # The same rows as a data module built on both, its preprocessor fitted on both.
    expected = TabularDataModule(
        both, splits["val"], features=FEATURES, batch_size=1024, min_steps_per_epoch=32
    )
    for name in ("train", "val"):
        for got, want in zip(merged.splits[name], expected.splits[name], strict=True):
            assert torch.equal(got, want)
    assert merged.cardinalities == expected.cardinalities
    assert merged.batch_size == training_batch_size(len(both), 1024, 32) != dm.batch_size
    assert dm.splits["train"][0].shape[0] == len(splits["train"])  # the original is unchanged
    assert sum(b[2].shape[0] for b in merged.train_dataloader()) == len(both)
