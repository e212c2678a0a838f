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
from nested_plans import nested_plans

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


def test_graph_leg_walks_edges_from_their_target(graph: Any) -> None:
    """A frontier entity that is an edge's object: Eve is only ever a target, so
    every edge of this walk is found through the read by target."""
    conn, project, ids = graph
    found = _graph_leg(conn, project, "What about Eve?", "2021-01-01T00:00:00Z")
    # Dee->Eve at depth 0, Cid->Dee at 1; at depth 2 (Cid) no edge has both ends at
    # depth 2: Bob->Cid and Xia->Cid lead three hops out.
    assert found == [ids["Dee->Eve"], ids["Cid->Dee"]]
    # Control: those two are walked from Cid, whose edges they are.
    found = _graph_leg(conn, project, "What about Cid?", "2021-01-01T00:00:00Z")
    assert ids["Bob->Cid"] in found and ids["Xia->Cid"] in found


def test_graph_leg_takes_an_edge_between_two_seeds_once(graph: Any) -> None:
    """Bob and Xia are both seeds: Bob->Xia has both ends at the frontier (read by
    source only) and appears once, at depth 0 with the seeds' other edges."""
    conn, project, ids = graph
    found = _graph_leg(conn, project, "What about Bob and Xia?", "2021-01-01T00:00:00Z")
    assert found == [
        ids["Xia->Cid"], ids["Bob->Xia"], ids["Bob->Cid"], ids["Ann->Bob"], ids["Cid->Dee"]
    ]  # fmt: skip


# One level of the graph walk as memory.search reads it (memory_internal.search_graph_level:
# per frontier entity, by source and by target), as the edges its facts stand on (one
# fact per edge in this graph).
LEVEL_EDGES = """
    select f.subject_id, f.object_entity_id, f.predicate
      from memory_internal.search_graph_level(%(p)s, now(), now(), %(frontier)s::uuid[],
                                              %(inner)s::uuid[], %(frontier)s::uuid[],
                                              %(depth)s) g
     cross join lateral unnest(g.level) l(fact_id)
      join memory.facts_at(%(p)s) f on f.fact_id = l.fact_id"""
# The single read of session 4: an OR of source and target, which no one index holds.
LEVEL_EDGES_OR = """
    select e.source_id, e.target_id, e.relation
      from memory.edges_at(%(p)s, now(), now()) e
     where (e.source_id = any (%(frontier)s::uuid[]) or e.target_id = any (%(frontier)s::uuid[]))
       and not (e.source_id = any (%(inner)s::uuid[]) or e.target_id = any (%(inner)s::uuid[]))"""


def test_graph_level_read_is_covered_by_the_edge_indexes(graph: Any) -> None:
    """A level's read (search_graph_level, by source and by target) returns what the
    single OR read returned, and each half's index holds every column the read uses
    (sql/0017 and 0019: validity and record time), so it can be an index-only range
    scan: a hub's edges cost no heap row each once the visibility map is current.
    (Which plan the planner picks depends on the statistics of the whole table; the
    benchmark's plans are in benchmarks/README.md.)"""
    conn, project, _ = graph
    ent = dict(
        conn.execute(
            "select normalized_name, entity_id from memory.entities where project_id = %s",
            (project,),
        ).fetchall()
    )
    for frontier, inner, depth in [
        (["cid"], [], 0),  # by target (Bob->Cid, Xia->Cid) and by source (Cid->Dee)
        (["bob", "xia"], [], 0),  # Bob->Xia has both ends at the frontier
        (["cid", "xia"], ["bob"], 2),  # depth 2: only Xia->Cid, both ends at the frontier
        (["dee"], ["eve"], 1),  # an inner entity's edge (Dee->Eve) is left out
    ]:
        params = {"p": project, "frontier": [ent[n] for n in frontier],
                  "inner": [ent[n] for n in inner], "depth": depth}  # fmt: skip
        split = sorted(conn.execute(LEVEL_EDGES, params).fetchall())
        if depth < 2:
            either = sorted(conn.execute(LEVEL_EDGES_OR, params).fetchall())
        else:
            either = sorted(
                r
                for r in conn.execute(LEVEL_EDGES_OR, params).fetchall()
                if r[0] in params["frontier"] and r[1] in params["frontier"]
            )
        assert split == either and split, (frontier, split, either)
    # What the read uses: edges_at's columns and the walk's.
    used = {"org_id", "project_id", "source_id", "target_id", "relation", "valid_range",
            "recorded_at", "expired_at"}  # fmt: skip
    covered = dict(
        conn.execute(
            "select c.relname, array_agg(a.attname::text) from pg_index i"
            " join pg_class c on c.oid = i.indexrelid"
            " join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any (i.indkey)"
            " where i.indrelid = 'memory.edges'::regclass group by c.relname"
        ).fetchall()
    )
    assert used <= set(covered["edges_key_idx"]) and used <= set(covered["edges_target_idx"])
    # Control: the check sees a missing column (the primary key holds none of these).
    assert not used <= set(covered["edges_pkey"])


# A project of n entities in a ring, with chords from each of the first 100 to its
# multiple of 20 (2,100 edges and facts for n = 2,000), loaded as superuser with
# triggers off, then analyzed: the planner's choices are those of a real project.
HUB_LOAD = """
    with ents as (
      insert into memory.entities (org_id, project_id, name, normalized_name)
      select %(org)s, %(p)s, 'node ' || i, 'node ' || i from generate_series(1, %(n)s) i
      returning entity_id, name),
    ids as (select entity_id, split_part(name, ' ', 2)::int as i from ents),
    pairs as (
      select a.entity_id as s, b.entity_id as t
        from ids a join ids b on b.i = (a.i %% %(n)s) + 1 or (a.i <= 100 and b.i = a.i * 20)),
    f as (
      insert into memory.facts (org_id, project_id, subject_id, predicate, predicate_label,
                                object_entity_id, object_key, identity_object, content,
                                content_key, source, valid_from, valid_range)
      select %(org)s, %(p)s, s, 'knows', 'knows', t, t::text, t::text, 'knows', 'knows', 'api',
             '2020-01-01Z', tstzrange('2020-01-01Z', null)
        from pairs returning 1)
    insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range)
    select %(org)s, %(p)s, s, t, 'knows', tstzrange('2020-01-01Z', null) from pairs"""


@pytest.mark.parametrize("n", [12, 2000])
def test_graph_level_is_one_generic_plan_of_index_probes(admin_dsn: str, n: int) -> None:
    """search_graph_level, as memory.search runs it (auto_explain of the nested
    statement): the same generic plan on every call (parameters, not values, in its
    index conditions: planned once per session, where the statement inside
    memory.search was planned on every call), reading edges per frontier entity by
    source and by target and each edge's facts by the edge's ends, all as index
    conditions; no sequential scan, in a project of 12 entities as in one of 2,000
    (the plan is kept for the session while the project grows)."""
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        conn.execute("set local role chronomem_app")
        org = conn.execute("select memory.create_org('graph plan')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'g')", (org,)).fetchone()[0]  # type: ignore[index]
        conn.execute("reset role")
        conn.execute("set local session_replication_role = replica")
        conn.execute(HUB_LOAD, {"org": org, "p": project, "n": n})
        conn.execute("set local session_replication_role = origin")
        conn.execute("analyze memory.entities, memory.edges, memory.facts")
        with nested_plans(conn) as seen:
            for question in ("What about node 1?", "What about node 7 and node 40?"):
                result = conn.execute(
                    "select memory.search(%s, %s, null, p_legs => array['graph'])",
                    (project, question),
                ).fetchone()[0]  # type: ignore[index]
                assert result["results"] and not result["degraded"], result
        plans = [p for p in seen if "with lvl as materialized" in p]
    # Control: each call's levels were seen (a walk reads up to three).
    assert len(plans) >= 2, plans
    for plan in plans:  # the statement's text, then its plan
        conds = [line for line in plan.splitlines() if "Index Cond:" in line]
        assert "Seq Scan" not in plan, plan
        # Edges by source and by target, each frontier entity a key of its index.
        assert any("(source_id = s.id)" in c for c in conds), plan
        assert any("(target_id = t.id)" in c for c in conds), plan
        # Facts by the edge: an index condition on its ends (the edge's whole key in
        # facts_edge_cover_idx, or its target alone in a small table's plan).
        assert any("lvl.source_id" in c or "lvl.target_id" in c for c in conds), plan
        # Generic: the project is a parameter, not this call's value.
        assert "(project_id = $1)" in plan and str(project) not in plan, plan


def test_graph_level_planned_while_edges_looked_empty_reads_by_entity(
    fresh_install: str,
) -> None:
    """A new install analyzed while empty (an operator's ANALYZE before the first
    writes): the session's graph walk, planned then and kept while the project grows,
    still reads each frontier entity's edges by source and by target. Planned so, it read
    the org's edges by edges_pkey with the org alone as its condition, once per entity
    of the frontier, until the next ANALYZE."""
    with psycopg.connect(fresh_install) as conn, conn.transaction(force_rollback=True):
        conn.execute("analyze memory.edges, memory.facts, memory.entities")
        conn.execute("set local role chronomem_app")
        org = conn.execute("select memory.create_org('graph empty stats')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'g')", (org,)).fetchone()[0]  # type: ignore[index]

        def knows(pairs: list[tuple[int, int]]) -> None:
            facts = [
                {"subject": f"node {a}", "predicate": "knows", "object": f"node {b}",
                 "object_type": "entity"}
                for a, b in pairs
            ]  # fmt: skip
            conn.execute("select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(facts)))

        def walk() -> Any:
            return conn.execute(
                "select memory.search(%s, 'What about node 1 and node 2?', null, "
                "p_legs => array['graph'])",
                (project,),
            ).fetchone()[0]  # type: ignore[index]

        knows([(1, 2), (2, 3)])
        conn.execute("reset role")
        with nested_plans(conn) as first:
            walk()  # the session's plan, made on the empty statistics
        conn.execute("set local role chronomem_app")
        knows([(i, i % 700 + 1) for i in range(1, 701)] + [(i, 1) for i in range(3, 300)])
        conn.execute("reset role")
        with nested_plans(conn) as seen:
            result = walk()
        reltuples = conn.execute(
            "select reltuples from pg_class where oid = 'memory.edges'::regclass"
        ).fetchone()
    plans = [p for p in first + seen if "with lvl as materialized" in p]
    # Controls: the statistics still say empty; the walk found facts on the edges.
    assert reltuples == (0,), reltuples
    assert result["results"] and not result["degraded"], result
    assert len(plans) >= 2, plans
    for plan in plans:
        assert "edges_pkey" not in plan and "Seq Scan" not in plan, plan
        conds = [line for line in plan.splitlines() if "Index Cond:" in line]
        assert any("(source_id = s.id)" in c for c in conds), plan
        assert any("(target_id = t.id)" in c for c in conds), plan


def test_communities_count_each_member_s_links_once(admin_dsn: str) -> None:
    """compute_communities names each community after its member with the most links;
    it counts every entity's links once, in one pass over the links. Counted per member
    from the links, the naming reads every link once per entity, growing with entities x
    links (3.2 s of the job at 3,000 entities and 6,000 edges, against 0.6 s)."""
    stars = [(f"hub {h}", [f"leaf {h}.{i}" for i in range(h + 3)]) for h in range(3)]
    facts = [
        {"subject": leaf, "predicate": "knows", "object": hub, "object_type": "entity"}
        for hub, leaves in stars
        for leaf in leaves
    ]
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        conn.execute("set local role chronomem_app")
        org = conn.execute("select memory.create_org('communities')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute("select memory.create_project(%s, 'c')", (org,)).fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(facts)))
        conn.execute("reset role")
        with nested_plans(conn) as plans:
            conn.execute("select memory.compute_communities(%s)", (project,))
        found = conn.execute(
            "select label, size from memory.communities where project_id = %s order by label",
            (project,),
        ).fetchall()
    # Control: one community per star, named after its hub (the most links).
    assert found == [("hub 0", 4), ("hub 1", 5), ("hub 2", 6)], found
    (naming,) = [p for p in plans if "insert into memory.community_members" in p]
    assert "SubPlan" not in naming, naming
    assert naming.count("on community_links") == 1, naming
