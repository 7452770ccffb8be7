"""The dbt models `flywheel-sim new-task` writes for a task of one daily feed.

Every model is in the daily build (a task with no dimension feed never runs the dimension job,
so its label views are built with the days): staging views of the feed, its labels and its label
tasks; the features table, incremental by partition, with the file's columns and, for each
categorical column, its value's label mean and labelled count over a trailing window of label
arrival (labels known before the partition began, so a partition's features never change when
later labels come); the examples table. A window's counts are bounded, unlike running counts,
which grow with time and stand in for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskModels:
    """What the models are made of (all names already plain SQL identifiers)."""

    task: str  # also the feed's and the raw table's name
    example_id: str
    time: str  # the feed's timestamp column
    time_column: str  # the partition's date column of the features
    label: str
    binary: bool
    columns: tuple[str, ...]  # the feed's other columns, as they land
    categorical: tuple[str, ...]  # with a label history each
    window_days: int

    def history_columns(self, column: str) -> tuple[str, str]:
        """The label mean and the labelled count of `column`'s value over the window."""
        return (
            f"{column}_label_mean_{self.window_days}d",
            f"{column}_labelled_{self.window_days}d",
        )

    @property
    def names(self) -> dict[str, str]:
        t = self.task
        return {
            "staging": f"stg_landing__{t}",
            "labels": f"stg_labels__{t}_labels",
            "tasks": f"stg_labels__{t}_label_tasks",
            "features": f"fct_{t}_features",
            "examples": f"fct_labelled_{t}",
        }


def sources_yml(m: TaskModels) -> str:
    return f"""version: 2

sources:
  - name: {m.task}_landing
    description: The {m.task} task's landing feed, loaded by its ingestion asset.
    schema: raw
    tables:
      - name: {m.task}
        meta:
          dagster:
            asset_key: ["raw_{m.task}"]

  - name: {m.task}_labels
    description: Labels as they come back from labeling, and the examples sent to annotators.
    schema: raw
    tables:
      - name: {m.task}_labels
        meta:
          dagster:
            asset_key: ["{m.task}_labels"]
      - name: {m.task}_label_tasks
        meta:
          dagster:
            asset_key: ["{m.task}_label_tasks"]
"""


def staging_sql(m: TaskModels) -> str:
    others = "".join(f"        {c},\n" for c in m.columns)
    return f"""{{{{ config(tags=['daily']) }}}}

with

source as (

    select * from {{{{ source('{m.task}_landing', '{m.task}') }}}}

),

ranked as (

    -- an example re-ingested (its partition replaced) keeps only its latest version
    select
        *,
        row_number() over (
            partition by _landing_date, {m.example_id}
            order by _ingested_at desc, _source_line desc
        ) as ingestion_rank
    from source

),

final as (

    select
        {m.example_id},
        _landing_date as {m.time_column},
        {m.time},
{others}        cast(extract(hour from {m.time}) as {{{{ dbt.type_bigint() }}}}) as {m.time}_hour,
        {{{{ iso_weekday('{m.time}') }}}} as {m.time}_weekday,
        _ingested_at as ingested_at
    from ranked
    where ingestion_rank = 1

)

select * from final
"""


def labels_sql(m: TaskModels) -> str:
    order = f"{m.label} desc"
    return f"""{{{{ config(tags=['daily']) }}}}

with

source as (

    select * from {{{{ source('{m.task}_labels', '{m.task}_labels') }}}}

),

ranked as (

    -- one label per example: the first known stays, so features computed from it never change
    select
        *,
        row_number() over (
            partition by {m.example_id}
            order by known_at asc, {order}  -- a tie resolves deterministically
        ) as known_rank
    from source

),

final as (

    select
        {m.example_id},
        {m.label},
        known_at
    from ranked
    where known_rank = 1

)

select * from final
"""


def label_tasks_sql(m: TaskModels) -> str:
    return f"""{{{{ config(tags=['daily']) }}}}

with

source as (

    select * from {{{{ source('{m.task}_labels', '{m.task}_label_tasks') }}}}

),

final as (

    select
        task_id,
        {m.example_id},
        reason as selection_reason,
        exported_at
    from source

)

select * from final
"""


def features_sql(m: TaskModels) -> str:
    n = m.names
    value = (
        f"case when labels.{m.label} then 1.0 else 0.0 end"
        if m.binary
        else f"cast(labels.{m.label} as {{{{ dbt.type_float() }}}})"
    )
    keys = "".join(f"        every_example.{c},\n" for c in m.categorical)
    window_start = f"{{{{ dbt.dateadd('day', -{m.window_days}, 'events.{m.time_column}') }}}}"
    histories, joins, selected = [], [], []
    for c in m.categorical:
        mean, count = m.history_columns(c)
        histories.append(f"""{c}_history as (

    select
        events.{m.example_id},
        avg(known_labels.label_value) as {mean},
        count(known_labels.label_value) as {count}
    from events
    left join known_labels
        on events.{c} = known_labels.{c}
        and cast(events.{m.time_column} as timestamp) > known_labels.known_at
        and cast({window_start} as timestamp) <= known_labels.known_at
    group by events.{m.example_id}

),
""")
        on = f"events.{m.example_id} = {c}_history.{m.example_id}"
        joins.append(f"    inner join {c}_history\n        on {on}\n")
        selected += [f"{c}_history.{mean}", f"{c}_history.{count}"]
    select = ",\n".join(["        events.*", *(f"        {s}" for s in selected)])
    return f"""{{{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='{m.time_column}',
        on_schema_change='fail',
        tags=['daily'],
    )
}}}}

with

events as (

    select * from {{{{ ref('{n["staging"]}') }}}}
    where {{{{ date_window_filter('{m.time_column}') }}}}

),

every_example as (

    select * from {{{{ ref('{n["staging"]}') }}}}

),

labels as (

    select * from {{{{ ref('{n["labels"]}') }}}}

),

-- every label known so far, with the example's categorical values
known_labels as (

    select
{keys}        {value} as label_value,
        labels.known_at
    from labels
    inner join every_example
        on labels.{m.example_id} = every_example.{m.example_id}

),

-- each categorical value's labels known in the {m.window_days} days before the example's
-- partition began: nothing the partition itself taught is used for its own examples
{"".join(histories)}
final as (

    select
{select}
    from events
{"".join(joins)}
)

select * from final
"""


def features_yml(m: TaskModels) -> str:
    return f"""version: 2

models:
  - name: {m.names["features"]}
    description: >
      One row per example of the {m.task} feed with its columns and, for each categorical
      column, the label mean and labelled count of its value over the {m.window_days} days of
      labels known before the example's partition. Incremental by partition.
    columns:
      - name: {m.example_id}
        data_tests:
          - unique:
              config: {{where: "date_window({m.time_column})"}}
          - not_null:
              config: {{where: "date_window({m.time_column})"}}
"""


def examples_sql(m: TaskModels) -> str:
    n = m.names
    return f"""{{{{ config(materialized='table', tags=['training']) }}}}

with

features as (

    select * from {{{{ ref('{n["features"]}') }}}}

),

labels as (

    select * from {{{{ ref('{n["labels"]}') }}}}

),

tasks as (

    select * from {{{{ ref('{n["tasks"]}') }}}}

),

final as (

    select
        features.*,
        labels.{m.label},
        labels.known_at as label_known_at,
        tasks.selection_reason
    from features
    inner join labels
        on features.{m.example_id} = labels.{m.example_id}
    left join tasks
        on features.{m.example_id} = tasks.{m.example_id}

)

select * from final
"""


def files(m: TaskModels) -> dict[str, str]:
    """Each model's path under `dbt_project/models/<task>/` and its text."""
    n = m.names
    return {
        "staging/_sources.yml": sources_yml(m),
        f"staging/{n['staging']}.sql": staging_sql(m),
        f"staging/{n['labels']}.sql": labels_sql(m),
        f"staging/{n['tasks']}.sql": label_tasks_sql(m),
        f"marts/{n['features']}.sql": features_sql(m),
        f"marts/{n['features']}.yml": features_yml(m),
        f"marts/{n['examples']}.sql": examples_sql(m),
    }
