{#-
    The segments that get a historical late rate: name -> SQL expression of the segment value over
    the columns of stg_landing__flights. One place, so the rates and the mart join them alike.
-#}
{% macro late_rate_segments() -%}
    {{ return({
        'route': 'route',
        'carrier': 'carrier',
        'origin_hour': "origin || '-' || cast(scheduled_hour as " ~ dbt.type_string() ~ ")",
    }) }}
{%- endmacro %}
