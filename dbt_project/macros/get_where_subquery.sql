{#-
    A test's `where` config, with `date_window(<column>)` standing for the run's window of days
    on that column (date_window_filter): the tests of the daily models check the rows the run
    (re)built, not every day again. Rendered when the test runs, so it reads the window of that
    run; with no window, every row is checked. Otherwise as dbt's default.
-#}
{% macro get_where_subquery(relation) -%}
    {%- set where = namespace(sql=config.get('where')) -%}
    {%- if where.sql -%}
        {%- for column in modules.re.findall('date_window\\((\\w+)\\)', where.sql) -%}
            {%- set where.sql = where.sql | replace(
                'date_window(' ~ column ~ ')', '(' ~ date_window_filter(column) ~ ')') -%}
        {%- endfor -%}
        {%- set filtered -%}
            (select * from {{ relation }} where {{ where.sql }}) dbt_subquery
        {%- endset -%}
        {%- do return(filtered) -%}
    {%- else -%}
        {%- do return(relation) -%}
    {%- endif -%}
{%- endmacro %}
