"""The schema against Citus's rules, read from the catalog (no Citus needed).

`chronomem distribute` distributes every table by org_id, colocated, so that an org's
rows of every table live on one node (docs/scale-out.md). That holds, and the rules
of row-level security hold on the workers, only while:

1. every table has org_id, and every primary key, unique and exclusion constraint and
   every unique index includes it (Citus enforces uniqueness per shard);
2. every foreign key pairs org_id with org_id (a key across shards is refused);
3. no function reads across orgs but the operator-only ones named here: cross-org
   reads exist only through the policies named here (the owner's: key lookup, the
   job queue, metrics), only named functions change the org scope, and a function
   writes a chronomem setting only with memory_internal.set_local (SET LOCAL, which
   Citus carries to the workers; set_config() stays on the coordinator:
   docs/decisions/016-org-scope-as-set-local.md);
4. a trigger's statements touch only rows of its own org (its rows' org_id), as
   they run on the shard of that org.

Each rule has a control: a scratch object breaking it, made in a rolled-back
transaction, is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from chronomem.citus_forms import SCOPE_WRITE
from chronomem.distribute import DISTRIBUTION_COLUMN, SCHEMAS
from chronomem.sql_statements import split_statements

# Policies not keyed on the org scope: (table, policy) -> why it may read across orgs.
CROSS_ORG_POLICIES = {
    ("memory.orgs", "operator_directory"): "operators list orgs when no org is in scope",
    ("memory_internal.counters", "metric_totals"): "the owner's totals for /metrics",
    ("memory.jobs", "worker_queue"): "the worker claims any org's jobs",
    ("memory.job_schedules", "worker_schedules"): "the worker queues every org's periodic jobs",
    ("memory_internal.api_keys", "key_lookup"): "a token names its key, not its org",
    ("memory_internal.auth_sessions", "session_lookup"): "a token names its session",
    ("memory_internal.oidc_mappings", "mapping_lookup"): "an OIDC token names its issuer",
    ("memory.model_budgets", "worker_budgets"): "claim_jobs reads every org's paused projects",
}

# Functions that read a cross-org policy's table without naming the org: operator-only.
CROSS_ORG_READERS = {
    "memory.metric_totals()": "operator metrics, every org's",
    "memory.queue_stats()": "operator queue view, every org's",
    "memory_worker.claim_jobs(text,text[],integer,interval)": "the job protocol",
    "memory_worker.resume_waiting_jobs(text[])": "the job protocol",
    "memory_internal.tg_jobs__notify()": "whether any ready job waits, to skip a NOTIFY",
    "memory_internal.authenticate_session(text)": "sign-in: the token's session",
    "memory_internal.matching_mappings(text,text[],jsonb)": "sign-in: the token's issuer",
    "memory_internal.budget_paused_projects()": "the job protocol (claim_jobs)",
}

# Functions that change the org scope (write chronomem.org_id).
SCOPE_WRITERS = {
    "memory.use_org(uuid,boolean)",
    "memory.create_org(text)",
    "memory.reembed(integer,text)",  # operator: queues every org's jobs, org by org
    "memory_http.authenticate(text)",
    "memory_http.open_oidc_session(jsonb,integer)",
    "memory_internal.authenticate_session(text)",
}

# Trigger functions whose statements may read other orgs' rows.
CROSS_ORG_TRIGGERS = {"memory_internal.tg_jobs__notify()": CROSS_ORG_READERS}

_STRING = re.compile(r"'(?:[^']|'')*'")
_DECLARE = re.compile(r"^\s*declare\b.*?\bbegin\b", re.S | re.I)


def _code(statement: str) -> str:
    """A statement without its string literals and comments (names in them are text)."""
    text = re.sub(r"--[^\n]*", "", statement)
    return _STRING.sub("''", text)


def _statements(body: str, language: str) -> list[str]:
    # A PL/pgSQL declare section names row types (v_job memory.jobs), reads nothing.
    if language == "plpgsql":
        body = _DECLARE.sub("begin", body, count=1)
    # A block's BEGIN is not a statement of its own: the first one follows it.
    return [re.sub(r"^\s*begin\b", "", _code(s), flags=re.I) for s in split_statements(body)]


def _tables(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    return conn.execute(
        "select c.oid::int, c.oid::regclass::text from pg_class c"
        " join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = any(%s) and c.relkind in ('r', 'p') order by 2",
        (list(SCHEMAS),),
    ).fetchall()


def tables_without_org(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        name
        for oid, name in _tables(conn)
        if not conn.execute(
            "select 1 from pg_attribute where attrelid = %s and attname = %s"
            " and not attisdropped and attnotnull",
            (oid, DISTRIBUTION_COLUMN),
        ).fetchone()
    ]


def unique_keys_without_org(conn: psycopg.Connection[Any]) -> list[str]:
    """Primary keys, unique and exclusion constraints and unique indexes (constraint or
    not) whose key columns lack org_id."""
    rows = conn.execute(
        """
        select i.indrelid::regclass::text || ': ' || i.indexrelid::regclass::text
          from pg_index i
          join pg_class c on c.oid = i.indrelid
          join pg_namespace n on n.oid = c.relnamespace
         where n.nspname = any(%(schemas)s)
           and (i.indisunique or i.indisexclusion)
           and not exists (
             select from pg_attribute a
              where a.attrelid = i.indrelid and a.attname = %(column)s
                and a.attnum = any ((i.indkey::int2[])[0:i.indnkeyatts - 1]))
        union all
        select k.conrelid::regclass::text || ': ' || k.conname
          from pg_constraint k
          join pg_namespace n on n.oid = k.connamespace
         where n.nspname = any(%(schemas)s) and k.contype in ('p', 'u', 'x')
           and not exists (
             select from pg_attribute a
              where a.attrelid = k.conrelid and a.attname = %(column)s
                and a.attnum = any (k.conkey))
         order by 1
        """,
        {"schemas": list(SCHEMAS), "column": DISTRIBUTION_COLUMN},
    ).fetchall()
    return sorted({r[0] for r in rows})


def foreign_keys_without_org(conn: psycopg.Connection[Any]) -> list[str]:
    """Foreign keys that do not pair the referencing table's org_id with the
    referenced table's org_id (Citus's rule for keys between distributed tables)."""
    rows = conn.execute(
        """
        select k.conrelid::regclass::text || ': ' || k.conname
          from pg_constraint k
          join pg_namespace n on n.oid = k.connamespace
         where n.nspname = any(%(schemas)s) and k.contype = 'f'
           and not exists (
             select from generate_subscripts(k.conkey, 1) s(i)
               join pg_attribute a on a.attrelid = k.conrelid and a.attnum = k.conkey[s.i]
               join pg_attribute b on b.attrelid = k.confrelid and b.attnum = k.confkey[s.i]
              where a.attname = %(column)s and b.attname = %(column)s)
         order by 1
        """,
        {"schemas": list(SCHEMAS), "column": DISTRIBUTION_COLUMN},
    ).fetchall()
    return [r[0] for r in rows]


def _policies(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str | None, str | None]]:
    return conn.execute(
        "select p.polrelid::regclass::text, p.polname,"
        " pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)"
        " from pg_policy p join pg_class c on c.oid = p.polrelid"
        " join pg_namespace n on n.oid = c.relnamespace where n.nspname = any(%s) order by 1, 2",
        (list(SCHEMAS),),
    ).fetchall()


TENANT_QUAL = f"({DISTRIBUTION_COLUMN} = memory_internal.current_org())"


def cross_org_policies(conn: psycopg.Connection[Any]) -> list[str]:
    """Policies not keyed on the org scope that are not named above."""
    return [
        f"{table}: {name}"
        for table, name, qual, check in _policies(conn)
        if (qual not in (None, TENANT_QUAL) or check not in (None, TENANT_QUAL))
        and (table, name) not in CROSS_ORG_POLICIES
    ]


def _functions(conn: psycopg.Connection[Any]) -> list[tuple[str, str, str, bool]]:
    return conn.execute(
        "select p.oid::regprocedure::text, l.lanname, p.prosrc,"
        " p.prorettype = 'trigger'::regtype from pg_proc p"
        " join pg_namespace n on n.oid = p.pronamespace"
        " join pg_language l on l.oid = p.prolang"
        " where n.nspname = any(%s) and l.lanname in ('sql', 'plpgsql') order by 1",
        (list(SCHEMAS),),
    ).fetchall()


def _table_pattern(names: list[str]) -> re.Pattern[str]:
    """A read or write of one of these tables (not a call of a function so named)."""
    alternatives = "|".join(re.escape(n) for n in sorted(names))
    return re.compile(rf"\b(?:{alternatives})\b(?!\s*\()", re.I)


def cross_org_readers(conn: psycopg.Connection[Any]) -> list[str]:
    """Statements that reach a table through a cross-org policy without naming the
    org, in functions not named as operator-only."""
    shared = sorted(
        {
            table
            for table, _, qual, check in _policies(conn)
            if qual not in (None, TENANT_QUAL) or check not in (None, TENANT_QUAL)
        }
    )
    pattern = _table_pattern(shared)
    found = []
    for name, language, body, _ in _functions(conn):
        if name in CROSS_ORG_READERS:
            continue
        for statement in _statements(body, language):
            if pattern.search(statement) and DISTRIBUTION_COLUMN not in statement:
                found.append(f"{name}: {' '.join(statement.split())[:120]}")
    return found


# set_config of a chronomem setting whose third argument is not `false` (session).
_SET_CONFIG_CHRONOMEM = re.compile(
    r"set_config\s*\(\s*'chronomem\.[a-z_]+'\s*,[^;]*?,\s*+(?!false\b)[^,;()]+\)", re.I
)


def scope_writers(conn: psycopg.Connection[Any]) -> list[str]:
    """Functions that change the org scope and are not named above."""
    return [
        name
        for name, _, body, _ in _functions(conn)
        if SCOPE_WRITE.search(body) and name not in SCOPE_WRITERS
    ]


def settings_not_propagated(conn: psycopg.Connection[Any]) -> list[str]:
    """Functions writing a chronomem setting for the transaction with set_config()."""
    return [name for name, _, body, _ in _functions(conn) if _SET_CONFIG_CHRONOMEM.search(body)]


def triggers_beyond_their_org(conn: psycopg.Connection[Any]) -> list[str]:
    """Statements of trigger functions on the schema's tables that reach a table of
    the schema without naming org_id (their rows' org: new.org_id, old.org_id, or the
    transition table's)."""
    tables = [name for _, name in _tables(conn)]
    pattern = _table_pattern(tables)
    attached = {
        row[0]
        for row in conn.execute(
            "select distinct t.tgfoid::regprocedure::text from pg_trigger t"
            " join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace"
            " where not t.tgisinternal and n.nspname = any(%s)",
            (list(SCHEMAS),),
        )
    }
    found = []
    for name, language, body, is_trigger in _functions(conn):
        if not is_trigger or name not in attached or name in CROSS_ORG_TRIGGERS:
            continue
        for statement in _statements(body, language):
            if pattern.search(statement) and DISTRIBUTION_COLUMN not in statement:
                found.append(f"{name}: {' '.join(statement.split())[:120]}")
    return found


RULES: dict[str, Callable[[psycopg.Connection[Any]], list[str]]] = {
    "tables_without_org": tables_without_org,
    "unique_keys_without_org": unique_keys_without_org,
    "foreign_keys_without_org": foreign_keys_without_org,
    "cross_org_policies": cross_org_policies,
    "cross_org_readers": cross_org_readers,
    "scope_writers": scope_writers,
    "settings_not_propagated": settings_not_propagated,
    "triggers_beyond_their_org": triggers_beyond_their_org,
}


@pytest.fixture(scope="module")
def owner(owner_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(owner_dsn) as conn:
        yield conn


@pytest.mark.parametrize("rule", sorted(RULES))
def test_schema_follows_rule(owner: psycopg.Connection[Any], rule: str) -> None:
    with owner.transaction():
        assert RULES[rule](owner) == []


# One scratch object per rule, breaking it; made and rolled back in one transaction.
SCRATCH = {
    "tables_without_org": (
        "create table memory_internal.citus_scratch (k integer primary key)",
        "memory_internal.citus_scratch",
    ),
    "unique_keys_without_org": (
        "create table memory_internal.citus_scratch (org_id uuid not null, k integer,"
        " constraint citus_scratch_k unique (k))",
        "memory_internal.citus_scratch: citus_scratch_k",
    ),
    "foreign_keys_without_org": (
        # The key pairs another uuid column with the parent's org_id.
        "create table memory_internal.citus_scratch (org_id uuid not null, other uuid not null,"
        " project_id uuid not null, constraint citus_scratch_project foreign key"
        " (other, project_id) references memory.projects (org_id, project_id))",
        "memory_internal.citus_scratch: citus_scratch_project",
    ),
    "cross_org_policies": (
        "create policy citus_scratch on memory.notes for select using (true)",
        "memory.notes: citus_scratch",
    ),
    "cross_org_readers": (
        "create function memory_internal.citus_scratch() returns bigint language sql"
        " security definer set search_path = memory_internal, pg_temp"
        " as $$ select count(*) from memory.jobs j where j.status = 'queued' $$",
        "memory_internal.citus_scratch(): select count(*) from memory.jobs j",
    ),
    "scope_writers": (
        "create function memory_internal.citus_scratch(p uuid) returns void language plpgsql"
        " as $$ begin perform memory_internal.set_local('chronomem.org_id', p::text); end $$",
        "memory_internal.citus_scratch(uuid)",
    ),
    "settings_not_propagated": (
        "create function memory_internal.citus_scratch(p uuid) returns void language plpgsql"
        " as $$ begin perform set_config('chronomem.org_id', p::text, true); end $$",
        "memory_internal.citus_scratch(uuid)",
    ),
    "triggers_beyond_their_org": (
        "create function memory_internal.citus_scratch() returns trigger language plpgsql"
        " as $$ begin update memory.projects p set name = p.name"
        " where p.project_id = new.project_id; return new; end $$;"
        " create trigger citus_scratch after insert on memory.notes"
        " for each row execute function memory_internal.citus_scratch()",
        "memory_internal.citus_scratch(): update memory.projects p",
    ),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_reports_a_scratch_object_breaking_it(
    owner: psycopg.Connection[Any], rule: str
) -> None:
    ddl, expected = SCRATCH[rule]
    try:
        with owner.transaction(force_rollback=True):
            owner.execute(ddl.encode())
            found = RULES[rule](owner)
            assert [f for f in found if f.startswith(expected)], (expected, found)
    finally:
        owner.rollback()
