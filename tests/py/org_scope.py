"""One committed transaction in an org's scope (`memory.use_org`, transaction-local), as
the record-time tests write and read: each call's changes carry their own instants."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row


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


@dataclass
class Tenant:
    """An org's project, reached by its own connection per call (the webhook tests'
    tenants, each writing and reading in its own org's scope)."""

    dsn: str
    org: uuid.UUID
    project: uuid.UUID

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            conn.execute("select memory.use_org(%s)", (self.org,))
            return conn.execute(query, params).fetchall()

    def one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return next(iter(self.rows(query, params)[0].values()))
