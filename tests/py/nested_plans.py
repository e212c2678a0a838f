"""The plans PostgreSQL runs for the statements inside our functions, for tests that
check them: auto_explain of every statement, nested ones included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


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
