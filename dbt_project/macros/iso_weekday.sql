{#- ISO day of the week of a date expression: Monday = 1 ... Sunday = 7. -#}
{% macro iso_weekday(date_expr) -%}
    {{ return(adapter.dispatch('iso_weekday', 'flywheel')(date_expr)) }}
{%- endmacro %}

{% macro default__iso_weekday(date_expr) -%}
    cast(extract(isodow from {{ date_expr }}) as {{ dbt.type_bigint() }})
{%- endmacro %}

{% macro duckdb__iso_weekday(date_expr) -%}
    isodow({{ date_expr }})
{%- endmacro %}
