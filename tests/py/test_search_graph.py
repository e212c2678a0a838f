"""The graph leg's walk: depth <= 2 from the entities the question names, facts on the
walked edges nearest first (an edge's depth is the nearer of its two ends), newest
first within a depth, and nothing three hops out.

Chain (each arrow a fact whose object is an entity, so an edge):

    Ann -> Bob -> Cid -> Dee -> Eve        Bob -> Xia, Xia -> Cid

Ann is the seed (depth 0); Bob is 1; Cid and Xia are 2; Dee is 3 and Eve 4.
Walked: Ann->Bob (depth 0); Bob->Cid, Bob->Xia (1); Xia->Cid (2, both ends at 2).
Not walked: Cid->Dee (Dee is three hops out), Dee->Eve.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

EDGES = [  # subject, predicate, object, valid_from
    ("Ann", "knows", "Bob", "2020-01-01"),
    ("Bob", "knows", "Cid", "2020-02-01"),
    ("Bob", "mentors", "Xia", "2020-03-01"),
    ("Xia", "knows", "Cid", "2020-04-01"),
    ("Cid", "knows", "Dee", "2020-05-01"),
    ("Dee", "knows", "Eve", "2020-06-01"),
]


@pytest.fixture
def graph(app_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], uuid.UUID, dict[str, str]]]:
    with psycopg.connect(app_dsn) as conn:
        org = conn.execute("select memory.create_org('search graph')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'g')", (org,)).fetchone()[0]  # type: ignore[index]
        facts = [
            {"subject": s, "predicate": p, "object": o, "object_type": "entity",
             "content": f"{s} {p} {o}", "valid_from": f"{t}T00:00:00Z"}
            for s, p, o, t in EDGES
        ]  # fmt: skip
        result = conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(facts))
        ).fetchone()[0]  # type: ignore[index]
        rows = zip(EDGES, result["results"], strict=True)
        ids = {f"{s}->{o}": r["fact_id"] for (s, _, o, _), r in rows}
        yield conn, project, ids
        conn.rollback()


def _graph_leg(
    conn: psycopg.Connection[Any], project: uuid.UUID, question: str, at: str
) -> list[str]:
    result = conn.execute(
        "select memory.search(%s, %s, null, %s::timestamptz, p_k => 50, p_legs => array['graph'])",
        (project, question, at),
    ).fetchone()[0]  # type: ignore[index]
    assert not result["degraded"], result["failed_legs"]
    return [r["id"] for r in sorted(result["results"], key=lambda r: r["ranks"]["graph"])]


def test_graph_leg_walks_two_hops_nearest_first(graph: Any) -> None:
    conn, project, ids = graph
    found = _graph_leg(conn, project, "What about Ann?", "2021-01-01T00:00:00Z")
    assert found == [ids["Ann->Bob"], ids["Bob->Xia"], ids["Bob->Cid"], ids["Xia->Cid"]]
    # Positive control for the edges left out: from Cid they are near.
    found = _graph_leg(conn, project, "What about Cid?", "2021-01-01T00:00:00Z")
    assert ids["Cid->Dee"] in found and ids["Dee->Eve"] in found


def test_graph_leg_walks_only_edges_effective_at_the_instant(graph: Any) -> None:
    conn, project, ids = graph
    # Mid-March 2020: Xia->Cid (April) does not hold yet, so Cid is reached from Bob
    # only and no edge joins two depth-2 entities.
    found = _graph_leg(conn, project, "What about Ann?", "2020-03-15T00:00:00Z")
    assert found == [ids["Ann->Bob"], ids["Bob->Xia"], ids["Bob->Cid"]]
