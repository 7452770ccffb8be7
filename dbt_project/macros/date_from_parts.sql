{#- A date from integer year, month and day expressions. -#}
{% macro date_from_parts(year, month, day) -%}
    {{ return(adapter.dispatch('date_from_parts', 'flywheel')(year, month, day)) }}
{%- endmacro %}

{% macro default__date_from_parts(year, month, day) -%}
    cast(
        cast({{ year }} as {{ dbt.type_string() }})
        || '-' || lpad(cast({{ month }} as {{ dbt.type_string() }}), 2, '0')
        || '-' || lpad(cast({{ day }} as {{ dbt.type_string() }}), 2, '0')
        as date
    )
{%- endmacro %}

{% macro duckdb__date_from_parts(year, month, day) -%}
    make_date({{ year }}, {{ month }}, {{ day }})
{%- endmacro %}
