"""A fact version's embedding and a wipe of its project, racing: whichever commits
first, no embedding of a wiped version is left (memory.fact_embeddings has no foreign
key, sql/0028: store_embeddings holds the project's write lock, shared, from its read
of the versions to its commit, and a wipe holds it exclusively)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

VEC = "array_fill(0.5, array[memory.embedding_dim()])::vector"


def _project_with_fact(app_dsn: str, org: uuid.UUID, name: str) -> tuple[uuid.UUID, uuid.UUID]:
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, %s)", (org, name)).fetchone()[0]  # type: ignore[index]
        facts = [{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo"}]
        result = conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(facts))
        ).fetchone()[0]  # type: ignore[index]
    return project, uuid.UUID(result["results"][0]["fact_id"])


def _store(conn: psycopg.Connection[Any], fact: uuid.UUID) -> int:
    return conn.execute(  # type: ignore[no-any-return, index]
        f"select memory_worker.store_embeddings('fact', array[%s]::uuid[], array[{VEC}])", (fact,)
    ).fetchone()[0]


def _embedded(app_dsn: str, org: uuid.UUID, fact: uuid.UUID) -> int:
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        return conn.execute(  # type: ignore[no-any-return, index]
            "select count(*) from memory.fact_embeddings where fact_id = %s", (fact,)
        ).fetchone()[0]


def _waits_for_a_lock(admin_dsn: str, pid: int, timeout: float = 10.0) -> bool:
    """Whether backend pid comes to wait for a heavyweight lock (an advisory one here)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "select wait_event_type from pg_stat_activity where pid = %s", (pid,)
            ).fetchone()
            if row and row[0] == "Lock":
                return True
            time.sleep(0.05)
    return False


def _waits_then_runs(
    holder: psycopg.Connection[Any],
    app_dsn: str,
    admin_dsn: str,
    org: uuid.UUID,
    sql: str,
    params: tuple[Any, ...],
) -> Any:
    """Run sql in another session of org while holder's transaction is open: it must wait
    for a lock until holder commits. Its result."""
    out: list[Any] = []

    def run() -> None:
        with psycopg.connect(app_dsn) as conn, conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            out.append(conn.info.backend_pid)
            out.append(conn.execute(sql, params).fetchone()[0])  # type: ignore[index]

    thread = threading.Thread(target=run)
    thread.start()
    while not out:
        time.sleep(0.01)
    waited = _waits_for_a_lock(admin_dsn, out[0])
    holder.commit()
    thread.join(timeout=30)
    assert waited, "the second session did not wait for the first one's commit"
    return out[1]


@pytest.fixture
def org(app_dsn: str) -> uuid.UUID:
    with psycopg.connect(app_dsn) as conn:
        return conn.execute("select memory.create_org('embedding wipe race')").fetchone()[0]  # type: ignore[no-any-return, index]


def test_a_wipe_after_a_store_takes_the_stored_embedding(
    app_dsn: str, admin_dsn: str, org: uuid.UUID
) -> None:
    project, fact = _project_with_fact(app_dsn, org, "stored first")
    with psycopg.connect(app_dsn) as storer:
        storer.execute("select memory.use_org(%s)", (org,))  # in the open transaction
        assert _store(storer, fact) == 1  # control: stored, not committed yet
        # The wipe waits for the store's commit, then deletes the version and its embedding.
        wiped = _waits_then_runs(
            storer, app_dsn, admin_dsn, org, "select memory.wipe(%s)", (project,)
        )
    assert wiped["scope"] == "project" and wiped["facts"] == 1, wiped
    assert _embedded(app_dsn, org, fact) == 0


def test_a_store_after_a_wipe_stores_nothing(app_dsn: str, admin_dsn: str, org: uuid.UUID) -> None:
    project, fact = _project_with_fact(app_dsn, org, "wiped first")
    _, other = _project_with_fact(app_dsn, org, "not wiped")
    with psycopg.connect(app_dsn) as wiper:
        wiper.execute("select memory.use_org(%s)", (org,))
        wiper.execute("select memory.wipe(%s)", (project,))  # not committed yet
        # The store waits for the wipe's commit, then finds no version to embed.
        stored = _waits_then_runs(
            wiper,
            app_dsn,
            admin_dsn,
            org,
            f"select memory_worker.store_embeddings('fact', array[%s]::uuid[], array[{VEC}])",
            (fact,),
        )
    assert stored == 0 and _embedded(app_dsn, org, fact) == 0, stored
    # Control: a version of another project is stored.
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        assert _store(conn, other) == 1
    assert _embedded(app_dsn, org, other) == 1
