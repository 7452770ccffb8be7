{{ config(tags=['daily']) }}

with

source as (

    select * from {{ source('landing', 'weather') }}

),

ranked as (

    -- one observation per airport and time: the latest ingested version wins
    select
        *,
        row_number() over (
            partition by origin, time_hour
            order by _ingested_at desc, _source_line desc
        ) as ingestion_rank
    from source

),

final as (

    select
        origin,
        time_hour as observed_at,
        {{ date_from_parts('year', 'month', 'day') }} as observed_local_date,
        hour as observed_local_hour,
        temp,
        dewp,
        humid,
        wind_dir,
        wind_speed,
        wind_gust,
        precip,
        pressure,
        visib,
        _landing_date as landing_date,
        _ingested_at as ingested_at
    from ranked
    where ingestion_rank = 1

)

select * from final
