{#-
    The window of days a run (re)builds: [FLYWHEEL_MIN_DATE, FLYWHEEL_MAX_DATE), ISO dates, min
    inclusive and max exclusive, as the orchestrator passes a partition's time window. Either may
    be left unset (or empty); with neither, every day is built.

    Environment variables rather than vars, read only when executing: a changed var makes dbt
    re-parse the whole project, and an environment variable read while parsing re-parses the
    files that read it. The window shapes no ref, source or config, only the SQL each run
    compiles, so the parse is the same for every window and partial parsing keeps all of it.
-#}

{#- A bound of the window ('min_date' or 'max_date') as a date literal shifted by offset_days,
    or none when unset. -#}
{% macro date_window_bound(bound, offset_days=0) -%}
    {%- if bound not in ('min_date', 'max_date') -%}
        {{ exceptions.raise_compiler_error(
            "date_window_bound: bound must be 'min_date' or 'max_date', got '" ~ bound ~ "'") }}
    {%- endif -%}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set name = 'FLYWHEEL_' ~ bound | upper -%}
    {%- set value = env_var(name, '') | trim -%}
    {%- if value == '' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- if not modules.re.match('^\d{4}-\d{2}-\d{2}$', value) -%}
        {{ exceptions.raise_compiler_error(
            name ~ " must be an ISO date (YYYY-MM-DD), got '" ~ value ~ "'") }}
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
