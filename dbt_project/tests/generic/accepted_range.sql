{#- Fails on rows whose value lies outside [min_value, max_value] (or the open interval). Nulls pass. -#}
{% test accepted_range(model, column_name, min_value=none, max_value=none, inclusive=true) %}
    {%- if min_value is none and max_value is none -%}
        {{ exceptions.raise_compiler_error('accepted_range needs min_value or max_value') }}
    {%- endif %}

select *
from {{ model }}
where
    1 = 2
    {%- if min_value is not none %}
    or {{ column_name }} {{ '<' if inclusive else '<=' }} {{ min_value }}
    {%- endif %}
    {%- if max_value is not none %}
    or {{ column_name }} {{ '>' if inclusive else '>=' }} {{ max_value }}
    {%- endif %}

{% endtest %}
