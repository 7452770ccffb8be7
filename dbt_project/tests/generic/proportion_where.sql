{#-
    Fails (one row) when fewer than `at_least` (0..1) of the rows satisfy `condition`, e.g. a
    coverage expectation. An empty model passes.
-#}
{% test proportion_where(model, condition, at_least) %}

with

counts as (
    select
        count(*) as total_rows,
        sum(case when {{ condition }} then 1 else 0 end) as matching_rows
    from {{ model }}
),

final as (
    select
        total_rows,
        matching_rows,
        matching_rows * 1.0 / total_rows as matching_proportion
    from counts
    where total_rows > 0
        and matching_rows * 1.0 / total_rows < {{ at_least }}
)

select * from final

{% endtest %}
