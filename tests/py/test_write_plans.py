"""The write path's plans: assert_facts' lookups of an identity's stored versions are
planned once per session and probe the identity index, whatever the planner's
statistics know of the project.

A project the statistics do not know (created after the last ANALYZE of
memory.facts) is the case that went wrong: planned per call for its id, the
planner guessed it had one row, and read each identity's versions by scanning the
project's whole range_changed index (3-5x slower per batch, growing with the
project). A generic plan does not see which project it is.

The same guess made sync_edges join the batch's edge keys to every current edge of
the project (a batch of 100 facts with entity objects: 75 ms of its 99 in
sync_edges, 4,000 edges in); each key's edges are now one index probe.

And every write that queues a job asks whether a ready job of that kind already
waits (then it skips NOTIFY): that read went through a backlog of other kinds.

A table with no statistics at all (a new install until autovacuum's first ANALYZE,
or one analyzed while empty) left the planner no reason to prefer the identity index:
its costs tied with a range of the project, or a sequential scan, and the window
updates read the org's whole key range (4x slower per batch, growing, until the
first ANALYZE replaced the session's plans).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import psycopg
import pytest
from nested_plans import (
    analyzed_tables,
    nested_plans,
    plans_in_a_new_session,
    plans_in_this_session,
)

# The statements whose plans are checked, each by a phrase of its text: restitch's
# layout of an identity's versions, assert_facts' per-fact outcome lookup, sync_edges'
# expiry and insert of a batch's edges, the edges half of the record-time floor
# (edges_floor), the job trigger's wake-up test, restitch's window update.
MARKERS = {
    "layout": "lead(v.valid_from) over w",
    "outcome": "l.outcome = 'skipped'",
    # sync_edges' expiry: the edges to expire found and locked, then updated by address.
    "find_expired": "select c.ctid",
    "expire_edges": "update memory.edges e",
    "insert_edges": "insert into memory.edges",
    "floor_edges": "max(greatest(e.recorded_at, e.expired_at))",
    "job_wakeup": "from new_rows n)",
    "close": "update memory.facts f set valid_range",
    # find_entities: the names a batch uses, looked up among the project's entities.
    "find_entities": "x.normalized_name = any (p_normalized)",
    # find_entities' other half: the names that are aliases, unless an entity's own.
    "find_aliases": "with own as materialized",
    # named_auto_objects: which of the batch's new entity names stored facts use.
    "named_auto": "named_auto_objects(v_org, p_project, v_created)",
}


def _plans(
    conn: psycopg.Connection[Any], project: uuid.UUID, batches: list[str]
) -> dict[str, list[str]]:
    """Run the batches through assert_facts as the app role and return the plans
    (auto_explain of nested statements) of the statements named in MARKERS."""

    def run() -> None:
        for batch in batches:
            result = conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)", (project, batch)
            ).fetchone()[0]  # type: ignore[index]
            assert result["invalid"] == 0 and result["refused"] == 0, result

    return _explained(conn, run)


def _explained(conn: psycopg.Connection[Any], run: Any) -> dict[str, list[str]]:
    """The plans of the statements named in MARKERS while run() runs as the app role."""
    with nested_plans(conn) as plans:
        run()
    return {name: [p for p in plans if marker in p] for name, marker in MARKERS.items()}


def _org(conn: psycopg.Connection[Any], label: str) -> uuid.UUID:
    """In conn's transaction, as chronomem_app (left set): a new org, in scope."""
    conn.execute("set local role chronomem_app")
    org: uuid.UUID = conn.execute("select memory.create_org(%s)", (label,)).fetchone()[0]  # type: ignore[index]
    conn.execute("select memory.use_org(%s)", (org,))
    return org


def _new_project(conn: psycopg.Connection[Any], org: uuid.UUID, name: str) -> uuid.UUID:
    project: uuid.UUID = conn.execute(
        "select memory.create_project(%s, %s)", (org, name)
    ).fetchone()[0]  # type: ignore[index]
    return project


def _count(conn: psycopg.Connection[Any], where: str, project: uuid.UUID) -> int:
    n: int = conn.execute(
        f"select count(*) from memory.facts where project_id = %s and {where}", (project,)
    ).fetchone()[0]  # type: ignore[index]
    return n


def _plan_batch(prefix: str, n: int, plan: str, day: int) -> str:
    return json.dumps([
        {"subject": f"{prefix}{i}", "predicate": "plan", "object": plan,
         "content": f"{prefix}{i} is on the {plan} plan", "valid_from": f"2024-01-{day:02d}"}
        for i in range(n)
    ])  # fmt: skip


def _known_and_new(conn: psycopg.Connection[Any], label: str) -> uuid.UUID:
    """In conn's transaction: an org with a project 'known' of 2,000 fact versions and
    an empty project 'new', then statistics that know 'known' and not 'new' (as after
    any ANALYZE that ran before a project was created). Returns 'new'."""
    org = _org(conn, label)
    known = _new_project(conn, org, "known")
    conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (known,))
    for day in (1, 2):  # 2,000 versions of 1,000 identities
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (known, _plan_batch("k", 1000, f"p{day}", day)),
        )
    new = _new_project(conn, org, "new")
    conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (new,))
    conn.execute("reset role")
    conn.execute("analyze memory.facts")
    return new


def _assert_identity_probes(plans: list[str], project: uuid.UUID) -> None:
    for plan in plans:
        # Each identity's versions by the identity index, keyed on the identity.
        assert "facts_identity_idx" in plan, plan
        conds = [line for line in plan.splitlines() if "Index Cond" in line]
        assert [c for c in conds if "subject_id =" in c and "identity_object =" in c], plan
        # Not a range of the project in another index.
        for other in ("facts_range_changed_idx", "facts_text_cover_idx"):
            assert other not in plan, plan
        # Generic: the project is a parameter, not this call's value.
        assert str(project) not in plan, plan


def test_identity_lookups_are_generic_probes_in_a_project_unknown_to_statistics(
    admin_dsn: str,
) -> None:
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        new = _known_and_new(conn, "write plans")
        # Three batches of 'new': first claims, then each identity superseded (its
        # stored version found and closed), then the same claims again (skipped).
        plans = _plans(conn, new, [_plan_batch("n", 40, "free", 1), _plan_batch("n", 40, "pro", 2),
                                   _plan_batch("n", 40, "pro", 2)])  # fmt: skip
        closed = _count(conn, "not upper_inf(valid_range)", new)
    # Control: the lookups ran and found what they had to (40 versions closed), and
    # both statements' plans were seen on every call that runs them.
    assert closed == 40
    assert len(plans["outcome"]) == 3, plans
    assert len(plans["layout"]) >= 1, plans
    _assert_identity_probes(plans["layout"] + plans["outcome"], new)


def test_first_plans_of_a_new_install_still_probe_keys_once_it_has_grown(
    fresh_install: str,
) -> None:
    """A session's generic plans are made at its first call. On a new install the
    tables are empty and have no statistics then, so any index on the org looked as
    good as the identity btree, or a scan as good as either; the plans stayed (until
    autovacuum's first ANALYZE) while the tables grew."""
    with psycopg.connect(fresh_install) as conn, conn.transaction(force_rollback=True):
        org = _org(conn, "new install")
        project = _new_project(conn, org, "p")
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (project,))
        # The first writes: every statement checked below runs once on empty tables.
        for plan in ("free", "pro"):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)", (project, _plan_batch("f", 2, plan, 1))
            )
        # The install grows (2,000 versions of 1,000 identities) under those plans.
        for day in (2, 3):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (project, _plan_batch("k", 1000, f"p{day}", day)),
            )
        conn.execute("reset role")
        batches = [_plan_batch("n", 40, "free", 4), _plan_batch("n", 40, "pro", 5)]
        plans = _plans(conn, project, [*batches, batches[1]])
        closed = _count(conn, "object_key = 'free' and not upper_inf(valid_range)", project)
    # Control: the lookups ran and found what they had to (the 40 'free' facts and the
    # first write's 2 closed), and each statement ran on every call that runs it.
    assert closed == 42
    assert len(plans["outcome"]) == 3 and len(plans["close"]) == 1, plans
    assert len(plans["layout"]) >= 1, plans
    _assert_identity_probes(plans["layout"] + plans["outcome"], project)
    for plan in plans["outcome"]:
        assert "Seq Scan on facts" not in plan, plan
    # The window update reads the facts it changes by their keys, not the org's range.
    for plan in plans["close"]:
        lines = plan.splitlines()
        reads = [i for i, line in enumerate(lines) if "Scan" in line and " on facts f" in line]
        assert reads, plan
        for i in reads:
            cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
            assert "fact_id =" in cond, (lines[i], plan)


def test_retraction_restitches_by_identity_in_a_project_unknown_to_statistics(
    admin_dsn: str,
) -> None:
    """retract_fact lays the identity out again (restitch) without assert_facts'
    setting around it: restitch's own."""
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        new = _known_and_new(conn, "retract plans")
        conn.execute("set local role chronomem_app")
        for day, plan in ((1, "free"), (2, "pro")):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)", (new, _plan_batch("n", 40, plan, day))
            )
        pro = [r[0] for r in conn.execute(
            "select fact_id from memory.facts where project_id = %s and object_key = 'pro' "
            "order by fact_id limit 3", (new,)).fetchall()]  # fmt: skip
        conn.execute("reset role")

        def retract() -> None:
            for fact in pro:
                conn.execute("select memory.retract_fact(%s, %s, 'test')", (new, fact))

        plans = _explained(conn, retract)["layout"]
        reopened = _count(conn, "object_key = 'free' and upper_inf(valid_range)", new)
    # Control: each retraction gave the 'free' fact it had closed its window back.
    assert reopened == 3
    assert len(plans) == 3, plans
    _assert_identity_probes(plans, new)


def _employer_batch(n: int, day: int) -> str:
    # Person i works at company (i + day) % 7: each day's batch moves everyone, so the
    # second batch closes every first-day edge (cardinality one) and opens new ones.
    return json.dumps([
        {"subject": f"person {i}", "predicate": "works_at", "object": f"company {(i + day) % 7}",
         "object_type": "entity", "valid_from": f"2024-02-{day:02d}"}
        for i in range(n)
    ])  # fmt: skip


def test_edge_sync_probes_each_key_in_a_project_unknown_to_statistics(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        org = _org(conn, "edge plans")
        known = _new_project(conn, org, "known")
        conn.execute("select memory.declare_predicate(%s, 'works_at', 'one')", (known,))
        conn.execute("select memory.assert_facts(%s, %s::jsonb)", (known, _employer_batch(500, 1)))
        new = _new_project(conn, org, "new")
        conn.execute("select memory.declare_predicate(%s, 'works_at', 'one')", (new,))
        conn.execute("reset role")
        conn.execute("analyze memory.facts")
        # memory.edges as the planner sees a table never analyzed (a new install
        # before autovacuum's first pass; the write benchmark until session 8).
        conn.execute("delete from pg_statistic where starelid = 'memory.edges'::regclass")
        conn.execute(
            "update pg_class set reltuples = -1, relpages = 0 where oid = 'memory.edges'::regclass"
        )
        plans = _plans(conn, new, [_employer_batch(60, 1), _employer_batch(60, 2)])
        edges = conn.execute(
            "select count(*) filter (where expired_at is null), "
            "       count(*) filter (where expired_at is not null) "
            "  from memory.edges where project_id = %s",
            (new,),
        ).fetchone()
    # Control: both statements ran, and did their work: the second batch closed the
    # first day's 60 edges (expired, replaced by closed ones) and opened 60 more.
    assert edges == (120, 60), edges
    assert len(plans["insert_edges"]) == 2 and len(plans["find_expired"]) == 2, plans
    _assert_expiry_by_address(plans["expire_edges"])
    # Every read of edges in these statements, and in the record-time floor's (which
    # reads the batch's subjects' edges), is an index probe keyed on an edge's end; no
    # sequential scan, no range of the org or project.
    for name in ("find_expired", "insert_edges", "floor_edges"):
        assert plans[name], (name, plans)
        for plan in plans[name]:
            assert "Seq Scan on edges" not in plan, (name, plan)
            lines = plan.splitlines()
            reads = [i for i, line in enumerate(lines) if "Scan" in line and " on edges" in line]
            assert reads, (name, plan)
            for i in reads:
                cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
                assert "source_id =" in cond or "target_id =" in cond, (name, lines[i], plan)


def _assert_expiry_by_address(plans: list[str]) -> None:
    """The expiry's update takes the rows found by their addresses: a TID scan, and no
    other read of memory.edges."""
    assert plans, plans
    for plan in plans:
        scans = [line for line in plan.splitlines() if "Scan" in line and " on edges" in line]
        assert scans and all("Tid Scan on edges" in line for line in scans), plan


def _grown_then_planned(
    conn: psycopg.Connection[Any], label: str
) -> tuple[uuid.UUID, dict[str, list[str]]]:
    """In a new org and project (works_at declared one): two people move twice
    (the session plans every statement of sync_edges on what the tables hold then, an
    edge expired), then 600 people on 7 companies twice (hubs of ~170 edges, 1,800
    edges); the project, and the plans of a fifth day's 60 moves."""
    project = _new_project(conn, _org(conn, label), "p")
    conn.execute("select memory.declare_predicate(%s, 'works_at', 'one')", (project,))
    for day, n in ((1, 2), (2, 2), (3, 600), (4, 600)):
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, _employer_batch(n, day))
        )
    conn.execute("reset role")
    return project, _plans(conn, project, [_employer_batch(60, 5)])


def test_first_edge_plans_of_a_new_install_probe_the_key_not_a_hub(fresh_install: str) -> None:
    """sync_edges' probes, planned on a new install's empty memory.edges, by the key
    index: the target index cost the same then and read every edge into a hub."""
    with psycopg.connect(fresh_install) as conn, conn.transaction(force_rollback=True):
        # The first writes plan every statement on empty tables.
        project, plans = _grown_then_planned(conn, "new install edges")
        hub = conn.execute(
            "select max(n) from (select count(*) n from memory.edges where project_id = %s "
            "group by target_id) x",
            (project,),
        ).fetchone()
    # Control: the hubs are there, and both statements ran.
    assert hub is not None and hub[0] > 150, hub
    assert len(plans["insert_edges"]) == 1 and len(plans["find_expired"]) == 1, plans
    _assert_expiry_by_address(plans["expire_edges"])
    for name in ("find_expired", "insert_edges"):
        for plan in plans[name]:
            assert "edges_key_idx" in plan, (name, plan)
            assert "edges_target_idx" not in plan, (name, plan)
            assert "Seq Scan on edges" not in plan, (name, plan)


def test_edge_plans_of_an_install_analyzed_while_empty_probe_by_key(fresh_install: str) -> None:
    """An ANALYZE of the new install's empty tables (an operator's, or the write
    benchmark's) leaves memory.edges with no rows on record: sync_edges' statements,
    planned on it once per session, must still read by key. The expiry's update, joined
    to the rows found by id, read the org's edges by edges_pkey once per key (a batch of
    100 took 95 ms, then 790 ms 30 batches later)."""
    with psycopg.connect(fresh_install) as conn, conn.transaction(force_rollback=True):
        conn.execute(
            "analyze memory.edges, memory.facts, memory.entities, memory.fact_events, "
            "memory_internal.fact_terms"
        )
        # The first writes plan every statement on tables analyzed empty.
        project, plans = _grown_then_planned(conn, "analyzed empty edges")
        edges = conn.execute(
            "select count(*), count(*) filter (where expired_at is not null) "
            "from memory.edges where project_id = %s",
            (project,),
        ).fetchone()
        reltuples = conn.execute(
            "select reltuples from pg_class where oid = 'memory.edges'::regclass"
        ).fetchone()
    # Controls: the statistics still say empty; the batches expired what they closed
    # (the last one 60 of day 4's edges).
    assert reltuples == (0,), reltuples
    assert edges is not None and edges[0] > 1800 and edges[1] >= 662, edges
    # No read of edges by a range of the org or project, in any of sync_edges' plans
    # or the record-time floor's.
    for plan in (
        plans["find_expired"] + plans["expire_edges"] + plans["insert_edges"] + plans["floor_edges"]
    ):
        lines = plan.splitlines()
        for i, line in enumerate(lines):
            if "Scan" in line and " on edges" in line:
                cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
                assert not re.search(
                    r"Index Cond: \(\(?org_id = \$1\)?( AND \(project_id = \$2\))?\)$", cond.strip()
                ), (line, plan)
    assert len(plans["find_expired"]) == 1 and len(plans["insert_edges"]) == 1, plans
    assert plans["floor_edges"], plans
    _assert_expiry_by_address(plans["expire_edges"])
    for name in ("find_expired", "insert_edges", "floor_edges"):
        for plan in plans[name]:
            lines = plan.splitlines()
            reads = [i for i, line in enumerate(lines) if "Scan" in line and " on edges" in line]
            assert reads, (name, plan)
            for i in reads:
                cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
                assert "source_id =" in cond, (name, lines[i], plan)


def test_job_wakeup_check_reads_one_kind_not_a_backlog_of_another(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn) as conn, conn.transaction(force_rollback=True):
        org = _org(conn, "job plans")
        project = _new_project(conn, org, "p")
        conn.execute("reset role")
        # A backlog of another kind: 3,000 embed jobs ready for an hour (the embedder
        # down), and none of kind enrich.
        conn.execute(
            "insert into memory.jobs (org_id, project_id, kind, payload, run_at) "
            "select %s, %s, 'embed', '{}', now() - interval '1 hour' from generate_series(1, 3000)",
            (org, project),
        )
        conn.execute("analyze memory.jobs")

        def ingest() -> None:
            conn.execute(
                "select memory.ingest(%s, 's', %s::jsonb)",
                (project, json.dumps([{"role": "user", "content": "I moved to Lisbon."}])),
            )

        plans = _explained(conn, ingest)["job_wakeup"]
        queued = conn.execute(
            "select kind, count(*) from memory.jobs where project_id = %s and status = 'queued' "
            "group by kind order by kind",
            (project,),
        ).fetchall()
    # Control: the ingest queued its enrich job and its embed job (two inserts, each
    # with its wake-up test).
    assert queued == [("embed", 3001), ("enrich", 1)], queued
    assert len(plans) == 2, plans
    for plan in plans:
        conds = [line for line in plan.splitlines() if "Index Cond" in line]
        # Ready jobs of the new job's kind, by an index condition on that kind.
        assert "jobs_kind_status_idx" in plan, plan
        assert any("(kind = " in c and "status = " in c for c in conds), plan
        assert "jobs_ready_idx" not in plan, plan


def _likes_batch(prefix: str, n: int, topics: int, day: int) -> str:
    """n new people who like one of `topics` things written as plain names (no entity
    of that name): every subject is a new entity, every object an auto object."""
    return json.dumps([
        {"subject": f"{prefix}{i}", "predicate": "likes", "object": f"topic {i % topics}",
         "valid_from": f"2024-02-{day:02d}"}
        for i in range(n)
    ])  # fmt: skip


def _reads(plan: str, index: str) -> list[str]:
    """The Index Cond of every scan of `index` in the plan."""
    lines = plan.splitlines()
    return [
        next((c.strip() for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
        for i, line in enumerate(lines)
        if f" using {index} on " in line
    ]


@pytest.mark.parametrize("first_plans", ["empty", "grown"])
def test_entity_lookups_of_a_new_install_probe_names(fresh_install: str, first_plans: str) -> None:
    """The names a batch uses are looked up by the name index, per name, and the stored
    facts using a new entity's name by the auto-object index, per name, whatever the
    planner knew when the session made its generic plans: on a new install's empty
    tables ("empty"), or after they grew with no ANALYZE yet ("grown": a new session of
    the API's pool, before autovacuum's first ANALYZE). Found by the HTTP API's
    benchmark, whose /facts ran 4x slower through the API's sessions than through the
    benchmark's own: there the entity key index on (org, project, entity_id) read every
    entity of the project per batch, and the auto objects were read whole into a hash."""

    def write(conn: psycopg.Connection[Any], project: uuid.UUID, batch: str) -> None:
        conn.execute("select memory.assert_facts(%s, %s::jsonb)", (project, batch))

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        org = _org(conn, "new install names")
        project = _new_project(conn, org, "p")
        # The first writes (new people, plain-name objects) plan every statement on
        # empty tables; then 2,000 people liking 400 things.
        write(conn, project, _likes_batch("f", 2, 2, 1))
        for day in (2, 3):
            write(conn, project, _likes_batch(f"k{day} ", 1000, 400, day))
        conn.execute("reset role")
        if first_plans == "empty":
            plans = _plans(conn, project, [_names_batch()])
    if first_plans == "grown":
        with psycopg.connect(fresh_install) as conn, conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            plans = _plans(conn, project, [_names_batch()])
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.entities", "memory.facts"])
        adopted = conn.execute(
            "select count(*) from memory.facts f join memory.entities e "
            "on e.org_id = f.org_id and e.entity_id = f.object_entity_id "
            "where f.project_id = %s and e.normalized_name = 'topic 7'",
            (project,),
        ).fetchone()
    # Controls: nothing was analyzed meanwhile; both statements ran; the adoption found
    # the facts naming topic 7.
    assert analyzed == [], analyzed
    assert adopted is not None and adopted[0] >= 5, adopted
    assert plans["find_entities"] and plans["find_aliases"] and plans["named_auto"], plans
    for plan in plans["find_entities"]:
        assert not _reads(plan, "entities_project_entity_key"), plan
        conds = _reads(plan, "entities_org_id_project_id_normalized_name_key")
        assert conds and all("normalized_name" in c for c in conds), plan
    for plan in plans["find_aliases"]:
        for index in (
            "entities_org_id_project_id_normalized_name_key",
            "entities_project_entity_key",
        ):
            assert all("normalized_name" in c for c in _reads(plan, index)), plan
    for plan in plans["named_auto"]:
        conds = _reads(plan, "facts_auto_object_idx")
        assert conds and all("object_key" in c for c in conds), plan


def _names_batch() -> str:
    """New people, and one of them named like a stored plain-name object: the facts
    using that name become the new entity's (adopt_auto_objects)."""
    batch = json.loads(_likes_batch("n", 40, 400, 4))
    return json.dumps([*batch, {"subject": "topic 7", "predicate": "likes", "object": "topic 8"}])


@pytest.mark.parametrize("first_plans", ["empty", "grown"])
def test_extraction_context_reads_the_named_entities_only(
    fresh_install: str, first_plans: str
) -> None:
    """The facts the model is shown for an episode (extraction_fact_ids) are found from
    the words said: the name tokens of those words, those candidates' names and aliases,
    their facts, each read by its key whatever the planner knew when the session planned
    it. Planned without statistics, the old query tested every entity of the project for
    each fact of the project (91 s at 3,000 entities and 6,000 facts). (extraction_context's
    own read of those facts by id may still take a range of the project then: linear, a
    few ms.)"""

    def context(conn: psycopg.Connection[Any], episode: uuid.UUID) -> list[str]:
        known = conn.execute(
            "select memory_worker.extraction_context(%s) -> 'known_facts'", (episode,)
        ).fetchone()[0]  # type: ignore[index]
        return sorted(f"{f['subject']} {f['object']}" for f in known)

    def grow(conn: psycopg.Connection[Any], project: uuid.UUID, n: int) -> None:
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (project, _plan_batch("p", n, "pro", 1)),
        )

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        org = _org(conn, "extraction plans")
        project = _new_project(conn, org, "p")
        grow(conn, project, 20)
        conn.execute("select memory.add_alias(%s, %s, 'the boss')", (project, "p7"))
        episode = conn.execute(
            "select (memory.ingest(%s, 's', %s::jsonb) -> 'episode_ids' ->> 0)::uuid",
            (project, json.dumps([{"role": "user", "content": "p3 and the boss met p12."}])),
        ).fetchone()[0]  # type: ignore[index]
        if first_plans == "empty":
            context(conn, episode)  # the session's plans, on 20 facts
        grow(conn, project, 1000)
        if first_plans == "empty":
            plans, known = plans_in_this_session(conn, lambda c: context(c, episode))
    if first_plans == "grown":
        plans, known = plans_in_a_new_session(fresh_install, org, lambda c: context(c, episode))
    # Control: the facts of the three people the episode names, by name or alias.
    assert known == ["p12 pro", "p3 pro", "p7 pro"], known
    # The statements of extraction_fact_ids (the names said, their entities, their facts).
    mine = [
        p for p in plans if any(m in p for m in ("strpos(v_said", "any (v_named)", "v_cand :="))
    ]
    assert len(mine) == 3, plans
    reads = [
        (line, next((c for c in p.splitlines()[i + 1 : i + 4] if "Index Cond" in c), ""), p)
        for p in mine
        for i, line in enumerate(p.splitlines())
        if " Scan using " in line and (" on entities " in line or " on facts " in line)
    ]
    assert reads, plans
    for line, cond, plan in reads:
        # Entities by id, facts by subject or id: never a range of the project.
        assert "entity_id = " in cond or "subject_id = " in cond or "fact_id = " in cond, (
            line,
            cond,
            plan,
        )


@pytest.mark.parametrize("first_plans", ["empty", "grown"])
def test_fact_history_of_a_new_install_reads_the_identity(
    fresh_install: str, first_plans: str
) -> None:
    """fact_history reads the fact's identity once, then that identity's versions by the
    identity key and their events by fact, whatever the planner knew when the session
    planned it. As one statement planned without statistics it looked the fact up
    again for every version of the project (3.9 s per call at 6,000 versions)."""

    def history(conn: psycopg.Connection[Any], project: uuid.UUID, fact: uuid.UUID) -> list[str]:
        rows = conn.execute(
            "select event_type, object from memory.fact_history(%s, %s)", (project, fact)
        ).fetchall()
        return [f"{t} {o}" for t, o in rows]

    def write(
        conn: psycopg.Connection[Any], project: uuid.UUID, n: int, plan: str, day: int
    ) -> None:
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, _plan_batch("h", n, plan, day))
        )

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        org = _org(conn, "history plans")
        project = _new_project(conn, org, "p")
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (project,))
        write(conn, project, 20, "free", 1)
        fact = conn.execute(
            "select fact_id from memory.facts where project_id = %s and content like 'h7 %%'",
            (project,),
        ).fetchone()[0]  # type: ignore[index]
        if first_plans == "empty":
            history(conn, project, fact)  # the session's plans, on 20 versions
        write(conn, project, 1000, "pro", 2)  # h7's plan superseded, 980 more people
        if first_plans == "empty":
            plans, seen = plans_in_this_session(conn, lambda c: history(c, project, fact))
    if first_plans == "grown":
        plans, seen = plans_in_a_new_session(
            fresh_install, org, lambda c: history(c, project, fact)
        )
    # Control: h7's two versions and what happened to them.
    assert seen == ["asserted free", "superseded free", "asserted pro"], seen
    # The versions by the identity key. (Their events and names are joined by key once
    # the statistics know the tables; planned on empty ones, the join may read the org's
    # events once per call: linear, not once per version.)
    (versions,) = [p for p in plans if "x.identity_object = t.identity_object" in p]
    lines = versions.splitlines()
    reads = [i for i, line in enumerate(lines) if " Scan using " in line and " on facts " in line]
    assert reads, versions
    for i in reads:
        cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
        assert "subject_id = " in cond, (lines[i], cond, versions)


@pytest.mark.parametrize("first_plans", ["empty", "grown"])
def test_subject_timeline_of_a_new_install_reads_the_subject(
    fresh_install: str, first_plans: str
) -> None:
    """subject_timeline resolves the subject once, then reads its versions by the
    identity key, whatever the planner knew when the session planned it. As one
    statement planned without statistics it ran the subject's lookup as a filter on
    every version of the project (0.46-0.75 s per call at 6,000 versions)."""

    def timeline(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[str]:
        rows = conn.execute(
            "select object, status from memory.subject_timeline(%s, 'H7')", (project,)
        ).fetchall()
        return [f"{o} {s}" for o, s in rows]

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        org = _org(conn, "timeline plans")
        project = _new_project(conn, org, "p")
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (project,))
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, _plan_batch("h", 20, "free", 1))
        )
        if first_plans == "empty":
            timeline(conn, project)  # the session's plans, on 20 versions
        # h7's plan superseded, 980 more people.
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, _plan_batch("h", 1000, "pro", 2))
        )
        if first_plans == "empty":
            plans, seen = plans_in_this_session(conn, lambda c: timeline(c, project))
    if first_plans == "grown":
        plans, seen = plans_in_a_new_session(fresh_install, org, lambda c: timeline(c, project))
    # Control: h7's two versions, in world-time order (the name matched as written
    # differently: "H7").
    assert seen == ["free ended", "pro current"], seen
    (versions,) = [p for p in plans if "x.org_id = v_org and x.subject_id" in p]
    lines = versions.splitlines()
    reads = [i for i, line in enumerate(lines) if " Scan" in line and " on facts " in line]
    assert reads, versions
    for i in reads:
        assert "facts_identity_idx" in lines[i], (lines[i], versions)
        cond = next((c for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
        assert "subject_id = " in cond, (lines[i], cond, versions)
