"""The warehouse's roles (deploy/stack/warehouse_roles.py) on a PostgreSQL server: what each may
read and write, and dbt's models that the steps' role built before dbt had a role of its own,
handed over."""

from __future__ import annotations

import sys

import pytest

from deploy.stack import warehouse_roles
from deploy.stack.warehouse_roles import BUILDER, OWNER, READER

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="PostgreSQL from the distribution's packages"
)


def test_dbt_owns_its_models_reads_the_steps_tables_and_writes_none_of_them(postgres_url: str):
    import psycopg2
    import psycopg2.errors

    admin = postgres_url.replace("postgresql+psycopg2://", "postgresql://", 1)
    connection = psycopg2.connect(f"{admin}/warehouse")
    connection.autocommit = True
    cursor = connection.cursor()

    def as_role(role: str, statement: str) -> list[tuple]:
        cursor.execute(f"set role {role}")
        try:
            cursor.execute(statement)
            return cursor.fetchall() if cursor.description else []
        finally:
            cursor.execute("reset role")

    def refused(role: str, statement: str) -> None:
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            as_role(role, statement)

    try:
        for role in (OWNER, *warehouse_roles.ROLES):  # as deploy/stack/postgres.py makes them
            cursor.execute(f"select 1 from pg_roles where rolname = '{role}'")
            if not cursor.fetchall():
                cursor.execute(f"create role {role} login")
        cursor.execute(f"alter database warehouse owner to {OWNER}")
        cursor.execute("drop schema if exists raw cascade")
        cursor.execute("drop table if exists public.fct_probe, public.stg_probe, public.later")
        # Before dbt had a role: the steps' role built everything, dbt's models included.
        as_role(OWNER, "create schema raw")
        as_role(OWNER, "create table raw.flights (x int); insert into raw.flights values (1)")
        as_role(OWNER, "create table public.fct_probe as select x from raw.flights")
        warehouse_roles.ensure(f"{admin}/postgres", ["fct_probe", "stg_probe"])
        warehouse_roles.ensure(f"{admin}/postgres", ["fct_probe"])  # idempotent

        cursor.execute("select tableowner from pg_tables where tablename = 'fct_probe'")
        assert cursor.fetchall() == [(BUILDER,)]
        # dbt reads the raw tables, builds in public and replaces its own models...
        assert as_role(BUILDER, "select x from raw.flights") == [(1,)]
        as_role(BUILDER, "drop table public.fct_probe")
        as_role(BUILDER, "create table public.fct_probe as select x + 1 as x from raw.flights")
        # ...and writes none of the steps' tables, nor makes a schema.
        for statement in (
            "insert into raw.flights values (2)",
            "delete from raw.flights",
            "drop table raw.flights",
            "create table raw.probe (x int)",
            "create schema probe",
        ):
            refused(BUILDER, statement)
        # The steps and the reader read a model dbt made, and write none of it; the steps'
        # tables made later are dbt's and the reader's to read.
        for role in (OWNER, READER):
            assert as_role(role, "select x from public.fct_probe") == [(2,)]
            refused(role, "insert into public.fct_probe values (3)")
        as_role(OWNER, "create table raw.later (y int)")
        assert as_role(BUILDER, "select count(*) from raw.later") == [(0,)]
        assert as_role(READER, "select count(*) from raw.later") == [(0,)]
        refused(READER, "create table public.later (x int)")
    finally:
        cursor.execute("reset role")
        connection.close()
