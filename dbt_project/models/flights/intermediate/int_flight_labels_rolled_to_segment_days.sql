{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='rate_date',
        on_schema_change='fail',
        tags=['daily'],
        pre_hook="{{ flywheel.no_nested_loops() }}",
    )
}}

{#-
    For every flight day D and segment: the labels known in the `window_days` days before D,
    i.e. known_at in [D - window_days, D). Only labels known before D's first instant count, so a
    day's rates never change when later flights or later labels arrive.
-#}
{%- set window_days = var('late_rate_window_days') | int %}
{%- set segments = late_rate_segments() %}
{%- set start_date = date_window_bound('min_date') or '(select min(flight_date) from flights)' %}
{%- set end_date = date_window_bound('max_date')
    or 'cast(' ~ dbt.dateadd('day', 1, '(select max(flight_date) from flights)') ~ ' as date)' %}

with

flights as (

    select * from {{ ref('stg_landing__flights') }}

),

flight_labels as (

    select * from {{ ref('stg_labels__flight_labels') }}

),

bounds as (

    -- the flight days to compute, [start_date, end_date), and the label days they look back on
    select
        {{ start_date }} as start_date,
        {{ end_date }} as end_date,
        cast({{ dbt.dateadd('day', -window_days, start_date) }} as date) as lookback_start_date

),

flight_segments as (

    select
        flight_id,
    {% for segment_type, expression in segments.items() %}
        {{ expression }} as {{ segment_type }}_segment
        {{- ',' if not loop.last }}
    {% endfor %}
    from flights

),

labelled_flights as (

    select
        flight_segments.*,
        flight_labels.is_late,
        flight_labels.known_at,
        cast(flight_labels.known_at as date) as known_date
    from flight_labels
    inner join flight_segments
        on flight_labels.flight_id = flight_segments.flight_id
    where
        flight_labels.known_at
        >= cast((select bounds.lookback_start_date from bounds) as timestamp)
        and flight_labels.known_at < cast((select bounds.end_date from bounds) as timestamp)

),

labelled_segment_flights as (

    {% for segment_type in segments %}
        select
            '{{ segment_type }}' as segment_type,
            {{ segment_type }}_segment as segment_value,
            is_late,
            known_at,
            known_date
        from labelled_flights
        where {{ segment_type }}_segment is not null
        {{ 'union all' if not loop.last }}
    {% endfor %}

),

segment_known_days as (

    select
        segment_type,
        segment_value,
        known_date,
        count(*) as labelled_count,
        sum(case when is_late then 1 else 0 end) as late_count,
        max(known_at) as latest_known_at
    from labelled_segment_flights
    group by segment_type, segment_value, known_date

),

labelled_segments as (

    select distinct
        segment_type,
        segment_value
    from segment_known_days

),

days as (

    {{ date_spine(
        '(select bounds.lookback_start_date from bounds)',
        '(select bounds.end_date from bounds)',
    ) }}

),

segment_days as (

    -- dense: one row per segment and day, so a row-based window spans exactly window_days days
    select
        labelled_segments.segment_type,
        labelled_segments.segment_value,
        days.date_day,
        coalesce(segment_known_days.labelled_count, 0) as labelled_count,
        coalesce(segment_known_days.late_count, 0) as late_count,
        segment_known_days.latest_known_at
    from labelled_segments
    cross join days
    left join segment_known_days
        on labelled_segments.segment_type = segment_known_days.segment_type
        and labelled_segments.segment_value = segment_known_days.segment_value
        and days.date_day = segment_known_days.known_date

),

rolled as (

    select
        segment_type,
        segment_value,
        date_day as rate_date,
        sum(labelled_count) over (
            partition by segment_type, segment_value
            order by date_day
            rows between {{ window_days }} preceding and 1 preceding
        ) as labelled_count,
        sum(late_count) over (
            partition by segment_type, segment_value
            order by date_day
            rows between {{ window_days }} preceding and 1 preceding
        ) as late_count,
        max(latest_known_at) over (
            partition by segment_type, segment_value
            order by date_day
            rows between {{ window_days }} preceding and 1 preceding
        ) as latest_label_known_at
    from segment_days

),

final as (

    select
        segment_type,
        segment_value,
        rate_date,
        cast(coalesce(labelled_count, 0) as {{ dbt.type_bigint() }}) as labelled_count,
        cast(coalesce(late_count, 0) as {{ dbt.type_bigint() }}) as late_count,
        cast(late_count as double precision) / nullif(labelled_count, 0) as late_rate,
        latest_label_known_at
    from rolled
    where rate_date >= (select bounds.start_date from bounds)
        and rate_date < (select bounds.end_date from bounds)

)

select * from final
