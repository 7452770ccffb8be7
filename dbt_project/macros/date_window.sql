{#-
    The window of days a run (re)builds: [var('min_date'), var('max_date')), ISO dates, min
    inclusive and max exclusive, as the orchestrator passes a partition's time window. Either may
    be left unset; with neither, every day is built.
-#}

{#- A bound of the window as a date literal shifted by offset_days, or none when unset. -#}
{% macro date_window_bound(var_name, offset_days=0) -%}
    {%- set value = var(var_name, none) -%}
    {%- if value is none or value == '' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set value = value | string -%}
    {%- if not modules.re.match('^\d{4}-\d{2}-\d{2}$', value) -%}
        {{ exceptions.raise_compiler_error(
            "var('" ~ var_name ~ "') must be an ISO date (YYYY-MM-DD), got '" ~ value ~ "'") }}
    {%- endif -%}
    {%- set day = modules.datetime.date.fromisoformat(value)
                  + modules.datetime.timedelta(days=offset_days) -%}
    {{ return("cast('" ~ day.isoformat() ~ "' as date)") }}
{%- endmacro %}

{#-
    A predicate keeping the rows of `column` inside the window; the offsets widen (negative
    lower, positive upper) the window for inputs that reach across day boundaries.
-#}
{% macro date_window_filter(column, lower_offset_days=0, upper_offset_days=0) -%}
    {%- set lower = date_window_bound('min_date', lower_offset_days) -%}
    {%- set upper = date_window_bound('max_date', upper_offset_days) -%}
    {%- set predicates = [] -%}
    {%- if lower is not none -%}
        {%- do predicates.append(column ~ ' >= ' ~ lower) -%}
    {%- endif -%}
    {%- if upper is not none -%}
        {%- do predicates.append(column ~ ' < ' ~ upper) -%}
    {%- endif -%}
    {{ predicates | join(' and ') if predicates else '1 = 1' }}
{%- endmacro %}
