{#-
    The models' pre-hook (dbt_project.yml): on PostgreSQL, where runs of different days build at
    once, hold a transaction-level advisory lock for the model's build, released at its commit.

    - A daily (incremental) model built for a window of days locks each day of the window:
      two builds of the same day are serialised (the second's delete+insert replaces the
      first's rows, never adds to them), builds of different days are not.
    - Any other build (a view, a table, an incremental without a window) locks the relation.

    DuckDB has one writer at a time: nothing to lock (an empty hook is skipped).
-#}
{% macro lock_relation() -%}
    {{ return(adapter.dispatch('lock_relation', 'flywheel')()) }}
{%- endmacro %}

{% macro default__lock_relation() -%}
{%- endmacro %}

{% macro postgres__lock_relation() -%}
    {%- set first = date_window_bound('min_date') -%}
    {%- set last = date_window_bound('max_date', -1) -%}
    {%- if model.config.materialized == 'incremental' and first and last -%}
        select pg_advisory_xact_lock(hashtextextended(
            'flywheel/{{ this.identifier }}/' || cast(cast(lock_day as date) as text), 0))
        from generate_series(
            cast({{ first }} as timestamp), cast({{ last }} as timestamp), interval '1 day'
        ) as lock_days(lock_day)
        order by lock_day
    {%- else -%}
        select pg_advisory_xact_lock(hashtextextended('flywheel/{{ this.identifier }}', 0))
    {%- endif -%}
{%- endmacro %}

{#-
    The models' post-hook: on PostgreSQL, refresh the planner's statistics of a table the build
    just changed. Without them the next models and tests of the same run plan joins for an empty
    table (a nested loop over the staging view), and a daily build slows from seconds to a minute
    as the tables grow. Views have no statistics; DuckDB keeps its own.
-#}
{% macro analyze_relation() -%}
    {{ return(adapter.dispatch('analyze_relation', 'flywheel')()) }}
{%- endmacro %}

{% macro default__analyze_relation() -%}
{%- endmacro %}

{% macro postgres__analyze_relation() -%}
    {%- if model.config.materialized != 'view' -%}
        analyze {{ this }}
    {%- endif -%}
{%- endmacro %}
