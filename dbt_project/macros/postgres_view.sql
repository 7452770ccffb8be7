{#-
    Views on PostgreSQL: `create or replace view` in the model's transaction, under the model's
    lock (lock_relation.sql). dbt's default view materialization swaps the view through renames
    and drops the old one after its commit, which two runs building at once collide on.

    A changed view may add columns at its end only (PostgreSQL's rule for `or replace`); one
    that drops or renames columns must be dropped first (`drop view ... cascade`).
-#}
{% materialization view, adapter='postgres' -%}

    {%- set target_relation = this.incorporate(type='view') -%}
    {%- set grant_config = config.get('grants') -%}

    {{ run_hooks(pre_hooks, inside_transaction=False) }}
    -- `BEGIN` happens here:
    {{ run_hooks(pre_hooks, inside_transaction=True) }}

    {% call statement('main') -%}
        {{ postgres__get_replace_view_sql(target_relation, sql) }}
    {%- endcall %}

    {% do apply_grants(target_relation, grant_config, should_revoke=True) %}
    {% do persist_docs(target_relation, model) %}

    {{ run_hooks(post_hooks, inside_transaction=True) }}
    {{ adapter.commit() }}
    {{ run_hooks(post_hooks, inside_transaction=False) }}

    {{ return({'relations': [target_relation]}) }}

{%- endmaterialization %}
