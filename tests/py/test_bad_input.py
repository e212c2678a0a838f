"""Malformed input to memory.assert_facts, through SQL as chronomem_app.

A bad fact is reported at its index with the field that is wrong, and costs the rest of
the batch nothing. A bad call (not an array, too many facts, unknown source) raises a
clear SQL error and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

Fact = Any  # a JSON value: most often an object, sometimes deliberately not


@pytest.fixture
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app_dsn, autocommit=False) as c:
        yield c


def _scalar(
    conn: psycopg.Connection[Any], query: str | sql.Composed, params: tuple[Any, ...] = ()
) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


class Project:
    def __init__(self, conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> None:
        self.conn, self.org, self.project = conn, org, project

    def assert_facts(self, facts: Any, source: str | None = "api") -> dict[str, Any]:
        """One committed transaction; errors roll it back and propagate."""
        with self.conn.transaction():
            self.conn.execute("select memory.use_org(%s)", (self.org,))
            result: dict[str, Any] = _scalar(
                self.conn,
                "select memory.assert_facts(%s, %s::jsonb, %s)",
                (self.project, None if facts is None else json.dumps(facts), source),
            )
        return result

    def footprint(self) -> dict[str, int]:
        """How much the project holds: facts, entities, events, edges, jobs, counters."""
        with self.conn.transaction():
            self.conn.execute("select memory.use_org(%s)", (self.org,))
            out = {
                "facts": _scalar(
                    self.conn,
                    "select count(*) from memory_internal.fact_versions(%s)",
                    (self.project,),
                ),
                "counters": _scalar(
                    self.conn,
                    "select coalesce(sum(value), 0)::int from memory.counters(%s)",
                    (self.project,),
                ),
            }
            for table in ("entities", "fact_events", "edges", "jobs"):
                out[table] = _scalar(
                    self.conn,
                    sql.SQL("select count(*) from memory.{} where project_id = %s").format(
                        sql.Identifier(table)
                    ),
                    (self.project,),
                )
        return out

    def contents(self) -> set[str]:
        with self.conn.transaction():
            self.conn.execute("select memory.use_org(%s)", (self.org,))
            return {
                r[0]
                for r in self.conn.execute(
                    "select content from memory_internal.fact_versions(%s)", (self.project,)
                )
            }


@pytest.fixture
def org(conn: psycopg.Connection[Any]) -> uuid.UUID:
    with conn.transaction():
        org_id: uuid.UUID = _scalar(conn, "select memory.create_org('bad input')")
    return org_id


def _new_project(conn: psycopg.Connection[Any], org: uuid.UUID, name: str) -> Project:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        project: uuid.UUID = _scalar(conn, "select memory.create_project(%s, %s)", (org, name))
    return Project(conn, org, project)


@pytest.fixture
def project(conn: psycopg.Connection[Any], org: uuid.UUID) -> Project:
    return _new_project(conn, org, "bad input")


def _episode(admin_dsn: str, project: Project, occurred_at: datetime) -> uuid.UUID:
    """An episode in the project (no SQL API writes episodes yet: the superuser does)."""
    with psycopg.connect(admin_dsn) as admin:
        session = _scalar(
            admin,
            """insert into memory.sessions (org_id, project_id, external_id)
               values (%s, %s, %s) returning session_id""",
            (project.org, project.project, f"s-{uuid.uuid4()}"),
        )
        episode: uuid.UUID = _scalar(
            admin,
            """insert into memory.episodes
                 (org_id, project_id, session_id, seq, role, content, occurred_at)
               values (%s, %s, %s, 1, 'user', 'I moved to Lisbon', %s) returning episode_id""",
            (project.org, project.project, session, occurred_at),
        )
    return episode


def _ok(label: str, **extra: Any) -> dict[str, Any]:
    """A valid fact about alice named label, with extra fields set or overridden."""
    return {"subject": "alice", "predicate": "lives in", "object": label, "content": label, **extra}


def test_each_bad_fact_is_reported_at_its_index_and_the_rest_is_stored(
    conn: psycopg.Connection[Any], org: uuid.UUID, project: Project, admin_dsn: str
) -> None:
    other = _new_project(conn, org, "other project")
    foreign_episode = _episode(admin_dsn, other, datetime(2023, 5, 1, tzinfo=UTC))
    own_at = datetime(2022, 3, 4, 5, 6, 7, tzinfo=UTC)
    own_episode = _episode(admin_dsn, project, own_at)
    unknown_episode = uuid.uuid4()
    backwards = _ok("x", valid_from="2024-02-01T00:00:00Z", valid_to="2024-01-01T00:00:00Z")

    # (fact, the field reported) — None marks a valid fact (a positive control, most of
    # them at the edge of what is allowed).
    cases: list[tuple[Fact, str | None]] = [
        (_ok("valid one"), None),
        ({"predicate": "lives in", "object": "Paris"}, "subject"),
        (_ok("x", subject=""), "subject"),
        (_ok("x", subject="   "), "subject"),
        (_ok("x", subject="?!-"), "subject"),
        (_ok("x", subject={"name": "alice"}), "subject"),
        (_ok("x", predicate="!!!"), "predicate"),
        (_ok("x", predicate="  --- ;; "), "predicate"),
        ({"subject": "alice", "object": "Paris"}, "predicate"),
        ({"subject": "alice", "predicate": "lives in"}, "object"),
        (_ok("x", valid_from="not a date"), "valid_from"),
        (_ok("x", valid_from="2024-13-45"), "valid_from"),
        (_ok("x", valid_from=1714000000), "valid_from"),
        (_ok("x", valid_from="infinity"), "valid_from"),
        (_ok("x", valid_to="yesterday-ish"), "valid_to"),
        (_ok("x", valid_from="2024-02-01T00:00:00Z", valid_to="2024-02-01T00:00:00Z"), "valid_to"),
        (backwards, "valid_to"),
        (_ok("valid window", valid_from="2024-02-01", valid_to="2024-02-01T00:00:01Z"), None),
        (_ok("x", confidence=1.5), "confidence"),
        (_ok("x", confidence=-0.01), "confidence"),
        (_ok("x", confidence="0.5"), "confidence"),
        (_ok("x", confidence=True), "confidence"),
        (_ok("confidence zero", confidence=0), None),
        (_ok("confidence one", confidence=1), None),
        (5, "fact"),
        ("alice lives in Paris", "fact"),
        ([_ok("nested")], "fact"),
        (None, "fact"),
        (_ok("x", object_type="thing"), "object_type"),
        (_ok("as literal", object_type="literal"), None),
        (_ok("as entity", object_type="entity"), None),
        (_ok("x", content=""), "content"),
        (_ok("x", content=17), "content"),
        (_ok("x", source_episode_id="not-a-uuid"), "source_episode_id"),
        (_ok("x", source_episode_id=12), "source_episode_id"),
        (_ok("x", source_episode_id=str(unknown_episode)), "source_episode_id"),
        (_ok("x", source_episode_id=str(foreign_episode)), "source_episode_id"),
        (_ok("from own episode", source_episode_id=str(own_episode)), None),
        (_ok("valid last"), None),
    ]
    facts = [fact for fact, _ in cases]
    result = project.assert_facts(facts)

    bad = [i for i, (_, field) in enumerate(cases) if field]
    good = [i for i, (_, field) in enumerate(cases) if not field]
    assert (result["invalid"], result["inserted"]) == (len(bad), len(good))
    assert result["skipped"] == result["refused"] == 0
    results = result["results"]
    assert [r["index"] for r in results] == list(range(len(cases)))
    for i, (fact, field) in enumerate(cases):
        r = results[i]
        if field is None:
            assert r["status"] == "inserted", (fact, r)
        else:
            assert r["status"] == "invalid", (fact, r)
            assert r["error"]["field"] == field, (fact, r)
            assert r["error"]["message"], (fact, r)
    # Messages say what is wrong.
    messages = {
        json.dumps(fact, sort_keys=True): r.get("error", {}).get("message", "")
        for (fact, _), r in zip(cases, results, strict=True)
    }
    for episode in (foreign_episode, unknown_episode):
        key = json.dumps(_ok("x", source_episode_id=str(episode)), sort_keys=True)
        assert f"episode {episode} not found in this project" in messages[key]
    assert "later than valid_from" in messages[json.dumps(backwards, sort_keys=True)]

    # Exactly the valid facts were stored.
    stored = project.contents()
    assert stored == {facts[i]["content"] for i in good}
    # The fact citing an episode of this project takes its world time from it.
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (org,))
        valid_from = _scalar(
            conn,
            "select valid_from from memory_internal.fact_versions(%s) where content = %s",
            (project.project, "from own episode"),
        )
    assert valid_from == own_at


@pytest.mark.parametrize(
    ("facts", "sqlstate", "names"),
    [
        ({"subject": "alice", "predicate": "likes", "object": "tea"}, "22023", "JSON array"),
        ("alice likes tea", "22023", "JSON array"),
        (None, "22023", "JSON array"),
        (
            [{"subject": "alice", "predicate": "likes", "object": f"tea {i}"} for i in range(1001)],
            "54000",
            "at most 1000 facts, got 1001",
        ),
    ],
    ids=["object", "string", "null", "1001 facts"],
)
def test_bad_batch_raises_and_writes_nothing(
    project: Project, facts: Any, sqlstate: str, names: str
) -> None:
    before = project.footprint()
    with pytest.raises(psycopg.Error) as raised:
        project.assert_facts(facts)
    assert raised.value.sqlstate == sqlstate
    assert names in str(raised.value)
    assert project.footprint() == before


def test_unknown_source_raises_and_writes_nothing(project: Project) -> None:
    fact = {"subject": "alice", "predicate": "likes", "object": "tea"}
    before = project.footprint()
    for source in ("llm", "API", "", None):
        with pytest.raises(errors.InvalidParameterValue) as raised:
            project.assert_facts([fact], source=source)
        message = str(raised.value)
        assert "source must be api, extraction or import" in message
        assert f"not {'NULL' if source is None else source}" in message
    assert project.footprint() == before
    # Positive control: each known source is accepted.
    for n, source in enumerate(("api", "extraction", "import")):
        result = project.assert_facts([{**fact, "object": f"tea {n}"}], source=source)
        assert result["inserted"] == 1


def test_largest_batch_is_accepted(project: Project) -> None:
    """Positive control for the limit: exactly 1000 facts go through in one call."""
    facts = [{"subject": "alice", "predicate": "likes", "object": f"tea {i}"} for i in range(1000)]
    result = project.assert_facts(facts)
    assert (result["inserted"], result["invalid"]) == (1000, 0)
    assert project.footprint()["facts"] == 1000


def test_a_batch_of_only_bad_facts_writes_nothing(project: Project) -> None:
    before = project.footprint()
    result = project.assert_facts([{"subject": "alice"}, 3, {"predicate": "x", "object": "y"}])
    assert (result["invalid"], result["inserted"]) == (3, 0)
    after = project.footprint()
    # Only the facts_invalid counter moved.
    assert {k: v for k, v in after.items() if k != "counters"} == {
        k: v for k, v in before.items() if k != "counters"
    }
    assert after["counters"] == before["counters"] + 3


def test_an_instant_is_iso_8601_in_years_1_to_9999_and_nothing_after_it(
    project: Project,
) -> None:
    """Text that is not one ISO 8601 instant within years 1..9999 (UTC) is refused per
    fact, naming the field; the controls beside them are stored."""
    bad = [
        "2024-01-01 BC",  # read as 2024 BC by the first ten characters
        "9999-12-31T23:59:59-14:00",  # year 10000 in UTC
        "0001-01-01T00:00:00+14:00",  # 1 BC in UTC
        "2024-01-01 allballs",
        "2024-01-01 5:00 pm",
        "2024-01-01T00:00:00Z trailing",
        " 2024-01-01T00:00:00Z",
        "2024-01-01T00:00:00 America/New_York",
        "-infinity",
        "10000-01-01",
        "2024-01-01+02",  # a zone needs a time (a bare date may end in Z only)
        "2024-01-01T00:00:00.1234567891Z",  # more than nine fraction digits
    ]
    good = ["2024-01-01T00:00:00Z", "2024-01-01 12:00:00+02", "2024-01-01", "9999-12-31T23:59:59Z",
            "2024-01-01Z", "2024-01-01T12:00+0530", "2024-01-01T12:00:00.123456789-03"]  # fmt: skip
    facts: list[Fact] = []
    expect: list[str | None] = []
    for n, text in enumerate(bad):
        facts.append(_ok(f"from {n}", valid_from=text))
        expect.append("valid_from")
        facts.append(_ok(f"to {n}", valid_from="2000-01-01T00:00:00Z", valid_to=text))
        expect.append("valid_to")
    for n, text in enumerate(good):
        facts.append(_ok(f"good from {n}", valid_from=text))
        expect.append(None)
        facts.append(_ok(f"good to {n}", valid_from="0001-01-01T00:00:00Z", valid_to=text))
        expect.append(None)
    result = project.assert_facts(facts)
    for fact, field, r in zip(facts, expect, result["results"], strict=True):
        if field is None:
            assert r["status"] == "inserted", (fact, r)
        else:
            assert r["status"] == "invalid", (fact, r)
            assert r["error"]["field"] == field, (fact, r)
            assert "ISO 8601" in r["error"]["message"], (fact, r)
    assert result["inserted"] == 2 * len(good)
    assert project.contents() == {f["content"] for f, e in zip(facts, expect, strict=True) if not e}


def test_wrong_types_and_unknown_keys_are_refused_per_fact(project: Project) -> None:
    """Each wrong JSON type and each key outside the documented set makes its fact invalid,
    naming the field or key; the rest of the batch is stored."""
    cases: list[tuple[Fact, str | None]] = [
        (_ok("x", subject=123), "subject"),
        (_ok("x", predicate=7), "predicate"),
        (_ok("x", object=True), "object"),
        (_ok("x", object=["a"]), "object"),
        (_ok("x", confidence="high"), "confidence"),
        (_ok("x", valid_form="2024-01-01T00:00:00Z"), "valid_form"),
        (_ok("x", override_tombstones=True), "override_tombstones"),
        (_ok("x", subject_type=5), "subject_type"),
        (_ok("x", object_entity_type={"t": 1}), "object_entity_type"),
        (_ok("x", object_type=1), "object_type"),
        (_ok("with types", subject_type="person", object_entity_type="city"), None),
        (_ok("with nulls", subject_type=None, confidence=None, valid_to=None), None),
        (_ok("control"), None),
    ]
    result = project.assert_facts([f for f, _ in cases])
    for (fact, field), r in zip(cases, result["results"], strict=True):
        if field is None:
            assert r["status"] == "inserted", (fact, r)
        else:
            assert r["status"] == "invalid", (fact, r)
            assert r["error"]["field"] == field, (fact, r)
            assert field in r["error"]["message"], (fact, r)
    assert result["inserted"] == 3


def test_reads_refuse_instants_outside_years_1_to_9999(
    conn: psycopg.Connection[Any], project: Project
) -> None:
    project.assert_facts([_ok("held")])
    for arg, at in (("as_of", "10000-01-01T00:00:00Z"), ("known_at", "0001-12-31T00:00:00 BC")):
        with pytest.raises(errors.InvalidParameterValue) as raised, conn.transaction():
            conn.execute("select memory.use_org(%s)", (project.org,))
            params = {"as_of": (at, None), "known_at": (None, at)}[arg]
            conn.execute(
                "select * from memory.list_facts(%s, p_at => %s::timestamptz, "
                "p_known_at => %s::timestamptz)",
                (project.project, *params),
            )
        assert raised.value.diag.message_detail == arg
        assert arg in str(raised.value)
    # Positive control: the last instant of year 9999 reads.
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (project.org,))
        rows = conn.execute(
            "select * from memory.list_facts(%s, p_at => '9999-12-31T23:59:59Z')",
            (project.project,),
        ).fetchall()
    assert rows
