with

source as (

    select * from {{ source('movielens_labels', 'rating_label_tasks') }}

),

final as (

    select
        task_id,
        rating_id,
        reason as selection_reason,
        exported_at
    from source

)

select * from final
