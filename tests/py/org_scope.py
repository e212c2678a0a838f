"""One committed transaction in an org's scope (`memory.use_org`, transaction-local), as
the record-time tests write and read: each call's changes carry their own instants."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg


def rows_in(
    conn: psycopg.Connection[Any], org: uuid.UUID, query: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Every row `query` returns, in a transaction of its own."""
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        return conn.execute(query, params).fetchall()


def one_in(
    conn: psycopg.Connection[Any], org: uuid.UUID, query: str, params: tuple[Any, ...] = ()
) -> Any:
    """The first column of the one row `query` returns, in a transaction of its own."""
    rows = rows_in(conn, org, query, params)
    assert len(rows) == 1, rows
    return rows[0][0]
