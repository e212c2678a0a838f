"""schema/current.sql is the schema a migration from empty gives.

The first test dumps a freshly migrated database and compares the text with the
committed file, printing the diff (regenerate with `chronomem schema-dump`). The second
builds a database from the file alone and compares what the catalog says of both, so
the file is known to be the schema, not merely text that looks like it.
"""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chronomem import embedded, schema_dump
from chronomem.dsn import with_params

SCHEMAS = ("memory", "memory_http", "memory_worker", "memory_internal", "public")
ROLES = ("chronomem_app", "chronomem_analyst", "public")

# What the catalog says of every object in the project's schemas, one row per fact,
# owners left out (the file has none). Each query yields (kind, name, definition).
CATALOG_QUERIES = {
    "schema": """
        select 'schema', n.nspname, coalesce(obj_description(n.oid, 'pg_namespace'), '')
          from pg_namespace n where n.nspname = any (%(schemas)s)""",
    "relation": """
        select 'relation', n.nspname || '.' || c.relname,
               c.relkind::text || ' rls=' || c.relrowsecurity || ' force=' || c.relforcerowsecurity
               || ' persistence=' || c.relpersistence::text
               || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
          from pg_class c join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = any (%(schemas)s) and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
           and c.relname <> 'alembic_version'
           and not exists (select from pg_depend d where d.objid = c.oid and d.deptype = 'e')""",
    "column": """
        select 'column', n.nspname || '.' || c.relname || '.' || a.attname,
               format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull
               || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
               || ' generated=' || a.attgenerated::text || ' identity=' || a.attidentity::text
               || ' collation=' || coalesce(co.collname, '')
               || ' comment=' || coalesce(col_description(c.oid, a.attnum), '')
          from pg_attribute a
          join pg_class c on c.oid = a.attrelid
          join pg_namespace n on n.oid = c.relnamespace
          left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
          left join pg_collation co on co.oid = a.attcollation and a.attcollation <> 100
         where n.nspname = any (%(schemas)s) and a.attnum > 0 and not a.attisdropped
           and c.relkind in ('r', 'p', 'v', 'm', 'f') and c.relname <> 'alembic_version'
           and not exists (select from pg_depend x where x.objid = c.oid and x.deptype = 'e')""",
    "constraint": """
        select 'constraint', n.nspname || '.' || c.relname || '.' || k.conname,
               k.contype::text || ' ' || pg_get_constraintdef(k.oid)
               || ' deferrable=' || k.condeferrable || ' validated=' || k.convalidated
          from pg_constraint k
          join pg_class c on c.oid = k.conrelid
          join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = any (%(schemas)s) and c.relname <> 'alembic_version'""",
    "index": """
        select 'index', n.nspname || '.' || i.relname, pg_get_indexdef(i.oid)
          from pg_index x
          join pg_class i on i.oid = x.indexrelid
          join pg_class t on t.oid = x.indrelid
          join pg_namespace n on n.oid = i.relnamespace
         where n.nspname = any (%(schemas)s) and t.relname <> 'alembic_version'""",
    "policy": """
        select 'policy', n.nspname || '.' || c.relname || '.' || p.polname,
               p.polcmd::text || ' permissive=' || p.polpermissive
               || ' roles=' || array_to_string(array(
                    select case when r = 0 then 'public' else r::regrole::text end
                      from unnest(p.polroles) r order by 1), ',')
               || ' using=' || coalesce(pg_get_expr(p.polqual, p.polrelid), '')
               || ' check=' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
          from pg_policy p
          join pg_class c on c.oid = p.polrelid
          join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = any (%(schemas)s)""",
    "trigger": """
        select 'trigger', n.nspname || '.' || c.relname || '.' || t.tgname,
               pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
          from pg_trigger t
          join pg_class c on c.oid = t.tgrelid
          join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = any (%(schemas)s) and not t.tgisinternal""",
    "function": """
        select 'function', p.oid::regprocedure::text,
               pg_get_functiondef(p.oid)
               || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
          from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname = any (%(schemas)s) and p.prokind in ('f', 'p', 'w')
           and not exists (select from pg_depend d where d.objid = p.oid and d.deptype = 'e')""",
    "type": """
        select 'type', n.nspname || '.' || t.typname, t.typtype::text
               || ' ' || coalesce(array_to_string(array(
                    select e.enumlabel from pg_enum e where e.enumtypid = t.oid
                     order by e.enumsortorder), ','), '')
          from pg_type t join pg_namespace n on n.oid = t.typnamespace
         where n.nspname = any (%(schemas)s) and t.typtype in ('e', 'd', 'c')
           and (t.typrelid = 0 or (select c.relkind from pg_class c where c.oid = t.typrelid) = 'c')
           and not exists (select from pg_depend d where d.objid = t.oid and d.deptype = 'e')""",
    "extension": """
        select 'extension', e.extname, n.nspname || ' ' || e.extversion
          from pg_extension e join pg_namespace n on n.oid = e.extnamespace""",
    # Privileges the roles that log in hold, on every object: the owner's own and
    # the grantor are left out (the file restores without owners).
    "grant": """
        select 'grant', o.kind || ' ' || o.name || ' to ' || g.grantee, g.privileges
          from (select 'relation' as kind, n.nspname || '.' || c.relname as name, c.relacl as acl
                  from pg_class c join pg_namespace n on n.oid = c.relnamespace
                 where n.nspname = any (%(schemas)s) and c.relname <> 'alembic_version'
                union all
                select 'function', p.oid::regprocedure::text, p.proacl
                  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                 where n.nspname = any (%(schemas)s)
                union all
                select 'schema', n.nspname, n.nspacl
                  from pg_namespace n where n.nspname = any (%(schemas)s)) o
         cross join lateral (
           select case when x.grantee = 0 then 'public' else x.grantee::regrole::text end
                    as grantee,
                  string_agg(x.privilege_type, ',' order by x.privilege_type) as privileges
             from aclexplode(o.acl) x
            group by 1) g
         where g.grantee = any (%(roles)s)""",
}


def catalog(dsn: str) -> set[tuple[str, str, str]]:
    rows: set[tuple[str, str, str]] = set()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for query in CATALOG_QUERIES.values():
            params: dict[str, Any] = {"schemas": list(SCHEMAS), "roles": list(ROLES)}
            rows.update(conn.execute(query, params).fetchall())
    return rows


@pytest.fixture
def restored_from_file(admin_dsn: str) -> Iterator[str]:
    """A new database built from schema/current.sql alone; yields a superuser DSN."""
    server = with_params(admin_dsn, dbname="postgres")
    name = "chronomem_test_from_schema_file"
    drop = sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = with_params(admin_dsn, dbname=name)
    try:
        subprocess.run(
            [
                str(embedded.psql_path()),
                "--no-psqlrc",
                "--quiet",
                "-v",
                "ON_ERROR_STOP=1",
                "--dbname",
                dsn,
                "--file",
                str(schema_dump.SCHEMA_FILE),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        yield dsn
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(drop)


def test_committed_schema_is_what_a_migration_from_empty_gives(fresh_install: str) -> None:
    committed = schema_dump.SCHEMA_FILE.read_text()
    migrated = schema_dump.dump(fresh_install)
    if migrated != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                migrated.splitlines(keepends=True),
                "schema/current.sql (committed)",
                "migration from empty",
                n=2,
            )
        )
        pytest.fail(
            "schema/current.sql is stale: run `chronomem schema-dump` and commit it\n"
            + diff[:20000]
        )


def test_a_database_built_from_the_file_has_the_migrated_catalog(
    fresh_install: str, restored_from_file: str
) -> None:
    migrated = catalog(fresh_install)
    restored = catalog(restored_from_file)
    # Positive control: the comparison sees the objects a user relies on.
    names = {(kind, name) for kind, name, _ in migrated}
    assert ("relation", "memory.facts") in names
    assert (
        "function",
        "memory.facts_at(uuid,timestamp with time zone,timestamp with time zone)",
    ) in names
    assert any(kind == "policy" for kind, _ in names)
    assert any(kind == "grant" and "chronomem_app" in name for kind, name in names)
    missing = sorted(migrated - restored)
    extra = sorted(restored - migrated)
    assert not missing and not extra, (
        "catalog of a database built from schema/current.sql differs from a migrated one:\n"
        + "\n".join(f"- {row}" for row in missing[:40])
        + "\n"
        + "\n".join(f"+ {row}" for row in extra[:40])
    )


def test_sql_reference_is_generated_from_the_comments(fresh_install: str) -> None:
    committed = schema_dump.REFERENCE_FILE.read_text()
    generated = schema_dump.reference(fresh_install)
    # Positive control: the reference carries the comments a reader looks for.
    assert "#### `memory.facts_at(" in generated
    assert "The effective-at predicate" in generated
    # Each public-facing schema, with its audience (COMMENT ON SCHEMA) and functions.
    for schema in ("memory", "memory_http", "memory_worker"):
        assert f"## Schema `{schema}`" in generated
    assert "#### `memory_http.authorize(" in generated
    assert "#### `memory_worker.claim_jobs(" in generated
    assert "Chronomem HTTP and MCP layer" in generated
    if generated != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                "docs/sql-reference.md (committed)",
                "generated",
                n=1,
            )
        )
        pytest.fail(
            "docs/sql-reference.md is stale: run `chronomem schema-dump` and commit it\n"
            + diff[:20000]
        )
