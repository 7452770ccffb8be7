{{ config(enabled=target.type in ('duckdb', 'postgres'), tags=['daily']) }}

{#-
    The portable as-of join returns what the target's own returns (DuckDB's native ASOF JOIN,
    PostgreSQL's join on hour buckets), on real data: a tenth of the flights of the run's date
    window (the portable join is slow on DuckDB, which hashes on the few origins).
-#}

{%- set arguments = dict(
    left_relation='flights',
    right_relation='weather_observations',
    left_key='origin',
    right_key='origin',
    left_at='scheduled_departure_at',
    right_at='observed_at',
    right_columns=['observed_at', 'temp', 'visib'],
    lookback_hours=var('weather_lookback_hours'),
    left_unique_key='flight_id',
) %}

with

flights as (

    select
        flight_id,
        origin,
        scheduled_departure_at
    from {{ ref('stg_landing__flights') }}
    where {{ date_window_filter('flight_date') }}
        and flight_number % 10 = 0

),

weather_observations as (

    select * from {{ ref('stg_landing__weather_observations') }}

),

native as (

    {{ flywheel.asof_join(**arguments) }}

),

portable as (

    {{ flywheel.default__asof_join(**arguments) }}

),

final as (

    (
        select
            'only_native' as found_in,
            *
        from native
        except
        select
            'only_native' as found_in,
            *
        from portable
    )
    union all
    (
        select
            'only_portable' as found_in,
            *
        from portable
        except
        select
            'only_portable' as found_in,
            *
        from native
    )

)

select * from final
