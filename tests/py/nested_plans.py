"""The plans PostgreSQL runs for the statements inside our functions, for tests that
check them: auto_explain of every statement, nested ones included."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")


@contextmanager
def nested_plans(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """In conn's transaction (a superuser's: auto_explain is loaded here), run the
    block as chronomem_app and collect each statement's text and plan, in order.
    Plain EXPLAIN shows only the outer call; the statements inside PL/pgSQL functions
    run with their own cached plans."""
    plans: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        plans.append(diag.message_primary or "")

    conn.execute("load 'auto_explain'")
    for name, value in [("log_min_duration", "0"), ("log_nested_statements", "on"),
                        ("log_level", "notice")]:  # fmt: skip
        conn.execute(f"set local auto_explain.{name} = '{value}'")
    conn.execute("set local client_min_messages = notice")
    conn.execute("set local role chronomem_app")
    conn.add_notice_handler(keep)
    try:
        yield plans
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("reset role")


def plans_in_this_session(
    conn: psycopg.Connection[Any], run: Callable[[psycopg.Connection[Any]], T]
) -> tuple[list[str], T]:
    """In conn's transaction (a superuser's, any role it set is reset): run(conn) as
    chronomem_app with the plans the session already has, and those plans."""
    conn.execute("reset role")
    with nested_plans(conn) as plans:
        result = run(conn)
    return plans, result


def plans_in_a_new_session(
    dsn: str, org: Any, run: Callable[[psycopg.Connection[Any]], T]
) -> tuple[list[str], T]:
    """run(conn) as chronomem_app in a new session scoped to org (its plans made now,
    on whatever statistics the tables have), and its plans."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        return plans_in_this_session(conn, run)


def analyzed_tables(conn: psycopg.Connection[Any], tables: list[str]) -> list[str]:
    """Which of the given tables (schema-qualified names) an ANALYZE or autovacuum's
    has analyzed: the control of the tests that need plans made without statistics."""
    rows = conn.execute(
        "select schemaname || '.' || relname from pg_stat_all_tables "
        "where schemaname || '.' || relname = any (%s) "
        "and (last_analyze is not null or last_autoanalyze is not null) order by 1",
        (tables,),
    ).fetchall()
    return [r[0] for r in rows]
