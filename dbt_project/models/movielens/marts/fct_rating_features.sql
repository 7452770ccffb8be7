{{
    config(
        materialized='incremental',
        incremental_strategy='delete+insert',
        unique_key='rating_month',
        on_schema_change='fail',
        tags=['daily'],
    )
}}

with

events as (

    select * from {{ ref('stg_landing__ratings') }}
    where {{ date_window_filter('rating_month') }}

),

movies as (

    select * from {{ ref('stg_landing__movies') }}

),

labels as (

    select * from {{ ref('stg_labels__rating_labels') }}

),

every_event as (

    select * from {{ ref('stg_landing__ratings') }}

),

-- every rating known so far, with whose and which film's it is
known_ratings as (

    select
        every_event.user_id,
        every_event.movie_id,
        labels.rating,
        labels.known_at
    from labels
    inner join every_event
        on labels.rating_id = every_event.rating_id

),

-- the user's and the film's ratings known before the event's month began: nothing the month
-- itself taught is used for its own events
user_history as (

    select
        events.rating_id,
        count(known_ratings.rating) as user_labelled_count,
        avg(known_ratings.rating) as user_mean_rating
    from events
    left join known_ratings
        on events.user_id = known_ratings.user_id
        and events.rating_month > known_ratings.known_at
    group by events.rating_id

),

movie_history as (

    select
        events.rating_id,
        count(known_ratings.rating) as movie_labelled_count,
        avg(known_ratings.rating) as movie_mean_rating
    from events
    left join known_ratings
        on events.movie_id = known_ratings.movie_id
        and events.rating_month > known_ratings.known_at
    group by events.rating_id

),

final as (

    select
        events.rating_id,
        events.rating_month,
        events.rated_at,
        events.user_id,
        events.movie_id,
        cast(events.user_id as {{ dbt.type_string() }}) as user_key,
        cast(events.movie_id as {{ dbt.type_string() }}) as movie_key,
        movies.title,
        movies.genres,
        movies.primary_genre,
        movies.genre_count,
        movies.release_year,
        cast(extract(year from events.rated_at) as {{ dbt.type_bigint() }})
        - movies.release_year as film_age_years,
        events.rated_hour,
        events.rated_weekday,
        user_history.user_labelled_count,
        user_history.user_mean_rating,
        movie_history.movie_labelled_count,
        movie_history.movie_mean_rating
    from events
    left join movies
        on events.movie_id = movies.movie_id
    inner join user_history
        on events.rating_id = user_history.rating_id
    inner join movie_history
        on events.rating_id = movie_history.rating_id

)

select * from final
