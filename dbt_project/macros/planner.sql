{#-
    A model's pre-hook where PostgreSQL's planner is known to go wrong: no nested-loop joins in
    the model's transaction (`set local`, undone at its commit).

    A staging view keeps the first row per key with a window function (`row_number() ... = 1`),
    and PostgreSQL estimates the rows such a filter leaves at almost none. It then joins two
    such views by a nested loop that evaluates the inner view again for every outer row: a daily
    build many times slower than with a hash join, and slower with every labelled day.
    DuckDB plans these joins as hash joins: nothing to set (an empty hook is skipped).
-#}
{% macro no_nested_loops() -%}
    {{ return(adapter.dispatch('no_nested_loops', 'flywheel')()) }}
{%- endmacro %}

{% macro default__no_nested_loops() -%}
{%- endmacro %}

{% macro postgres__no_nested_loops() -%}
    set local enable_nestloop = off
{%- endmacro %}
