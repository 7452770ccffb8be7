{{ config(materialized='table', tags=['training']) }}

with

features as (

    select * from {{ ref('fct_rating_features') }}

),

labels as (

    select * from {{ ref('stg_labels__rating_labels') }}

),

tasks as (

    select * from {{ ref('stg_labels__rating_label_tasks') }}

),

final as (

    select
        features.*,
        labels.rating,
        labels.known_at as label_known_at,
        tasks.selection_reason
    from features
    inner join labels
        on features.rating_id = labels.rating_id
    left join tasks
        on features.rating_id = tasks.rating_id

)

select * from final
