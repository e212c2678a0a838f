"""`chronomem distribute`: a migrated database on a Citus coordinator, distributed by org.

Every table of Chronomem's schemas carries `org_id` and every key includes it
(tests/py/test_citus_lint.py), so each table is distributed by `org_id`, all of them
colocated with `memory.orgs`: an org's rows of every table live on one shard group,
and every per-org query and foreign key stays on one node. A table without `org_id`
would become a reference table (a copy on every node); the schema has none today.
Tables go in foreign-key order (a distributed table may reference only distributed
or reference tables). Functions Citus has not propagated yet (those whose types are
tables, made before their table was distributed) are propagated afterwards, so every
node has every function the shards' triggers and policies may call; then every function
takes the form Citus runs (`chronomem.citus_forms`: readers as SECURITY DEFINER, SQL
helpers on tables as PL/pgSQL, plans per call). Last, new
sessions of the database get `citus.propagate_set_commands = 'local'`: the org scope
is a SET LOCAL (memory_internal.set_local), which Citus then carries to the workers
(docs/decisions/016-org-scope-as-set-local.md).

Idempotent: what is already distributed is left as it is, so it runs after every
migrate; a migration that adds a table leaves it local until the next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from chronomem.citus_forms import FormError, Forms, apply_forms

ANCHOR = "memory.orgs"  # the colocation group every org-keyed table joins
SCHEMAS = ("memory", "memory_internal", "memory_http", "memory_worker")
DISTRIBUTION_COLUMN = "org_id"


# Set for the database's new sessions, on every node (Citus propagates ALTER DATABASE).
DATABASE_SETTINGS = {
    # The org scope is a SET LOCAL (memory_internal.set_local); Citus carries those to
    # the workers only with this setting.
    "citus.propagate_set_commands": "local",
    # A function that a shard's query calls per row (memory_internal.range_believed in
    # facts_at) reads another table of the same org: its statements name the org, so
    # they go to a colocated shard on the same node, run by the same backend in the
    # same transaction (local execution). Citus refuses such nesting by default
    # because a query that reaches other nodes from there sees none of the
    # transaction's writes.
    "citus.allow_nested_distributed_execution": "on",
}


# Triggers that do nothing useful on the shards, off on a distributed database.
DISABLED_TRIGGERS = {
    # A NOTIFY sent on a worker node reaches no listener (the worker listens on the
    # coordinator and polls there), and its probe of ready jobs reads every org's.
    ("memory.jobs", "90_notify"): "job wake-ups are by polling",
}


class DistributeError(RuntimeError):
    pass


@dataclass
class Outcome:
    distributed: list[str] = field(default_factory=list)
    reference: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    already: int = 0
    forms: Forms = field(default_factory=Forms)
    disabled_triggers: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.distributed)} table(s) distributed by {DISTRIBUTION_COLUMN}, "
            f"{len(self.reference)} reference table(s), {len(self.functions)} function(s) "
            f"propagated, {self.already} table(s) already distributed; {self.forms.summary()}"
        )


_TABLES = """
select c.oid::regclass::text as name,
       exists (select from pg_attribute a
                where a.attrelid = c.oid and a.attname = %(column)s and not a.attisdropped)
         as has_org,
       exists (select from pg_dist_partition d where d.logicalrelid = c.oid) as done,
       coalesce(array(select f.confrelid::regclass::text from pg_constraint f
                       where f.conrelid = c.oid and f.contype = 'f'
                         and f.confrelid <> c.oid), '{}') as references
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
 where n.nspname = any(%(schemas)s) and c.relkind in ('r', 'p') and not c.relispartition
 order by c.oid::regclass::text
"""

_UNPROPAGATED_FUNCTIONS = """
select p.oid::regprocedure::text
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace
 where n.nspname = any(%(schemas)s) and p.prokind in ('f', 'p')
   and not exists (select from pg_dist_object o
                    where o.classid = 'pg_proc'::regclass and o.objid = p.oid)
 order by 1
"""


def _in_key_order(tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Referenced tables before the tables referencing them."""
    by_name = {t["name"]: t for t in tables}
    ordered: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in seen or name not in by_name:
            return
        if name in path:
            raise DistributeError(f"foreign keys form a cycle through {name}")
        for referenced in sorted(by_name[name]["references"]):
            visit(referenced, (*path, name))
        seen.add(name)
        ordered.append(by_name[name])

    # The anchor first: every other table is colocated with it.
    for name in [ANCHOR, *sorted(by_name)]:
        visit(name, ())
    return ordered


@contextmanager
def _naming(table: str) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as err:
        raise DistributeError(f"distributing {table}: {err}") from err


def distribute(dsn: str, shard_count: int | None = None) -> Outcome:
    """Distribute what is not yet distributed; `dsn` is the tables' owner (or a
    superuser) on the coordinator."""
    outcome = Outcome()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("select extversion from pg_extension where extname = 'citus'").fetchone()
        if row is None:
            raise DistributeError(
                "the citus extension is not in this database: distribute runs on a Citus "
                "coordinator (docs/scale-out.md)"
            )
        if shard_count is not None:
            conn.execute(sql.SQL("set citus.shard_count = {}").format(sql.Literal(shard_count)))
        params = {"column": DISTRIBUTION_COLUMN, "schemas": list(SCHEMAS)}
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            tables = cur.execute(_TABLES, params).fetchall()
        if not any(t["name"] == ANCHOR for t in tables):
            raise DistributeError(f"{ANCHOR} is missing: run `chronomem migrate` first")
        for table in _in_key_order(tables):
            if table["done"]:
                outcome.already += 1
                continue
            # One transaction per table: a failure names its table and leaves the
            # tables before it distributed, which a rerun then skips.
            with _naming(table["name"]), conn.transaction():
                if table["has_org"]:
                    conn.execute(
                        "select create_distributed_table(%s, %s, colocate_with => %s)",
                        (
                            table["name"],
                            DISTRIBUTION_COLUMN,
                            "default" if table["name"] == ANCHOR else ANCHOR,
                        ),
                    )
                    outcome.distributed.append(table["name"])
                else:
                    conn.execute("select create_reference_table(%s)", (table["name"],))
                    outcome.reference.append(table["name"])
        for (function,) in conn.execute(_UNPROPAGATED_FUNCTIONS, params).fetchall():
            try:
                with conn.transaction():
                    # A SQL-language body names functions that may not be on the
                    # workers yet (they go in name order, and such a body records no
                    # dependency): the workers create it unchecked, as a restore does.
                    conn.execute("set local citus.propagate_set_commands = 'local'")
                    conn.execute("set local check_function_bodies = off")
                    conn.execute("select create_distributed_function(%s)", (function,))
            except psycopg.Error as err:
                raise DistributeError(f"propagating {function}: {err}") from err
            outcome.functions.append(function)
        for (table_name, trigger), why in DISABLED_TRIGGERS.items():
            conn.execute(
                sql.SQL("alter table {} disable trigger {}").format(
                    sql.SQL(table_name), sql.Identifier(trigger)
                )
            )
            outcome.disabled_triggers.append(f"{table_name} {trigger}: {why}")
        # The functions in the forms Citus runs (chronomem.citus_forms); a migrate
        # since the last run restored the one-server forms.
        try:
            outcome.forms = apply_forms(conn)
        except (psycopg.Error, FormError) as err:
            raise DistributeError(f"the Citus forms of the functions: {err}") from err
        dbname = conn.execute("select current_database()").fetchone()
        assert dbname is not None
        for setting, value in DATABASE_SETTINGS.items():
            conn.execute(
                sql.SQL("alter database {} set {} = {}").format(
                    sql.Identifier(dbname[0]),
                    sql.Identifier(*setting.split(".")),
                    sql.Literal(value),
                )
            )
    return outcome
