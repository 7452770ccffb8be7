{#-
    As-of left join: every row of `left_relation`, with `right_columns` from the latest row of
    `right_relation` with the same key whose `right_at` is at or before `left_at` and no more than
    `lookback_hours` older; nulls when there is none. Returns a select over the two relations
    (CTE names or relations). `left_unique_key` identifies a left row (portable implementation).
    The right rows are expected to be unique per (right_key, right_at).
-#}
{% macro asof_join(
    left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
    lookback_hours, left_unique_key
) -%}
    {{ return(adapter.dispatch('asof_join', 'flywheel')(
        left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
        lookback_hours, left_unique_key
    )) }}
{%- endmacro %}

{#- Portable: the candidates inside the lookback, ranked newest first per left row. -#}
{% macro default__asof_join(
    left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
    lookback_hours, left_unique_key
) -%}
    {{ flywheel.ranked_asof_join(
        left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
        lookback_hours, left_unique_key, hour_buckets=false
    ) }}
{%- endmacro %}

{#-
    PostgreSQL: the same ranking, but each left row meets only the right rows of its key in the
    hour buckets its lookback spans (an equi-join on key and hour), not every row of its key.
    The same candidates, hence the same row: any right row inside the lookback starts in one of
    those buckets.
-#}
{% macro postgres__asof_join(
    left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
    lookback_hours, left_unique_key
) -%}
    {{ flywheel.ranked_asof_join(
        left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
        lookback_hours, left_unique_key, hour_buckets=true
    ) }}
{%- endmacro %}

{#-
    The left rows with the newest of their candidates: the right rows of the same key inside
    the lookback; with `hour_buckets`, found through an equi-join on the hours the lookback spans
    (generate_series, date_trunc and make_interval: PostgreSQL).
-#}
{% macro ranked_asof_join(
    left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
    lookback_hours, left_unique_key, hour_buckets
) -%}
    select
        asof_left.*,
        {%- for column in right_columns %}
        asof_match.{{ column }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ left_relation }} as asof_left
    left join (
        select
            candidate_left.{{ left_unique_key }} as asof_left_unique_key,
            {%- for column in right_columns %}
            candidate_right.{{ column }},
            {%- endfor %}
            row_number() over (
                partition by candidate_left.{{ left_unique_key }}
                order by candidate_right.{{ right_at }} desc
            ) as asof_rank
        from {{ left_relation }} as candidate_left
        {%- if hour_buckets %}
        cross join generate_series(0, {{ lookback_hours | int }}) as asof_bucket(hours_back)
        {%- endif %}
        inner join {{ right_relation }} as candidate_right
            on candidate_left.{{ left_key }} = candidate_right.{{ right_key }}
            {%- if hour_buckets %}
            and date_trunc('hour', candidate_right.{{ right_at }})
                = date_trunc('hour', candidate_left.{{ left_at }})
                - make_interval(hours => asof_bucket.hours_back)
            {%- endif %}
            and candidate_right.{{ right_at }} <= candidate_left.{{ left_at }}
            and candidate_right.{{ right_at }}
                >= {{ dbt.dateadd('hour', -lookback_hours, 'candidate_left.' ~ left_at) }}
    ) as asof_match
        on asof_left.{{ left_unique_key }} = asof_match.asof_left_unique_key
        and asof_match.asof_rank = 1
{%- endmacro %}

{#- DuckDB: a native ASOF join finds the latest row; the lookback then discards stale ones. -#}
{% macro duckdb__asof_join(
    left_relation, right_relation, left_key, right_key, left_at, right_at, right_columns,
    lookback_hours, left_unique_key
) -%}
    select
        asof_left.*,
        {%- for column in right_columns %}
        case
            when asof_right.{{ right_at }}
                >= {{ dbt.dateadd('hour', -lookback_hours, 'asof_left.' ~ left_at) }}
                then asof_right.{{ column }}
        end as {{ column }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ left_relation }} as asof_left
    asof left join {{ right_relation }} as asof_right
        on asof_left.{{ left_key }} = asof_right.{{ right_key }}
        and asof_left.{{ left_at }} >= asof_right.{{ right_at }}
{%- endmacro %}
