"""The background worker against a real server, as the app role.

The model is the scripted OpenAI-compatible server in scripted_openai.py (the real
`openai` client talks to it over loopback). Workers run in-process (workers.runner)
or as `chronomem worker` subprocesses. Jobs of other tests' orgs are set aside first
(`quiet`), so each test's worker sees only its own jobs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import worker_support
from scripted_openai import Hold, ScriptedOpenAI
from worker_support import drain_until, fact, limit_attempts, make_worker

from workers.extraction import NO_LLM_REASON
from workers.jobs import Handler, Job

T1 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)


class Tenant(worker_support.Tenant):
    def jobs(self, kind: str | None = None) -> list[dict[str, Any]]:
        return self.rows(
            "select * from memory.jobs where org_id = %s and (%s::text is null or kind = %s) "
            "and kind in ('enrich', 'embed') order by job_id",
            (self.org, kind, kind),
        )

    def facts_at(self, at: datetime) -> list[dict[str, Any]]:
        return self.rows(
            "select fact_id, predicate, object_literal, valid_range, content "
            "from memory.facts_at(%s, %s) order by predicate, valid_range",
            (self.project, at),
        )


@pytest.fixture
def tenant(app_dsn: str) -> Tenant:
    t = Tenant.create(app_dsn, "worker test")
    t.one("select memory.declare_predicate(%s, 'plan', 'one')", (t.project,))
    return t


def all_done(t: Tenant) -> Callable[[], bool]:
    return lambda: all(j["status"] == "done" for j in t.jobs())


# -- extraction end to end ---------------------------------------------------------------


def test_plan_change_supersedes_at_the_second_message(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    user = {"name": "user", "type": "person", "summary": None, "aliases": []}
    llm.answer("pro plan", {"entities": [user], "facts": [fact("user", "plan", "pro", "On pro.")]})
    llm.answer(
        "enterprise plan",
        {"entities": [user], "facts": [fact("user", "plan", "enterprise", "On enterprise.")]},
    )
    tenant.ingest(
        "s1",
        {"role": "user", "content": "I'm on the pro plan.", "occurred_at": T1},
        {"role": "user", "content": "We moved to the enterprise plan.", "occurred_at": T2},
    )
    drain_until(make_worker(app_dsn, llm), admin_dsn, tenant.org, all_done(tenant))

    before = tenant.facts_at(T1 + timedelta(days=1))
    after = tenant.facts_at(T2 + timedelta(days=1))
    assert [(f["predicate"], f["object_literal"]) for f in before] == [("plan", "pro")]
    assert [(f["predicate"], f["object_literal"]) for f in after] == [("plan", "enterprise")]
    assert before[0]["valid_range"].upper == T2  # closed at the second message's instant
    assert after[0]["valid_range"].lower == T2 and after[0]["valid_range"].upper is None
    # The model saw the first message as context of the second, and the declared predicate.
    second = llm.calls_for("enterprise plan")[0].context
    assert [t["content"] for t in second["recent_turns"]] == ["I'm on the pro plan."]
    assert {"predicate": "plan", "cardinality": "one"} in second["predicates"]
    # Every episode got its embedding too.
    assert tenant.one("select count(*) from memory.episodes where embedding is null") == 0


def test_contradiction_closes_the_cited_fact_only(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    result = tenant.one(
        "select memory.assert_facts(%s, %s::jsonb)",
        (
            tenant.project,
            json.dumps(
                [
                    fact("Alice", "lives_in", "Paris", "Alice lives in Paris.", valid_from=str(T1)),
                    fact("Alice", "works_at", "Acme", "Alice works at Acme.", valid_from=str(T1)),
                ]
            ),
        ),
    )
    paris, acme = (r["fact_id"] for r in result["results"])
    llm.answer(
        "moved out of Paris",
        {"contradictions": [{"fact_id": paris, "reason": "Alice moved out of Paris."}]},
    )
    tenant.ingest("s1", {"role": "user", "content": "Alice moved out of Paris.", "occurred_at": T2})
    drain_until(make_worker(app_dsn, llm), admin_dsn, tenant.org, all_done(tenant))

    # The model was shown both facts about Alice, with their ids.
    shown = {f["fact_id"] for f in llm.calls_for("moved out of Paris")[0].context["known_facts"]}
    assert shown == {paris, acme}
    now = {str(f["fact_id"]): f for f in tenant.facts_at(T2 + timedelta(days=1))}
    assert list(now) == [acme]  # Paris no longer holds; Acme does (positive control)
    windows = {
        str(r["fact_id"]): r["valid_range"]
        for r in tenant.rows(
            "select fact_id, valid_range from memory_internal.fact_versions(%s)", (tenant.project,)
        )
    }
    assert windows[paris].upper == T2 and windows[acme].upper is None
    events = tenant.rows(
        "select fact_id::text, event_type from memory.fact_events where event_type = 'contradicted'"
    )
    assert events == [{"fact_id": paris, "event_type": "contradicted"}]


def test_malformed_answers_retry_then_dead_and_nothing_written(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, owner_dsn: str, quiet: Any
) -> None:
    # Not JSON each time: every attempt asks twice (the re-ask carries the error), then
    # fails; an answer with invalid items instead keeps its valid ones
    # (tests/py/test_extraction_robust.py).
    llm.answer("garbled", "this is not JSON {")
    tenant.ingest("s1", {"role": "user", "content": "garbled message"})
    limit_attempts(admin_dsn, tenant.org, "enrich", 3)

    def enrich_dead() -> bool:
        return tenant.jobs("enrich")[0]["status"] == "dead"

    drain_until(make_worker(app_dsn, llm), admin_dsn, tenant.org, enrich_dead)
    (job,) = tenant.jobs("enrich")
    assert job["attempts"] == 3
    assert "malformed model answer, asked twice" in job["last_error"]
    assert "not valid JSON" in job["last_error"]  # the last error says what was wrong
    assert len(llm.calls_for("garbled")) == 6
    for table in ("memory.entities", "memory.notes", "memory.fact_events"):
        assert tenant.one(f"select count(*) from {table}") == 0
    assert tenant.one("select count(*) from memory.facts_at(%s)", (tenant.project,)) == 0
    assert [j["status"] for j in tenant.jobs("embed")] == ["done"]  # the episode is embedded

    # The model is fixed: `chronomem retry-jobs` queues the dead job again (attempts
    # reset), and the next drain applies what the model now answers.
    llm.answer("garbled", {"facts": [fact("user", "plan", "pro", "The user is on the pro plan.")]})
    # (This project's only: other tests' dead jobs share the queue.)
    retry = [*_cli(), "retry-jobs", "--project", str(tenant.project), "--dsn", owner_dsn]
    retried = subprocess.run(
        [*retry, "--kind", "enrich"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == "1 dead job(s) queued again"
    ((status, attempts),) = [(j["status"], j["attempts"]) for j in tenant.jobs("enrich")]
    assert (status, attempts) == ("queued", 0)
    make_worker(app_dsn, llm).drain(timeout=30)
    assert [j["status"] for j in tenant.jobs("enrich")] == ["done"]
    now = datetime.now(UTC)
    assert [f["content"] for f in tenant.facts_at(now)] == ["The user is on the pro plan."]
    again = subprocess.run(
        retry,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.stdout.strip() == "0 dead job(s) queued again", again  # nothing dead now


# -- crash, concurrency, enqueue ---------------------------------------------------------


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("chronomem")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]


def _worker_env(llm: ScriptedOpenAI | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOMEM_")}
    if llm is not None:
        env |= {
            "CHRONOMEM_LLM_BASE_URL": llm.base_url,
            "CHRONOMEM_LLM_MODEL": "scripted",
            "CHRONOMEM_EMBEDDING_BASE_URL": llm.base_url,
            "CHRONOMEM_EMBEDDING_MODEL": "scripted-embed",
        }
    return env | {"CHRONOMEM_WORKER_POLL_INTERVAL": "0.2", **extra}


def test_killed_worker_job_is_reclaimed_and_applied_once(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    gate = threading.Event()
    held = Hold(gate, {"facts": [fact("user", "plan", "team", "On the team plan.")]})
    llm.answer("team plan", held, held.reply)
    (episode,) = tenant.ingest("s1", {"role": "user", "content": "We are on the team plan."})
    proc = subprocess.Popen(
        [*_cli(), "worker", "--dsn", app_dsn],
        env=_worker_env(llm, CHRONOMEM_WORKER_LEASE="2", CHRONOMEM_WORKER_CONCURRENCY="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert held.arrived.wait(30), "the worker never asked the model"
        (job,) = tenant.jobs("enrich")
        assert job["status"] == "running" and job["locked_by"]
        proc.send_signal(signal.SIGKILL)  # mid-job: its transaction dies with it
        proc.wait(10)
        assert tenant.jobs("enrich")[0]["status"] == "running"  # until the lease expires

        def applied() -> bool:
            return tenant.jobs("enrich")[0]["status"] == "done"

        worker = make_worker(app_dsn, llm, lease=2)
        drain_until(worker, admin_dsn, tenant.org, applied, timeout=20)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()

    (job,) = tenant.jobs("enrich")
    assert job["attempts"] == 2 and job["locked_by"] is None
    facts = tenant.rows(
        "select source_episode_id::text from memory_internal.fact_versions(%s)", (tenant.project,)
    )
    assert facts == [{"source_episode_id": episode}]
    events = tenant.rows("select event_type from memory.fact_events")
    assert [e["event_type"] for e in events] == ["asserted"]


def test_sigterm_finishes_the_job_in_hand(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    gate = threading.Event()
    held = Hold(gate, {"facts": [fact("user", "plan", "free", "On the free plan.")]})
    llm.answer("free plan", held)
    tenant.ingest("s1", {"role": "user", "content": "I use the free plan."})
    proc = subprocess.Popen(
        [*_cli(), "worker", "--dsn", app_dsn],
        env=_worker_env(llm, CHRONOMEM_WORKER_CONCURRENCY="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert held.arrived.wait(30), "the worker never asked the model"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None  # still finishing the job
        gate.set()
        _, stderr = proc.communicate(timeout=30)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert [j["status"] for j in tenant.jobs("enrich")] == ["done"]
    assert len(tenant.facts_at(datetime.now(UTC))) == 1
    logged = [json.loads(line)["msg"] for line in stderr.splitlines() if line.startswith("{")]
    assert logged[-1] == "worker stopped" and "job done" in logged


def test_notify_wakes_an_idle_worker(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    worker = make_worker(app_dsn, llm, concurrency=2)
    worker.poll_interval = 60.0  # so only the NOTIFY at commit can wake it in time
    worker.start()
    try:
        time.sleep(1.0)  # listening, lanes idle
        started = time.monotonic()
        tenant.ingest("s1", {"role": "user", "content": "Wake up."})
        while not (tenant.jobs() and all_done(tenant)()):
            assert time.monotonic() - started < 10, "the worker did not wake on NOTIFY"
            time.sleep(0.05)
    finally:
        worker.stop()
        assert worker.wait(10)
    assert [j["kind"] for j in tenant.jobs()] == ["enrich", "embed"]


def test_concurrent_workers_never_run_a_job_twice(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    """200 jobs of three orgs, interleaved in the queue (claim_jobs claims org by org),
    drained by four workers: each runs once."""
    owners = [(tenant.org, tenant.project)]
    for i in range(2):
        with psycopg.connect(app_dsn) as conn:  # one transaction: use_org's scope
            org = conn.execute("select memory.create_org(%s)", (f"drain {i}",)).fetchone()
            assert org is not None
            conn.execute("select memory.use_org(%s)", org)
            project = conn.execute("select memory.create_project(%s, 'p')", org).fetchone()
            assert project is not None
            owners.append((org[0], project[0]))
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "insert into memory.jobs (org_id, project_id, kind, payload, run_at) "
                "select (%s::uuid[])[1 + g %% 3], (%s::uuid[])[1 + g %% 3], 'embed', "
                '\'{"kind": "episode", "ids": []}\', '
                "now() - interval '1 minute' + g * interval '1 ms' "
                "from generate_series(1, 200) g returning job_id",
                ([o for o, _ in owners], [p for _, p in owners]),
            ).fetchall()
        ]
    runs: list[tuple[int, str]] = []
    lock = threading.Lock()

    def record(handler: Handler) -> Handler:
        def run(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
            with lock:
                runs.append((job.job_id, threading.current_thread().name))
            return handler(conn, job)

        return run

    workers = [make_worker(app_dsn, llm, name=f"w{i}", wrap=record) for i in range(4)]
    for w in workers:
        w.start(until_idle=True)
    assert all(w.wait(60) for w in workers)

    counts = Counter(job_id for job_id, _ in runs)
    assert set(ids) <= set(counts)
    assert [j for j, n in counts.items() if n > 1] == []
    assert len({w.name for w in workers}) == 4
    with psycopg.connect(admin_dsn) as conn:
        status = conn.execute(
            "select status, attempts, count(distinct org_id), count(*) from memory.jobs"
            " where job_id = any(%s) group by 1, 2",
            (ids,),
        ).fetchall()
    assert status == [("done", 1, 3, 200)]


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "no-heartbeat-control"])
def test_a_job_longer_than_its_lease_is_not_run_twice(
    heartbeat: bool, tenant: Tenant, llm: ScriptedOpenAI, admin_dsn: str, app_dsn: str, quiet: Any
) -> None:
    """A lane renews its lease while it works: a second worker polling all along never
    reclaims the job. Without the heartbeat (the control) the same run is reclaimed."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        (job_id,) = conn.execute(
            "insert into memory.jobs (org_id, project_id, kind, payload) "
            'values (%s, %s, \'embed\', \'{"kind": "episode", "ids": []}\') returning job_id',
            (tenant.org, tenant.project),
        ).fetchone()  # type: ignore[misc]
    runs: list[str] = []

    def slow(handler: Handler) -> Handler:
        def run(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
            runs.append(threading.current_thread().name)
            time.sleep(3.5)  # almost three leases of 1.2 s
            return handler(conn, job)

        return run

    holder = make_worker(app_dsn, llm, name="holder", lease=1.2, wrap=slow)
    holder.heartbeat = heartbeat
    other = make_worker(app_dsn, llm, name="other", lease=1.2, wrap=slow)
    holder.start(until_idle=True)
    while not runs:
        time.sleep(0.05)
    while any(t.is_alive() for t in holder._lanes):
        assert other.drain(timeout=30)
        time.sleep(0.1)
    assert holder.wait(10)
    assert other.drain(timeout=30)

    (job,) = tenant.rows("select status, attempts from memory.jobs where job_id = %s", (job_id,))
    if heartbeat:
        assert len(runs) == 1 and job == {"status": "done", "attempts": 1}
    else:
        assert len(runs) == 2 and job == {"status": "done", "attempts": 2}


def test_enqueue_is_transactional(tenant: Tenant, app_dsn: str) -> None:
    messages = json.dumps([{"role": "user", "content": "hello"}])
    with psycopg.connect(app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        rolled = conn.execute(
            "select memory.ingest(%s, 's1', %s::jsonb)", (tenant.project, messages)
        ).fetchone()[0]["episode_ids"][0]  # type: ignore[index]
        conn.rollback()
    (kept,) = tenant.ingest("s2", {"role": "user", "content": "hello"})

    def jobs_for(episode: str) -> list[str]:
        return [
            j["kind"]
            for j in tenant.jobs()
            if j["payload"].get("episode_id") == episode or episode in j["payload"].get("ids", [])
        ]

    assert jobs_for(rolled) == []
    assert jobs_for(kept) == ["enrich", "embed"]


def test_periodic_jobs_run_per_org(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    tenant.one(
        "select memory.assert_facts(%s, %s::jsonb)",
        (
            tenant.project,
            json.dumps([fact("Alice", "works_at", "Acme", "At Acme.", object_type="entity")]),
        ),
    )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.job_schedules set next_run_at = now() where org_id = %s", (tenant.org,)
        )

    def project_communities_jobs() -> list[dict[str, Any]]:
        return tenant.rows(
            "select status, result from memory.jobs where org_id = %s and kind = 'communities' "
            "and project_id = %s order by job_id",
            (tenant.org, tenant.project),
        )

    make_worker(app_dsn, llm).drain(timeout=30)  # queues the due schedules, then runs them
    results = {
        j["kind"]: j
        for j in tenant.rows(
            "select kind, status, result from memory.jobs where org_id = %s "
            "and kind in ('reconcile_edges', 'communities', 'purge') and project_id is null",
            (tenant.org,),
        )
    }
    assert {k: j["status"] for k, j in results.items()} == {
        "reconcile_edges": "done",
        "communities": "done",
        "purge": "done",
    }
    assert results["reconcile_edges"]["result"]["keys_healed"] == 0  # nothing had drifted
    # The org's communities job queued one for the project, which the drain ran.
    first = results["communities"]["result"]
    assert first == {"queued": [str(tenant.project)], "pending": 0, "unchanged": 0}, first
    computed = project_communities_jobs()
    assert [j["status"] for j in computed] == ["done"], computed
    communities = computed[0]["result"]
    assert communities["computed"] is True, communities
    assert communities["communities"] == 1 and communities["members"] == 2  # Alice, Acme
    assert "jobs_purged" in results["purge"]["result"]

    def run_communities_job() -> dict[str, Any]:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                "update memory.job_schedules set next_run_at = now() "
                "where org_id = %s and kind = 'communities'",
                (tenant.org,),
            )
        make_worker(app_dsn, llm).drain(timeout=30)
        newest = tenant.one(
            "select result from memory.jobs where org_id = %s and kind = 'communities' "
            "and project_id is null order by job_id desc limit 1",
            (tenant.org,),
        )
        assert newest is not None, newest
        result: dict[str, Any] = newest
        return result

    # The next run finds the graph unchanged and queues nothing ...
    again = run_communities_job()
    assert again == {"queued": [], "pending": 0, "unchanged": 1}, again
    assert len(project_communities_jobs()) == 1
    # ... and after a new edge queues the project's job, which computes them again.
    tenant.one(
        "select memory.assert_facts(%s, %s::jsonb)",
        (
            tenant.project,
            json.dumps([fact("Bob", "works_at", "Acme", "At Acme too.", object_type="entity")]),
        ),
    )
    changed = run_communities_job()
    assert changed["queued"] == [str(tenant.project)], changed
    latest = project_communities_jobs()[-1]
    assert latest["status"] == "done" and latest["result"]["members"] == 3, latest  # + Bob


# -- without a model ---------------------------------------------------------------------


def test_without_llm_enrich_waits_and_embedding_goes_on(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    """`chronomem worker --drain` with no LLM configured and the default (local) embedder."""
    tenant.ingest("s1", {"role": "user", "content": "Remember that I like green tea."})
    env = _worker_env(None)
    try:
        import torch  # noqa: F401
    except ImportError:  # the local model needs the `embed` extra; embed remotely then
        env |= {
            "CHRONOMEM_EMBEDDING_BASE_URL": llm.base_url,
            "CHRONOMEM_EMBEDDING_MODEL": "scripted-embed",
        }
    done = subprocess.run(
        [*_cli(), "worker", "--dsn", app_dsn, "--drain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (enrich,) = tenant.jobs("enrich")
    assert enrich["status"] == "waiting" and enrich["last_error"] == NO_LLM_REASON
    assert enrich["attempts"] == 0  # waiting costs no attempt
    assert [j["status"] for j in tenant.jobs("embed")] == ["done"]
    assert tenant.one("select count(*) from memory.episodes where embedding is not null") == 1
    assert llm.chat_calls == []


def test_worker_refuses_a_model_of_another_dimension(llm: ScriptedOpenAI, app_dsn: str) -> None:
    done = subprocess.run(
        [*_cli(), "worker", "--dsn", app_dsn, "--drain"],
        env=_worker_env(llm, CHRONOMEM_EMBEDDING_DIM="8"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "dimension mismatch" in done.stderr and "chronomem reembed --dim 8" in done.stderr
