"""memory.merge_entities: two entities that turn out to be one thing ("Mel" and
"Melanie", named apart by an extractor) become the kept one, as if the absorbed name
had been an alias of it from the start. Each test writes the same claims in two
projects: in one the absorbed name is an entity of its own and the merge comes last,
in the other the name is an alias before any write. What facts_at, edges_at, the
counters and later writes show must then be the same. An unrelated entity is the
control that must not move. Every write is its own committed transaction (app role).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from test_auto_objects import Project, fact

Y2020 = datetime(2020, 1, 1, tzinfo=UTC)
Y2021 = datetime(2021, 1, 1, tzinfo=UTC)
Y2022 = datetime(2022, 1, 1, tzinfo=UTC)
Y2023 = datetime(2023, 1, 1, tzinfo=UTC)
INSTANTS = [datetime(y, 6, 1, tzinfo=UTC) for y in (2019, 2020, 2021, 2022, 2023)]


class Merging(Project):
    def merge(self, keep: str, absorb: str) -> dict[str, Any]:
        report: dict[str, Any] = self.one(
            "select memory.merge_entities(%s, %s, %s)", (self.id, keep, absorb)
        )
        return report

    def outcome(self, *facts: dict[str, Any]) -> dict[str, Any]:
        """assert_facts's answer, whatever it is (refusals included)."""
        answer: dict[str, Any] = self.one(
            "select memory.assert_facts(%s, %s::jsonb)", (self.id, json.dumps(facts, default=str))
        )
        return answer

    def counters(self) -> dict[str, int]:
        rows = self.all("select metric, value from memory.counters(%s)", (self.id,))
        return {m: v for m, v in rows if v}

    def names(self) -> set[tuple[str, str | None]]:
        """Every entity's name with each of its aliases (None: no alias)."""
        rows = self.all(
            """
            select e.name, a.normalized_alias
              from memory.entities e
              left join memory.entity_aliases a
                on a.org_id = e.org_id and a.entity_id = e.entity_id
             where e.project_id = %s
            """,
            (self.id,),
        )
        return set(rows)


@pytest.fixture
def pair(
    conn: psycopg.Connection[Any], org: uuid.UUID, request: pytest.FixtureRequest
) -> tuple[Merging, Merging]:
    """Two fresh projects: merged last in the first, an alias from the start in the second."""
    name = request.node.name
    return Merging(conn, org, f"{name} merged"), Merging(conn, org, f"{name} alias")


def merged_and_aliased(
    pair: tuple[Merging, Merging], writes: Callable[[Merging], None]
) -> tuple[dict[str, Any], datetime]:
    """Melanie and Mel: two entities merged after the writes in the first project, one
    entity with the alias Mel before them in the second. Returns the merge's report and
    an instant after the writes and before the merge."""
    merged, aliased = pair
    for p in pair:
        p.entity("Melanie")
        p.entity("Zoe")  # the control
    merged.entity("Mel")
    aliased.alias("Melanie", "Mel")
    writes(merged)
    writes(aliased)
    before = merged.now()
    return merged.merge("Melanie", "Mel"), before


def same_state(pair: tuple[Merging, Merging]) -> None:
    merged, aliased = pair
    for at in INSTANTS:
        assert merged.facts(at) == aliased.facts(at), at
        assert merged.edges(at) == aliased.edges(at), at
    assert merged.names() == aliased.names()


def test_a_subjects_facts_join_the_kept_entity_in_world_time_order(
    pair: tuple[Merging, Merging],
) -> None:
    """lives_in is cardinality one: Mel's Berlin (2021) closes Melanie's Paris (2020)
    once they are one person, as it does when Mel was an alias all along. Zoe's fact, of
    the same predicate and window, is the control."""

    def writes(p: Merging) -> None:
        p.one("select memory.declare_predicate(%s, 'lives in', 'one')", (p.id,))
        p.assert_facts(
            fact("Melanie", "lives in", "Paris", Y2020),
            fact("Zoe", "lives in", "Paris", Y2020),
        )
        p.assert_facts(fact("Mel", "lives in", "Berlin", Y2021))

    merged, _ = pair
    report, before = merged_and_aliased(pair, writes)
    assert report["merged"] is True
    assert (report["facts_rekeyed"], report["facts_superseded"]) == (1, 1), report
    same_state(pair)
    at_2022 = {(s, o): w.upper for s, _, _, o, _, w in merged.facts(INSTANTS[3])}
    assert at_2022 == {("Melanie", "Berlin"): None, ("Zoe", "Paris"): None}
    at_2020 = {(s, o): w.upper for s, _, _, o, _, w in merged.facts(INSTANTS[1])}
    assert at_2020 == {("Melanie", "Paris"): Y2021, ("Zoe", "Paris"): None}
    # What the store believed before the merge (two people, both windows open) is still
    # readable, under the kept name.
    believed = {(s, o): w.upper for s, _, _, o, _, w in merged.facts(INSTANTS[3], before)}
    assert believed == {("Melanie", "Paris"): None, ("Melanie", "Berlin"): None,
                        ("Zoe", "Paris"): None}  # fmt: skip
    # Counted as the alias project counts its write-time supersession.
    counters = [p.counters() for p in pair]
    assert counters[0].pop("entities_merged") == 1
    assert counters[0] == counters[1]
    assert counters[0]["facts_superseded"] == 1


def test_objects_and_edges_join_and_the_absorbed_name_resolves_to_the_kept_entity(
    pair: tuple[Merging, Merging],
) -> None:
    """knows is cardinality many: Bob knows Mel (2021) and Bob knows Melanie (2020) are
    one claim once merged, so the later start closes the earlier window and one edge
    covers both. Mel's own alias (Mellie) comes along: a later claim naming it is a new
    version of the same claim."""

    def writes(p: Merging) -> None:
        p.assert_facts(
            fact("Bob", "knows", "Melanie", Y2020, object_type="entity"),
            fact("Bob", "knows", "Zoe", Y2020, object_type="entity"),
        )
        p.assert_facts(fact("Bob", "knows", "Mel", Y2021, object_type="entity"))

    merged, aliased = pair
    merged.entity("Mel")
    merged.alias("Mel", "Mellie")
    aliased.entity("Melanie")
    aliased.alias("Melanie", "Mellie")
    report, _ = merged_and_aliased(pair, writes)
    assert report["aliases"] == ["mel", "mellie"]
    same_state(pair)
    # One edge over both windows (they are adjacent), beside Zoe's.
    assert {(t, w.lower, w.upper) for _, _, t, w in merged.edges(INSTANTS[3])} == {
        ("Melanie", Y2020, None), ("Zoe", Y2020, None)}  # fmt: skip
    # A later claim naming Mellie is a new version of the same claim (it closes the
    # current one), not a second person.
    for p in pair:
        again = p.assert_facts(fact("Bob", "knows", "Mellie", Y2022))
        assert (again["inserted"], again["superseded"]) == (1, 1), again
    # No entity is named Mel any more; its names resolve to Melanie.
    assert not merged.all("select from memory.entities where project_id = %s and name = 'Mel'",
                          (merged.id,))  # fmt: skip
    mel = merged.one("select memory.upsert_entity(%s, 'MEL')", (merged.id,))
    assert mel == merged.entity("Melanie") == uuid.UUID(report["entity_id"])


def test_a_retracted_claim_of_the_absorbed_entity_stays_refused(
    pair: tuple[Merging, Merging],
) -> None:
    """Mel's retracted "likes tea" refuses Melanie's later "likes tea". In the merged
    project both were made and retracted before the merge (the alias project refuses
    the second at once): one tombstone stays live. Zoe's claim (never retracted) is
    accepted: the positive control."""

    def writes(p: Merging) -> None:
        for who in ("Mel", "Melanie"):
            out = p.one(
                "select memory.assert_facts(%s, %s::jsonb)",
                (p.id, f'[{{"subject": "{who}", "predicate": "likes", "object": "tea"}}]'),
            )
            if out["inserted"]:
                fact_id = uuid.UUID(out["results"][0]["fact_id"])
                p.one("select memory.retract_fact(%s, %s, 'wrong')", (p.id, fact_id))

    merged_and_aliased(pair, writes)
    same_state(pair)
    for p in pair:
        live = p.one(
            "select count(*) from memory.tombstones where project_id = %s and lifted_at is null",
            (p.id,),
        )
        assert live == 1
        refused = p.one(
            "select memory.assert_facts(%s, %s::jsonb)",
            (p.id, '[{"subject": "Melanie", "predicate": "likes", "object": "tea"}]'),
        )
        assert refused["refused"] == 1, refused
        accepted = p.assert_facts({"subject": "Zoe", "predicate": "likes", "object": "tea"})
        assert accepted["inserted"] == 1


def test_edge_history_and_reads_at_an_earlier_known_at_name_the_kept_entity(
    pair: tuple[Merging, Merging],
) -> None:
    """Mel's edge, read at a known_at before the merge, is under Melanie (naming is not
    versioned), with the window believed then; the absorbed row is gone."""

    def writes(p: Merging) -> None:
        p.assert_facts(fact("Mel", "works at", "Acme", Y2020, object_type="entity"))

    merged, _ = pair
    report, before = merged_and_aliased(pair, writes)
    assert report["edges_repointed"] >= 1, report
    rows = merged.all(
        """
        select s.name, e.relation, t.name, e.valid_range
          from memory.edges_at(%s, %s, %s) e
          join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
          join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
        """,
        (merged.id, INSTANTS[2], before),
    )
    assert [(s, r, t) for s, r, t, _ in rows] == [("Melanie", "works at", "Acme")]
    same_state(pair)


def test_merging_an_entity_with_itself_or_an_unknown_name(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    p = Merging(conn, org, "self and unknown")
    p.entity("Melanie")
    p.alias("Melanie", "Mel")
    p.assert_facts(fact("Melanie", "likes", "tea", Y2020))
    before = p.facts(INSTANTS[2])
    report = p.merge("Mel", "melanie")
    assert report["merged"] is False and report["facts_rekeyed"] == 0
    assert p.facts(INSTANTS[2]) == before
    assert p.names() == {("Melanie", "mel")}
    with pytest.raises(psycopg.errors.NoDataFound, match='entity "Nobody" not found'):
        p.merge("Melanie", "Nobody")
    conn.rollback()
    with pytest.raises(psycopg.errors.NoDataFound, match='entity "Nobody" not found'):
        p.merge("Nobody", "Melanie")
    conn.rollback()


def test_a_writer_waits_for_a_merge_and_sees_the_merged_names(
    conn: psycopg.Connection[Any], org: uuid.UUID, app_dsn: str
) -> None:
    """A batch about Mel started while a merge holds the project lock waits for it, and
    then resolves Mel to Melanie: its fact supersedes Melanie's under the one predicate
    instead of starting a second person."""
    p = Merging(conn, org, "writer waits")
    p.one("select memory.declare_predicate(%s, 'lives in', 'one')", (p.id,))
    p.assert_facts(fact("Melanie", "lives in", "Paris", Y2020))
    p.entity("Mel")
    done: list[dict[str, Any]] = []
    with psycopg.connect(app_dsn) as merger, psycopg.connect(app_dsn) as writer:
        merger.execute("select memory.use_org(%s)", (org,))
        merger.execute("select memory.merge_entities(%s, 'Melanie', 'Mel')", (p.id,))

        def write() -> None:
            with writer.transaction():
                writer.execute("select memory.use_org(%s)", (org,))
                row = writer.execute(
                    "select memory.assert_facts(%s, %s::jsonb)",
                    (p.id, json.dumps([fact("Mel", "lives in", "Rome", Y2022)], default=str)),
                ).fetchone()
                assert row is not None
                done.append(row[0])

        thread = threading.Thread(target=write)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and not done  # waiting on the merge's lock
        merger.commit()
        thread.join(10)
    assert done and done[0]["superseded"] == 1, done
    assert {(s, o) for s, _, _, o, _, _ in p.facts(INSTANTS[4])} == {("Melanie", "Rome")}


def test_the_absorbed_entitys_notes_move_with_it(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """A preference the extractor noted about Mel is Melanie's after the merge (deleting
    the absorbed entity would otherwise cascade it away); Zoe's note is the control."""
    p = Merging(conn, org, "notes")
    for name in ("Melanie", "Mel", "Zoe"):
        p.entity(name)
    p.one("select memory.ingest(%s, 's', %s::jsonb)",
          (p.id, '[{"role": "user", "content": "Mel likes hiking, Zoe likes chess"}]'))  # fmt: skip
    episode = p.one("select episode_id from memory.episodes where project_id = %s", (p.id,))
    p.one(
        "select memory_worker.apply_extraction(%s, %s::jsonb)",
        (episode, '{"entities": [], "facts": [], "contradictions": [], "notes": ['
                  '{"kind": "preference", "subject": "Mel", "content": "Mel likes hiking"},'
                  '{"kind": "preference", "subject": "Zoe", "content": "Zoe likes chess"}]}'),
    )  # fmt: skip

    def notes() -> set[tuple[str, str]]:
        rows = p.all(
            """
            select s.name, n.content from memory.notes n
              join memory.entities s on s.org_id = n.org_id and s.entity_id = n.subject_id
             where n.project_id = %s
            """,
            (p.id,),
        )
        return set(rows)

    assert notes() == {("Mel", "Mel likes hiking"), ("Zoe", "Zoe likes chess")}
    report = p.merge("Melanie", "Mel")
    assert report["notes_moved"] == 1
    assert notes() == {("Melanie", "Mel likes hiking"), ("Zoe", "Zoe likes chess")}


def test_the_entity_leg_finds_the_kept_entity_by_the_absorbed_names(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """The name tokens the entity leg reads follow the merge: a question naming Mel's
    alias (a rare word no other entity has) finds Melanie, and before the merge found
    Mel (the positive control); Zoe is found by her own name throughout."""
    p = Merging(conn, org, "entity leg")
    melanie, mel, zoe = (p.entity(n) for n in ("Melanie", "Mel", "Zoe"))
    p.alias("Mel", "Quillfeather")

    def first(question: str) -> uuid.UUID:
        result = p.one(
            "select memory.search(%s, %s, null, p_k => 5, p_legs => array['entity'])",
            (p.id, question),
        )
        assert not result["degraded"], result["failed_legs"]
        return uuid.UUID(result["results"][0]["id"])

    assert (first("Where is Quillfeather?"), first("Where is Zoe?")) == (mel, zoe)
    p.merge("Melanie", "Mel")
    assert (first("Where is Quillfeather?"), first("Where is Zoe?")) == (melanie, zoe)
    assert first("Where is Mel?") == melanie


def test_a_dry_run_answers_what_the_merge_would_do_and_changes_nothing(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """The dry run's report is the merge's own (the same code, rolled back): the real
    merge that follows answers the same, and in between every fact, edge, name, event
    and counter of the project is as before."""
    p = Merging(conn, org, "dry run")
    p.one("select memory.declare_predicate(%s, 'lives in', 'one')", (p.id,))
    for name in ("Melanie", "Mel"):
        p.entity(name)
    p.alias("Mel", "Mellie")
    p.assert_facts(
        fact("Melanie", "lives in", "Paris", Y2020),
        fact("Bob", "knows", "Mel", Y2020, object_type="entity"),
    )
    p.assert_facts(fact("Mel", "lives in", "Berlin", Y2021))

    def state() -> tuple[Any, ...]:
        events = p.one("select count(*) from memory.fact_events where project_id = %s", (p.id,))
        return (
            {at: (p.facts(at), p.edges(at)) for at in INSTANTS},
            p.names(),
            p.counters(),
            events,
        )

    before = state()
    preview = p.one("select memory.merge_entities(%s, 'Melanie', 'Mel', p_dry_run => true)",
                    (p.id,))  # fmt: skip
    assert state() == before
    assert preview["dry_run"] is True and preview["merged"] is True
    assert (preview["facts_rekeyed"], preview["facts_superseded"]) == (2, 1), preview
    report = p.merge("Melanie", "Mel")
    assert report["dry_run"] is False
    assert {**preview, "dry_run": False} == report
    assert state() != before  # the positive control: the real merge changes what state reads


# -- split_entity: the inverse --------------------------------------------------------
def everything(p: Merging) -> tuple[Any, ...]:
    """What holds at every instant (facts and edges, by name), and the names."""
    return ({at: (p.facts(at), p.edges(at)) for at in INSTANTS}, p.names())


def mel_and_melanie_writes(p: Merging) -> None:
    """Claims about Mel and Melanie that a merge joins: lives_in (one) closes across
    them, knows (many) joins, each has an edge; Zoe is the control."""
    p.one("select memory.declare_predicate(%s, 'lives in', 'one')", (p.id,))
    p.assert_facts(
        fact("Melanie", "lives in", "Paris", Y2020),
        fact("Zoe", "lives in", "Paris", Y2020),
        fact("Bob", "knows", "Melanie", Y2020, object_type="entity"),
        fact("Melanie", "works at", "Acme", Y2020, object_type="entity"),
    )
    p.assert_facts(
        fact("Mel", "lives in", "Berlin", Y2021),
        fact("Bob", "knows", "Mel", Y2021, object_type="entity"),
        fact("Mel", "works at", "Globex", Y2022, object_type="entity"),
    )


def test_splitting_what_a_merge_joined_gives_back_the_state_before_it(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """merge then split is the identity on what holds: Melanie's Paris window, closed
    by Mel's Berlin when they were one, is open again; Bob knows both again, with an
    edge each; Mel is an entity of its own (a new one, by name)."""
    p = Merging(conn, org, "merge then split")
    for name in ("Melanie", "Mel", "Zoe"):
        p.entity(name)
    mel_and_melanie_writes(p)
    before = everything(p)
    p.merge("Melanie", "Mel")
    assert everything(p) != before  # the positive control: the merge changed it
    report = p.one("select memory.split_entity(%s, 'MEL')", (p.id,))
    assert report["facts_moved"] == 3 and report["windows_restored"] >= 1, report
    assert everything(p) == before
    # Mel's names resolve to the new entity, Melanie's to hers.
    assert p.one("select memory.upsert_entity(%s, 'mel')", (p.id,)) == uuid.UUID(
        report["entity_id"]
    )
    assert p.entity("Melanie") == uuid.UUID(report["split_from"])


def test_splitting_an_alias_is_as_if_the_name_had_been_an_entity_all_along(
    pair: tuple[Merging, Merging],
) -> None:
    """Mel written as an alias of Melanie, then split off, ends where Mel as an entity
    from the start ends. Bob's explicit literal "Mel" shares the claim's identity with
    the split-off object (an object's key is its name), so the two are laid out in
    world-time order either way."""
    split, apart = pair
    for p in pair:
        p.entity("Melanie")
        p.entity("Zoe")
    split.alias("Melanie", "Mel")
    apart.entity("Mel")

    def writes(p: Merging) -> None:
        mel_and_melanie_writes(p)
        p.assert_facts(
            fact("Bob", "likes", "Mel", Y2020, object_type="literal"),
            fact("Bob", "likes", "Mel", Y2022),
        )

    writes(split)
    writes(apart)
    assert everything(split) != everything(apart)  # the positive control
    split.one("select memory.split_entity(%s, 'Mel')", (split.id,))
    assert everything(split) == everything(apart)


def test_a_split_takes_its_tombstones_and_leaves_the_other_claims_free(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    """Mel's retracted "likes tea" (written while Mel was an alias of Melanie) stays
    refused for Mel after the split, and no longer refuses Melanie's."""
    p = Merging(conn, org, "split tombstones")
    p.entity("Melanie")
    p.alias("Melanie", "Mel")
    out = p.assert_facts(fact("Mel", "likes", "tea", Y2020))
    p.one("select memory.retract_fact(%s, %s, 'wrong')",
          (p.id, uuid.UUID(out["results"][0]["fact_id"])))  # fmt: skip
    refused = p.outcome(fact("Melanie", "likes", "tea", Y2021))
    assert refused["refused"] == 1  # one person: the claim was retracted
    p.one("select memory.split_entity(%s, 'Mel')", (p.id,))
    melanie = p.assert_facts(fact("Melanie", "likes", "tea", Y2021))
    assert melanie["inserted"] == 1, melanie
    mel = p.outcome(fact("Mel", "likes", "tea", Y2021))
    assert mel["refused"] == 1, mel


def test_splitting_a_name_that_is_no_alias_and_a_dry_run(
    conn: psycopg.Connection[Any], org: uuid.UUID
) -> None:
    p = Merging(conn, org, "split refusals")
    p.entity("Melanie")
    p.alias("Melanie", "Mel")
    p.assert_facts(fact("Mel", "likes", "tea", Y2020))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="entity's own name"):
        p.one("select memory.split_entity(%s, 'Melanie')", (p.id,))
    with pytest.raises(psycopg.errors.NoDataFound, match='alias "Nobody" not found'):
        p.one("select memory.split_entity(%s, 'Nobody')", (p.id,))
    before = everything(p)
    preview = p.one("select memory.split_entity(%s, 'Mel', p_dry_run => true)", (p.id,))
    assert (preview["dry_run"], preview["facts_moved"]) == (True, 1)
    assert everything(p) == before
    report = p.one("select memory.split_entity(%s, 'Mel')", (p.id,))
    assert {**preview, "dry_run": False, "entity_id": report["entity_id"]} == report
    assert everything(p) != before


def test_a_plain_name_taken_over_through_an_alias_goes_with_the_split(
    pair: tuple[Merging, Merging],
) -> None:
    """Bob likes "Mel", written as a plain name before Mel was an alias of Melanie: the
    alias took it over (Melanie's), the split gives it to Mel, as if Mel had been an
    entity all along."""
    split, apart = pair
    for p in pair:
        p.entity("Melanie")
        p.assert_facts(fact("Bob", "likes", "Mel", Y2020), fact("Bob", "likes", "Jazz", Y2020))
    split.alias("Melanie", "Mel")
    assert {o for _, p_, o, *_ in split.facts(INSTANTS[2]) if p_ == "likes"} == {"Melanie", None}
    apart.entity("Mel")
    split.one("select memory.split_entity(%s, 'Mel')", (split.id,))
    assert everything(split) == everything(apart)


def test_versions_from_before_written_names_are_split_by_the_merge_that_joined_them(
    conn: psycopg.Connection[Any], org: uuid.UUID, admin_dsn: str
) -> None:
    """Versions stored before migration 0022 have no written names; a merge records the
    absorbed entity's name on them, so a split still finds them."""
    p = Merging(conn, org, "old versions")
    for name in ("Melanie", "Mel", "Zoe"):
        p.entity(name)
    mel_and_melanie_writes(p)
    before = everything(p)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        forgot = admin.execute(
            "update memory.facts set subject_written = null, object_written = null "
            "where project_id = %s",
            (p.id,),
        ).rowcount
    assert forgot == 7
    p.merge("Melanie", "Mel")
    report = p.one("select memory.split_entity(%s, 'Mel')", (p.id,))
    assert report["facts_moved"] == 3, report
    assert everything(p) == before
