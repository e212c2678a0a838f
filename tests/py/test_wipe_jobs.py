"""A wipe takes the queued work for what it deleted with it, in its transaction: no
enrich or embed job is left pointing at a wiped episode, fact or entity, while jobs of
what stays are untouched. Runs as the app role in one transaction, rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb


@pytest.fixture
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(app_dsn, row_factory=dict_row) as c:
        yield c
        c.rollback()


def _project(conn: psycopg.Connection[Any], name: str) -> tuple[Any, Any]:
    """A new org's project; leaves the transaction scoped to the org."""
    org = conn.execute("select memory.create_org(%s) as id", (name,)).fetchone()
    assert org is not None
    conn.execute("select memory.use_org(%s)", (org["id"],))
    row = conn.execute("select memory.create_project(%s, 'p') as id", (org["id"],)).fetchone()
    assert row is not None
    return org["id"], row["id"]


def _ingest(conn: psycopg.Connection[Any], project: Any, session: str, *texts: str) -> list[str]:
    row = conn.execute(
        "select memory.ingest(%s, %s, %s) as r",
        (project, session, Jsonb([{"role": "user", "content": t} for t in texts])),
    ).fetchone()
    assert row is not None
    ids: list[str] = row["r"]["episode_ids"]
    return ids


def _jobs(conn: psycopg.Connection[Any], project: Any) -> dict[str, Any]:
    """Queued work of the project: enrich episode ids, and embed ids per kind."""
    rows = conn.execute(
        "select kind, status, payload, result from memory.jobs where project_id = %s "
        "and kind in ('enrich', 'embed') order by job_id",
        (project,),
    ).fetchall()
    queued = [r for r in rows if r["status"] == "queued"]
    embed: dict[str, set[str]] = {"episode": set(), "fact": set(), "entity": set()}
    for r in queued:
        if r["kind"] == "embed":
            embed[r["payload"]["kind"]] |= set(r["payload"]["ids"])
    return {
        "enrich": {r["payload"]["episode_id"] for r in queued if r["kind"] == "enrich"},
        "embed": embed,
        "skipped": sum(
            1
            for r in rows
            if r["status"] == "done" and r["result"] == {"skipped": "wiped before it ran"}
        ),
    }


def test_wipe_cancels_the_jobs_of_what_it_deleted(conn: psycopg.Connection[Any]) -> None:
    other_org, other = _project(conn, "wipe jobs other org")
    other_episodes = _ingest(conn, other, "s1", "untouched")
    _, project = _project(conn, "wipe jobs org")
    gone = _ingest(conn, project, "s1", "Alice says hi", "Alice works at Acme")
    kept = _ingest(conn, project, "s2", "Bob says hi")
    conn.execute(
        "select memory.assert_facts(%s, %s)",
        (
            project,
            Jsonb(
                [
                    {"subject": "Alice", "predicate": "likes", "object": "tea"},
                    {"subject": "Bob", "predicate": "likes", "object": "coffee"},
                ]
            ),
        ),
    )
    facts = {
        r["subject"]: str(r["fact_id"])
        for r in conn.execute(
            "select s.name as subject, f.fact_id from memory.facts_at(%s) f "
            "join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id",
            (project,),
        )
    }
    alice = conn.execute(
        "select entity_id::text as id from memory.entities where project_id = %s "
        "and normalized_name = 'alice'",
        (project,),
    ).fetchone()
    assert alice is not None
    before = _jobs(conn, project)
    # Every row has its queued job to start with (the setup is what it should be).
    assert before["enrich"] == set(gone + kept)
    assert before["embed"]["episode"] == set(gone + kept)
    assert before["embed"]["fact"] == set(facts.values())
    assert alice["id"] in before["embed"]["entity"]
    assert before["skipped"] == 0

    # Session s1: its episodes' enrich jobs are done, its ids leave the embed jobs.
    conn.execute("select memory.wipe(%s, 's1')", (project,))
    after = _jobs(conn, project)
    assert after["enrich"] == set(kept)
    assert after["embed"]["episode"] == set(kept)
    assert after["embed"]["fact"] == set(facts.values())  # no fact came from s1
    assert after["skipped"] == len(gone) + 1  # two enrich jobs and s1's embed job

    # Subject Alice: her fact and entity leave the embed jobs; Bob's stay.
    conn.execute("select memory.wipe(%s, null, 'Alice')", (project,))
    after = _jobs(conn, project)
    assert after["embed"]["fact"] == {facts["Bob"]}
    assert alice["id"] not in after["embed"]["entity"] and after["embed"]["entity"]
    assert after["enrich"] == set(kept)

    # The whole project: nothing queued is left for it.
    conn.execute("select memory.wipe(%s)", (project,))
    after = _jobs(conn, project)
    assert after["enrich"] == set()
    assert all(ids == set() for ids in after["embed"].values())

    # Another org's jobs are untouched (positive control: they are visible in scope).
    conn.execute("select memory.use_org(%s)", (other_org,))
    assert _jobs(conn, other)["enrich"] == set(other_episodes)
