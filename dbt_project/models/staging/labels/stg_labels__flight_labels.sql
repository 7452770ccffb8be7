with

source as (

    select * from {{ source('labels', 'flight_labels') }}

),

ranked as (

    -- a flight labelled more than once keeps its most recently known outcome
    select
        *,
        row_number() over (
            partition by flight_id
            order by known_at desc, is_late desc  -- a tie resolves deterministically
        ) as known_rank
    from source

),

final as (

    select
        flight_id,
        is_late,
        known_at
    from ranked
    where known_rank = 1

)

select * from final
