with

source as (

    select * from {{ source('movielens_landing', 'movies') }}

),

final as (

    select
        movie_id,
        title,
        year as release_year,
        genres,
        -- the first genre listed, and how many there are
        split_part(genres, '|', 1) as primary_genre,
        length(genres) - length(replace(genres, '|', '')) + 1 as genre_count,
        _ingested_at as ingested_at
    from source

)

select * from final
