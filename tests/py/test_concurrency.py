"""Many writers at once, as the app role: no overlap, no lost assertion, same end state.

Each writer is a thread with its own psycopg connection logged in as chronomem_app
(owns nothing, RLS forced). Every transaction scopes itself with memory.use_org and
then calls memory.assert_facts, exactly as the API and the worker do.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.range import Range

WRITERS = 8
BATCHES_PER_WRITER = 25
SUBJECTS = ("ada", "brook", "cyd", "dane")
PLANS = ("free", "basic", "pro", "team", "enterprise")
BASE = datetime(2020, 1, 1, tzinfo=UTC)

Fact = dict[str, Any]
# (subject, predicate, object_key, content, (lower, upper)) as facts_at reports it.
Row = tuple[str, str, str, str, tuple[datetime | None, datetime | None]]


def _connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=False)
    # A stuck lock must fail the test, not hang it.
    conn.execute("set statement_timeout = '30s'")
    conn.commit()
    return conn


def _assert_batch(
    conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID, facts: Sequence[Fact]
) -> dict[str, Any]:
    """One transaction: scope to the org, assert the batch, commit."""
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        row = conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, json.dumps(list(facts)))
        ).fetchone()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


@dataclass(frozen=True)
class Tenant:
    org: uuid.UUID
    project: uuid.UUID


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _new_project(
    conn: psycopg.Connection[Any], org: uuid.UUID | None = None, subjects: Sequence[str] = ()
) -> Tenant:
    """A project with 'plan' declared cardinality one and the given entities."""
    with conn.transaction():
        if org is None:
            org = _scalar(conn, "select memory.create_org('concurrency')")
        conn.execute("select memory.use_org(%s)", (org,))
        project = _scalar(conn, "select memory.create_project(%s, %s)", (org, f"p-{uuid.uuid4()}"))
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (project,))
        for subject in subjects:
            conn.execute("select memory.upsert_entity(%s, %s)", (project, subject))
    assert org is not None
    return Tenant(org, project)


def _state(
    conn: psycopg.Connection[Any], tenant: Tenant, instants: Sequence[datetime]
) -> dict[datetime, set[Row]]:
    """What facts_at answers at each instant (known_at now), without fact ids."""
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        rows = conn.execute(
            """
            select i.at, s.name, f.predicate, f.object_key, f.content, f.valid_range
              from unnest(%s::timestamptz[]) i(at)
             cross join lateral memory.facts_at(%s, i.at) f
              join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
            """,
            (list(instants), tenant.project),
        ).fetchall()
    out: dict[datetime, set[Row]] = {at: set() for at in instants}
    for at, subject, predicate, obj, content, rng in rows:
        out[at].add((subject, predicate, obj, content, _bounds(rng)))
    return out


def _timeline(conn: psycopg.Connection[Any], tenant: Tenant) -> set[Row]:
    """Every current (not retracted) version with the window it holds, without fact ids."""
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        rows = conn.execute(
            """
            select s.name, v.predicate, v.object_key, v.content, v.valid_range
              from memory_internal.fact_versions(%s) v
              join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id
             where v.invalid_at is null
            """,
            (tenant.project,),
        ).fetchall()
    return {(s, p, o, c, _bounds(r)) for s, p, o, c, r in rows}


def _expected_timeline(unique: Sequence[Fact]) -> set[Row]:
    """World-time order per subject: each plan holds until the next one starts."""
    out: set[Row] = set()
    for subject in SUBJECTS:
        mine = sorted(
            (datetime.fromisoformat(f["valid_from"]), f)
            for f in unique
            if f["subject"].lower() == subject
        )
        ends: list[datetime | None] = [start for start, _ in mine[1:]]
        for (start, f), end in zip(mine, [*ends, None], strict=True):
            plan = f["object"].strip(" !").lower()
            out.add((subject, "plan", plan, f["content"], (start, end)))
    return out


def _bounds(rng: Range[datetime]) -> tuple[datetime | None, datetime | None]:
    assert rng.bounds == "[)", rng
    return rng.lower, rng.upper


def _workload(rng: random.Random) -> tuple[list[list[list[Fact]]], list[Fact]]:
    """8 writers x 25 batches of conflicting 'plan' facts about 4 subjects.

    Every distinct fact has its own valid_from instant (world-time order decides who
    wins, so the end state does not depend on commit order) and its own content (so a
    claim is never restated at another instant: see test_restated_claims_converge_too
    in test_state_machine_property.py for why that is order-dependent today). A quarter
    of the submissions repeat an earlier fact verbatim: an idempotent retry, possibly
    racing the original from another writer.
    """
    total = WRITERS * BATCHES_PER_WRITER * 4
    n_unique = total * 3 // 4
    minutes = rng.sample(range(60 * 24 * 365 * 3), n_unique)
    unique = [
        {
            "subject": rng.choice(SUBJECTS),
            "predicate": "plan",
            "object": rng.choice(PLANS),
            "content": f"claim #{k}",
            "valid_from": (BASE + timedelta(minutes=m)).isoformat(),
        }
        for k, m in enumerate(minutes)
    ]
    # Spelling variants of the same claim normalize to the same identity and object.
    for fact in unique[::7]:
        fact["subject"] = fact["subject"].upper()
        fact["object"] = f"  {fact['object'].title()}!"
    submissions = unique + [dict(rng.choice(unique)) for _ in range(total - n_unique)]
    rng.shuffle(submissions)
    batches = [submissions[i : i + 4] for i in range(0, total, 4)]
    per_writer = [batches[w::WRITERS] for w in range(WRITERS)]
    return per_writer, unique


def _run_writers(
    app_dsn: str,
    n: int,
    work: Callable[[int, psycopg.Connection[Any]], Any],
    barriers: Sequence[threading.Barrier] = (),
) -> list[Any]:
    """Run work(i, conn) in n threads, each with its own connection, started together.

    Returns the results in writer order; if any writer raised, raises the first real error
    (a writer that failed breaks the barriers the others wait on)."""
    conns = [_connect(app_dsn) for _ in range(n)]
    start = threading.Barrier(n)

    def run(i: int) -> Any:
        try:
            start.wait(timeout=30)
            return work(i, conns[i])
        except BaseException:
            for barrier in (start, *barriers):
                barrier.abort()
            raise

    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            futures = [pool.submit(run, i) for i in range(n)]
            errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise next(
                (e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0]
            )
        return [f.result() for f in futures]
    finally:
        for conn in conns:
            conn.close()


@pytest.fixture
def app(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    conn = _connect(app_dsn)
    yield conn
    conn.close()


def test_concurrent_conflicting_writers(
    app_dsn: str, admin_dsn: str, app: psycopg.Connection[Any]
) -> None:
    rng = random.Random(20240601)
    per_writer, unique = _workload(rng)
    submitted = sum(len(b) for w in per_writer for b in w)
    # Subjects exist up front: this test is about identities, the one below about
    # first inserts.
    tenant = _new_project(app, subjects=SUBJECTS)

    def writer(i: int, conn: psycopg.Connection[Any]) -> list[tuple[list[Fact], dict[str, Any]]]:
        out = []
        for batch in per_writer[i]:
            out.append((batch, _assert_batch(conn, tenant.org, tenant.project, batch)))
        return out

    # No error of any kind (exclusion violation, deadlock, serialization) reaches a caller:
    # _run_writers re-raises the first one.
    outcomes = [o for writer_out in _run_writers(app_dsn, WRITERS, writer) for o in writer_out]

    # No assertion lost: every submitted fact has exactly one outcome.
    totals = Counter[str]()
    for batch, result in outcomes:
        for key in ("inserted", "skipped", "refused", "invalid", "superseded"):
            totals[key] += result[key]
        assert [r["index"] for r in result["results"]] == list(range(len(batch)))
        assert Counter(r["status"] for r in result["results"]) == Counter(
            {k: result[k] for k in ("inserted", "skipped", "refused", "invalid") if result[k]}
        )
    assert (
        totals["inserted"] + totals["skipped"] + totals["refused"] + totals["invalid"] == submitted
    )
    # Each distinct claim is stored once; every verbatim repeat is recognized.
    assert totals["inserted"] == len(unique)
    assert totals["skipped"] == submitted - len(unique)
    assert totals["refused"] == totals["invalid"] == 0
    assert totals["superseded"] > 0  # positive control: the writers did conflict

    with app.transaction():
        app.execute("select memory.use_org(%s)", (tenant.org,))
        versions = {
            r[0]: r[1:]
            for r in app.execute(
                "select fact_id, content, valid_from from memory_internal.fact_versions(%s)",
                (tenant.project,),
            )
        }
    assert len(versions) == len(unique)
    by_content = {f["content"]: f for f in unique}
    for batch, result in outcomes:
        for fact, res in zip(batch, result["results"], strict=True):
            # Every reported fact id exists, and is the fact that was asserted.
            content, valid_from = versions[uuid.UUID(res["fact_id"])]
            assert content == fact["content"]
            assert valid_from == datetime.fromisoformat(by_content[content]["valid_from"])

    # Invariant 1, checked on the table itself (superuser, no RLS): no two current
    # versions of one identity overlap in world time.
    with psycopg.connect(admin_dsn) as admin:
        pairs = """
            select count(*) from memory.facts a
              join memory.facts b
                on b.org_id = a.org_id and b.project_id = a.project_id
               and b.subject_id = a.subject_id and b.predicate = a.predicate
               and b.identity_object = a.identity_object and b.fact_id < a.fact_id
             where a.project_id = %s and a.invalid_at is null and b.invalid_at is null
               and {overlap}
        """
        overlaps = admin.execute(
            pairs.format(overlap="a.valid_range && b.valid_range"), (tenant.project,)
        ).fetchone()
        # Positive control: the same join does pair the versions of an identity, and
        # their claimed (unclipped) windows do overlap.
        claimed = admin.execute(
            pairs.format(
                overlap="tstzrange(a.valid_from, a.asserted_until)"
                " && tstzrange(b.valid_from, b.asserted_until)"
            ),
            (tenant.project,),
        ).fetchone()
    assert overlaps == (0,)
    assert claimed is not None and claimed[0] > 0

    # Exactly one current fact per identity at any instant: at now, and at instants
    # sampled across (and at the edges of) the written windows.
    starts = sorted(datetime.fromisoformat(f["valid_from"]) for f in unique)
    first_start = {
        s: min(datetime.fromisoformat(f["valid_from"]) for f in unique if f["subject"].lower() == s)
        for s in SUBJECTS
    }
    now = datetime.now(UTC)
    instants = [
        now,
        starts[0] - timedelta(days=1),
        *starts[::10],
        *(t - timedelta(microseconds=1) for t in starts[5::20]),
        *(starts[0] + (starts[-1] - starts[0]) * rng.random() for _ in range(40)),
    ]
    state = _state(app, tenant, instants)
    for at, rows in state.items():
        per_identity = Counter((subject, predicate) for subject, predicate, *_ in rows)
        expected = {(s, "plan") for s in SUBJECTS if first_start[s] <= at}
        assert set(per_identity) == expected, at
        assert all(n == 1 for n in per_identity.values()), (at, rows)

    # The versions and their windows are what world-time order gives...
    timeline = _timeline(app, tenant)
    assert timeline == _expected_timeline(unique)
    # ...and the same as replaying the same submissions serially, in other orders.
    for order in ("shuffled", "reversed"):
        replay = _new_project(app, tenant.org, subjects=SUBJECTS)
        batches = [b for w in per_writer for b in w]
        flat = [f for b in batches for f in b]
        if order == "shuffled":
            random.Random(7).shuffle(flat)
        else:
            flat.reverse()
        for i in range(0, len(flat), 40):
            _assert_batch(app, replay.org, replay.project, flat[i : i + 40])
        assert _timeline(app, replay) == timeline, f"{order} replay differs"
        assert _state(app, replay, instants) == state, f"{order} replay differs"


@pytest.mark.parametrize("entities", ["new", "known"])
def test_concurrent_first_inserts_of_one_new_triple(
    app_dsn: str, app: psycopg.Connection[Any], entities: str
) -> None:
    """8 connections assert the same never-seen triple at the same moment, each with a
    triple of its own: the shared one is stored once, the others are told it exists.

    With new entities the writers also race to create subject and object; with known
    entities nothing but the identity lock orders them."""
    rounds = 6
    subjects = [f"newcomer {r}" for r in range(rounds)]
    objects = [f"Startup {r}" for r in range(rounds)]
    tenant = _new_project(app, subjects=subjects + objects if entities == "known" else ())
    valid_from = "2024-05-01T12:00:00+00:00"
    in_step = threading.Barrier(WRITERS)

    def shared(r: int) -> Fact:
        return {
            "subject": subjects[r],
            "predicate": "works at",
            "object": objects[r],
            "object_type": "entity",
            "valid_from": valid_from,
            "content": f"{subjects[r]} works at {objects[r]}",
        }

    def writer(i: int, conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
        results = []
        for r in range(rounds):
            own = {
                "subject": f"writer {i} round {r}",
                "predicate": "works at",
                "object": objects[r],
                "object_type": "entity",
                "valid_from": valid_from,
            }
            in_step.wait(timeout=30)
            results.append(_assert_batch(conn, tenant.org, tenant.project, [shared(r), own]))
        return results

    per_writer = _run_writers(app_dsn, WRITERS, writer, [in_step])

    with app.transaction():
        app.execute("select memory.use_org(%s)", (tenant.org,))
        stored = app.execute(
            "select v.content, v.fact_id from memory_internal.fact_versions(%s) v",
            (tenant.project,),
        ).fetchall()
        edges = app.execute(
            "select count(*) from memory.edges_at(%s, %s::timestamptz + interval '1 day')",
            (tenant.project, valid_from),
        ).fetchone()
    ids_by_content: dict[str, list[uuid.UUID]] = defaultdict(list)
    for content, fact_id in stored:
        ids_by_content[content].append(fact_id)

    for r in range(rounds):
        outcomes = [results[r]["results"][0] for results in per_writer]
        statuses = Counter(o["status"] for o in outcomes)
        assert statuses == Counter({"inserted": 1, "skipped": WRITERS - 1}), (r, outcomes)
        assert len(ids_by_content[shared(r)["content"]]) == 1
        # All callers were told about the one stored fact.
        assert {o["fact_id"] for o in outcomes} == {str(ids_by_content[shared(r)["content"]][0])}
        # Positive control: each writer's own triple, asserted in the same
        # transactions, was inserted every time.
        assert all(results[r]["results"][1]["status"] == "inserted" for results in per_writer)
    assert len(stored) == rounds * (1 + WRITERS)
    # One edge per stored entity-to-entity fact.
    assert edges == (rounds * (1 + WRITERS),)


def test_concurrent_batches_creating_the_same_entities_in_opposite_orders(
    app_dsn: str, app: psycopg.Connection[Any]
) -> None:
    """Batches that name the same brand-new entities in different orders must not
    deadlock: entity rows are created in one global order whatever the batch order."""
    tenant = _new_project(app)
    rounds = 8
    in_step = threading.Barrier(WRITERS)

    def writer(i: int, conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
        results = []
        for r in range(rounds):
            names = [f"person {r}-{k}" for k in range(4)]
            if i % 2:
                names.reverse()
            facts = [
                {
                    "subject": n,
                    "predicate": "likes",
                    "object": "tea",
                    "object_type": "literal",
                    "content": f"{n} likes tea (writer {i})",
                }
                for n in names
            ]
            in_step.wait(timeout=30)
            results.append(_assert_batch(conn, tenant.org, tenant.project, facts))
        return results

    per_writer = _run_writers(app_dsn, WRITERS, writer, [in_step])

    assert all(res["inserted"] == 4 for results in per_writer for res in results)
    with app.transaction():
        app.execute("select memory.use_org(%s)", (tenant.org,))
        entities = _scalar(
            app, "select count(*) from memory.entities where project_id = %s", (tenant.project,)
        )
        facts = _scalar(
            app, "select count(*) from memory_internal.fact_versions(%s)", (tenant.project,)
        )
    # One entity per name, however many writers raced to create it.
    assert entities == rounds * 4
    assert facts == rounds * 4 * WRITERS


def test_writer_that_started_before_a_concurrent_commit_can_still_assert(
    app_dsn: str, app: psycopg.Connection[Any]
) -> None:
    """The deterministic form of two extraction writers racing on one claim: T1 begins,
    T2 asserts 'alice knows bob' and commits, then T1 asserts it (other wording, same
    identity, default valid_from). T1 must succeed; one edge alice->bob holds."""
    tenant = _new_project(app, subjects=("alice", "bob"))

    def fact(content: str) -> Fact:
        return {
            "subject": "alice",
            "predicate": "knows",
            "object": "bob",
            "object_type": "entity",
            "content": content,
        }

    def edges_now(conn: psycopg.Connection[Any]) -> int:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            n: int = _scalar(conn, "select count(*) from memory.edges_at(%s)", (tenant.project,))
        return n

    # Positive control: in sequence (T1 begins after T2 committed) both go through.
    _assert_batch(app, tenant.org, tenant.project, [fact("alice knows bob")])
    _assert_batch(app, tenant.org, tenant.project, [fact("alice is a friend of bob")])
    assert edges_now(app) == 1

    later = _new_project(app, tenant.org, subjects=("alice", "bob"))
    t1 = _connect(app_dsn)
    try:
        with t1.transaction():
            t1.execute("select memory.use_org(%s)", (later.org,))  # T1's now() is fixed here
            _assert_batch(app, later.org, later.project, [fact("alice knows bob")])  # T2
            result = _scalar(
                t1,
                "select memory.assert_facts(%s, %s::jsonb)",
                (later.project, json.dumps([fact("alice is a friend of bob")])),
            )
        assert result["inserted"] == 1
        assert edges_now(app) == 1
    finally:
        t1.close()


# Every way a fact changes, at once: assertions (literal and entity objects, open and
# closed windows, tombstone overrides), retractions, closings, subject wipes, entities
# named, merged and split, by 8 connections over a few identities.
MIXED_OPS = 40
PEOPLE = ("ada", "brook", "cyd", "dane")
COMPANIES = ("acme", "globex", "initech")
# A caller may lose a race for a fact another connection retracted or wiped first:
# these are the answers it may get, and nothing else (no exclusion violation, no
# deadlock, no check violation).
LOST_RACES = {"P0002": "not found (wiped)", "22023": "retracted (closing it)"}


def _mixed_facts(rng: random.Random, minutes: list[int]) -> list[Fact]:
    facts: list[Fact] = []
    for _ in range(rng.randint(1, 3)):
        start = BASE + timedelta(minutes=minutes.pop())
        subject = rng.choice(PEOPLE)
        kind = rng.random()
        if kind < 0.4:
            fact: Fact = {"subject": subject, "predicate": "plan", "object": rng.choice(PLANS)}
        elif kind < 0.75:
            fact = {"subject": subject, "predicate": "works at",
                    "object": rng.choice(COMPANIES), "object_type": "entity"}  # fmt: skip
        else:
            other = rng.choice([p for p in PEOPLE if p != subject])
            fact = {"subject": subject, "predicate": "knows", "object": other,
                    "object_type": "entity"}  # fmt: skip
        fact["valid_from"] = start.isoformat()
        if rng.random() < 0.2:
            fact["valid_to"] = (start + timedelta(days=rng.randint(1, 400))).isoformat()
        facts.append(fact)
    return facts


def _pick_fact(
    conn: psycopg.Connection[Any], tenant: Tenant, rng: random.Random
) -> uuid.UUID | None:
    """A version not retracted (current in record time), chosen at random."""
    ids = [
        r[0]
        for r in conn.execute(
            "select v.fact_id from memory_internal.fact_versions(%s) v "
            "where v.invalid_at is null order by v.fact_id",
            (tenant.project,),
        ).fetchall()
    ]
    return rng.choice(ids) if ids else None


def test_concurrent_assertions_retractions_closings_and_wipes(
    app_dsn: str, app: psycopg.Connection[Any]
) -> None:
    """8 connections mix every write there is over a few identities. Whatever the
    interleaving, every call either answers or loses a documented race, and the end
    state is one the writers could have produced one at a time: each identity's current
    versions laid out in world-time order, edges equal to their facts' windows, one
    'asserted' event per version, record time that never goes back within an identity,
    the counters equal to the rows, no live tombstone of a fact that still holds."""
    tenant = _new_project(app, subjects=PEOPLE + COMPANIES)
    with app.transaction():
        app.execute("select memory.use_org(%s)", (tenant.org,))
        app.execute("select memory.declare_predicate(%s, 'works at', 'one')", (tenant.project,))
        app.execute("select memory.declare_predicate(%s, 'knows', 'many')", (tenant.project,))
    # Distinct valid_from instants for every fact any writer asserts.
    pool = random.Random(7).sample(range(60 * 24 * 365 * 3), WRITERS * MIXED_OPS * 3)
    kept: list[str] = []  # entities that took another's facts over (merge_entities)

    def writer(i: int, conn: psycopg.Connection[Any]) -> Counter[str]:
        rng = random.Random(1000 + i)
        minutes = pool[i::WRITERS]
        done = Counter[str]()
        for _ in range(MIXED_OPS):
            op = rng.random()
            try:
                with conn.transaction():
                    conn.execute("select memory.use_org(%s)", (tenant.org,))
                    if op < 0.55:
                        facts = _mixed_facts(rng, minutes)
                        result = _scalar(
                            conn,
                            "select memory.assert_facts(%s, %s::jsonb, "
                            "p_override_tombstones => %s)",
                            (tenant.project, json.dumps(facts), rng.random() < 0.3),
                        )
                        assert [r["index"] for r in result["results"]] == list(range(len(facts)))
                        done.update(r["status"] for r in result["results"])
                    elif op < 0.84:
                        fact_id = _pick_fact(conn, tenant, rng)
                        if fact_id is None:
                            continue
                        if op < 0.77:
                            result = _scalar(
                                conn, "select memory.retract_fact(%s, %s, 'mixed')",
                                (tenant.project, fact_id),
                            )  # fmt: skip
                        else:
                            at = BASE + timedelta(minutes=rng.randrange(60 * 24 * 365 * 3))
                            result = _scalar(
                                conn, "select memory.close_fact(%s, %s, %s)",
                                (tenant.project, fact_id, at),
                            )  # fmt: skip
                        done[result["status"]] += 1
                    elif op < 0.87:
                        # Redeclared while others write: 'many' gives back the windows
                        # other plans ended; 'one' is refused while two plans overlap.
                        cardinality = rng.choice(("one", "many"))
                        try:
                            with conn.transaction():
                                conn.execute(
                                    "select memory.declare_predicate(%s, 'plan', %s)",
                                    (tenant.project, cardinality),
                                )
                            done[f"declared {cardinality}"] += 1
                        except psycopg.errors.ExclusionViolation:
                            assert cardinality == "one"
                            done["refused: plans overlap"] += 1
                    elif op < 0.89:
                        # Plans are written as plain names: an entity of that name, made
                        # by upsert_entity or by a batch that names it as a subject,
                        # takes the plan facts over (and their edges) while others write.
                        name = rng.choice(PLANS)
                        if rng.random() < 0.5:
                            conn.execute(
                                "select memory.upsert_entity(%s, %s)", (tenant.project, name)
                            )
                        else:
                            facts = [{"subject": name, "predicate": "tier", "object": "paid"}]
                            conn.execute(
                                "select memory.assert_facts(%s, %s::jsonb)",
                                (tenant.project, json.dumps(facts)),
                            )
                        done["named"] += 1
                    elif op < 0.91:
                        # Two people or two companies found to be one, while others write
                        # about both: later writes naming either mean the kept one.
                        # (Not ada, whom wipes spare: a wipe of an alias of hers would not.)
                        keep, absorb = rng.sample(rng.choice((PEOPLE[1:], COMPANIES)), 2)
                        report = _scalar(
                            conn, "select memory.merge_entities(%s, %s, %s)",
                            (tenant.project, keep, absorb),
                        )  # fmt: skip
                        done["merged" if report["merged"] else "already one"] += 1
                        if report["merged"]:
                            kept.append(report["entity_id"])
                    elif op < 0.94:
                        # And split apart again: a merge's (or a name's) alias becomes an
                        # entity of its own, with the facts written with it.
                        aliases = [
                            r[0]
                            for r in conn.execute(
                                "select alias from memory.entity_aliases where project_id = %s "
                                "order by alias",
                                (tenant.project,),
                            ).fetchall()
                        ]
                        if not aliases:
                            continue
                        report = _scalar(
                            conn, "select memory.split_entity(%s, %s)",
                            (tenant.project, rng.choice(aliases)),
                        )  # fmt: skip
                        done["split"] += 1
                        kept.extend((report["entity_id"], report["split_from"]))
                    elif op < 0.97:
                        # An operator's drift check, among the writers: what it reads
                        # (facts and edges in one snapshot) is always in step.
                        healed = _scalar(
                            conn, "select memory.reconcile_edges(1000, %s)", (tenant.project,)
                        )
                        done["reconciled"] += 1
                        done["healed"] += healed["keys_healed"]
                    else:
                        conn.execute(
                            "select memory.wipe(%s, p_subject => %s)",
                            (tenant.project, rng.choice(PEOPLE[1:])),
                        )
                        done["wiped"] += 1
            except psycopg.Error as e:
                if e.sqlstate not in LOST_RACES:
                    raise
                done[LOST_RACES[e.sqlstate]] += 1
        return done

    totals = sum(_run_writers(app_dsn, WRITERS, writer), Counter[str]())
    # Positive controls: every kind of write happened, and they did collide.
    for status in ("inserted", "retracted", "expired", "wiped", "reconciled", "named", "merged",
                   "split"):  # fmt: skip
        assert totals[status] > 0, totals
    assert totals["healed"] == 0, totals
    answers = {"inserted", "skipped", "refused", "retracted", "already_retracted", "expired",
               "unchanged", "wiped", "reconciled", "healed", "declared one", "declared many",
               "refused: plans overlap", "named", "merged", "already one", "split",
               *LOST_RACES.values()}  # fmt: skip
    assert set(totals) <= answers, totals

    with app.transaction():
        app.execute("select memory.use_org(%s)", (tenant.org,))
        p = tenant.project
        # Each identity's current versions hold [valid_from, the earlier of their claimed
        # end and the next version's start): what restitch lays out, as one writer would.
        misplaced = app.execute(
            """
            select v.fact_id, v.valid_range, v.want
              from (select x.fact_id, x.valid_range,
                           tstzrange(x.valid_from,
                                     case when x.next_from is null then x.asserted_until
                                          when x.asserted_until is null then x.next_from
                                          else least(x.asserted_until, x.next_from) end) as want
                      from (select f.*, lead(f.valid_from) over (
                                     partition by f.subject_id, f.predicate, f.identity_object
                                     order by f.valid_from, f.fact_seq) as next_from
                              from memory_internal.fact_versions(%s) f
                             where f.invalid_at is null) x) v
             where v.valid_range <> v.want
            """,
            (p,),
        ).fetchall()
        versions = _scalar(app, "select count(*) from memory_internal.fact_versions(%s)", (p,))
        reshaped = _scalar(
            app,
            "select count(*) from memory.fact_events e where e.project_id = %s "
            "and e.event_type in ('superseded', 'restored')",
            (p,),
        )
        asserted_events = app.execute(
            """
            select v.fact_id, count(e.event_id) filter (where e.event_type = 'asserted')
              from memory_internal.fact_versions(%s) v
              left join memory.fact_events e on e.org_id = v.org_id and e.fact_id = v.fact_id
             group by v.fact_id
            having count(e.event_id) filter (where e.event_type = 'asserted') <> 1
            """,
            (p,),
        ).fetchall()
        counted = _scalar(
            app,
            "select coalesce(sum(c.value) filter (where c.metric = 'facts_inserted'), 0) "
            "- coalesce(sum(c.value) filter (where c.metric = 'facts_purged'), 0) "
            "from memory.counters(%s) c",
            (p,),
        )
        stale_tombstones = _scalar(
            app,
            "select count(*) from memory.tombstones t "
            "join memory_internal.fact_versions(%s) v on v.fact_id = t.fact_id "
            "where t.lifted_at is null and v.invalid_at is null",
            (p,),
        )
        # Writers of one identity take turns (its lock), so their events' ids follow
        # their commits; record time must follow them too (begin_write's floor: a writer
        # that waited for the lock is stamped no earlier than the one it waited for), or
        # a read at some known_at would see a later change without an earlier one.
        # (Not across a merge or a split: they join or part identities' histories, each
        # in its own order; the replay property test reads those back at every known_at.)
        record_time = app.execute(
            """
            select count(*) filter (where x.occurred_at < x.before),
                   count(*) filter (where x.occurred_at > x.before)
              from (select e.occurred_at, lag(e.occurred_at) over (
                             partition by v.subject_id, v.predicate, v.identity_object
                             order by e.event_id) as before
                      from memory.fact_events e
                      join memory_internal.fact_versions(%s) v
                        on v.org_id = e.org_id and v.fact_id = e.fact_id
                     where not v.subject_id = any (%s::uuid[])
                       and not coalesce(v.object_entity_id = any (%s::uuid[]), false)) x
            """,
            (p, kept, kept),
        ).fetchone()
        edges = _scalar(app, "select count(*) from memory.edges where project_id = %s", (p,))
        plan_edges = _scalar(
            app,
            "select count(*) from memory.edges where project_id = %s and relation = 'plan'",
            (p,),
        )
        drift = _scalar(app, "select memory.reconcile_edges(100000, %s)", (p,))
        # Whatever a writer could not see (an entity committed after it looked) is
        # taken over by that reconciliation: no plain name is left naming an entity.
        unadopted = _scalar(
            app,
            "select count(*) from memory_internal.fact_versions(%s) v where v.object_auto "
            "and exists (select from memory.entities e where e.org_id = v.org_id "
            "and e.project_id = v.project_id and e.normalized_name = v.object_key)",
            (p,),
        )
    assert misplaced == []
    # No identity's record time goes back; positive control: it moves on.
    assert record_time is not None and record_time[0] == 0 and record_time[1] > 0, record_time
    assert reshaped > 0  # positive control: windows were closed and given back
    assert asserted_events == []
    assert counted == versions > 0
    assert stale_tombstones == 0
    assert edges > 0
    assert plan_edges > 0  # positive control: plan facts were taken over by entities
    assert drift["keys_checked"] == 0, drift
    assert unadopted == 0


def test_a_writer_that_waited_is_stamped_after_a_closing_that_changed_no_window(
    app_dsn: str, app: psycopg.Connection[Any]
) -> None:
    """T1 begins; T2 closes gold at day 40, after silver already ended gold's window at
    day 30 (the window stays [0, 30), only the claimed end moves), and commits; then T1
    retracts silver, which gives gold its window back up to that claimed end. T1's
    record time must come after T2's: read at an instant between the two writes, the
    store believed silver held at day 35, not gold's [0, 40), which needs T2's close."""
    tenant = _new_project(app, subjects=("alice",))

    def fact(obj: str, day: int) -> Fact:
        return {"subject": "alice", "predicate": "plan", "object": obj,
                "valid_from": (BASE + timedelta(days=day)).isoformat()}  # fmt: skip

    gold = _assert_batch(app, tenant.org, tenant.project, [fact("gold", 0)])
    silver = _assert_batch(app, tenant.org, tenant.project, [fact("silver", 30)])
    gold_id, silver_id = (r["results"][0]["fact_id"] for r in (gold, silver))

    def holding_at_day_35(known_at: datetime | None) -> set[tuple[str, Any]]:
        with app.transaction():
            app.execute("select memory.use_org(%s)", (tenant.org,))
            rows = app.execute(
                "select object_key, valid_range from memory.facts_at(%s, %s, %s)",
                (tenant.project, BASE + timedelta(days=35), known_at),
            ).fetchall()
        return {(o, _bounds(r)) for o, r in rows}

    t1 = _connect(app_dsn)
    try:
        with t1.transaction():
            t1.execute("select memory.use_org(%s)", (tenant.org,))  # T1's now() is fixed here
            with app.transaction():  # T2
                app.execute("select memory.use_org(%s)", (tenant.org,))
                closed = _scalar(
                    app, "select memory.close_fact(%s, %s, %s)",
                    (tenant.project, gold_id, BASE + timedelta(days=40)),
                )  # fmt: skip
                between = _scalar(app, "select memory_internal.txn_instant()")
            assert closed["status"] == "expired"
            t1.execute("select memory.retract_fact(%s, %s)", (tenant.project, silver_id))
            stamp = _scalar(t1, "select memory_internal.txn_instant()")
    finally:
        t1.close()

    assert stamp >= between
    # Positive control: afterwards gold holds again, up to its claimed end.
    assert holding_at_day_35(None) == {("gold", (BASE, BASE + timedelta(days=40)))}
    # Just before T1's writes, silver still held.
    assert holding_at_day_35(stamp - timedelta(microseconds=1)) == {
        ("silver", (BASE + timedelta(days=30), None))
    }
