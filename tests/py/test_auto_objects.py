"""An object written as a plain name (object_type auto, the default) is an entity when
the project has one by that name or alias, else a literal. The end state must not
depend on whether the entity (or alias) came before or after the facts: each test
writes the same claims in both orders, in two projects, and compares what facts_at,
edges_at and assert_facts's answers show. An explicit literal of the same name is the
control that must not move. Every write is its own committed transaction (app role).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from org_scope import one_in, rows_in

Y2020 = datetime(2020, 1, 1, tzinfo=UTC)
Y2021 = datetime(2021, 1, 1, tzinfo=UTC)
Y2022 = datetime(2022, 1, 1, tzinfo=UTC)
Y2023 = datetime(2023, 1, 1, tzinfo=UTC)


class Project:
    """One project as the app role sees it; each call is one committed transaction."""

    def __init__(self, conn: psycopg.Connection[Any], org: uuid.UUID, name: str) -> None:
        self.conn = conn
        self.org = org
        self.id: uuid.UUID = self.one("select memory.create_project(%s, %s)", (org, name))

    def one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return one_in(self.conn, self.org, query, params)

    def all(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return rows_in(self.conn, self.org, query, params)

    def assert_facts(self, *facts: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.one(
            "select memory.assert_facts(%s, %s::jsonb)", (self.id, json.dumps(facts, default=str))
        )
        assert result["invalid"] == 0, result
        return result

    def entity(self, name: str) -> uuid.UUID:
        entity_id: uuid.UUID = self.one("select memory.upsert_entity(%s, %s)", (self.id, name))
        return entity_id

    def alias(self, entity: str, alias: str) -> None:
        self.one("select memory.add_alias(%s, %s, %s)", (self.id, entity, alias))

    def facts(self, at: datetime, known_at: datetime | None = None) -> set[tuple[Any, ...]]:
        """(subject, predicate, object entity or None, literal or None, key, window)."""
        rows = self.all(
            """
            select s.name, f.predicate, o.name, f.object_literal, f.object_key, f.valid_range
              from memory.facts_at(%s, %s, %s) f
              join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
              left join memory.entities o
                on o.org_id = f.org_id and o.entity_id = f.object_entity_id
            """,
            (self.id, at, known_at),
        )
        return set(rows)

    def edges(self, at: datetime) -> set[tuple[Any, ...]]:
        rows = self.all(
            """
            select s.name, e.relation, t.name, e.valid_range
              from memory.edges_at(%s, %s) e
              join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
              join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
            """,
            (self.id, at),
        )
        return set(rows)

    def now(self) -> datetime:
        instant: datetime = self.one("select now()")
        return instant


@pytest.fixture
def pair(
    conn: psycopg.Connection[Any], org: uuid.UUID, request: pytest.FixtureRequest
) -> tuple[Project, Project]:
    """Two fresh projects: the entity (or alias) comes first in one, last in the other."""
    name = request.node.name
    return Project(conn, org, f"{name} entity first"), Project(conn, org, f"{name} entity last")


def both_orders(
    pair: tuple[Project, Project],
    naming: Callable[[Project], None],
    writes: Callable[[Project], None],
) -> None:
    first, last = pair
    naming(first)
    writes(first)
    writes(last)
    naming(last)


def fact(subject: str, predicate: str, obj: str, start: datetime, **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, "valid_from": start, **extra}


def test_an_entity_created_later_takes_over_the_facts_that_named_it(
    pair: tuple[Project, Project],
) -> None:
    """The entity comes from a later batch (assert_facts creates it as a subject) in one
    project and exists first in the other: both end with Bob's fact on the entity and
    its edge. The explicit literal of the same name stays a literal, with no edge."""

    def writes(p: Project) -> None:
        p.assert_facts(
            fact("Bob", "works_at", "Acme", Y2020),
            fact("Dee", "mentions", "Acme", Y2020, object_type="literal"),
        )

    def naming(p: Project) -> None:
        p.assert_facts(fact("Acme", "located_in", "Paris", Y2020))

    first, last = pair
    naming(first)
    writes(first)
    writes(last)
    before = last.facts(Y2021)
    # Control: before the entity exists, the name is a literal in that project.
    assert ("Bob", "works at", None, "Acme", "acme") in {r[:5] for r in before}
    assert last.edges(Y2021) == set()
    naming(last)

    for p in pair:
        rows = {r[:5] for r in p.facts(Y2021)}
        assert ("Bob", "works at", "Acme", None, "acme") in rows
        assert ("Dee", "mentions", None, "Acme", "acme") in rows  # explicit literal: untouched
        assert {e[:3] for e in p.edges(Y2021)} == {("Bob", "works at", "Acme")}
    assert first.facts(Y2021) == last.facts(Y2021)
    assert first.edges(Y2021) == last.edges(Y2021)
    # A retry of the first batch is a retry in both: nothing new.
    for p in pair:
        result = p.assert_facts(fact("Bob", "works_at", "Acme", Y2020))
        assert (result["inserted"], result["skipped"]) == (0, 1), result


def test_upsert_entity_takes_over_the_facts_that_named_it(pair: tuple[Project, Project]) -> None:
    def writes(p: Project) -> None:
        p.assert_facts(fact("Bob", "knows", "Carol", Y2020))

    both_orders(pair, lambda p: p.entity("CAROL"), writes)
    first, last = pair
    assert {e[:3] for e in last.edges(Y2021)} == {("Bob", "knows", "CAROL")}
    assert first.facts(Y2021) == last.facts(Y2021)
    assert first.edges(Y2021) == last.edges(Y2021)


def test_an_alias_joins_the_identities_a_many_predicate_kept_apart(
    pair: tuple[Project, Project],
) -> None:
    """Under 'many' the object is part of the identity: "ACME Corp" (2020) and "Acme"
    (2022) were two identities, both holding in 2023, until the alias said they are one
    thing. Then the later claim closes the earlier one, as it does when the alias came
    first. Reads at a known_at before the alias still see both."""

    def naming(p: Project) -> None:
        p.entity("Acme")
        p.alias("Acme", "ACME Corp")

    def writes(p: Project) -> None:
        p.assert_facts(fact("Bob", "likes", "ACME Corp", Y2020))
        p.assert_facts(fact("Bob", "likes", "Acme", Y2022))

    first, last = pair
    for p in pair:
        p.one("select memory.declare_predicate(%s, 'likes', 'many')", (p.id,))
    naming(first)
    writes(first)
    last.entity("Acme")
    writes(last)
    before_alias = last.now()
    two = {r[:5] for r in last.facts(Y2023)}
    assert two == {
        ("Bob", "likes", None, "ACME Corp", "acme corp"),
        ("Bob", "likes", "Acme", None, "acme"),
    }, "control: without the alias the two claims both hold"
    last.alias("Acme", "ACME Corp")

    for p in pair:
        assert {r[:5] for r in p.facts(Y2023)} == {("Bob", "likes", "Acme", None, "acme")}
        assert {r[:5] for r in p.facts(Y2021)} == {("Bob", "likes", "Acme", None, "acme")}
        assert {(e[:3], e[3].lower, e[3].upper) for e in p.edges(Y2021)} == {
            (("Bob", "likes", "Acme"), Y2020, None)
        }
    for at in (Y2021, Y2023):
        assert first.facts(at) == last.facts(at)
    # Record time: before the alias, both claims were believed to hold in 2023, each
    # with its own open window. (Their objects read as they are named now: naming is
    # not a belief about the world, and is not versioned.)
    believed = last.facts(Y2023, before_alias)
    assert sorted((r[5].lower, r[5].upper) for r in believed) == [(Y2020, None), (Y2022, None)]
    # The earlier window was closed by the later claim, and the log says so.
    events = last.all(
        """
        select e.event_type, e.reason, upper(e.old_range), upper(e.new_range)
          from memory.fact_events e
          join memory.facts f on f.org_id = e.org_id and f.fact_id = e.fact_id
         where f.project_id = %s and f.valid_from = %s and e.event_type <> 'asserted'
        """,
        (last.id, Y2020),
    )
    assert events == [("superseded", "an alias joined two names", None, Y2022)]
    # Either name is a retry now, in both projects.
    for p in pair:
        for name in ("ACME Corp", "acme corp!"):
            result = p.assert_facts(fact("Bob", "likes", name, Y2020))
            assert (result["inserted"], result["skipped"]) == (0, 1), (name, result)
    # And the counters agree: one window superseded in each. (Only the project where
    # the alias came last took a version over, which /metrics shows.)
    counters = [dict(p.all("select metric, value from memory.counters(%s)", (p.id,))) for p in pair]
    assert counters[1].pop("objects_adopted") == 1
    assert counters[0] == counters[1]
    assert counters[0]["facts_superseded"] == 1


def test_an_alias_under_a_one_predicate_keeps_the_layout_and_makes_retries_retries(
    pair: tuple[Project, Project],
) -> None:
    def writes(p: Project) -> None:
        p.assert_facts(fact("Bob", "works_at", "ACME Corp", Y2020))
        p.assert_facts(fact("Bob", "works_at", "Globex", Y2022))

    def naming(p: Project) -> None:
        p.entity("Acme")
        p.alias("Acme", "acme-corp")

    for p in pair:
        p.one("select memory.declare_predicate(%s, 'works_at', 'one')", (p.id,))
    both_orders(pair, naming, writes)
    first, last = pair
    for at in (Y2021, Y2023):
        assert first.facts(at) == last.facts(at)
    assert first.edges(Y2021) == last.edges(Y2021)
    assert {r[:3] for r in last.facts(Y2021)} == {("Bob", "works at", "Acme")}
    # Restating the 2020 claim by either name changes nothing.
    for p in pair:
        result = p.assert_facts(fact("Bob", "works_at", "Acme Corp", Y2020))
        assert (result["inserted"], result["skipped"]) == (0, 1), result


def test_a_retracted_claim_stays_refused_under_the_entitys_name(
    pair: tuple[Project, Project],
) -> None:
    """The tombstone of a claim made with the alias follows it to the entity's key, so
    the claim made with the entity's own name is refused too. The control: a claim
    about another object is accepted."""

    def writes(p: Project) -> None:
        result = p.assert_facts(fact("Bob", "likes", "ACME Corp", Y2020))
        p.one(
            "select memory.retract_fact(%s, %s, 'wrong')",
            (p.id, uuid.UUID(result["results"][0]["fact_id"])),
        )

    def naming(p: Project) -> None:
        p.entity("Acme")
        p.alias("Acme", "ACME Corp")

    both_orders(pair, naming, writes)
    for p in pair:
        refused = p.assert_facts(fact("Bob", "likes", "Acme", Y2021))
        assert refused["refused"] == 1, refused
        accepted = p.assert_facts(fact("Bob", "likes", "Initech", Y2021))
        assert accepted["inserted"] == 1, accepted
    keys = [
        p.all(
            "select object_key, lifted_at is null from memory.tombstones where project_id = %s",
            (p.id,),
        )
        for p in pair
    ]
    assert keys[0] == keys[1] == [("acme", True)]


def test_two_tombstones_that_come_to_name_one_claim_leave_one_live(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    p = Project(conn, org, "two tombstones")
    p.entity("Acme")
    for name in ("Acme", "ACME Corp"):
        result = p.assert_facts(fact("Bob", "likes", name, Y2020))
        p.one(
            "select memory.retract_fact(%s, %s, 'wrong')",
            (p.id, uuid.UUID(result["results"][0]["fact_id"])),
        )
    p.alias("Acme", "ACME Corp")
    rows = p.all(
        "select object_key, lifted_at is null from memory.tombstones where project_id = %s"
        " order by created_at",
        (p.id,),
    )
    assert rows == [("acme", True), ("acme", False)]
    assert p.assert_facts(fact("Bob", "likes", "ACME Corp", Y2021))["refused"] == 1


def _race(app_dsn: str, p: Project, *facts: dict[str, Any]) -> None:
    """Write `facts` while another transaction is creating the entity "Zenith": the
    writer cannot see it, and stores its plain names as literals."""
    with psycopg.connect(app_dsn, autocommit=False) as creator:
        creator.execute("select memory.use_org(%s)", (p.org,))
        creator.execute("select memory.upsert_entity(%s, 'Zenith')", (p.id,))
        done = threading.Event()

        def write() -> None:
            p.assert_facts(*facts)
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(timeout=30)
        assert done.is_set(), "the writer waited on the uncommitted entity"
        creator.commit()
    assert (None, "Zenith") in {r[2:4] for r in p.facts(Y2021)}, "control: the race happened"


def test_reconcile_takes_over_what_a_concurrent_writer_could_not_see(
    app_dsn: str, conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """reconcile_edges gives the fact the racing writer stored to the entity, with its
    edge."""
    p = Project(conn, org, "race")
    _race(app_dsn, p, fact("Bob", "works_at", "Zenith", Y2020))
    report = p.one("select memory.reconcile_edges(1000, %s)", (p.id,))
    assert report["objects_adopted"] == 1
    assert {r[2:4] for r in p.facts(Y2021)} == {("Zenith", None)}
    assert {e[:3] for e in p.edges(Y2021)} == {("Bob", "works at", "Zenith")}
    again = p.one("select memory.reconcile_edges(1000, %s)", (p.id,))
    assert (again["objects_adopted"], again["keys_healed"]) == (0, 0)


def test_wiping_a_subject_takes_the_plain_names_of_it_not_yet_taken_over(
    app_dsn: str, conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """Forgetting Zenith forgets the fact that names it by a plain name even before
    reconciliation gave it to the entity; an explicit literal "Zenith" is no reference
    to the entity and stays (the control), as does Bob's other plan."""
    p = Project(conn, org, "race then wipe")
    _race(
        app_dsn,
        p,
        fact("Bob", "works_at", "Zenith", Y2020),
        fact("Bob", "mentions", "Zenith", Y2020, object_type="literal"),
        fact("Bob", "plan", "Pro", Y2020),
    )
    p.one("select memory.wipe(%s, p_subject => 'Zenith')", (p.id,))
    assert {r[1:4] for r in p.facts(Y2021)} == {
        ("mentions", None, "Zenith"),
        ("plan", None, "Pro"),
    }
    left = p.one(
        "select count(*) from memory_internal.fact_versions(%s) where object_key = 'zenith'",
        (p.id,),
    )
    assert left == 1  # the explicit literal only, at every instant


def test_a_writer_of_a_fact_being_taken_over_waits_and_keeps_its_edge_in_step(
    app_dsn: str, conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """T1's batch creates the entity "Pro" and so takes over Bob's plan fact (not yet
    committed); T2 supersedes that fact meanwhile. T2 must wait for T1 (the fact's
    identity lock, taken with T1's own), then see the fact as the entity's, and close
    its edge with it: afterwards edges equal their facts' windows."""
    p = Project(conn, org, "taken over while written")
    p.one("select memory.declare_predicate(%s, 'plan', 'one')", (p.id,))
    p.assert_facts(fact("Bob", "plan", "Pro", Y2020))
    with psycopg.connect(app_dsn, autocommit=False) as t1:
        t1.execute("select memory.use_org(%s)", (org,))
        t1.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (p.id, json.dumps([fact("Pro", "tier", "paid", Y2020)], default=str)),
        )
        writer = threading.Thread(target=lambda: p.assert_facts(fact("Bob", "plan", "Team", Y2022)))
        writer.start()
        writer.join(timeout=1)
        assert writer.is_alive(), "T2 did not wait for the fact's new owner"
        t1.commit()
        writer.join(timeout=30)
        assert not writer.is_alive()
    edges = {(e[:3], e[3].lower, e[3].upper) for e in p.edges(Y2021)}
    assert edges == {(("Bob", "plan", "Pro"), Y2020, Y2022)}
    report = p.one("select memory.reconcile_edges(1000, %s)", (p.id,))
    assert (report["keys_healed"], report["objects_adopted"]) == (0, 0), report


def test_two_entities_taking_over_at_once_queue_instead_of_deadlocking(
    app_dsn: str, conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """upsert_entity of a name stored facts use takes the project lock exclusively
    before it writes, not shared and then exclusively: two of them started while a
    writer held the lock shared both wait for it, then run one after the other. (Each
    holding it shared and then waiting for the other to let go is a deadlock: one of
    them fails with 40P01.)"""
    p = Project(conn, org, "two takeovers")
    p.assert_facts(fact("Bob", "works_at", "Acme", Y2020), fact("Cy", "works_at", "Zenith", Y2020))
    errors: list[psycopg.Error] = []
    with psycopg.connect(app_dsn) as writer:
        writer.execute("select memory.use_org(%s)", (p.org,))
        # The project's write lock, shared, as a writer in its transaction holds it.
        writer.execute(
            "select pg_advisory_xact_lock_shared(hashtextextended('chronomem.project:' || %s, 0))",
            (str(p.id),),
        )

        def upsert(name: str) -> None:
            try:
                with psycopg.connect(app_dsn) as c:
                    c.execute("select memory.use_org(%s)", (p.org,))
                    c.execute("select memory.upsert_entity(%s, %s)", (p.id, name))
            except psycopg.Error as err:
                errors.append(err)

        threads = [threading.Thread(target=upsert, args=(n,)) for n in ("Acme", "Zenith")]
        for t in threads:
            t.start()
        time.sleep(0.5)  # both are waiting for the writer
        writer.commit()
        for t in threads:
            t.join(30)
    assert errors == []
    # Both took their facts over.
    assert {r[2:4] for r in p.facts(Y2021)} == {("Acme", None), ("Zenith", None)}
