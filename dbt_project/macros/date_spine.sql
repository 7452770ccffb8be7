{#-
    One row per day in [start_date, end_date) as column `date_day`. The bounds are SQL
    expressions of type date (literals, columns of a one-row CTE via scalar subqueries, ...).
-#}
{% macro date_spine(start_date, end_date) -%}
    {{ return(adapter.dispatch('date_spine', 'flywheel')(start_date, end_date)) }}
{%- endmacro %}

{#- Portable: days as offsets 0..99999 (about 270 years) built from cross-joined digits. -#}
{% macro default__date_spine(start_date, end_date) -%}
    {%- set digits -%}
        select 0 as d union all select 1 union all select 2 union all select 3
        union all select 4 union all select 5 union all select 6 union all select 7
        union all select 8 union all select 9
    {%- endset -%}
    select date_day
    from (
        select
            cast({{ dbt.dateadd('day', 'day_offsets.n', start_date) }} as date) as date_day
        from (
            select
                ones.d + 10 * tens.d + 100 * hundreds.d + 1000 * thousands.d
                + 10000 * ten_thousands.d as n
            from ({{ digits }}) as ones
            cross join ({{ digits }}) as tens
            cross join ({{ digits }}) as hundreds
            cross join ({{ digits }}) as thousands
            cross join ({{ digits }}) as ten_thousands
        ) as day_offsets
    ) as days
    where date_day < {{ end_date }}
{%- endmacro %}

{% macro duckdb__date_spine(start_date, end_date) -%}
    select cast(generated.date_day as date) as date_day
    from (
        select unnest(generate_series(
            cast({{ start_date }} as timestamp),
            cast({{ end_date }} as timestamp) - interval 1 day,
            interval 1 day
        )) as date_day
    ) as generated
{%- endmacro %}
