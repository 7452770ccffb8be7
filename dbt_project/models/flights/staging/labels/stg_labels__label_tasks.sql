with

source as (

    select * from {{ source('labels', 'label_tasks') }}

),

final as (

    select
        task_id,
        flight_id,
        reason as selection_reason,
        exported_at
    from source

)

select * from final
