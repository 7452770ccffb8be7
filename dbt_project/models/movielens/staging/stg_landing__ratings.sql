{{ config(tags=['daily']) }}

with

source as (

    select * from {{ source('movielens_landing', 'ratings') }}

),

ranked as (

    -- an event re-ingested (its month replaced) keeps only its latest version; ranked within
    -- its month, so a filter on the month reaches below the ranking
    select
        *,
        row_number() over (
            partition by _landing_date, rating_id
            order by _ingested_at desc, _source_line desc
        ) as ingestion_rank
    from source

),

final as (

    select
        rating_id,
        _landing_date as rating_month,
        rated_at,
        user_id,
        movie_id,
        cast(extract(hour from rated_at) as {{ dbt.type_bigint() }}) as rated_hour,
        {{ iso_weekday('rated_at') }} as rated_weekday,
        _ingested_at as ingested_at
    from ranked
    where ingestion_rank = 1

)

select * from final
