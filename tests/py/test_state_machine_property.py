"""Property tests of the write state machine (assert_facts), as the app role.

Facts are placed in world-time order, so the order in which the same assertions arrive
must not matter: any permutation, one fact per call or all in one batch, ends in the
same current state and the same valid-time timeline, and that state is the one the
design specifies (per identity, each fact holds from its valid_from until its valid_to
or the next fact's valid_from, whichever is first). Re-running a batch changes nothing.

Each example runs in its own fresh projects inside one transaction that is rolled back.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

BASE = datetime(2024, 1, 1, tzinfo=UTC)
SUBJECTS = ("alice", "bob")
# 'plan' is declared cardinality one (a new object supersedes the old one), 'likes' many.
PREDICATES = {"plan": "one", "likes": "many"}
OBJECTS = ("tea", "gold", "Zürich")
CONTENT_VARIANTS = ("", " (again)", " indeed")

# (subject, predicate, object_key, content, (lower, upper)) — no fact ids.
Row = tuple[str, str, str, str, tuple[datetime | None, datetime | None]]


@dataclass(frozen=True)
class Claim:
    subject: str
    predicate: str
    obj: str
    variant: str
    start_hours: int  # valid_from, hours after BASE
    length_hours: int | None  # valid_to - valid_from, or open

    @property
    def valid_from(self) -> datetime:
        return BASE + timedelta(hours=self.start_hours)

    @property
    def valid_to(self) -> datetime | None:
        if self.length_hours is None:
            return None
        return self.valid_from + timedelta(hours=self.length_hours)

    @property
    def content(self) -> str:
        return f"{self.subject} {self.predicate} {self.obj}{self.variant}"

    @property
    def object_key(self) -> str:
        return self.obj.lower()  # what memory.normalize_text makes of OBJECTS

    def identity(self) -> tuple[str, str, str]:
        one = PREDICATES[self.predicate] == "one"
        return self.subject, self.predicate, "" if one else self.object_key

    def as_json(self) -> dict[str, Any]:
        fact: dict[str, Any] = {
            "subject": self.subject,
            "predicate": self.predicate,
            "object": self.obj,
            "content": self.content,
            "valid_from": self.valid_from.isoformat(),
        }
        if self.valid_to is not None:
            fact["valid_to"] = self.valid_to.isoformat()
        return fact


def claims(*, restatements: bool) -> st.SearchStrategy[list[Claim]]:
    """2-8 assertions with distinct valid_from instants. Unless restatements are
    allowed, no two assertions make the same claim (subject, predicate, object and
    content) at different instants."""
    claim = st.builds(
        Claim,
        subject=st.sampled_from(SUBJECTS),
        predicate=st.sampled_from(sorted(PREDICATES)),
        obj=st.sampled_from(OBJECTS),
        variant=st.sampled_from(CONTENT_VARIANTS),
        start_hours=st.integers(0, 24 * 60),
        length_hours=st.one_of(st.none(), st.integers(1, 24 * 30)),
    )

    def start(c: Claim) -> int:
        return c.start_hours

    def what(c: Claim) -> tuple[str, str, str, str]:
        return c.subject, c.predicate, c.obj, c.variant

    unique_by = start if restatements else (start, what)
    return st.lists(claim, min_size=2, max_size=8, unique_by=unique_by)


def expected_windows(batch: Sequence[Claim]) -> set[tuple[Claim, tuple[datetime, datetime | None]]]:
    """The design's layout: per identity, in world-time order, each fact holds from its
    valid_from until its valid_to or the next fact's valid_from, whichever is first."""
    out = set()
    by_identity: dict[tuple[str, str, str], list[Claim]] = {}
    for c in batch:
        by_identity.setdefault(c.identity(), []).append(c)
    for facts in by_identity.values():
        facts.sort(key=lambda c: c.valid_from)
        for c, nxt in zip(facts, [*facts[1:], None], strict=True):
            ends = [t for t in (c.valid_to, nxt.valid_from if nxt else None) if t is not None]
            out.add((c, (c.valid_from, min(ends) if ends else None)))
    return out


def instants_for(batch: Sequence[Claim]) -> list[datetime]:
    """Every boundary, the midpoint between consecutive boundaries, and beyond both ends."""
    edges = sorted({c.valid_from for c in batch} | {c.valid_to for c in batch if c.valid_to})
    mids = [a + (b - a) / 2 for a, b in itertools.pairwise(edges)]
    return [edges[0] - timedelta(days=1), *edges, *mids, edges[-1] + timedelta(days=1)]


def expected_state(
    batch: Sequence[Claim], instants: Sequence[datetime]
) -> dict[datetime, set[Row]]:
    windows = expected_windows(batch)
    return {
        at: {
            (c.subject, c.predicate, c.object_key, c.content, (lo, hi))
            for c, (lo, hi) in windows
            if lo <= at and (hi is None or at < hi)
        }
        for at in instants
    }


# --------------------------------------------------------------------------------------
# Database side
# --------------------------------------------------------------------------------------
class Example:
    """One hypothesis example: a transaction, rolled back at the end, scoped to the org."""

    def __init__(self, conn: psycopg.Connection[Any], org: uuid.UUID) -> None:
        self.conn = conn
        self.org = org

    def __enter__(self) -> Example:
        self._tx = self.conn.transaction(force_rollback=True)
        self._tx.__enter__()
        self.conn.execute("select memory.use_org(%s)", (self.org,))
        return self

    def __exit__(self, *exc: object) -> None:
        self._tx.__exit__(*exc)  # type: ignore[arg-type]

    def new_project(self) -> uuid.UUID:
        row = self.conn.execute(
            "select memory.create_project(%s, %s)", (self.org, f"p-{uuid.uuid4()}")
        ).fetchone()
        assert row is not None
        project: uuid.UUID = row[0]
        for predicate, cardinality in PREDICATES.items():
            self.conn.execute(
                "select memory.declare_predicate(%s, %s, %s)", (project, predicate, cardinality)
            )
        return project

    def assert_facts(self, project: uuid.UUID, batch: Sequence[Claim]) -> dict[str, Any]:
        row = self.conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (project, json.dumps([c.as_json() for c in batch])),
        ).fetchone()
        assert row is not None
        result: dict[str, Any] = row[0]
        assert result["invalid"] == 0 and result["refused"] == 0, result
        return result

    def state(self, project: uuid.UUID, instants: Sequence[datetime]) -> dict[datetime, set[Row]]:
        """What holds at each instant, as believed now, through the API's reader (on Citus
        a transaction may not read a table directly as the app role after the API's
        functions wrote it as the owner: docs/scale-out.md). Predicate and object as
        their keys, by the function that makes them."""
        rows = self.conn.execute(
            """
            select i.at, f.subject, memory.normalize_text(f.predicate),
                   memory.normalize_text(f.object), f.content, f.valid_from, f.valid_until
              from unnest(%s::timestamptz[]) i(at)
             cross join lateral memory.readable_facts_at(%s, i.at, now()) f
            """,
            (list(instants), project),
        ).fetchall()
        out: dict[datetime, set[Row]] = {at: set() for at in instants}
        for at, subject, predicate, obj, content, lo, hi in rows:
            out[at].add((subject, predicate, obj, content, (lo, hi)))
        return out

    def versions(self, project: uuid.UUID) -> set[tuple[Any, ...]]:
        return set(
            self.conn.execute(
                """select fact_id, valid_range::text, asserted_until, invalid_at, recorded_at
                     from memory_internal.fact_versions(%s)""",
                (project,),
            ).fetchall()
        )


SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    database=None,
)


def with_order(
    batches: st.SearchStrategy[list[Claim]],
) -> st.SearchStrategy[tuple[list[Claim], list[Claim]]]:
    """A batch and a permutation of it."""
    return batches.flatmap(lambda b: st.tuples(st.just(b), st.permutations(b)))


def _check_permutations_converge(
    conn: psycopg.Connection[Any], org: uuid.UUID, batch: list[Claim], permutation: list[Claim]
) -> dict[datetime, set[Row]]:
    """Four projects get the same assertions: one per call and as one batch, each in
    world-time order and in the permuted order. All four end in the same state at every
    instant (returned)."""
    canonical = sorted(batch, key=lambda c: c.valid_from)
    instants = instants_for(batch)
    with Example(conn, org) as ex:
        states = {}
        for label, order, one_per_call in [
            ("one per call, world-time order", canonical, True),
            ("one per call, permuted", permutation, True),
            ("one batch, permuted", permutation, False),
            ("one batch, world-time order", canonical, False),
        ]:
            project = ex.new_project()
            if one_per_call:
                for c in order:
                    ex.assert_facts(project, [c])
            else:
                ex.assert_facts(project, order)
            states[label] = ex.state(project, instants)
        reference = states["one per call, world-time order"]
        for label, state in states.items():
            assert state == reference, f"{label} differs from world-time order"
        return reference


@SETTINGS
@given(case=with_order(claims(restatements=False)))
def test_any_order_of_assertions_ends_in_the_same_timeline(
    conn: psycopg.Connection[Any], org: uuid.UUID, case: tuple[list[Claim], list[Claim]]
) -> None:
    batch, permutation = case
    state = _check_permutations_converge(conn, org, batch, permutation)
    # ... and it is the state the design specifies.
    assert state == expected_state(batch, instants_for(batch))
    # Positive control: the timeline is not trivially empty.
    assert any(state.values())


@SETTINGS
@given(batch=claims(restatements=False))
def test_rerunning_a_batch_is_a_no_op(
    conn: psycopg.Connection[Any], org: uuid.UUID, batch: list[Claim]
) -> None:
    instants = instants_for(batch)
    with Example(conn, org) as ex:
        project = ex.new_project()
        first = ex.assert_facts(project, batch)
        # Positive control: the first run stored every assertion.
        assert first["inserted"] == len(batch) and first["skipped"] == 0
        ids = [r["fact_id"] for r in first["results"]]
        versions, state = ex.versions(project), ex.state(project, instants)

        again = ex.assert_facts(project, batch)
        assert (again["inserted"], again["skipped"], again["superseded"]) == (0, len(batch), 0)
        assert again["superseded_pairs"] == []
        # Each repeat is recognized as the fact the first run stored for it.
        assert [r["status"] for r in again["results"]] == ["skipped"] * len(batch)
        assert [r["fact_id"] for r in again["results"]] == ids
        assert ex.versions(project) == versions
        assert ex.state(project, instants) == state


# Two facts with the same object and content at different instants (alice's plan is
# gold from Jan 1, and again from Jan 21) with another object in between (tea from
# Jan 11). Arriving Jan 1, Jan 21, Jan 11: the Jan 21 assertion is skipped as "already
# holds" (gold's window was still open then), tea then closes gold's window at Jan 11,
# and nothing remembers that gold held again from Jan 21. Arriving in world-time order,
# all three are stored and gold holds from Jan 21. So the end state depends on arrival
# order, and re-running the batch is not a no-op (the second run inserts Jan 21).
_RESTATEMENT = [
    Claim("alice", "plan", "gold", "", 0, None),
    Claim("alice", "plan", "gold", "", 480, None),
    Claim("alice", "plan", "tea", "", 240, None),
]


@SETTINGS
@given(case=with_order(claims(restatements=True)))
@example(case=(_RESTATEMENT, _RESTATEMENT))
def test_restated_claims_converge_too(
    conn: psycopg.Connection[Any], org: uuid.UUID, case: tuple[list[Claim], list[Claim]]
) -> None:
    batch, permutation = case
    _check_permutations_converge(conn, org, batch, permutation)
    with Example(conn, org) as ex:
        project = ex.new_project()
        ex.assert_facts(project, permutation)
        again = ex.assert_facts(project, permutation)
        assert again["inserted"] == 0
