with

source as (

    select * from {{ source('movielens_labels', 'rating_labels') }}

),

ranked as (

    -- one rating per event: the first known stays, so features computed from it never change
    select
        *,
        row_number() over (
            partition by rating_id
            order by known_at asc, rating desc  -- a tie resolves deterministically
        ) as known_rank
    from source

),

final as (

    select
        rating_id,
        rating,
        known_at
    from ranked
    where known_rank = 1

)

select * from final
