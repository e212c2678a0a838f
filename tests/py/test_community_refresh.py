"""Concurrent community computations: two refreshes of one project (two workers running
the periodic job at once) end with one set of communities, the second finding the work
done; and a subject wipe that runs while the communities are being computed never leaves
a community labelled with the wiped name."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from org_scope import one_in, rows_in


def _knows(*pairs: tuple[str, str]) -> str:
    knows = {"predicate": "knows", "object_type": "entity"}
    return json.dumps([{**knows, "subject": a, "object": b} for a, b in pairs])


@pytest.fixture
def project(app_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], uuid.UUID, uuid.UUID]]:
    """Ann, Ben and Cat know each other (a triangle: one community whatever the entity ids,
    labelled Ann, the first of three names with two links each), computed once."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('community refresh')").fetchone()[0]  # type: ignore[index]
        project = one_in(conn, org, "select memory.create_project(%s, 'p')", (org,))
        one_in(
            conn,
            org,
            "select memory.assert_facts(%s, %s::jsonb)",
            (project, _knows(("Ann", "Ben"), ("Ann", "Cat"), ("Ben", "Cat"))),
        )
        one_in(conn, org, "select memory.compute_communities(%s)", (project,))
        yield conn, org, project


def _while_held(
    app_dsn: str,
    watcher: psycopg.Connection[Any],
    org: uuid.UUID,
    first: str,
    second: str,
    params: tuple[Any, ...],
) -> tuple[Any, bool, dict[str, Any]]:
    """Run `first` in one transaction and, before it commits, `second` in another (a
    thread): `first`'s answer, whether `second` waited on an advisory lock, and
    `second`'s answer ("result") or error ("error") once both committed."""
    out: dict[str, Any] = {}
    with psycopg.connect(app_dsn) as one, psycopg.connect(app_dsn) as two:
        one.execute("select memory.use_org(%s)", (org,))
        answer = one.execute(first, params).fetchone()[0]  # type: ignore[index]

        def run() -> None:
            try:
                two.execute("select memory.use_org(%s)", (org,))
                out["result"] = two.execute(second, params).fetchone()[0]  # type: ignore[index]
                two.commit()
            except Exception as err:  # reported by the test
                out["error"] = err

        thread = threading.Thread(target=run)
        thread.start()
        waited = _waits_on_advisory_lock(watcher, two.info.backend_pid)
        one.commit()
        thread.join(30)
    return answer, waited, out


def _waits_on_advisory_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    """Whether backend `pid` waits on an advisory lock, within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = conn.execute(
            "select wait_event_type, wait_event from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()
        if row == ("Lock", "advisory"):
            return True
        time.sleep(0.05)
    return False


def _groups(conn: psycopg.Connection[Any], org: uuid.UUID, project: uuid.UUID) -> list[Any]:
    return rows_in(
        conn,
        org,
        "select c.label, array_agg(n.name order by n.name) from memory.communities c "
        "join memory.community_members m "
        "on m.org_id = c.org_id and m.community_id = c.community_id "
        "join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id "
        "where c.project_id = %s group by c.community_id, c.label order by c.label",
        (project,),
    )


def test_concurrent_refreshes_compute_once(
    app_dsn: str, project: tuple[psycopg.Connection[Any], uuid.UUID, uuid.UUID]
) -> None:
    conn, org, p = project
    one_in(conn, org, "select memory.assert_facts(%s, %s::jsonb)", (p, _knows(("Cat", "Dan"))))
    refresh = "select memory.refresh_communities(%s)"
    answer, waited, out = _while_held(app_dsn, conn, org, refresh, refresh, (p,))
    assert answer["computed"], answer  # the new edge: computed by the first
    assert waited, "the second refresh did not wait for the first"
    assert "error" not in out, out
    assert out["result"]["computed"] is False, out  # it found the work done
    # One set of communities: each entity in one (how Dan is grouped depends on the ids).
    members = sorted(name for _, names in _groups(conn, org, p) for name in names)
    assert members == ["Ann", "Ben", "Cat", "Dan"], members


def test_subject_wipe_waits_for_a_computation(
    app_dsn: str, project: tuple[psycopg.Connection[Any], uuid.UUID, uuid.UUID]
) -> None:
    conn, org, p = project
    assert _groups(conn, org, p) == [("Ann", ["Ann", "Ben", "Cat"])]  # control: her label
    _, waited, out = _while_held(
        app_dsn,
        conn,
        org,
        "select memory.compute_communities(%s)",
        "select memory.wipe(%s, p_subject => 'Ann')",
        (p,),
    )
    assert waited, "the wipe did not wait for the computation"
    assert "error" not in out, out
    labels = [label for label, _ in _groups(conn, org, p)]
    assert "Ann" not in labels, labels
    # The next refresh groups what is left.
    one_in(conn, org, "select memory.refresh_communities(%s)", (p,))
    assert _groups(conn, org, p) == [("Ben", ["Ben", "Cat"])]


def _project_lock_key(project: uuid.UUID) -> str:
    return f"hashtextextended('chronomem.project:' || '{project}', 0)"


def test_the_periodic_job_queues_each_changed_project_without_locks(
    app_dsn: str, admin_dsn: str
) -> None:
    """The periodic job (memory_worker.queue_community_refreshes) queues one job per project
    whose graph changed, each of which takes that project's locks only while it runs:
    with one project's write lock held exclusively (as a wipe or a merge holds it),
    the sweep neither waits nor fails, and queues both; a second sweep queues nothing
    more; once the projects' jobs ran, the next sweep finds both unchanged."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('community sweep')").fetchone()[0]  # type: ignore[index]
        projects = sorted(
            (
                one_in(conn, org, "select memory.create_project(%s, %s)", (org, name))
                for name in ("first", "second")
            ),
            key=str,
        )
        for p in projects:
            one_in(
                conn,
                org,
                "select memory.assert_facts(%s, %s::jsonb)",
                (p, _knows(("Ann", "Ben"), ("Ann", "Cat"), ("Ben", "Cat"))),
            )
        with psycopg.connect(admin_dsn, autocommit=True) as holder:
            holder.execute(f"select pg_advisory_lock({_project_lock_key(projects[0])})")
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (org,))
                conn.execute("set local lock_timeout = '300ms'")
                answer = conn.execute(
                    "select memory_worker.queue_community_refreshes()"
                ).fetchone()[0]  # type: ignore[index]
        assert answer == {"queued": [str(p) for p in projects], "pending": 0, "unchanged": 0}
        again = one_in(conn, org, "select memory_worker.queue_community_refreshes()")
        assert again == {"queued": [], "pending": 2, "unchanged": 0}, again
        jobs = rows_in(
            conn,
            org,
            "select project_id, payload from memory.jobs where kind = 'communities' "
            "and status = 'queued' order by project_id",
        )
        assert jobs == [(p, {"max_rounds": 20}) for p in projects], jobs
        # The projects' jobs run as the worker runs them: claimed, refreshed, done.
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            claimed = conn.execute(
                "select org_id, job_id, project_id from memory_worker.claim_jobs('t', "
                "array['communities'], 10)"
            ).fetchall()
            assert sorted(c[2] for c in claimed) == projects, claimed
            for job_org, job, p in claimed:
                result = conn.execute("select memory.refresh_communities(%s, 20)", (p,)).fetchone()[
                    0
                ]  # type: ignore[index]
                assert result["computed"] is True, result
                conn.execute(
                    "select memory_worker.complete_job(%s, %s, 't', %s::jsonb)",
                    (job_org, job, json.dumps(result)),
                )
        for p in projects:
            assert _groups(conn, org, p) == [("Ann", ["Ann", "Ben", "Cat"])]
        settled = one_in(conn, org, "select memory_worker.queue_community_refreshes()")
        assert settled == {"queued": [], "pending": 0, "unchanged": 2}, settled
        # Control: a new edge in one project queues that project alone.
        one_in(
            conn,
            org,
            "select memory.assert_facts(%s, %s::jsonb)",
            (projects[1], _knows(("Cat", "Dan"))),
        )
        changed = one_in(conn, org, "select memory_worker.queue_community_refreshes()")
        assert changed == {"queued": [str(projects[1])], "pending": 0, "unchanged": 1}, changed
