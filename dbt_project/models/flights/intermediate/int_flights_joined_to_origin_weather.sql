{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='flight_date',
        on_schema_change='fail',
        tags=['daily'],
    )
}}

{%- set weather_columns = [
    'observed_at', 'temp', 'dewp', 'humid', 'wind_dir', 'wind_speed', 'wind_gust', 'precip',
    'pressure', 'visib',
] %}

with

flights as (

    select * from {{ ref('stg_landing__flights') }}
    where {{ date_window_filter('flight_date') }}

),

weather_observations as (

    -- a local flight day departs within a day of its UTC dates; a lookback of hours fits too
    select * from {{ ref('stg_landing__weather_observations') }}
    where {{ date_window_filter('observed_at', lower_offset_days=-1, upper_offset_days=1) }}

),

joined as (

    {{ asof_join(
        left_relation='flights',
        right_relation='weather_observations',
        left_key='origin',
        right_key='origin',
        left_at='scheduled_departure_at',
        right_at='observed_at',
        right_columns=weather_columns,
        lookback_hours=var('weather_lookback_hours'),
        left_unique_key='flight_id',
    ) }}

),

final as (

    select
        flight_id,
        flight_date,
        scheduled_departure_at,
        carrier,
        flight_number,
        tailnum,
        origin,
        dest,
        route,
        distance,
        scheduled_hour,
        scheduled_weekday,
        scheduled_month,
        observed_at as weather_observed_at,
        temp,
        dewp,
        humid,
        wind_dir,
        wind_speed,
        wind_gust,
        precip,
        pressure,
        visib
    from joined

)

select * from final
