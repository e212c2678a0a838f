"""A batch retried after a failure ends in the state of one successful run.

The failure is the client's transaction dying after assert_facts returned (a crash, a
lost connection, an error in the caller's next statement): everything the call wrote
rolls back with it — facts, events, edges, counters, jobs — and the retry is applied
as if for the first time. A retry of a batch that did commit is a no-op.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

BATCH = [
    {"subject": "Rita", "predicate": "works at", "object": "Acme", "object_type": "entity",
     "valid_from": "2020-01-01T00:00:00Z"},
    {"subject": "Rita", "predicate": "works at", "object": "Globex", "object_type": "entity",
     "valid_from": "2023-01-01T00:00:00Z"},
    {"subject": "Rita", "predicate": "likes", "object": "tea",
     "valid_from": "2021-05-01T00:00:00Z"},
]  # fmt: skip

STATE = """
    select jsonb_build_object(
      'facts', (select coalesce(jsonb_agg(jsonb_build_array(
                  v.predicate, v.object_key, v.content, v.valid_range::text, v.invalid_at is null)
                  order by v.predicate, v.valid_from), '[]')
                from memory_internal.fact_versions(%(p)s) v),
      'events', (select coalesce(jsonb_agg(jsonb_build_array(e.event_type, e.new_range::text)
                   order by e.event_type, e.new_range::text), '[]')
                 from memory.fact_events e where e.project_id = %(p)s),
      'edges', (select coalesce(jsonb_agg(jsonb_build_array(e.relation, e.valid_range::text)
                  order by e.valid_range), '[]')
                from memory.edges_at(%(p)s, '2022-01-01') e),
      'counters', (select coalesce(jsonb_object_agg(c.metric, c.value), '{}')
                   from memory.counters(%(p)s) c),
      'jobs', (select count(*) from memory.jobs j where j.project_id = %(p)s))
"""


@pytest.fixture
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app_dsn) as c:
        yield c


def new_project(conn: psycopg.Connection[Any]) -> tuple[uuid.UUID, uuid.UUID]:
    with conn.transaction():
        org = conn.execute("select memory.create_org('retry')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'retry')", (org,)).fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.declare_predicate(%s, 'works at', 'one')", (project,))
    return org, project


def apply(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> dict[str, Any]:
    conn.execute("select memory.use_org(%s)", (org,))
    row = conn.execute(
        "select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(BATCH))
    ).fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


def state(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> dict[str, Any]:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        row = conn.execute(STATE, {"p": project}).fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


def test_batch_retried_after_a_failed_transaction_ends_as_one_run(
    conn: psycopg.Connection[Any],
) -> None:
    # Reference: the batch applied once, successfully, in its own project.
    ref_org, ref_project = new_project(conn)
    with conn.transaction():
        apply(conn, ref_org, ref_project)
    reference = state(conn, ref_org, ref_project)
    assert reference["facts"] and reference["events"] and reference["edges"]  # not trivial

    org, project = new_project(conn)
    empty = state(conn, org, project)
    # The first attempt runs to the end of assert_facts, then its transaction fails.
    with pytest.raises(psycopg.errors.DivisionByZero), conn.transaction():
        first = apply(conn, org, project)
        assert first["inserted"] == 3  # it did the work ...
        conn.execute("select 1 / 0")  # ... and then the caller's transaction died
    assert state(conn, org, project) == empty, "a failed attempt leaves nothing behind"

    with conn.transaction():
        retried = apply(conn, org, project)
    assert retried["inserted"] == 3 and retried["skipped"] == 0
    assert state(conn, org, project) == reference

    # A retry of the batch that did commit changes nothing, counters aside.
    with conn.transaction():
        again = apply(conn, org, project)
    assert again["inserted"] == 0 and again["skipped"] == 3
    after = state(conn, org, project)
    assert {k: v for k, v in after.items() if k != "counters"} == {
        k: v for k, v in reference.items() if k != "counters"
    }
    assert after["counters"]["facts_skipped"] == 3
