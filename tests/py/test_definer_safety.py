"""No code that runs as the owner uses an object a caller can create or replace.

A SECURITY DEFINER function runs as chronomem_owner, and so does every function it
calls. A temp table belongs to the session that created it: a caller who creates the
one a definer function writes, with a trigger, runs the trigger's code as the owner. A
schema the caller can create objects in, named in a definer function's search_path,
lets the caller shadow what the function names unqualified (a function with a more
specific signature captures a call). So, read from the catalog: no function in the
memory schemas creates or names a temp table; every search_path set on them ends with
pg_temp (absent, PostgreSQL searches it first); the app and analyst roles can create
nothing in those schemas, own nothing there, and can neither write nor put triggers on
the tables the definer functions use. Last, the attack itself, as the app role.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

SCHEMAS = ("memory", "memory_http", "memory_worker", "memory_internal")
CALLERS = ("chronomem_app", "chronomem_analyst")
# A temp relation created or named in a function body.
TEMP_USE = r"pg_temp\s*\.|\m(temp|temporary)\s+(table|view|sequence)\M"
# Where the definer functions keep working sets across statements.
SCRATCH_TABLES = ("memory_internal.community_labels", "memory_internal.community_links")


@pytest.fixture
def admin(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        yield c


def _search_path(config: list[str] | None) -> list[str] | None:
    for setting in config or ():
        name, _, value = setting.partition("=")
        if name == "search_path":
            return [s.strip().strip('"') for s in value.split(",")]
    return None


def _functions(admin: psycopg.Connection[Any]) -> list[tuple[str, bool, list[str] | None, str]]:
    """(signature, security definer, search_path or None, body) of every function in the
    memory schemas."""
    rows = admin.execute(
        "select p.oid::regprocedure::text, p.prosecdef, p.proconfig, p.prosrc "
        "from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = any (%s) order by 1",
        (list(SCHEMAS),),
    ).fetchall()
    return [(sig, definer, _search_path(config), src) for sig, definer, config, src in rows]


def test_no_memory_function_creates_or_uses_a_temp_table(
    admin: psycopg.Connection[Any],
) -> None:
    # Definer functions and the helpers they call alike: a helper runs as the owner
    # when a definer function calls it.
    found = admin.execute(
        "select p.oid::regprocedure::text from pg_proc p "
        "join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = any (%s) and p.prosrc ~* %s order by 1",
        (list(SCHEMAS), TEMP_USE),
    ).fetchall()
    assert found == [], f"functions using a temp table: {[f for (f,) in found]}"
    # The pattern finds what it is meant to (positive control).
    assert admin.execute(
        "select bool_and(s ~* %s) from unnest(array["
        "'create temp table if not exists pg_temp.x (id uuid)', 'insert into pg_temp.x', "
        "'CREATE TEMPORARY TABLE y ()', 'select * from PG_TEMP . y']) s",
        (TEMP_USE,),
    ).fetchone() == (True,)


def test_every_search_path_ends_with_pg_temp(admin: psycopg.Connection[Any]) -> None:
    functions = _functions(admin)
    assert any(definer for _, definer, _, _ in functions)  # the check has functions to see
    unset = [sig for sig, definer, path, _ in functions if definer and path is None]
    assert unset == [], f"SECURITY DEFINER functions without SET search_path: {unset}"
    misplaced = {
        sig: path for sig, _, path, _ in functions if path is not None and path[-1] != "pg_temp"
    }
    assert misplaced == {}, f"search_path without pg_temp last: {misplaced}"


def _definer_schemas(admin: psycopg.Connection[Any]) -> set[str]:
    schemas = {"public"}
    for _, definer, path, _ in _functions(admin):
        if definer and path:
            schemas |= {s for s in path if s != "pg_temp" and s != "$user"}
    return schemas


def test_callers_cannot_create_in_a_definer_search_path(admin: psycopg.Connection[Any]) -> None:
    # The definer functions' search_paths, and the schemas that hold definer functions.
    schemas = _definer_schemas(admin) | set(SCHEMAS)
    assert {"memory", "memory_internal", "public"} <= _definer_schemas(admin)
    # Each schema holds functions the scan sees (a misspelt schema would hold none).
    assert {sig.split(".")[0] for sig, _, _, _ in _functions(admin)} == set(SCHEMAS)
    can_create = admin.execute(
        "select r, s from unnest(%s::text[]) r, unnest(%s::text[]) s "
        "where has_schema_privilege(r, s, 'CREATE') order by 1, 2",
        (list(CALLERS), sorted(schemas)),
    ).fetchall()
    assert can_create == [], f"roles that can create in a definer search_path: {can_create}"
    # Positive control: the owner can create in its schemas.
    assert admin.execute(
        "select has_schema_privilege('chronomem_owner', 'memory_internal', 'CREATE')"
    ).fetchone() == (True,)


def test_callers_own_nothing_and_cannot_write_definer_tables(
    admin: psycopg.Connection[Any],
) -> None:
    schemas = sorted(_definer_schemas(admin))
    owned = admin.execute(
        "select 'relation ' || c.oid::regclass::text from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = any (%(s)s) and pg_get_userbyid(c.relowner) = any (%(r)s) "
        "union all "
        "select 'function ' || p.oid::regprocedure::text from pg_proc p "
        "join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = any (%(s)s) and pg_get_userbyid(p.proowner) = any (%(r)s) "
        "union all "
        "select 'type ' || t.oid::regtype::text from pg_type t "
        "join pg_namespace n on n.oid = t.typnamespace "
        "where n.nspname = any (%(s)s) and pg_get_userbyid(t.typowner) = any (%(r)s) "
        "union all "
        "select 'operator ' || o.oid::regoperator::text from pg_operator o "
        "join pg_namespace n on n.oid = o.oprnamespace "
        "where n.nspname = any (%(s)s) and pg_get_userbyid(o.oprowner) = any (%(r)s)",
        {"s": schemas, "r": list(CALLERS)},
    ).fetchall()
    assert owned == [], f"objects the callers own: {owned}"
    # A trigger (TRIGGER) runs its code as whoever writes the table; TRUNCATE empties
    # what a definer function relies on; the definer functions' helper tables
    # (memory_internal) take no direct write from the callers at all.
    writable = admin.execute(
        "select r, c.oid::regclass::text, x.p from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace, unnest(%(r)s::text[]) r, "
        "unnest(array['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'TRIGGER']) x(p) "
        "where n.nspname = any (%(s)s) and c.relkind in ('r', 'p', 'v', 'm', 'f') "
        "and (n.nspname = 'memory_internal' or x.p in ('TRUNCATE', 'TRIGGER')) "
        "and has_table_privilege(r, c.oid, x.p) order by 1, 2, 3",
        {"s": schemas, "r": list(CALLERS)},
    ).fetchall()
    assert writable == [], f"tables the callers can write or put triggers on: {writable}"
    # The scratch tables: no privilege of any kind, and empty between computations.
    for table in SCRATCH_TABLES:
        granted = admin.execute(
            "select r, x.p from unnest(%s::text[]) r, unnest(array['SELECT', 'INSERT', "
            "'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER', 'MAINTAIN']) x(p) "
            "where has_table_privilege(r, %s::regclass, x.p)",
            (list(CALLERS), table),
        ).fetchall()
        assert granted == [], f"{table}: {granted}"
        assert admin.execute(f"select count(*) from {table}").fetchone() == (0,), table
    # Positive control: the check sees a privilege that is there.
    assert admin.execute(
        "select has_table_privilege('chronomem_app', 'memory.facts', 'SELECT')"
    ).fetchone() == (True,)


# --- The attack ----------------------------------------------------------------------

# Bait: temp tables named as a definer function's working tables would be (the wipe's
# lists of ids and keys, label propagation's labels and links), with their columns.
BAIT = {
    "chronomem_wiped_ids": "id uuid primary key",
    "chronomem_wiped_keys": "subject_id uuid, predicate text, identity_object text, "
    "object_entity_id uuid",
    "chronomem_labels": "entity_id uuid primary key, label uuid not null, color integer",
    "chronomem_links": "a uuid not null, b uuid not null",
}
# Records who ran it, and tries what the owner may do and the app role may not.
ATTACK = """
create function pg_temp.chronomem_attack() returns trigger language plpgsql as $f$
begin
  insert into pg_temp.attack_log values (current_user, tg_op, tg_table_name);
  begin
    create table public.chronomem_attack_probe (x integer);
    insert into pg_temp.attack_log values (current_user, 'created a table', tg_table_name);
  exception when insufficient_privilege or duplicate_table then null;
  end;
  return null;
end $f$
"""


def _knows(*pairs: tuple[str, str]) -> str:
    return json.dumps(
        [
            {"subject": a, "predicate": "knows", "object": b, "object_type": "entity"}
            for a, b in pairs
        ]
    )


@pytest.mark.parametrize(
    "call",
    [
        "select memory.wipe(%(p)s, 's1')",
        "select memory.wipe(%(p)s, p_subject => 'Ann')",
        "select memory.wipe(%(p)s)",
        "select memory.compute_communities(%(p)s)",
        "select memory.refresh_communities(%(p)s)",
    ],
)
def test_a_callers_temp_tables_never_run_as_the_owner(app_dsn: str, call: str) -> None:
    with psycopg.connect(app_dsn) as conn:
        try:
            org = conn.execute("select memory.create_org('definer safety')").fetchone()[0]  # type: ignore[index]
            conn.execute("select memory.use_org(%s)", (org,))
            p = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
            # Edges (label propagation and the wiped keys run), an episode of
            # session s1 with its queued jobs (the wiped ids).
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (p, _knows(("Ann", "Ben"), ("Ann", "Cat"), ("Ben", "Cat"), ("Dan", "Eve"))),
            )
            conn.execute(
                "select memory.ingest(%s, 's1', %s::jsonb)",
                (p, json.dumps([{"role": "user", "content": "Ann knows Ben"}])),
            )
            conn.execute("create temp table attack_log (who text, what text, tbl text)")
            conn.execute("grant all on pg_temp.attack_log to public")
            conn.execute(ATTACK)
            for name, columns in BAIT.items():
                conn.execute(f"create temp table {name} ({columns})")
                conn.execute(f"grant all on pg_temp.{name} to public")
                for i, event in enumerate(("insert or update or delete", "truncate")):
                    conn.execute(
                        f"create trigger chronomem_attack_{i} before {event} on pg_temp.{name} "
                        "for each statement execute function pg_temp.chronomem_attack()"
                    )
            # Positive control: the bait fires for whoever writes it.
            for name in BAIT:
                conn.execute(f"truncate pg_temp.{name}")
            conn.execute("insert into pg_temp.chronomem_wiped_ids values (%s)", (uuid.uuid4(),))
            fired = conn.execute("select who, what, tbl from pg_temp.attack_log").fetchall()
            assert sorted(fired) == sorted(
                [("chronomem_app", "TRUNCATE", name) for name in BAIT]
                + [("chronomem_app", "INSERT", "chronomem_wiped_ids")]
            ), fired
            conn.execute("delete from pg_temp.attack_log")

            conn.execute(call, {"p": p})

            fired = conn.execute("select who, what, tbl from pg_temp.attack_log").fetchall()
            assert fired == [], f"the caller's trigger ran inside {call!r}: {fired}"
            probe = conn.execute("select to_regclass('public.chronomem_attack_probe')").fetchone()
            assert probe == (None,)
        finally:
            conn.rollback()
