"""Property test of record time: any history of writes can be read back as it was.

A random sequence of writes (assertions of literal, plain-name and entity objects, open
and closed windows, tombstone overrides, retractions, closings, subject wipes (of people
and of places that a cardinality-one predicate points at), redeclared
cardinalities, entities and aliases named after plain-name objects, which take those
facts over), each its own committed transaction as chronomem_app. After each write
the test reads what holds (facts_at and edges_at with the default known_at, i.e. now)
at every instant that matters; at the end, the same reads with known_at = that write's
record-time instant must give exactly those answers, windows included. A subject wipe
rewrites that past: every earlier known_at must then answer as if the wiped facts had
never been asserted, which a second project says, written with the same history less
those facts and the writes on them (and without the wipes). That is what known_at promises
("what did the store believe then?"), and it exercises every path that reconstructs a
past window from the event log (range_believed) and every record-time stamp a write
sets.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from psycopg.types.range import Range

BASE = datetime(2024, 1, 1, tzinfo=UTC)
# predicate -> (cardinality, objects, object_type: an "auto" object is a plain name that
# an entity or alias named like it later takes over)
PREDICATES = {
    "plan": ("one", ("free", "pro", "team"), "literal"),
    "likes": ("many", ("tea", "jazz"), "auto"),
    "works at": ("one", ("Acme", "Globex"), "entity"),
    "knows": ("many", ("alice", "bob", "carol"), "entity"),
    # A subject wipe of a place takes the moves to it out of a cardinality-one identity
    # whose other versions stay: their past windows are laid out again without them.
    "lives in": ("one", ("Paris", "東京", "Zürich"), "entity"),
}
LIKED = PREDICATES["likes"][1]
# Mostly alice, and cardinality-one predicates most, so that assertions collide: over
# 300 examples a quarter superseded a window and one in ten had one given back. (likes
# twice: an alias joins two identities only when a subject likes both names.)
SUBJECTS = ("alice", "alice", "alice", "bob")
DRAWN = ("plan", "plan", "plan", "works at", "works at", "works at", "likes", "likes", "knows",
         "lives in", "lives in", "lives in")  # fmt: skip
# Wiped subjects: people (subjects, and objects of knows) and places (objects of lives in).
WIPED = ("bob", "carol", "東京", "Paris")

# (fact_id, subject, predicate, object, content, (lower, upper)): what holds.
FactRow = tuple[str, str, str, str, str, tuple[datetime | None, datetime | None]]
# (source, relation, target, (lower, upper))
EdgeRow = tuple[str, str, str, tuple[datetime | None, datetime | None]]
# What holds at each instant: facts and edges.
Read = tuple[set[tuple[datetime, FactRow]], set[tuple[datetime, EdgeRow]]]


@dataclass(frozen=True)
class Assert:
    subject: str
    predicate: str
    obj: str
    variant: int
    start_hours: int
    length_hours: int | None
    override: bool

    def as_json(self) -> dict[str, Any]:
        fact: dict[str, Any] = {
            "subject": self.subject,
            "predicate": self.predicate,
            "object": self.obj,
            "object_type": PREDICATES[self.predicate][2],
            "content": f"{self.subject} {self.predicate} {self.obj} #{self.variant}",
            "valid_from": (BASE + timedelta(hours=self.start_hours)).isoformat(),
        }
        if self.length_hours is not None:
            end = BASE + timedelta(hours=self.start_hours + self.length_hours)
            fact["valid_to"] = end.isoformat()
        return fact


@dataclass(frozen=True)
class Retract:
    pick: int  # the pick-th stored version (modulo how many there are)


@dataclass(frozen=True)
class Close:
    pick: int
    at_hours: int


@dataclass(frozen=True)
class Wipe:
    subject: str  # every fact naming it goes, at every instant


@dataclass(frozen=True)
class Declare:
    predicate: str  # redeclared: 'many' gives back windows other objects ended
    cardinality: str


@dataclass(frozen=True)
class Name:
    name: str  # an entity of that name takes over the plain-name objects it matches


@dataclass(frozen=True)
class Alias:
    """The entity is named first (upsert_entity); then the alias's plain-name objects
    become the entity's: under 'many' two identities join, and the later start closes
    the earlier window."""

    entity: str
    alias: str


@dataclass(frozen=True)
class Merge:
    """memory.merge_entities: the absorbed entity's facts and edges become the kept
    one's (identities it joins laid out as one), and its name an alias of it."""

    keep: str
    absorb: str


@dataclass(frozen=True)
class Split:
    """memory.split_entity: an alias (left by add_alias or by a merge) becomes an entity
    of its own again, with the versions written with that name."""

    name: str


def _split(read: Read, moved: dict[str, tuple[bool, bool]], name: str) -> Read:
    """A read with the versions a split moved shown under the new entity's name (as
    subject and/or object: `moved` maps their ids). The graph's history stays with the
    entity they were joined to, as the store keeps it."""
    facts, edges = read

    def renamed(row: FactRow) -> FactRow:
        i, s, p, o, c, r = row
        if i not in moved:
            return row
        subject, obj = moved[i]
        return (i, name if subject else s, p, name if obj else o, c, r)

    return {(at, renamed(f)) for at, f in facts}, edges


def _merged(read: Read, absorb: str, keep: str) -> Read:
    """A read with the absorbed entity shown as the kept one, wherever it is named (a
    merge is naming too: past reads show today's names, with the windows then)."""
    facts, edges = read

    def n(name: str) -> str:
        return keep if name == absorb else name

    return (
        {(at, (i, n(s), p, n(o), c, r)) for at, (i, s, p, o, c, r) in facts},
        {(at, (n(s), rel, n(t), r)) for at, (s, rel, t, r) in edges},
    )


def _renamed(read: Read, alias: str, entity: str) -> Read:
    """A read with the plain-name objects `alias` shown as the entity they now are.
    (Naming is not a belief about the world, so it is not versioned: a past read shows
    today's names, with the windows believed then.)"""
    facts, _ = read
    return (
        {
            (at, (i, s, p, entity if p == "likes" and o == alias else o, c, r))
            for at, (i, s, p, o, c, r) in facts
        },
        read[1],
    )


def _assertion() -> st.SearchStrategy[Assert]:
    return st.sampled_from(DRAWN).flatmap(
        lambda p: st.builds(
            Assert,
            subject=st.sampled_from(SUBJECTS),
            predicate=st.just(p),
            obj=st.sampled_from(PREDICATES[p][1]),
            variant=st.integers(0, 1),
            start_hours=st.integers(0, 24 * 30),
            length_hours=st.one_of(st.none(), st.integers(1, 24 * 30)),
            override=st.booleans(),
        )
    )


Write = Assert | Retract | Close | Wipe | Declare | Name | Alias | Merge | Split


def histories() -> st.SearchStrategy[list[Write]]:
    """An assertion first (so something holds), then 3-11 writes of any kind."""
    write = st.one_of(
        _assertion(),
        _assertion(),
        _assertion(),
        st.builds(Retract, pick=st.integers(0, 50)),
        st.builds(Close, pick=st.integers(0, 50), at_hours=st.integers(0, 24 * 90)),
        st.builds(Wipe, subject=st.sampled_from(WIPED)),
        st.builds(Wipe, subject=st.sampled_from(WIPED)),
        st.builds(
            Declare,
            predicate=st.sampled_from(("plan", "works at", "likes")),
            cardinality=st.sampled_from(("one", "many")),
        ),
        st.builds(Name, name=st.sampled_from(LIKED)),
        st.sampled_from(LIKED).map(lambda e: Alias(e, next(x for x in LIKED if x != e))),
    )
    return st.tuples(_assertion(), st.lists(write, min_size=3, max_size=11)).map(
        lambda t: [t[0], *t[1]]
    )


def instants_for(history: Sequence[Write]) -> list[datetime]:
    """Every boundary any write names, the midpoints between them, and beyond both ends."""
    hours = {0}
    for w in history:
        if isinstance(w, Assert):
            hours.add(w.start_hours)
            if w.length_hours is not None:
                hours.add(w.start_hours + w.length_hours)
        elif isinstance(w, Close):
            hours.add(w.at_hours)
    edges = [BASE + timedelta(hours=h) for h in sorted(hours)]
    mids = [a + (b - a) / 2 for a, b in itertools.pairwise(edges)]
    return [edges[0] - timedelta(days=1), *edges, *mids, edges[-1] + timedelta(days=1)]


def _bounds(rng: Range[datetime]) -> tuple[datetime | None, datetime | None]:
    assert rng.bounds == "[)", rng
    return rng.lower, rng.upper


class Project:
    """One project of the app role; every method is one committed transaction."""

    def __init__(self, conn: psycopg.Connection[Any], org: uuid.UUID) -> None:
        self.conn = conn
        self.org = org
        with self._tx():
            row = conn.execute(
                "select memory.create_project(%s, %s)", (org, f"replay-{uuid.uuid4()}")
            ).fetchone()
            assert row is not None
            self.id: uuid.UUID = row[0]
            for predicate, (cardinality, _, _) in PREDICATES.items():
                conn.execute(
                    "select memory.declare_predicate(%s, %s, %s)",
                    (self.id, predicate, cardinality),
                )

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self.conn.transaction():
            self.conn.execute("select memory.use_org(%s)", (self.org,))
            yield

    def write(self, w: Write, target: str | None = None) -> datetime | None:
        """Apply one write; returns its record-time instant (the transaction's stamp),
        or None when the write was refused by design and changed nothing. A retraction or
        closing acts on `target` when given, else on its pick. What it did is kept in
        `outcome` (an assertion's status and fact, the fact a retraction or closing acted
        on, the facts a wipe deleted)."""
        self.outcome: tuple[Any, ...] = ()
        if isinstance(w, Declare):
            try:
                with self._tx():
                    self.conn.execute(
                        "select memory.declare_predicate(%s, %s, %s)",
                        (self.id, w.predicate, w.cardinality),
                    )
                    instant: datetime = self._one("select memory_internal.txn_instant()")
            except psycopg.errors.ExclusionViolation:
                return None  # 'one' while a subject holds two objects at once
            return instant
        if isinstance(w, Alias):
            try:
                with self._tx():
                    self.conn.execute("select memory.upsert_entity(%s, %s)", (self.id, w.entity))
                    self.conn.execute(
                        "select memory.add_alias(%s, %s, %s)", (self.id, w.entity, w.alias)
                    )
                    instant = self._one("select memory_internal.txn_instant()")
            except psycopg.errors.UniqueViolation:
                return None  # the alias is an entity's own name
            return instant
        if isinstance(w, Merge):
            # What reads show of the two, before: either name may be an alias by now
            # (an earlier merge's), and then it is another entity's name that goes.
            absorbed, kept = self.entity_name(w.absorb), self.entity_name(w.keep)
            try:
                with self._tx():
                    report = self._one(
                        "select memory.merge_entities(%s, %s, %s)", (self.id, w.keep, w.absorb)
                    )
                    instant = self._one("select memory_internal.txn_instant()")
            except psycopg.errors.NoDataFound:
                return None  # one of the two is no entity (yet, or any more)
            assert absorbed is not None and kept is not None
            self.merged_names: tuple[str, str] = (absorbed, kept)
            return instant if report["merged"] else None
        if isinstance(w, Split):
            try:
                with self._tx():
                    report = self._one("select memory.split_entity(%s, %s)", (self.id, w.name))
                    instant = self._one("select memory_internal.txn_instant()")
            except (psycopg.errors.NoDataFound, psycopg.errors.InvalidParameterValue):
                return None  # no alias of that name (an entity's own, or none)
            with self._tx():
                self.split_name: str = self._one(
                    "select name from memory.entities where entity_id = %s", (report["entity_id"],)
                )
                self.split_moved: dict[str, tuple[bool, bool]] = {
                    str(i): (s, o)
                    for i, s, o in self.conn.execute(
                        "select fact_id, subject_id = %s, coalesce(object_entity_id = %s, false) "
                        "from memory_internal.fact_versions(%s) "
                        "where subject_id = %s or object_entity_id = %s",
                        (report["entity_id"],) * 2 + (self.id,) + (report["entity_id"],) * 2,
                    ).fetchall()
                }
            return instant
        with self._tx():
            if isinstance(w, Name):
                self.conn.execute("select memory.upsert_entity(%s, %s)", (self.id, w.name))
            elif isinstance(w, Wipe):
                before = self.fact_ids()
                self.conn.execute("select memory.wipe(%s, p_subject => %s)", (self.id, w.subject))
                self.outcome = tuple(sorted(set(before) - set(self.fact_ids())))
            elif isinstance(w, Assert):
                result = self._one(
                    "select memory.assert_facts(%s, %s::jsonb, p_override_tombstones => %s)",
                    (self.id, json.dumps([w.as_json()]), w.override),
                )
                assert result["invalid"] == 0, result
                done = result["results"][0]
                self.outcome = (done["status"], done.get("fact_id"))
            else:
                ids = self.fact_ids()
                fact = target if target is not None else ids[w.pick % len(ids)]
                self.outcome = (fact,)
                if isinstance(w, Retract):
                    self.conn.execute(
                        "select memory.retract_fact(%s, %s, 'replay')", (self.id, fact)
                    )
                elif self._one(
                    "select invalid_at is null from memory_internal.fact_versions(%s) "
                    "where fact_id = %s",
                    (self.id, fact),
                ):  # a retracted fact cannot be closed (it never held)
                    self.conn.execute(
                        "select memory.close_fact(%s, %s, %s)",
                        (self.id, fact, BASE + timedelta(hours=w.at_hours)),
                    )
            stamp: datetime = self._one("select memory_internal.txn_instant()")
        return stamp

    def fact_ids(self) -> list[str]:
        """Every stored version's id, in assertion order (inside a transaction)."""
        return [
            str(r[0])
            for r in self.conn.execute(
                "select fact_id from memory_internal.fact_versions(%s) order by fact_seq",
                (self.id,),
            ).fetchall()
        ]

    def can(self, w: Write) -> bool:
        """Whether there is something for w to act on (a wipe of a subject the project
        does not know, or a retraction in an empty project, is an error by design)."""
        if isinstance(w, Assert | Declare | Name | Alias | Merge | Split):
            return True
        with self._tx():
            if isinstance(w, Wipe):
                query = "select count(*) from memory.entities where project_id = %s and name = %s"
                n: int = self._one(query, (self.id, w.subject))
            else:
                n = self._one("select count(*) from memory_internal.fact_versions(%s)", (self.id,))
        return n > 0

    def entity_name(self, name: str) -> str | None:
        """The name of the entity `name` is (its own name or an alias), or None."""
        with self._tx():
            row = self.conn.execute(
                "select e.name from memory.entities e where e.project_id = %s "
                "and (e.normalized_name = memory.normalize_text(%s) or exists ("
                "  select from memory.entity_aliases a where a.org_id = e.org_id "
                "     and a.entity_id = e.entity_id "
                "     and a.normalized_alias = memory.normalize_text(%s)))",
                (self.id, name, name),
            ).fetchone()
        return None if row is None else str(row[0])

    def alias_of(self, alias: str) -> str | None:
        """The name of the entity `alias` is an alias of (None: it is no alias)."""
        with self._tx():
            row = self.conn.execute(
                "select e.name from memory.entity_aliases a join memory.entities e "
                "on e.org_id = a.org_id and e.entity_id = a.entity_id "
                "where a.project_id = %s and a.normalized_alias = %s",
                (self.id, alias),
            ).fetchone()
        return None if row is None else str(row[0])

    def _one(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(query, params).fetchone()
        assert row is not None
        return row[0]

    def read(self, instants: Sequence[datetime], known_at: datetime | None) -> Read:
        """What holds at each instant as believed at known_at (None: the default, now)."""
        with self._tx():
            facts = self.conn.execute(
                """
                select i.at, f.fact_id::text, s.name, f.predicate,
                       coalesce(o.name, f.object_literal), f.content, f.valid_range
                  from unnest(%s::timestamptz[]) i(at)
                 cross join lateral memory.facts_at(%s, i.at, %s) f
                  join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
                  left join memory.entities o
                    on o.org_id = f.org_id and o.entity_id = f.object_entity_id
                """,
                (list(instants), self.id, known_at),
            ).fetchall()
            edges = self.conn.execute(
                """
                select i.at, s.name, e.relation, t.name, e.valid_range
                  from unnest(%s::timestamptz[]) i(at)
                 cross join lateral memory.edges_at(%s, i.at, %s) e
                  join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
                  join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
                """,
                (list(instants), self.id, known_at),
            ).fetchall()
        return (
            {(at, (i, s, p, o, c, _bounds(r))) for at, i, s, p, o, c, r in facts},
            {(at, (s, rel, t, _bounds(r))) for at, s, rel, t, r in edges},
        )

    def changes(self, since: datetime | None, until: datetime | None) -> list[tuple[datetime, int]]:
        """memory.fact_changes in (since, until]: each event's (occurred_at, event_id)."""
        with self._tx():
            page = self._one(
                "select memory.fact_changes(%s, %s, %s, p_limit => 1000)", (self.id, since, until)
            )
        assert page["next_cursor"] is None, "more than one page"
        return [(datetime.fromisoformat(c["occurred_at"]), c["event_id"]) for c in page["changes"]]


# Each example writes committed transactions of its own (its own project): slow to
# shrink, so no deadline; the module's connection is shared by every example.
SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)


def _never_asserted(
    conn: psycopg.Connection[Any],
    org: uuid.UUID,
    instants: Sequence[datetime],
    landed: list[tuple[Write, tuple[Any, ...]]],
) -> list[Read]:
    """What each landed write's known_at must read once the wipes among them are done:
    the same history written into a second project without the assertions a later wipe
    took (those naming its subject), the retractions and closings of the facts it deleted,
    and the wipes; read at the stamp of the last of its writes up to each one (nothing
    before the first), its fact ids shown as the first project's. A write whose outcome
    differs there (a redeclaration refused because of a wiped fact) makes the example
    moot."""
    deleted = {i for w, o in landed if isinstance(w, Wipe) for i in o}
    twin = Project(conn, org)
    ids: dict[str, str] = {}  # first project's fact id -> the twin's
    stamps: list[datetime | None] = []
    last: datetime | None = None
    for j, (w, outcome) in enumerate(landed):
        later = {x.subject for x, _ in landed[j + 1 :] if isinstance(x, Wipe)}
        if isinstance(w, Assert):
            if later & {w.subject, w.obj} or outcome[1] in deleted:
                stamps.append(last)
                continue
            last = twin.write(w)
            if twin.outcome[0] != outcome[0]:
                reject()
            if outcome[1] is not None:
                ids[outcome[1]] = twin.outcome[1]
        elif isinstance(w, Retract | Close):
            if outcome[0] in deleted:
                stamps.append(last)
                continue
            if outcome[0] not in ids:
                reject()
            last = twin.write(w, target=ids[outcome[0]])
        elif not isinstance(w, Wipe):
            stamp = twin.write(w)
            if stamp is None:
                reject()
            last = stamp
        stamps.append(last)
    back = {b: a for a, b in ids.items()}
    reads: list[Read] = []
    for stamp in stamps:
        if stamp is None:
            reads.append((set(), set()))
            continue
        facts, edges = twin.read(instants, stamp)
        reads.append(({(at, (back.get(f[0], f[0]), *f[1:])) for at, f in facts}, edges))
    return reads


def _replays(conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]) -> int:
    """Write `history` into a new project, reading what holds after each write; then read
    each of those states back at its write's known_at. Returns how many writes landed."""
    project = Project(conn, org)
    instants = instants_for(history)
    seen: list[tuple[Write, datetime, Read]] = []
    outcomes: list[tuple[Any, ...]] = []
    for w in history:
        if not project.can(w):
            continue  # nothing stored to retract or close, or no such subject to wipe
        stamp = project.write(w)
        if stamp is None:
            continue
        outcomes.append(project.outcome)
        if isinstance(w, Alias) and (entity := project.alias_of(w.alias)) is not None:
            seen = [(x, t, _renamed(read, w.alias, entity)) for x, t, read in seen]
        if isinstance(w, Merge):
            absorbed, kept = project.merged_names
            seen = [(x, t, _merged(read, absorbed, kept)) for x, t, read in seen]
        if isinstance(w, Split):
            moved, name = project.split_moved, project.split_name
            seen = [(x, t, _split(read, moved, name)) for x, t, read in seen]
        seen.append((w, stamp, project.read(instants, None)))
        # Positive control: the first write (an assertion) made something hold.
        assert len(seen) > 1 or seen[0][2][0]
    if any(isinstance(w, Wipe) for w, _, _ in seen):
        # A wipe rewrites the past: each earlier known_at reads as if the wiped facts
        # had never been asserted, as the same history without them reads.
        expected = _never_asserted(
            conn, org, instants, [(w, o) for (w, _, _), o in zip(seen, outcomes, strict=True)]
        )
        seen = [(w, stamp, then) for (w, stamp, _), then in zip(seen, expected, strict=True)]
    for w, stamp, then in seen:
        assert project.read(instants, stamp) == then, w
    # Stamps follow the writes: a later write's changes are not read back earlier.
    stamps = [stamp for _, stamp, _ in seen]
    assert stamps == sorted(stamps)
    # What changed, write by write: the span that ends at a write's stamp holds events
    # of that write alone (every event of a transaction carries its stamp), and the
    # spans together are the whole feed, each event once (since exclusive, until
    # inclusive).
    whole = project.changes(None, None)
    # Control: the first write (an assertion) logged something, unless a wipe took it.
    assert whole or any(isinstance(w, Wipe) for w, _, _ in seen)
    spans: list[tuple[datetime, int]] = []
    for since, until in zip([None, *stamps], stamps, strict=False):
        span = project.changes(since, until)
        assert {at for at, _ in span} <= {until}, (since, until, span)
        spans += span
    assert spans == whole
    return len(seen)


@settings(SETTINGS, max_examples=80)
@given(history=histories())
def test_every_past_state_reads_back_at_its_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]
) -> None:
    _replays(conn, org, history)


def alias_histories() -> st.SearchStrategy[list[Write]]:
    """Alice's plain-name likes of tea and jazz (windows mostly open, so that they
    overlap), then more of them, closings, retractions, and the names becoming one
    entity, in either direction: two identities that both hold somewhere are joined."""
    like = st.builds(
        Assert,
        subject=st.just("alice"),
        predicate=st.just("likes"),
        obj=st.sampled_from(LIKED),
        variant=st.integers(0, 1),
        start_hours=st.integers(0, 24 * 30),
        length_hours=st.one_of(st.none(), st.none(), st.integers(1, 24 * 30)),
        override=st.booleans(),
    )
    naming = st.sampled_from(LIKED).map(lambda e: Alias(e, next(x for x in LIKED if x != e)))
    write = st.one_of(
        like,
        like,
        naming,
        st.builds(Retract, pick=st.integers(0, 50)),
        st.builds(Close, pick=st.integers(0, 50), at_hours=st.integers(0, 24 * 90)),
    )
    return st.tuples(
        st.lists(like, min_size=2, max_size=4), st.lists(write, max_size=6), naming
    ).map(lambda t: [*t[0], *t[1], t[2]])


@settings(SETTINGS, max_examples=40)
@given(history=alias_histories())
def test_names_joined_by_an_alias_read_back_at_every_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]
) -> None:
    """The replay property where an alias joins two identities: the joint layout's
    closings are logged, so every earlier state reads back with its own windows."""
    _replays(conn, org, history)


MERGES = [("alice", "bob"), ("bob", "alice"), ("carol", "alice"), ("Acme", "Globex"),
          ("Globex", "Acme")]  # fmt: skip


def merge_histories() -> st.SearchStrategy[list[Write]]:
    """Assertions (alice's and bob's plans and employers, who knows whom), closings and
    retractions, with one or two merges among them: two people or two employers found
    to be one, after which their names resolve to the kept one; and splits, which
    take a merged name apart again (half the histories end with the last merge's)."""
    merge = st.sampled_from(MERGES).map(lambda m: Merge(*m))
    split = st.sampled_from(sorted({n for m in MERGES for n in m})).map(Split)
    write = st.one_of(
        _assertion(),
        _assertion(),
        _assertion(),
        st.builds(Retract, pick=st.integers(0, 50)),
        st.builds(Close, pick=st.integers(0, 50), at_hours=st.integers(0, 24 * 90)),
        merge,
        split,
    )
    return st.tuples(
        st.lists(_assertion(), min_size=2, max_size=5),
        st.lists(write, max_size=6),
        merge,
        st.lists(st.one_of(_assertion(), split), max_size=3),
        st.booleans(),
    ).map(lambda t: [*t[0], *t[1], t[2], *t[3], *([Split(t[2].absorb)] if t[4] else [])])


@settings(SETTINGS, max_examples=40)
@given(history=merge_histories())
def test_merged_entities_read_back_at_every_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]
) -> None:
    """The replay property across merges and splits: the joint layout's closings, the
    split's emptied and restored windows are logged, and the absorbed entity's edge
    history moves with it, so every earlier state reads back with its own windows, under
    today's names."""
    _replays(conn, org, history)


def wipe_histories() -> st.SearchStrategy[list[Write]]:
    """Moves (lives in, cardinality one: each closes the one it follows), open and
    bounded, with facts about the places, other assertions, closings, retractions and
    wipes among them, and a wipe of a place at the end: the moves to it leave an identity
    whose other versions stay, and every earlier known_at must read as if they had never
    been asserted."""
    move = st.builds(
        Assert,
        subject=st.sampled_from(("alice", "alice", "bob")),
        predicate=st.just("lives in"),
        obj=st.sampled_from(PREDICATES["lives in"][1]),
        variant=st.integers(0, 1),
        start_hours=st.integers(0, 24 * 30),
        length_hours=st.one_of(st.none(), st.none(), st.integers(1, 24 * 30)),
        override=st.booleans(),
    )
    about_a_place = st.builds(
        Assert,
        subject=st.sampled_from(("東京", "Paris")),
        predicate=st.just("likes"),
        obj=st.sampled_from(LIKED),
        variant=st.just(0),
        start_hours=st.integers(0, 24 * 30),
        length_hours=st.none(),
        override=st.booleans(),
    )
    wipe = st.builds(Wipe, subject=st.sampled_from(WIPED))
    write = st.one_of(
        move,
        move,
        about_a_place,
        _assertion(),
        st.builds(Retract, pick=st.integers(0, 50)),
        st.builds(Close, pick=st.integers(0, 50), at_hours=st.integers(0, 24 * 90)),
        wipe,
    )
    return st.tuples(
        st.lists(move, min_size=2, max_size=4),
        st.lists(write, max_size=7),
        st.builds(Wipe, subject=st.sampled_from(("東京", "Paris"))),
    ).map(lambda t: [*t[0], *t[1], t[2]])


@settings(SETTINGS, max_examples=30)
@given(history=wipe_histories())
def test_wiped_places_read_back_at_every_known_at(
    conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]
) -> None:
    """The replay property across subject wipes of places that moves point at: the
    windows the wiped moves cut, the closings and retractions after them, and the edges
    read at every earlier known_at as the same history without them reads."""
    _replays(conn, org, history)


QUESTION = (
    "Does alice or bob know carol; which plan (free, pro, team), likes tea or jazz, "
    "works at Acme or Globex?"
)


@settings(SETTINGS, max_examples=40)
@given(history=histories())
def test_search_finds_only_what_holds_at_its_instants(
    conn: psycopg.Connection[Any], org: uuid.UUID, history: list[Write]
) -> None:
    """After any history, memory.search at any (at, known_at) returns facts only if
    facts_at holds them there, and entities only if they existed then: every leg that
    returns facts (vector, full text, graph) reads through the same effective-at
    predicate. Every version, closed and retracted ones too, has the query's own
    embedding and shares its words, so each leg has every chance to return it."""
    project = Project(conn, org)
    stamps = []
    for w in history:
        if project.can(w):
            stamp = project.write(w)
            if stamp is not None:
                stamps.append(stamp)
    instants = instants_for(history)[::2]
    found = 0
    # The entities, read before the transaction that stores embeddings (on Citus a
    # transaction may not read a table as the app role after a function wrote as the
    # owner: docs/scale-out.md); nothing there changes them.
    with project._tx():
        entities = conn.execute(
            "select entity_id, created_at from memory.entities where project_id = %s",
            (project.id,),
        ).fetchall()
    with project._tx():
        dim = project._one("select memory.embedding_dim()")
        embedding = "[" + ",".join(["0.5"] * dim) + "]"
        conn.execute(
            "select memory_worker.store_embeddings('fact', array_agg(v.fact_id), "
            "array_agg(%s::vector)) from memory_internal.fact_versions(%s) v",
            (embedding, project.id),
        )
        for known_at in [*stamps[::2], stamps[-1]]:
            for at in instants:
                answer = project._one(
                    "select memory.search(%s, %s, %s::vector, p_at => %s, p_known_at => %s, "
                    "p_k => 200)",
                    (project.id, QUESTION, embedding, at, known_at),
                )
                assert not answer["degraded"], answer["failed_legs"]
                assert "fact_vector" in answer["legs"]
                hits = {(r["kind"], r["id"]) for r in answer["results"]}
                holding = {
                    ("fact", str(r[0]))
                    for r in conn.execute(
                        "select fact_id from memory.facts_at(%s, %s, %s)",
                        (project.id, at, known_at),
                    ).fetchall()
                }
                known = {("entity", str(e)) for e, created in entities if created <= known_at}
                assert hits <= holding | known, (at, known_at, hits - holding - known)
                found += len(hits & holding)
    # Positive control: what holds is found (the question names every word there is).
    assert found > 0 or all(not project.read(instants, k)[0] for k in [*stamps[::2], stamps[-1]])
