{#-
    Every row condition of a model checked in one scan: one failing row per condition that some
    rows break, naming the condition and how many rows break it. Conditions:
    - not_null: columns that must have a value;
    - ranges: {column: {min_value, max_value, inclusive (default true)}}, nulls pass;
    - accepted_values: {column: [values]}, nulls pass;
    - expressions: {name: boolean SQL expression}, a null result passes.
    Cheaper than a test per column and condition: a partition's build runs (and its orchestrator
    records) one test where there would be dozens, and a failure still names each condition.
-#}
{% test row_conditions(model, not_null=[], ranges={}, accepted_values={}, expressions={}) %}
    {%- set conditions = [] -%}
    {%- for column in not_null -%}
        {%- do conditions.append(('not_null(' ~ column ~ ')', column ~ ' is not null')) -%}
    {%- endfor -%}
    {%- for column, bounds in ranges.items() -%}
        {%- set inclusive = bounds.get('inclusive', true) -%}
        {%- set predicates = [] -%}
        {%- if bounds.get('min_value') is not none -%}
            {%- do predicates.append(column ~ (' >= ' if inclusive else ' > ') ~ bounds['min_value']) -%}
        {%- endif -%}
        {%- if bounds.get('max_value') is not none -%}
            {%- do predicates.append(column ~ (' <= ' if inclusive else ' < ') ~ bounds['max_value']) -%}
        {%- endif -%}
        {%- if not predicates -%}
            {{ exceptions.raise_compiler_error(
                "row_conditions: the range of " ~ column ~ " needs min_value or max_value") }}
        {%- endif -%}
        {%- do conditions.append(
            ('range(' ~ column ~ ': ' ~ predicates | join(' and ') ~ ')', predicates | join(' and '))) -%}
    {%- endfor -%}
    {%- for column, values in accepted_values.items() -%}
        {%- set quoted = [] -%}
        {%- for value in values -%}
            {%- do quoted.append("'" ~ value ~ "'") -%}
        {%- endfor -%}
        {%- do conditions.append(
            ('accepted_values(' ~ column ~ ')', column ~ ' in (' ~ quoted | join(', ') ~ ')')) -%}
    {%- endfor -%}
    {%- for name, expression in expressions.items() -%}
        {%- do conditions.append((name, expression)) -%}
    {%- endfor -%}
    {%- if not conditions -%}
        {{ exceptions.raise_compiler_error("row_conditions: no condition given") }}
    {%- endif %}

with

counts as (
    select
    {%- for name, condition in conditions %}
        sum(case when not coalesce(({{ condition }}), true) then 1 else 0 end)
            as failing_{{ loop.index }}{{ ',' if not loop.last }}
    {%- endfor %}
    from {{ model }}
)

{% for name, condition in conditions -%}
select '{{ name | replace("'", "''") }}' as failed_condition, failing_{{ loop.index }} as failing_rows
from counts
where failing_{{ loop.index }} > 0
{{ 'union all' if not loop.last }}
{% endfor %}

{% endtest %}
