{{ config(tags=['daily']) }}

with

source as (

    select
        {{ date_from_parts('year', 'month', 'day') }} as flight_date,
        *
    from {{ source('landing', 'flights') }}

),

ranked as (

    -- a flight re-ingested (e.g. its landing day replaced) keeps only its latest version. Ranked
    -- within its flight_date (the same partitions as year, month, day): a filter on flight_date
    -- then reaches below the ranking, and a day's tests and models rank that day's rows, not
    -- every row ever landed.
    select
        *,
        row_number() over (
            partition by flight_date, carrier, flight, origin
            order by _ingested_at desc, _source_line desc
        ) as ingestion_rank
    from source

),

latest as (

    select
        flight_date,
        carrier,
        flight as flight_number,
        tailnum,
        origin,
        dest,
        distance,
        sched_dep_time as scheduled_departure_hhmm,
        sched_arr_time as scheduled_arrival_hhmm,
        hour as scheduled_hour,
        minute as scheduled_minute,
        month as scheduled_month,
        {{ dbt.dateadd('minute', 'minute', 'time_hour') }} as scheduled_departure_at,
        _landing_date as landing_date,
        _ingested_at as ingested_at
    from ranked
    where ingestion_rank = 1

),

final as (

    select
        cast(flight_date as {{ dbt.type_string() }})
        || '_' || carrier || cast(flight_number as {{ dbt.type_string() }})
        || '_' || origin as flight_id,
        flight_date,
        scheduled_departure_at,
        carrier,
        flight_number,
        tailnum,
        origin,
        dest,
        origin || '-' || dest as route,
        distance,
        scheduled_departure_hhmm,
        scheduled_arrival_hhmm,
        scheduled_hour,
        scheduled_minute,
        {{ iso_weekday('flight_date') }} as scheduled_weekday,
        scheduled_month,
        landing_date,
        ingested_at
    from latest

)

select * from final
