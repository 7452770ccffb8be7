{{ config(enabled=target.type == 'duckdb') }}

{#-
    The portable date spine returns the days DuckDB's generate_series returns, across a leap
    day.
-#}

{%- set start_date = "cast('2011-12-15' as date)" %}
{%- set end_date = "cast('2014-03-02' as date)" %}

with

native as (

    {{ flywheel.duckdb__date_spine(start_date, end_date) }}

),

portable as (

    {{ flywheel.default__date_spine(start_date, end_date) }}

),

counts as (

    select count(*) as native_days from native

),

final as (

    select
        'only_native' as found_in,
        a.date_day
    from (
        select * from native
        except
        select * from portable
    ) as a
    union all
    select
        'only_portable' as found_in,
        b.date_day
    from (
        select * from portable
        except
        select * from native
    ) as b
    union all
    select
        'wrong_day_count' as found_in,
        null as date_day
    from counts
    where counts.native_days != 808

)

select * from final
