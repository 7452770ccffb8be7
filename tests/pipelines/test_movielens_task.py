"""The second task through the same code: monthly MovieLens rating events land, are ingested
against their contract, and become leak-free features in the task's own dbt models."""

from __future__ import annotations

from datetime import date

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from pipelines.definitions import build_definitions
from pipelines.task import load_task
from sim.world import movielens
from sim.world.replay import land_days
from tests.pipelines.conftest import play_landings

TASK = load_task("movielens")
MONTHS = [date(2000, 11, 1), date(2000, 12, 1)]


@pytest.fixture
def movielens_defs(flywheel, dvc_repo, monkeypatch) -> dg.Definitions:
    """The movielens task's definitions, its datasets in a checkout of the test's own."""
    monkeypatch.setenv("FLYWHEEL_TASK", "movielens")
    return build_definitions(task_name="movielens")


def test_monthly_events_become_features_from_ratings_known_before_their_month(
    flywheel, movielens_defs
) -> None:
    land_days(movielens_defs.resources["landing_zone"], MONTHS, TASK)
    ran = play_landings(flywheel, movielens_defs)
    assert ran == [
        ("dimension_warehouse_job", None),
        ("daily_warehouse_job", "2000-11-01"),
        ("daily_warehouse_job", "2000-12-01"),
    ]
    source = movielens.load()
    november, december = (source.months[m.isoformat()] for m in MONTHS)
    warehouse = movielens_defs.resources["warehouse"]
    with warehouse.connect() as con:
        features = con.df("select * from fct_rating_features order by rating_id")
    assert features.groupby("rating_month").size().to_dict() == {
        pd.Timestamp(m): len(rows) for m, rows in zip(MONTHS, (november, december), strict=True)
    }
    assert features.user_labelled_count.eq(0).all() and features.user_mean_rating.isna().all()

    # Ratings of November come back: some during November, some only in December.
    labelled = november.sample(400, random_state=0).reset_index(drop=True)
    known_at = [pd.Timestamp("2000-11-20")] * 300 + [pd.Timestamp("2000-12-05")] * 100
    labels = pd.DataFrame(
        {
            "rating_id": labelled.rating_id,
            "rating": movielens.true_ratings(labelled.rating_id),
            "known_at": known_at,
        }
    )
    with warehouse.connect() as con:
        con.insert_rows(f"raw.{TASK.labels_table}", labels)
    movielens_defs.resolve_job_def("dimension_warehouse_job").execute_in_process(
        instance=flywheel.instance
    )
    movielens_defs.resolve_job_def("daily_warehouse_job").execute_in_process(
        instance=flywheel.instance, partition_key="2000-12-01"
    )
    with warehouse.connect() as con:
        rebuilt = con.df("select * from fct_rating_features where rating_month = date '2000-12-01'")
    # Only what was known before December 1 counts for December's events.
    before = labels.iloc[:300].merge(labelled[["rating_id", "user_id"]], on="rating_id")
    expected = before.groupby("user_id").rating.agg(["count", "mean"])
    got = rebuilt.set_index("rating_id")
    for row in december.itertuples():
        count = expected["count"].get(row.user_id, 0)
        assert got.at[row.rating_id, "user_labelled_count"] == count
        if count:
            assert got.at[row.rating_id, "user_mean_rating"] == pytest.approx(
                expected["mean"][row.user_id]
            )
    assert got.user_labelled_count.gt(0).any()


def test_a_ten_class_model_is_trained_evaluated_registered_and_scores_each_class(
    flywheel, movielens_defs
) -> None:
    """The retraining job on the ratings of three months (uniformly labelled), then the next
    month's scoring with the model it registered: one probability per star choice."""
    from pipelines.lib.asset_keys import task_run_config
    from pipelines.lib.registry import champion, registered_name, versions
    from pipelines.settings import retraining_run_config

    months = [date(2000, 8, 1), date(2000, 9, 1), date(2000, 10, 1), date(2000, 11, 1)]
    land_days(movielens_defs.resources["landing_zone"], months, TASK)
    play_landings(flywheel, movielens_defs)
    source = movielens.load()
    labelled = pd.concat([source.months[m.isoformat()] for m in months[:3]], ignore_index=True)
    known_at = pd.to_datetime(labelled.rated_at).dt.tz_localize(None) + pd.Timedelta(days=1)
    labels = pd.DataFrame(
        {
            "rating_id": labelled.rating_id,
            "rating": movielens.true_ratings(labelled.rating_id),
            "known_at": known_at,
        }
    )
    tasks = pd.DataFrame(
        {"task_id": "T-" + labelled.rating_id, "rating_id": labelled.rating_id, "reason": "random"}
    )
    warehouse = movielens_defs.resources["warehouse"]
    with warehouse.connect() as con:
        con.insert_rows(f"raw.{TASK.labels_table}", labels)
        con.insert_rows(f"raw.{TASK.label_tasks_table}", tasks)
    movielens_defs.resolve_job_def("dimension_warehouse_job").execute_in_process(
        instance=flywheel.instance
    )
    settings = {
        "FLYWHEEL_TRIALS": 1,
        "FLYWHEEL_MAX_EPOCHS": 3,
        "FLYWHEEL_MEMBERS": 1,
        "FLYWHEEL_VALIDATION_DAYS": 1,
        "FLYWHEEL_TEST_DAYS": 1,
        "FLYWHEEL_TUNING_WORKERS": 1,
    }
    retrained = movielens_defs.resolve_job_def("retraining_job").execute_in_process(
        instance=flywheel.instance,
        run_config=task_run_config(TASK, retraining_run_config(settings)),
    )
    assert retrained.success
    # The multi-class figures: macro one-vs-rest AUC and the ten-class log loss.
    tracker = movielens_defs.resources["tracker"]
    name = registered_name(TASK.name)
    (version,) = versions(tracker, name)
    run = tracker.client().get_run(version.run_id).data.metrics
    assert 0.5 < run["test/auroc"] <= 1.0
    assert 0 < run["test/logloss"] < 2 * np.log(10)
    if champion(tracker, name) is None:  # the gate may refuse a model of three months
        tracker.client().set_registered_model_alias(name, "champion", str(version.version))
    movielens_defs.resolve_job_def("daily_warehouse_job").execute_in_process(
        instance=flywheel.instance,
        partition_key="2000-11-01",
        asset_selection=[dg.AssetKey(["movielens", "rating_predictions"])],
    )
    with warehouse.connect() as con:
        scored = con.df("select * from rating_predictions")
    columns = [f"p_{k}" for k in range(10)]
    assert len(scored) == len(source.months["2000-11-01"])
    assert np.allclose(scored[columns].sum(axis=1), 1.0)
    expected = scored[columns].to_numpy() @ np.arange(10) / 9
    assert np.allclose(scored.probability, expected)
    # A month in which nobody rated anything is scored as what it is: nothing.
    land_days(movielens_defs.resources["landing_zone"], [date(1999, 8, 1)], TASK)
    assert ("daily_warehouse_job", "1999-08-01") in play_landings(flywheel, movielens_defs)
    (scoring,) = flywheel.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            dg.AssetKey(["movielens", "rating_predictions"]), asset_partitions=["1999-08-01"]
        ),
        limit=1,
    ).records
    assert scoring.asset_materialization.metadata["dagster/row_count"].value == 0
