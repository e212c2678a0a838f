"""memory.search at an earlier known_at, across committed transactions.

Each write is its own committed transaction as chronomem_app, so recorded_at and
invalid_at carry real, distinct instants; an instant "between" two writes is now()
of a transaction run after the first committed and before the second started.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from org_scope import one_in

EMBEDDING = "[" + ",".join("0.05" for _ in range(384)) + "]"
QUERY = "Where is Erin employed? Initrode"
FACT_LEGS = ("fact_vector", "fact_fulltext", "graph")


class Store:
    def __init__(self, conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> None:
        self.conn, self.org, self.project = conn, org, project

    def one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return one_in(self.conn, self.org, query, params)

    def now(self) -> Any:
        return self.one("select now()")

    def found_in(self, fact: uuid.UUID, known_at: Any) -> set[str]:
        """The legs (alone, then all together) in which `fact` is found at known_at."""
        found = set()
        for legs in [[leg] for leg in FACT_LEGS] + [None]:
            result = self.one(
                "select memory.search(%s, %s, %s::vector, now(), %s, 20, %s)",
                (self.project, QUERY, EMBEDDING, known_at, legs),
            )
            assert not result["degraded"] and result["legs"] == (legs or result["legs"]), result
            if str(fact) in {r["id"] for r in result["results"]}:
                found.add(legs[0] if legs else "all")
        return found


@pytest.fixture
def store(app_dsn: str) -> Iterator[Store]:
    with psycopg.connect(app_dsn) as conn:
        with conn.transaction():
            org = conn.execute("select memory.create_org('search known_at')").fetchone()[0]  # type: ignore[index]
            conn.execute("select memory.use_org(%s)", (org,))
            project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        yield Store(conn, org, project)


def test_search_sees_a_retracted_fact_only_at_known_at_before_the_retraction(store: Store) -> None:
    before = store.now()
    facts = [
        {
            "subject": "Erin",
            "predicate": "works at",
            "object": "Initrode",
            "object_type": "entity",
            "content": "Erin is employed at Initrode",
            "valid_from": "2020-01-01T00:00:00Z",
        },
        # Control: stays believed throughout.
        {
            "subject": "Erin",
            "predicate": "knows",
            "object": "Frank",
            "object_type": "entity",
            "content": "Erin is employed alongside Frank",
            "valid_from": "2020-01-01T00:00:00Z",
        },
    ]
    result = store.one(
        "select memory.assert_facts(%s, %s::jsonb)", (store.project, json.dumps(facts))
    )
    job, control = (uuid.UUID(r["fact_id"]) for r in result["results"])
    ids = store.one("select array_agg(fact_id) from memory.facts_at(%s)", (store.project,))
    store.one(
        "select memory_worker.store_embeddings('fact', %s, array_fill(%s::vector, array[%s]))",
        (ids, EMBEDDING, len(ids)),
    )
    recorded = store.now()
    assert (
        store.one("select memory.retract_fact(%s, %s)", (store.project, job))["status"]
        == "retracted"
    )
    retracted = store.now()

    every = {*FACT_LEGS, "all"}
    assert store.found_in(job, recorded) == every, (
        "believed between the assertion and the retraction"
    )
    assert store.found_in(job, retracted) == set(), "not believed after the retraction"
    assert store.found_in(job, before) == set(), "not believed before it was recorded"
    # Controls: the other fact is found after the retraction; before it was recorded
    # the legs run and find nothing.
    assert store.found_in(control, retracted) == every
    assert store.found_in(control, before) == set()
