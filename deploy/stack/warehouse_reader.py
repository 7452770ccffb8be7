"""The warehouse's reader: a role that logs in to the warehouse database and reads every table
the pipeline writes there (now and later), and writes nothing. For analysts, dashboards and
notebooks, in place of the writers' role (`warehouse`, the steps' and dbt's).
"""

from __future__ import annotations

READER = "warehouse_reader"
DATABASE = "warehouse"

# Every schema of the warehouse (the writers' own, and `public`): usage and read. Then the same
# for what the writers create later (default privileges: PostgreSQL applies them as each schema
# or table is created).
GRANTS = f"""
do $$
declare item record;
begin
  for item in select nspname from pg_namespace
      where nspowner = '{DATABASE}'::regrole or nspname = 'public' loop
    execute format('grant usage on schema %I to {READER}', item.nspname);
    execute format('grant select on all tables in schema %I to {READER}', item.nspname);
  end loop;
end $$;
alter default privileges for role {DATABASE} grant usage on schemas to {READER};
alter default privileges for role {DATABASE} grant select on tables to {READER};
"""


def ensure(libpq_url: str, password: str) -> None:
    """The reader role with `password`, and its grants; idempotent. `libpq_url`: the
    administrator's, to the `postgres` database."""
    import psycopg2

    connection = psycopg2.connect(libpq_url)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("select 1 from pg_roles where rolname = %s", (READER,))
            verb = "alter" if cursor.fetchone() else "create"
            cursor.execute(
                f"{verb} role {READER} login nosuperuser nocreatedb nocreaterole noreplication "
                "password %s",
                (password,),
            )
            cursor.execute(f"grant connect on database {DATABASE} to {READER}")
    finally:
        connection.close()
    connection = psycopg2.connect(libpq_url.removesuffix("/postgres") + f"/{DATABASE}")
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute(GRANTS)
    finally:
        connection.close()
