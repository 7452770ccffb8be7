with

source as (

    select * from {{ source('labels', 'flight_labels') }}

),

ranked as (

    -- label import accepts one label per flight; should a second ever arrive, the first known
    -- outcome stays: a later one must not rewrite features already computed from the first
    select
        *,
        row_number() over (
            partition by flight_id
            order by known_at asc, is_late desc  -- a tie resolves deterministically
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
