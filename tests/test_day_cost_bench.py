"""bench.day_cost: the order of the plays of two versions, and their figures averaged."""

from pathlib import Path

from bench.day_cost import mean_of_plays, play_order


def test_each_pair_plays_both_versions_and_the_order_alternates():
    versions = [("before", Path("old")), ("after", Path("new"))]
    order = [(pair, name) for pair, name, _ in play_order(versions, 3)]
    assert order == [
        (0, "before"),
        (0, "after"),
        (1, "after"),
        (1, "before"),
        (2, "before"),
        (2, "after"),
    ]
    assert [name for _, name, _ in play_order(versions[1:], 2)] == ["after", "after"]


def test_a_versions_plays_are_averaged_a_stage_missing_from_one_counting_zero():
    plays = [{"steady day": 2.0, "retraining": 10.0}, {"steady day": 3.0}]
    assert mean_of_plays(plays) == {"steady day": 2.5, "retraining": 5.0}
