{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='flight_date',
        on_schema_change='fail',
        tags=['daily'],
    )
}}

{%- set segments = late_rate_segments() %}

with

flights as (

    select * from {{ ref('int_flights_joined_to_origin_weather') }}
    where {{ date_window_filter('flight_date') }}

),

planes as (

    select * from {{ ref('stg_landing__planes') }}

),

segment_late_rates as (

    select * from {{ ref('int_flight_labels_rolled_to_segment_days') }}
    where {{ date_window_filter('rate_date') }}

),

flight_segments as (

    select
        flights.*,
    {% for segment_type, expression in segments.items() %}
        {{ expression }} as {{ segment_type }}_segment
        {{- ',' if not loop.last }}
    {% endfor %}
    from flights

),

final as (

    select
        flight_segments.flight_id,
        flight_segments.flight_date,
        flight_segments.scheduled_departure_at,

        flight_segments.carrier,
        flight_segments.origin,
        flight_segments.dest,
        flight_segments.route,
        flight_segments.scheduled_hour,
        flight_segments.scheduled_weekday,
        flight_segments.scheduled_month,
        flight_segments.distance,

        flight_segments.temp,
        flight_segments.dewp,
        flight_segments.humid,
        flight_segments.wind_dir,
        flight_segments.wind_speed,
        flight_segments.wind_gust,
        flight_segments.precip,
        flight_segments.pressure,
        flight_segments.visib,
        flight_segments.weather_observed_at,

        flight_segments.tailnum,
        cast(extract(year from flight_segments.flight_date) as {{ dbt.type_bigint() }})
        - planes.manufactured_year as plane_age_years,
        planes.seat_count as plane_seats,
        planes.engine_count as plane_engines,
        planes.manufacturer as plane_manufacturer,
        planes.aircraft_type as plane_type,
        planes.engine_type as plane_engine,
        planes.tailnum is not null as has_plane_record,

    {% for segment_type in segments %}
        {{ segment_type }}_rates.late_rate as {{ segment_type }}_late_rate,
        coalesce({{ segment_type }}_rates.labelled_count, 0) as {{ segment_type }}_labelled_count
        {{- ',' if not loop.last }}
    {% endfor %}

    from flight_segments
    left join planes
        on flight_segments.tailnum = planes.tailnum
    {% for segment_type in segments %}
        left join segment_late_rates as {{ segment_type }}_rates
            on {{ segment_type }}_rates.segment_type = '{{ segment_type }}'
            and flight_segments.{{ segment_type }}_segment = {{ segment_type }}_rates.segment_value
            and flight_segments.flight_date = {{ segment_type }}_rates.rate_date
    {% endfor %}

)

select * from final
