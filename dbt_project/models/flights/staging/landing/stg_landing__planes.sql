with

source as (

    select * from {{ source('landing', 'planes') }}

),

final as (

    select
        tailnum,
        year as manufactured_year,
        type as aircraft_type,
        manufacturer,
        model,
        engines as engine_count,
        seats as seat_count,
        speed as cruising_speed,
        engine as engine_type,
        _ingested_at as ingested_at
    from source

)

select * from final
