{{ config(materialized='table', tags=['training']) }}

with

features as (

    select * from {{ ref('fct_flight_features') }}

),

labels as (

    select * from {{ ref('stg_labels__flight_labels') }}

),

tasks as (

    select * from {{ ref('stg_labels__label_tasks') }}

),

final as (

    select
        features.*,
        labels.is_late,
        labels.known_at as label_known_at,
        tasks.selection_reason
    from features
    inner join labels
        on features.flight_id = labels.flight_id
    left join tasks
        on features.flight_id = tasks.flight_id

)

select * from final
