"""Conflicts under concurrent writers: one conflict per set, nothing lost.

Eight writers, each a thread with its own connection as chronomem_app, assert at the
same moment a different object of one undeclared predicate for one subject (and each
also writes a subject of its own, a positive control that must open no conflict). A
writer of a different object holds the (subject, predicate) lock that a
cardinality-one identity uses, so each sees the facts of those before it: the end
state is one open conflict whose members are all eight facts, every fact stored.
"""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

WRITERS = 8


def _connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=False)
    conn.execute("set statement_timeout = '30s'")
    conn.commit()
    return conn


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def test_eight_writers_of_one_set_open_one_conflict(app_dsn: str) -> None:
    setup = _connect(app_dsn)
    with setup.transaction():
        org = _scalar(setup, "select memory.create_org('conflict writers')")
        setup.execute("select memory.use_org(%s)", (org,))
        project = _scalar(setup, "select memory.create_project(%s, 'p')", (org,))
    barrier = threading.Barrier(WRITERS)

    def writer(i: int) -> dict[str, Any]:
        conn = _connect(app_dsn)
        try:
            facts = [
                {"subject": "Quinn", "predicate": "lives in", "object": f"City {i}",
                 "valid_from": "2020-01-01T00:00:00Z"},
                {"subject": f"Solo {i}", "predicate": "lives in", "object": "Town",
                 "valid_from": "2020-01-01T00:00:00Z"},
            ]  # fmt: skip
            barrier.wait()
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (org,))
                result: dict[str, Any] = _scalar(
                    conn, "select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(facts))
                )
            return result
        finally:
            conn.close()

    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(writer, range(WRITERS)))

    assert all(r["inserted"] == 2 for r in results), results
    with setup.transaction():
        setup.execute("select memory.use_org(%s)", (org,))
        rows = setup.execute(
            "select subject, status, members from memory.list_conflicts(%s, 'all')", (project,)
        ).fetchall()
        objects = _scalar(
            setup,
            "select count(distinct object) from memory.readable_facts_at(%s) "
            "where subject = 'Quinn' and predicate = 'lives in'",
            (project,),
        )
        opened = _scalar(
            setup,
            "select count(*) from memory.conflict_events e join memory.conflicts c "
            "using (org_id, conflict_id) where c.project_id = %s and e.event_type = 'opened'",
            (project,),
        )
    # Every writer's fact stands, in one conflict holding all of them; the first writer
    # (alone) opened nothing, the second opened it, the rest joined it.
    assert objects == WRITERS
    assert rows == [("Quinn", "open", WRITERS)], rows
    assert opened == 1
    # Positive control: the subjects each writer had alone are in no conflict.
    assert not any(r[0].startswith("Solo") for r in rows)
    # The writers that saw an earlier object report the conflict they opened or joined.
    reported = {c for r in results for c in r.get("conflicts", [])}
    assert len(reported) == 1 and uuid.UUID(reported.pop())
    assert sum(1 for r in results if "conflicts" not in r) == 1
    setup.close()
