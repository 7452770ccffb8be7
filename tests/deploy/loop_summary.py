"""Print, as JSON, what a simulation did on the Dagster instance of DAGSTER_HOME: its successful
runs with their origin and run key, its datasets and its promotion gate's decisions.

Run as `python -m tests.deploy.loop_summary` with the environment of the instance to read (the
embedded defaults or the stack's settings), so one test can compare two instances.
"""

from __future__ import annotations

import json
import re

import dagster as dg

# A landing or inbox file's version: a content hash locally, an ETag on S3.
VERSION = re.compile(r"@[^|]+")


def origin(tags: dict[str, str]) -> str:
    """What asked for a run: its sensor or schedule, else the operator's trigger."""
    return (
        tags.get("dagster/sensor_name")
        or tags.get("dagster/schedule_name")
        or f"operator:{tags.get('flywheel/trigger', '')}"
    )


def run_pids(instance: dg.DagsterInstance, run_id: str) -> list[int]:
    """The pids a run's steps ran in (from its engine events), each once."""
    found = [
        int(match.group(1))
        for entry in instance.all_logs(run_id)
        if (match := re.search(r"steps in process \(pid: (\d+)\)", entry.user_message or ""))
    ]
    return list(dict.fromkeys(found))


def summary(instance: dg.DagsterInstance) -> dict:
    """Runs (job, partition, origin, run key with file versions masked), datasets, decisions;
    and where they ran: each run's step pids, the storage classes."""
    runs, pids = [], []
    for record in instance.get_run_records(
        dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]), ascending=True
    ):
        pids.append(run_pids(instance, record.dagster_run.run_id))
        tags = record.dagster_run.tags
        runs.append(
            [
                record.dagster_run.job_name,
                tags.get("dagster/partition"),
                origin(tags),
                VERSION.sub("@<version>", tags.get("dagster/run_key", "")),
            ]
        )

    def materializations(asset: str, keys: tuple[str, ...]) -> list[list[str]]:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["flights", asset])),
            limit=1000,
            ascending=True,
        ).records
        return [
            [str(r.asset_materialization.metadata[k].value) for k in keys]
            for r in records
            if r.asset_materialization is not None
        ]

    return {
        "runs": sorted(runs, key=lambda r: [str(x) for x in r]),
        "datasets": materializations("training_dataset", ("dvc_hash", "dagster/row_count")),
        "decisions": materializations(
            "champion_model", ("challenger_version", "decision", "reason")
        ),
        "pids": pids,
        "storage": [type(instance.run_storage).__name__, type(instance.event_log_storage).__name__],
    }


if __name__ == "__main__":
    with dg.DagsterInstance.get() as instance:
        print(json.dumps(summary(instance)))
