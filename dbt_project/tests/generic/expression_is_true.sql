{#-
    Fails on rows where `expression` is false. A null result passes (pair with not_null where a
    value is required). As a column test, the expression is appended to the column name.
-#}
{% test expression_is_true(model, expression, column_name=none) %}

select *
from {{ model }}
where not ({{ column_name ~ ' ' if column_name is not none }}{{ expression }})

{% endtest %}
