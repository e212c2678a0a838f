"""A `plpy`-shaped interface, so job bodies can run in the worker or inside PostgreSQL.

The extraction and embedding bodies (workers/extraction.py, workers/embedding.py) talk
to the database only through `Plpy` below. In the worker, `PsycopgPlpy` backs it with
a psycopg connection (inside the transaction the runner opened); under PL/Python,
`ServerPlpy` wraps the real `plpy` module. The contract, which both adapters keep:

- parameters go through `prepare(query, types)` with `$1, $2 ...` placeholders and
  PostgreSQL type names, then `plan.execute(args)`. (`execute(query)` is for queries
  without parameters: the real `plpy.execute`'s second argument is a row limit.)
- a parameter declared `vector` takes a sequence of floats, `vector[]` a sequence of
  them (PL/Python would read nested lists as a 2-D array, so `ServerPlpy` sends the
  pgvector text form; `PsycopgPlpy` sends them through the pgvector adapter).
- rows are dicts; bodies cast what they read to text or to plain scalars in SQL
  (`...::text`), because PL/Python hands jsonb and uuid over as strings.

Installing a body as a database function (needs plpython3u, i.e. a superuser to
create the language, and the `chronomem` repo importable by the *server's* Python, e.g.
on its PYTHONPATH; the LLM / embedding endpoint must be reachable from the database
host, and the call then runs inside the caller's transaction and statement_timeout):

    CREATE FUNCTION memory_internal.enrich_episode_py(episode uuid) RETURNS jsonb
    LANGUAGE plpython3u AS $$
      import json
      from workers.plpy import ServerPlpy
      from workers.extraction import Extractor, enrich_episode
      return json.dumps(enrich_episode(ServerPlpy(plpy), episode, Extractor.from_env()))
    $$;

The function must run with an org scope (`select memory.use_org(org)` first) like
any other caller.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

Row = dict[str, Any]

log = logging.getLogger("chronomem.plpy")

_PLACEHOLDER = re.compile(r"\$(\d+)(?!\d)")


class Plan(Protocol):
    def execute(self, args: Sequence[Any]) -> list[Row]: ...


class Plpy(Protocol):
    def execute(self, query: str, args: Sequence[Any] | None = None) -> list[Row]: ...

    def prepare(self, query: str, types: Sequence[str]) -> Plan: ...

    def notice(self, msg: str) -> None: ...


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form: '[0.1,0.2,...]' (repr keeps every float32 digit)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _is_vector(pg_type: str) -> bool:
    return pg_type.strip().lower().split("(")[0] == "vector"


def _is_vector_array(pg_type: str) -> bool:
    t = pg_type.strip().lower().replace(" ", "")
    return t.startswith("vector") and t.endswith("[]")


class PsycopgPlpy:
    """`Plpy` on a psycopg connection. Runs in whatever transaction the connection
    is in; the caller (the runner) owns commit and rollback. Register the pgvector
    adapter on the connection (pgvector.psycopg.register_vector) before use."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, query: str, args: Sequence[Any] | None = None) -> list[Row]:
        return self._run(query, list(args) if args else None)

    def prepare(self, query: str, types: Sequence[str]) -> _PsycopgPlan:
        return _PsycopgPlan(self, query, list(types))

    def notice(self, msg: str) -> None:
        log.info(msg)

    def _run(self, query: str, args: list[Any] | None) -> list[Row]:
        # Imported here so this module stays importable where psycopg is absent
        # (inside PostgreSQL only ServerPlpy is used).
        import psycopg
        from psycopg.rows import dict_row

        # RawCursor: PostgreSQL's own $n placeholders, as in PL/Python.
        with psycopg.RawCursor(self._conn, row_factory=dict_row) as cur:
            cur.execute(query, args)
            return list(cur.fetchall()) if cur.description is not None else []


class _PsycopgPlan:
    def __init__(self, plpy: PsycopgPlpy, query: str, types: list[str]) -> None:
        self._plpy = plpy
        self._types = types
        # Each $n gets its declared type, as plpy.prepare's argument types do.
        self._query = _PLACEHOLDER.sub(lambda m: f"{m.group(0)}::{types[int(m[1]) - 1]}", query)

    def execute(self, args: Sequence[Any]) -> list[Row]:
        values = [_to_psycopg(t, a) for t, a in zip(self._types, args, strict=True)]
        return self._plpy._run(self._query, values)


def _to_psycopg(pg_type: str, value: Any) -> Any:
    if value is None:
        return None
    if _is_vector_array(pg_type) or _is_vector(pg_type):
        import numpy as np  # the pgvector adapter dumps float32 arrays as binary vectors

        if _is_vector_array(pg_type):
            return [np.asarray(v, dtype=np.float32) for v in value]
        return np.asarray(value, dtype=np.float32)
    return value


class ServerPlpy:
    """`Plpy` inside PL/Python: wraps the `plpy` module the server provides."""

    def __init__(self, plpy_module: Any) -> None:
        self._plpy = plpy_module

    def execute(self, query: str, args: Sequence[Any] | None = None) -> list[Row]:
        if args:
            raise TypeError("under PL/Python, pass parameters through prepare(query, types)")
        return [dict(row) for row in self._plpy.execute(query)]

    def prepare(self, query: str, types: Sequence[str]) -> _ServerPlan:
        return _ServerPlan(self._plpy, self._plpy.prepare(query, list(types)), list(types))

    def notice(self, msg: str) -> None:
        self._plpy.notice(msg)


class _ServerPlan:
    def __init__(self, plpy_module: Any, plan: Any, types: list[str]) -> None:
        self._plpy, self._plan, self._types = plpy_module, plan, types

    def execute(self, args: Sequence[Any]) -> list[Row]:
        converted = [_to_server(t, a) for t, a in zip(self._types, args, strict=True)]
        return [dict(row) for row in self._plpy.execute(self._plan, converted)]


def _to_server(pg_type: str, value: Any) -> Any:
    if value is None:
        return None
    if _is_vector_array(pg_type):
        return [vector_literal(v) for v in value]
    if _is_vector(pg_type):
        return vector_literal(value)
    return value
