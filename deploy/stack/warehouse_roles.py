"""The warehouse's roles besides its owner, each holding only what it needs.

- `warehouse` (the database's owner; deploy/stack/postgres.py): the pipeline's steps, which
  write the raw tables (ingestion, labeling), the predictions and the monitoring tables, and
  read dbt's models.
- `warehouse_dbt`: dbt, which builds its models in `public` and owns them, and reads what the
  steps write; it may not write a table of theirs (a model's SQL cannot touch the raw data).
- `warehouse_reader`: analysts, dashboards and notebooks: reads every table, writes nothing.

Each role's grants cover what is there and what is made later (default privileges, which
PostgreSQL applies as each schema or table is created). A stack whose models `warehouse` built
before `warehouse_dbt` existed hands them over: a table's owner alone may replace it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

OWNER = "warehouse"
BUILDER = "warehouse_dbt"
READER = "warehouse_reader"
DATABASE = "warehouse"
ROLES = (BUILDER, READER)

# Every schema of the steps (theirs, and `public`): usage and read, for dbt and the reader.
# Then the same for what the steps and dbt make later.
GRANTS = f"""
do $$
declare item record;
begin
  for item in select nspname from pg_namespace
      where nspowner = '{OWNER}'::regrole or nspname = 'public' loop
    execute format('grant usage on schema %I to {BUILDER}, {READER}', item.nspname);
    execute format('grant select on all tables in schema %I to {BUILDER}, {READER}',
                   item.nspname);
  end loop;
end $$;
grant create on schema public to {BUILDER};
alter default privileges for role {OWNER} grant usage on schemas to {BUILDER}, {READER};
alter default privileges for role {OWNER} grant select on tables to {BUILDER}, {READER};
alter default privileges for role {BUILDER} grant select on tables to {OWNER}, {READER};
"""
# One of dbt's relations that the steps' role made, handed to dbt's (the steps read it still).
HAND_OVER = """
do $$
declare item record;
begin
  for item in select c.oid::regclass as name, c.relkind from pg_class c
      join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'public' and c.relname = any(%(relations)s)
        and c.relowner = %(owner)s::regrole and c.relkind in ('r', 'v', 'm') loop
    execute format('alter %%s %%s owner to %%I', case item.relkind when 'v' then 'view'
      when 'm' then 'materialized view' else 'table' end, item.name, %(builder)s);
    execute format('grant select on %%s to %%I, %%I', item.name, %(owner)s, %(reader)s);
  end loop;
end $$;
"""


def environment(host: str, port: int, passwords: Mapping[str, str]) -> dict[str, str]:
    """The warehouse's settings of the stack's runs (pipelines/settings.py): the steps' role,
    and dbt's own."""
    return {
        "FLYWHEEL_WAREHOUSE_HOST": host,
        "FLYWHEEL_WAREHOUSE_PORT": str(port),
        "FLYWHEEL_WAREHOUSE_USER": OWNER,
        "FLYWHEEL_WAREHOUSE_PASSWORD": passwords[OWNER],
        "FLYWHEEL_WAREHOUSE_DATABASE": DATABASE,
        "FLYWHEEL_DBT_USER": BUILDER,
        "FLYWHEEL_DBT_PASSWORD": passwords[BUILDER],
    }


def ensure(libpq_url: str, dbt_relations: Iterable[str]) -> None:
    """The grants of the roles of `ROLES` (deploy/stack/postgres.py makes them), and dbt's
    relations (`dbt_relations`: its models' and seeds' names) handed to dbt's role; idempotent.
    `libpq_url`: the administrator's, to the `postgres` database."""
    import psycopg2

    connection = psycopg2.connect(libpq_url.removesuffix("/postgres") + f"/{DATABASE}")
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            # dbt's incremental models stage their rows in temporary tables.
            cursor.execute(f"grant connect, temporary on database {DATABASE} to {BUILDER}")
            cursor.execute(f"grant connect on database {DATABASE} to {READER}")
            cursor.execute(GRANTS)
            names = {"owner": OWNER, "builder": BUILDER, "reader": READER}
            cursor.execute(HAND_OVER, {**names, "relations": sorted(set(dbt_relations))})
    finally:
        connection.close()


def dbt_relations() -> list[str]:
    """The names of the relations dbt builds (its models and seeds, every task's), from the
    parsed project; none where it is not parsed yet (nothing of it was built then)."""
    from pipelines.lib.dbt import dbt_project
    from pipelines.lib.wiring import parsed_manifest

    if not dbt_project.manifest_path.exists():
        return []
    nodes = parsed_manifest()["nodes"].values()
    return [n["alias"] for n in nodes if n["resource_type"] in ("model", "seed", "snapshot")]
