{#-
    dbt's relationships test for a model built a window of days at a time, reading the parent in
    the same window: every value of `column_name` in the model's rows (its `where`, such as
    `date_window(flight_date)`) is a `field` of the parent's rows whose `parent_day_column` lies
    in the run's window. Where the key holds its day (a flight's id holds its flight date), a row
    of the window can only match a parent row of the window, so this is the relationships test
    over the whole parent, reading one window of it: the flights' staging view ranks every landed
    version of every flight, and read whole it costs a ranking of all of them each day. A row whose
    match lies outside the window fails. With no window, the whole parent is read.
-#}
{% test relationships_in_window(model, column_name, to, field, parent_day_column) %}
    {#- dbt's own relationships test, its parent the window's rows of `to`. -#}
    {%- set windowed_parent -%}
        (select * from {{ to }} where {{ date_window_filter(parent_day_column) }}) windowed_parent
    {%- endset -%}
    {{ adapter.dispatch('test_relationships', 'dbt')(model, column_name, windowed_parent, field) }}
{% endtest %}
