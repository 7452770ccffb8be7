with

source as (

    select * from {{ source('landing', 'airports') }}

),

final as (

    select
        faa,
        name as airport_name,
        lat as latitude,
        lon as longitude,
        alt as altitude_ft,
        tz as utc_offset_hours,
        dst as dst_rule,
        tzone as time_zone,
        _ingested_at as ingested_at
    from source

)

select * from final
