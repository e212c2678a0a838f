"""The plpy-shaped interface: both adapters keep one contract (workers/plpy.py).

PsycopgPlpy runs every worker test. ServerPlpy needs PL/Python, which the test server
lacks, so it is driven here by a stand-in `plpy` module that does what PL/Python does
with arguments (a str goes through the type's input function) on a real connection.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from workers.plpy import PsycopgPlpy, ServerPlpy, vector_literal


class FakePlpy:
    """PL/Python's plpy, reduced to prepare/execute/notice, on a psycopg connection."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.notices: list[str] = []

    def prepare(self, query: str, types: list[str]) -> tuple[str, list[str]]:
        return query, types

    def execute(self, plan: Any, args: list[Any] | None = None) -> list[dict[str, Any]]:
        if isinstance(plan, str):
            return self.conn.execute(plan).fetchall()  # type: ignore[return-value]
        query, types = plan
        for i, t in enumerate(types, start=1):
            query = query.replace(f"${i}", f"${i}::{t}")
        with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
            # Like PL/Python: a list becomes an array, anything else its str().
            cur.execute(query, [a if isinstance(a, list) else str(a) for a in args or []])
            return cur.fetchall()

    def notice(self, msg: str) -> None:
        self.notices.append(msg)


@pytest.fixture
def conn(app_dsn: str) -> Any:
    with psycopg.connect(app_dsn, row_factory=dict_row) as conn:
        register_vector(conn)
        yield conn


QUERY = "select $1::text as v, $2::text as vs, $3 + 1 as n"
TYPES = ["vector", "vector[]", "integer"]
ARGS = [[0.5, -1.25, 3.0], [[1.0, 2.0], [0.1, 0.2]], 41]
EXPECTED = {"v": "[0.5,-1.25,3]", "vs": '{"[1,2]","[0.1,0.2]"}', "n": 42}


def test_both_adapters_pass_vectors_alike(conn: psycopg.Connection[Any]) -> None:
    assert PsycopgPlpy(conn).prepare(QUERY, TYPES).execute(ARGS) == [EXPECTED]
    assert ServerPlpy(FakePlpy(conn)).prepare(QUERY, TYPES).execute(ARGS) == [EXPECTED]


def test_vector_literal_is_pgvector_text() -> None:
    assert vector_literal([0.1, 1e-8, 3]) == "[0.1,1e-08,3.0]"


def test_server_adapter_wants_parameters_through_prepare(conn: psycopg.Connection[Any]) -> None:
    plpy = ServerPlpy(FakePlpy(conn))
    assert plpy.execute("select 1 as one") == [{"one": 1}]
    with pytest.raises(TypeError, match="prepare"):
        plpy.execute("select $1", [1])
