with

source as (

    select * from {{ source('landing', 'airlines') }}

),

final as (

    select
        carrier,
        name as airline_name,
        _ingested_at as ingested_at
    from source

)

select * from final
