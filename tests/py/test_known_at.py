"""Record time across committed transactions: what the store believed at an instant.

Every write here is its own committed transaction (as chronomem_app), so recorded_at,
invalid_at and range changes carry real, distinct instants; an instant "between" two
writes is now() of a transaction run after the first committed and before the second
started.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from org_scope import one_in, rows_in
from psycopg.types.range import Range

JAN = datetime(2024, 1, 1, tzinfo=UTC)

# (subject, predicate, object, (lower, upper))
Row = tuple[str, str, str, tuple[datetime | None, datetime | None]]


def day(n: int) -> datetime:
    return JAN + timedelta(days=n)


@dataclass
class Store:
    """The app role's view of one project; each method is one committed transaction."""

    conn: psycopg.Connection[Any]
    org: uuid.UUID
    project: uuid.UUID

    def _one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return one_in(self.conn, self.org, query, params)

    def _all(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return rows_in(self.conn, self.org, query, params)

    def now(self) -> datetime:
        """An instant after every transaction committed so far, before any later one."""
        instant: datetime = self._one("select now()")
        return instant

    def assert_facts(self, *facts: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._one(
            "select memory.assert_facts(%s, %s::jsonb)", (self.project, json.dumps(facts))
        )
        assert result["invalid"] == 0, result
        return result

    def fact_id(self, result: dict[str, Any], index: int = 0) -> uuid.UUID:
        return uuid.UUID(result["results"][index]["fact_id"])

    def retract(self, fact_id: uuid.UUID) -> dict[str, Any]:
        result: dict[str, Any] = self._one(
            "select memory.retract_fact(%s, %s, 'test')", (self.project, fact_id)
        )
        return result

    def facts_at(self, at: datetime, known_at: datetime | None = None) -> set[Row]:
        query = """
            select s.name, f.predicate, coalesce(o.name, f.object_literal), f.valid_range
              from memory.facts_at(%s, %s{known_at}) f
              join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
              left join memory.entities o
                on o.org_id = f.org_id and o.entity_id = f.object_entity_id
        """
        if known_at is None:  # the default: now
            rows = self._all(query.format(known_at=""), (self.project, at))
        else:
            rows = self._all(query.format(known_at=", %s"), (self.project, at, known_at))
        return {(s, p, o, _bounds(r)) for s, p, o, r in rows}

    def edges_at(self, at: datetime, known_at: datetime) -> int:
        n: int = self._one(
            "select count(*) from memory.edges_at(%s, %s, %s)", (self.project, at, known_at)
        )
        return n


def _bounds(rng: Range[datetime]) -> tuple[datetime | None, datetime | None]:
    assert rng.bounds == "[)", rng
    return rng.lower, rng.upper


@pytest.fixture
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app_dsn, autocommit=False) as c:
        yield c


@pytest.fixture
def org(conn: psycopg.Connection[Any]) -> uuid.UUID:
    with conn.transaction():
        row = conn.execute("select memory.create_org('known_at')").fetchone()
    assert row is not None
    org_id: uuid.UUID = row[0]
    return org_id


def new_store(conn: psycopg.Connection[Any], org: uuid.UUID, name: str) -> Store:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        row = conn.execute("select memory.create_project(%s, %s)", (org, name)).fetchone()
        assert row is not None
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (row[0],))
    return Store(conn, org, row[0])


@pytest.fixture
def store(conn: psycopg.Connection[Any], org: uuid.UUID) -> Store:
    return new_store(conn, org, "main")


def test_retracted_fact_is_still_seen_at_an_earlier_known_at(store: Store) -> None:
    before = store.now()
    tea = {
        "subject": "alice",
        "predicate": "likes",
        "object": "tea",
        "valid_from": day(0).isoformat(),
    }
    coffee = {**tea, "object": "coffee"}
    result = store.assert_facts(tea, coffee)
    t1 = store.now()
    assert store.retract(store.fact_id(result, 0))["status"] == "retracted"

    both = {("alice", "likes", "tea", (day(0), None)), ("alice", "likes", "coffee", (day(0), None))}
    # Believed at t1 (after the assertion, before the retraction): both facts.
    assert store.facts_at(day(30), t1) == both
    # Believed now: the retracted one is gone; coffee (never retracted) stays.
    only_coffee = {("alice", "likes", "coffee", (day(0), None))}
    assert store.facts_at(day(30), store.now()) == only_coffee
    assert store.facts_at(day(30)) == only_coffee  # known_at defaults to now
    # Before the assertion was recorded, neither was believed.
    assert store.facts_at(day(30), before) == set()
    # World time still applies at the earlier known_at.
    assert store.facts_at(day(-1), t1) == set()


def test_supersession_keeps_the_earlier_window_for_earlier_known_at(store: Store) -> None:
    gold = {
        "subject": "bob",
        "predicate": "plan",
        "object": "gold",
        "valid_from": day(0).isoformat(),
    }
    store.assert_facts(gold)
    t1 = store.now()
    store.assert_facts({**gold, "object": "silver", "valid_from": day(60).isoformat()})
    t2 = store.now()
    # Arrives last but holds in between: closes gold's window a second time.
    store.assert_facts({**gold, "object": "bronze", "valid_from": day(30).isoformat()})
    t3 = store.now()

    gold_open = ("bob", "plan", "gold", (day(0), None))
    # At t1 the store believed gold's window open: gold holds in January, February and
    # April, once (not also with the window believed later).
    assert store.facts_at(day(10), t1) == {gold_open}
    assert store.facts_at(day(45), t1) == {gold_open}
    assert store.facts_at(day(90), t1) == {gold_open}
    # At t2: silver from day 60 closed gold's window there.
    assert store.facts_at(day(45), t2) == {("bob", "plan", "gold", (day(0), day(60)))}
    assert store.facts_at(day(90), t2) == {("bob", "plan", "silver", (day(60), None))}
    # At t3 (and now): bronze took days 30..60 from gold.
    for known_at in (t3, None):
        assert store.facts_at(day(10), known_at) == {("bob", "plan", "gold", (day(0), day(30)))}
        assert store.facts_at(day(45), known_at) == {("bob", "plan", "bronze", (day(30), day(60)))}
        assert store.facts_at(day(90), known_at) == {("bob", "plan", "silver", (day(60), None))}
    # Before anything was recorded: nothing.
    assert store.facts_at(day(10), t1 - timedelta(hours=1)) == set()


def test_retraction_gives_back_the_window_it_closed_only_from_then_on(store: Store) -> None:
    gold = {
        "subject": "carol",
        "predicate": "plan",
        "object": "gold",
        "valid_from": day(0).isoformat(),
    }
    store.assert_facts(gold)
    silver = store.assert_facts({**gold, "object": "silver", "valid_from": day(30).isoformat()})
    t1 = store.now()
    store.retract(store.fact_id(silver))
    t2 = store.now()
    # Believed at t1: silver holds from day 30, gold had ended there.
    assert store.facts_at(day(40), t1) == {("carol", "plan", "silver", (day(30), None))}
    assert store.facts_at(day(10), t1) == {("carol", "plan", "gold", (day(0), day(30)))}
    # From the retraction on: silver never held, gold's window is open again.
    for known_at in (t2, None):
        assert store.facts_at(day(40), known_at) == {("carol", "plan", "gold", (day(0), None))}


def _seed(store: Store) -> dict[str, Any]:
    """A current fact, a superseded one, a retracted one and an entity-to-entity fact
    (with its edge), each in its own transaction; returns the instants between them."""
    marks: dict[str, Any] = {"start": store.now()}
    base = {"subject": "dora", "predicate": "plan", "valid_from": day(0).isoformat()}
    store.assert_facts({**base, "object": "gold"})
    marks["asserted"] = store.now()
    store.assert_facts({**base, "object": "silver", "valid_from": day(30).isoformat()})
    marks["superseded"] = store.now()
    result = store.assert_facts(
        {"subject": "dora", "predicate": "likes", "object": "tea", "valid_from": day(5).isoformat()}
    )
    marks["tea"] = store.fact_id(result)
    marks["tea asserted"] = store.now()
    store.retract(marks["tea"])
    marks["retracted"] = store.now()
    store.assert_facts(
        {
            "subject": "dora",
            "predicate": "works at",
            "object": "Acme",
            "object_type": "entity",
            "valid_from": day(1).isoformat(),
        }
    )
    marks["edge"] = store.now()
    return marks


def test_wipe_leaves_nothing_visible_at_any_instant(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    wiped = new_store(conn, org, "wiped")
    kept = new_store(conn, org, "kept")  # positive control: same history, not wiped
    marks = {name: _seed(s) for name, s in (("wiped", wiped), ("kept", kept))}
    before_wipe = wiped.now()

    counts = wiped._one("select memory.wipe(%s)", (wiped.project,))
    assert counts["scope"] == "project" and counts["facts"] == 4 and counts["edges"] >= 1

    ats = [
        day(-1),
        day(0),
        day(2),
        day(10),
        day(45),
        datetime.now(UTC),
        datetime.now(UTC) + timedelta(days=400),
    ]
    for name, s in (("wiped", wiped), ("kept", kept)):
        m = marks[name]
        knowns = [
            m["start"],
            m["asserted"],
            m["superseded"],
            m["tea asserted"],
            m["retracted"],
            m["edge"],
            before_wipe,
            s.now(),
        ]
        seen = {(at, k): s.facts_at(at, k) for at in ats for k in knowns}
        edges = {(at, k): s.edges_at(at, k) for at in ats for k in knowns}
        if name == "wiped":
            assert all(rows == set() for rows in seen.values()), seen
            assert all(n == 0 for n in edges.values()), edges
        else:
            # The control answers at those same instants.
            assert seen[(day(10), m["asserted"])] == {("dora", "plan", "gold", (day(0), None))}
            assert ("dora", "likes", "tea", (day(5), None)) in seen[(day(10), m["tea asserted"])]
            assert ("dora", "likes", "tea", (day(5), None)) not in seen[(day(10), before_wipe)]
            assert seen[(day(45), before_wipe)] >= {("dora", "plan", "silver", (day(30), None))}
            assert edges[(day(10), before_wipe)] == 1

    # The history readers and the tables have nothing of it either.
    assert wiped._all("select * from memory_internal.fact_versions(%s)", (wiped.project,)) == []
    assert (
        wiped._all(
            "select * from memory.fact_history(%s, %s)", (wiped.project, marks["wiped"]["tea"])
        )
        == []
    )
    assert wiped._all("select * from memory.subject_timeline(%s, 'dora')", (wiped.project,)) == []
    for table in ("fact_events", "tombstones", "edges", "entities"):
        assert (
            wiped._one(
                f"select count(*) from memory.{table} where project_id = %s", (wiped.project,)
            )
            == 0
        ), table
        assert (
            kept._one(f"select count(*) from memory.{table} where project_id = %s", (kept.project,))
            > 0
        ), table
    # Wipe writes no tombstones: the retracted claim may be asserted again...
    tea = {
        "subject": "dora",
        "predicate": "likes",
        "object": "tea",
        "valid_from": day(5).isoformat(),
    }
    assert wiped.assert_facts(tea)["inserted"] == 1
    # ...while in the project that was not wiped it stays refused.
    assert kept.assert_facts(tea)["refused"] == 1


@pytest.mark.parametrize(
    "order", ["wiped fact last in record time", "wiped fact first in record time"]
)
def test_wipe_leaves_no_window_it_imposed_at_earlier_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID, order: str
) -> None:
    """'As if never asserted': after a wipe, no fact that stays ends, at any earlier
    known_at, where a wiped fact began. silver (from day 0) and Gold (an entity, from
    day 20) are plans of one identity; wiping the subject Gold takes Gold's fact. Both
    arrival orders must read the same at a known_at between the two writes and the wipe:
    silver, open-ended, at day 10 and at day 30 (with Gold's start as the end of silver's
    window, day 20 stays readable). Control: before the wipe, Gold held at day 30."""
    s = new_store(conn, org, order)
    silver = {"subject": "alice", "predicate": "plan", "object": "silver",
              "valid_from": day(0).isoformat()}  # fmt: skip
    gold = {"subject": "alice", "predicate": "plan", "object": "Gold", "object_type": "entity",
            "valid_from": day(20).isoformat()}  # fmt: skip
    first, last = (gold, silver) if order.startswith("wiped fact first") else (silver, gold)
    s.assert_facts(first)
    s.assert_facts(last)
    between = s.now()
    assert ("alice", "plan", "Gold", (day(20), None)) in s.facts_at(day(30), between)
    s._one("select memory.wipe(%s, p_subject => 'Gold')", (s.project,))
    assert s.facts_at(day(10), between) == {("alice", "plan", "silver", (day(0), None))}
    assert s.facts_at(day(30), between) == {("alice", "plan", "silver", (day(0), None))}
    assert s.facts_at(day(30)) == {("alice", "plan", "silver", (day(0), None))}


def test_wipe_gives_a_cut_window_the_end_it_would_have_had(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """Without the wiped Gold (from day 20), silver (from day 0, asserted after Gold and
    bronze) would have ended where bronze (day 40) began, not never; tin, claimed only
    up to day 20 itself (another identity's twin of silver), keeps that end. The history
    of silver keeps no range that ends at day 20; tin's keeps its own."""
    s = new_store(conn, org, "cut")

    def plan(subject: str, obj: str, start: int, **extra: Any) -> dict[str, Any]:
        return {"subject": subject, "predicate": "plan", "object": obj,
                "valid_from": day(start).isoformat(), **extra}  # fmt: skip

    s.assert_facts(plan("alice", "Gold", 20, object_type="entity"), plan("alice", "bronze", 40))
    s.assert_facts(plan("bob", "Gold", 20, object_type="entity"))
    # carol as alice, then copper (day 10) closes her silver: that event's old range
    # was cut by Gold too.
    s.assert_facts(plan("carol", "Gold", 20, object_type="entity"), plan("carol", "bronze", 40))
    carol = s.fact_id(s.assert_facts(plan("carol", "silver", 0)))
    s.assert_facts(plan("carol", "copper", 10))
    silver = s.fact_id(s.assert_facts(plan("alice", "silver", 0)))
    tin = s.fact_id(s.assert_facts(plan("bob", "tin", 0, valid_to=day(20).isoformat())))
    between = s.now()
    assert s.facts_at(day(5), between) >= {
        ("alice", "plan", "silver", (day(0), day(20))),
        ("bob", "plan", "tin", (day(0), day(20))),
    }
    s._one("select memory.wipe(%s, p_subject => 'Gold')", (s.project,))
    want = {
        ("alice", "plan", "silver", (day(0), day(40))),
        ("bob", "plan", "tin", (day(0), day(20))),
        ("carol", "plan", "silver", (day(0), day(10))),
    }
    assert s.facts_at(day(5), between) == want
    assert s.facts_at(day(5)) == want
    assert ("alice", "plan", "silver", (day(0), day(40))) in s.facts_at(day(30), between)

    def ends(fact: uuid.UUID) -> set[datetime | None]:
        history = s._all(
            "select old_range, new_range from memory.fact_history(%s, %s) where fact_id = %s",
            (s.project, fact, fact),
        )
        return {r.upper for row in history for r in row if r is not None}

    assert day(40) in ends(silver) and day(20) not in ends(silver)
    assert ends(tin) == {day(20)}  # its own claimed end, logged as it was
    assert ends(carol) == {day(10), day(40)}  # closed by copper, from [day 0, day 40)


def test_subject_wipe_removes_the_subject_at_every_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    store = new_store(conn, org, "subject wipe")
    store.assert_facts(
        {"subject": "eve", "predicate": "plan", "object": "gold", "valid_from": day(0).isoformat()},
        {
            "subject": "frank",
            "predicate": "plan",
            "object": "gold",
            "valid_from": day(0).isoformat(),
        },
        {
            "subject": "frank",
            "predicate": "knows",
            "object": "eve",
            "object_type": "entity",
            "valid_from": day(0).isoformat(),
        },
        {
            "subject": "frank",
            "predicate": "knows",
            "object": "gus",
            "object_type": "entity",
            "valid_from": day(0).isoformat(),
        },
    )
    t1 = store.now()
    store.assert_facts(
        {
            "subject": "eve",
            "predicate": "plan",
            "object": "silver",
            "valid_from": day(30).isoformat(),
        }
    )
    t2 = store.now()
    store._one("select memory.wipe(%s, p_subject => 'Eve')", (store.project,))

    # Facts about eve, and facts naming eve as their object, are gone at every known_at;
    # frank's other facts (and his edge to gus) remain.
    frank = {("frank", "plan", "gold", (day(0), None)), ("frank", "knows", "gus", (day(0), None))}
    for known_at in (t1, t2, None):
        for at in (day(10), day(40)):
            assert store.facts_at(at, known_at) == frank, (at, known_at)
        assert store.edges_at(day(10), known_at or store.now()) == 1


def test_declaring_many_gives_back_the_windows_other_objects_ended(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """Under 'one', gold's window ended where silver began; once 'plan' is declared
    'many', gold runs to its own (open) end again: the state the same facts give in a
    project that declared 'many' first. Reads at an earlier known_at keep the old
    window, and the edge follows the fact."""

    def plan(obj: str, start: int) -> dict[str, Any]:
        return {"subject": "dana", "predicate": "plan", "object": obj, "object_type": "entity",
                "valid_from": day(start).isoformat()}  # fmt: skip

    store = new_store(conn, org, "redeclared")  # 'plan' declared one
    store.assert_facts(plan("gold", 0), plan("silver", 10))
    t1 = store.now()
    # Positive control: under 'one', silver ended gold's window.
    assert store.facts_at(day(20)) == {("dana", "plan", "silver", (day(10), None))}
    assert store.edges_at(day(20), t1) == 1

    assert store._one("select memory.declare_predicate(%s, 'plan', 'many')", (store.project,))
    both = {("dana", "plan", "gold", (day(0), None)), ("dana", "plan", "silver", (day(10), None))}
    assert store.facts_at(day(20)) == both
    assert store.edges_at(day(20), store.now()) == 2
    # As believed before the declaration: the windows (and edges) as they were.
    assert store.facts_at(day(20), t1) == {("dana", "plan", "silver", (day(10), None))}
    assert store.edges_at(day(20), t1) == 1
    restored = store._all(
        "select event_type from memory.fact_events where project_id = %s "
        "and event_type = 'restored'",
        (store.project,),
    )
    assert len(restored) == 1

    # The same facts where 'plan' was 'many' from the start.
    first = new_store(conn, org, "many from the start")
    first._one("select memory.declare_predicate(%s, 'plan', 'many')", (first.project,))
    first.assert_facts(plan("gold", 0), plan("silver", 10))
    for at in (day(5), day(20)):
        assert first.facts_at(at) == store.facts_at(at)


# ---------------------------------------------------------------- the default instants


def _plan_fact(subject: str, obj: str, start: int) -> dict[str, Any]:
    return {
        "subject": subject,
        "predicate": "plan",
        "object": obj,
        "valid_from": day(start).isoformat(),
        "object_type": "entity",
    }


def test_null_instants_mean_now_as_the_defaults_do(store: Store) -> None:
    """facts_at, readable_facts_at and edges_at read NULL at / known_at as now, like
    an omitted argument; an explicit earlier instant still answers for then."""
    store.assert_facts(_plan_fact("hana", "gold", -10))
    store.assert_facts(_plan_fact("hana", "silver", -1))
    reads = {
        "facts_at": "select array_agg(f.object_key order by f.object_key)"
        " from memory.facts_at(%s{args}) f",
        "readable_facts_at": "select array_agg(r.object order by r.object)"
        " from memory.readable_facts_at(%s{args}) r",
        "edges_at": "select array_agg(o.normalized_name order by o.normalized_name)"
        " from memory.edges_at(%s{args}) e join memory.entities o"
        " on o.org_id = e.org_id and o.entity_id = e.target_id",
    }
    for name, query in reads.items():
        omitted = store._one(query.format(args=""), (store.project,))
        nulls = store._one(query.format(args=", null, null"), (store.project,))
        null_known = store._one(query.format(args=", now(), null"), (store.project,))
        explicit = store._one(
            query.format(args=", now(), memory_internal.txn_instant()"), (store.project,)
        )
        assert omitted == nulls == null_known == explicit == ["silver"], name
        # Positive control: an instant before the supersession sees the old object.
        earlier = store._one(query.format(args=", %s, null"), (store.project, day(-5)))
        assert earlier == ["gold"], name


def test_default_known_at_sees_the_transactions_own_writes_stamped_after_now(
    store: Store, app_dsn: str
) -> None:
    """A writer that waited for a lock while another committed stamps its rows later
    than its now() (begin_write); its own reads with the default known_at see them."""
    store.assert_facts(_plan_fact("ivan", "gold", 0))
    with psycopg.connect(app_dsn, autocommit=False) as late:
        # Its transaction (and so its now()) starts here.
        late.execute("select memory.use_org(%s)", (store.org,))
        # Another transaction, committed after `late` started, supersedes ivan's plan.
        store.assert_facts(_plan_fact("ivan", "silver", 1))
        # `late` supersedes it again: its floor is the silver row's stamp, after its now().
        late.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (store.project, json.dumps([_plan_fact("ivan", "bronze", 2)])),
        )
        query = "select array_agg(f.object_key) from memory.facts_at(%s, %s{known_at}) f"
        stamp = late.execute("select memory_internal.txn_instant() > now()").fetchone()
        assert stamp == (True,), "the write was not stamped after now(): no test"
        for known_at in ("", ", null"):
            row = late.execute(query.format(known_at=known_at), (store.project, day(5)))
            assert row.fetchone() == (["bronze"],), known_at
        # Positive control: at known_at = its now(), neither later write was known yet.
        row = late.execute(query.format(known_at=", now()"), (store.project, day(5)))
        assert row.fetchone() == (["gold"],)
        late.rollback()


def test_default_known_at_is_computed_once_per_query_not_per_row(store: Store) -> None:
    """The record-time default is a subquery run once (an InitPlan), not the
    write-instant setting read again for every row the scan filters."""
    store.assert_facts(_plan_fact("jon", "gold", 0))
    for read in ("memory.facts_at(%s)", "memory.edges_at(%s)", "memory.facts_at(%s, null, null)"):
        query = f"explain (verbose, costs off) select count(*) from {read} x"
        plan = "\n".join(r[0] for r in store._all(query, (store.project,)))
        filters = [ln for ln in plan.splitlines() if "Filter:" in ln or "Index Cond:" in ln]
        assert filters, plan
        assert not [ln for ln in filters if "write_instant" in ln], plan
        # Positive control: the setting is still read, once, by the InitPlan.
        assert "InitPlan" in plan and "write_instant" in plan, plan
