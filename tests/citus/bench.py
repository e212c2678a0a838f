"""A small run on a Citus cluster against one server (docs/scale-out.md has the figures).

    .venv/bin/python tests/citus/bench.py --coordinator DSN --single DSN [--out FILE]

Both DSNs are superusers on a maintenance database; on each, the database
`chronomem_bench_citus` is made (on the cluster: on every node, then distributed with
`chronomem distribute`), migrated and filled with a few orgs' projects, then:

- scope: `memory.use_org` (SET LOCAL through memory_internal.set_local) per call,
  against the same scope written with set_config() (what it was before);
- writes: facts per second stored through the coordinator, each transaction one org's
  scope and one batch of rows into a table shaped as memory.facts (its keys, its
  exclusion constraint and its eleven indexes; not its triggers);
- memory.assert_facts, the API's write path: facts/s on each (where it stops, the
  error is reported);
- memory.search: p50/p95 of the API's search of one org's project (its text, entity
  and graph legs), and how many answers had a leg fail;
- reads: p50/p95 of a subject's current facts read by org (Citus routes it to the
  org's shard) and of the same read without naming the org (as a query that leaves
  the org to the policy: Citus cannot route it, every shard is asked);
- the job queue: the worker's protocol without a handler, memory_worker.claim_jobs of
  one job then memory_worker.complete_job, each its own transaction as the app role,
  over jobs queued in every org: the claim's p50/p95 and jobs per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "citus"))
sys.path.insert(0, str(ROOT))

import nodes  # noqa: E402
from psycopg import sql  # noqa: E402

from benchmarks.common import git_state, latency_ms  # noqa: E402
from chronomem.bootstrap import bootstrap  # noqa: E402
from chronomem.distribute import distribute  # noqa: E402
from chronomem.dsn import with_params  # noqa: E402
from chronomem.migrate import migrate  # noqa: E402
from chronomem.settings import OWNER_ROLE  # noqa: E402

DB = "chronomem_bench_citus"
Conn = psycopg.Connection[Any]


def prepare(server_admin: str, citus: bool) -> str:
    """The migrated (and on Citus distributed) bench database; returns the owner DSN."""
    if citus:
        admin = nodes.create_database(server_admin, DB)
    else:
        with psycopg.connect(server_admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(DB))
            )
        admin = with_params(server_admin, dbname=DB)
    owner = bootstrap(server_admin, DB)
    if citus:
        nodes.hand_to_owner(admin, DB, OWNER_ROLE)
    migrate(owner)
    if citus:
        distribute(owner)
    return owner


def tenants(conn: Conn, orgs: int) -> list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]]:
    """(org, project, subject id) per org, each made in transactions of its own."""
    made = []
    for i in range(orgs):
        with conn.transaction():
            org = one(conn, "select memory.create_org(%s)", (f"bench {i}",))
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            project = one(conn, "select memory.create_project(%s, 'p')", (org,))
        made.append((org, project, uuid.uuid4()))
    return made


def one(conn: Conn, query: str, params: tuple[Any, ...]) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def facts_shaped_table(conn: Conn, citus: bool) -> None:
    """bench_facts: memory.facts' columns, keys, exclusion constraint and indexes (not its
    triggers, which Citus cannot run: docs/scale-out.md), on Citus colocated by org."""
    with conn.transaction():
        conn.execute("drop table if exists public.bench_facts")
        conn.execute("create table public.bench_facts (like memory.facts including all)")
        if citus:
            conn.execute(
                "select create_distributed_table('public.bench_facts', 'org_id',"
                " colocate_with => 'memory.orgs')"
            )


def scope_cost(conn: Conn, org: uuid.UUID, calls: int) -> dict[str, float]:
    """Microseconds per call: the scope written as SET LOCAL (memory_internal.set_local),
    as set_config() (before), and a whole memory.use_org."""
    out = {}
    for label, call in (
        ("set_local_us", f"perform memory_internal.set_local('chronomem.org_id', '{org}')"),
        ("set_config_us", f"perform set_config('chronomem.org_id', '{org}', true)"),
        ("use_org_us", f"perform memory.use_org('{org}')"),
    ):
        with conn.transaction():
            started = time.perf_counter()
            conn.execute(f"do $$ begin for i in 1..{calls} loop {call}; end loop; end $$")
            out[label] = (time.perf_counter() - started) / calls * 1e6
    return out


def write_rate(
    conn: Conn, made: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]], batches: int, batch: int
) -> float:
    """Facts per second: `batches` transactions per org in turn, `batch` rows each."""
    insert = """
        insert into public.bench_facts (org_id, project_id, subject_id, predicate, predicate_label,
                                  object_literal, object_key, identity_object, content,
                                  content_key, source, valid_from, valid_range)
        select %(org)s, %(project)s, %(subject)s, 'p' || %(b)s, 'p' || %(b)s, 'v' || g, 'v' || g,
               'v' || g, 'alice p' || %(b)s || ' v' || g, 'alice p v' || g, 'import',
               '2024-01-01', tstzrange('2024-01-01', null)
          from generate_series(1, %(n)s) g
    """
    started = time.perf_counter()
    for b in range(batches):
        for org, project, subject in made:
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (org,))
                conn.execute(
                    insert, {"org": org, "project": project, "subject": subject, "b": b, "n": batch}
                )
    return batches * len(made) * batch / (time.perf_counter() - started)


def assert_facts_rate(
    app: Conn, made: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]], batches: int, batch: int
) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        for b in range(batches):
            for org, project, _ in made:
                facts = [
                    {"subject": "bob", "predicate": f"q{b}", "object": f"w{i}"}
                    for i in range(batch)
                ]
                with app.transaction():
                    app.execute("select memory.use_org(%s)", (org,))
                    app.execute("select memory.assert_facts(%s, %s)", (project, json.dumps(facts)))
    except psycopg.Error as err:
        app.rollback()
        return {"facts_per_s": None, "error": str(err).splitlines()[0]}
    return {"facts_per_s": batches * len(made) * batch / (time.perf_counter() - started)}


def read_latency(
    conn: Conn, made: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]], calls: int, routed: bool
) -> dict[str, float]:
    where = "f.org_id = %(org)s and " if routed else ""
    query = (
        "select f.fact_id, f.content from public.bench_facts f where "
        + where
        + "f.project_id = %(project)s and f.subject_id = %(subject)s and f.invalid_at is null"
        " order by f.valid_from desc, f.fact_id limit 10"
    )
    times = []
    for i in range(calls):
        org, project, subject = made[i % len(made)]
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (org,))
            started = time.perf_counter()
            rows = conn.execute(
                query, {"org": org, "project": project, "subject": subject}
            ).fetchall()
            times.append(time.perf_counter() - started)
            assert rows, "no facts read"
    return latency_ms(times)


def search_latency(
    app: Conn, made: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]], calls: int
) -> dict[str, Any]:
    """memory.search through the API's function (its text, entity and graph legs: no
    query vector), on the facts assert_facts stored; failed legs are counted."""
    times, failed, empty = [], 0, 0
    try:
        for i in range(calls):
            org, project, _ = made[i % len(made)]
            with app.transaction():
                app.execute("select memory.use_org(%s)", (org,))
                started = time.perf_counter()
                answer = one(app, "select memory.search(%s, %s)", (project, f"bob q0 w{i % 50}"))
                times.append(time.perf_counter() - started)
                empty += not answer["results"]
                failed += bool(answer.get("failed_legs"))
    except psycopg.Error as err:
        app.rollback()
        return {"p50": None, "error": str(err).splitlines()[0]}
    return {
        **latency_ms(times),
        "answers_with_a_failed_leg": failed,
        "answers_without_results": empty,
        "calls": calls,
    }


def queue_drain(
    owner: Conn, app: Conn, made: list[tuple[uuid.UUID, uuid.UUID, uuid.UUID]], jobs: int
) -> dict[str, Any]:
    """`jobs` embed jobs per org (ids none: nothing for a handler to do), then claims of
    one job and its completion until the queue is empty."""
    for org, project, _ in made:
        with owner.transaction():
            owner.execute("select memory.use_org(%s)", (org,))
            owner.execute(
                "insert into memory.jobs (org_id, project_id, kind, payload)"
                ' select %s, %s, \'embed\', \'{"kind": "fact", "ids": []}\''
                # RETURNING: without it Citus sends the rows as COPY, which forced
                # row-level security refuses.
                " from generate_series(1, %s) returning job_id",
                (org, project, jobs),
            ).fetchall()
    kinds = ["embed", "enrich", "reconcile_edges", "communities", "purge"]
    times, done = [], 0
    started = time.perf_counter()
    try:
        while True:
            with app.transaction():
                t0 = time.perf_counter()
                row = app.execute(
                    "select org_id, job_id from memory_worker.claim_jobs('bench', %s, 1)", (kinds,)
                ).fetchone()
                times.append(time.perf_counter() - t0)
            if row is None:
                break
            with app.transaction():
                app.execute("select memory_worker.complete_job(%s, %s, 'bench')", row)
            done += 1
    except psycopg.Error as err:
        app.rollback()
        return {"p50": None, "error": str(err).splitlines()[0], "jobs": done}
    return {
        "claim_ms": latency_ms(times),
        "jobs": done,
        "jobs_per_s": done / (time.perf_counter() - started),
    }


def measure(server_admin: str, citus: bool, args: argparse.Namespace) -> dict[str, Any]:
    owner = prepare(server_admin, citus)
    app = with_params(owner, user="chronomem_app")
    result: dict[str, Any] = {"server": "citus coordinator" if citus else "single server"}
    with psycopg.connect(owner) as conn:
        made = tenants(conn, args.orgs)
        facts_shaped_table(conn, citus)
        result["scope"] = scope_cost(conn, made[0][0], args.scope_calls)
        result["store_facts_per_s"] = write_rate(conn, made, args.batches, args.batch)
    with psycopg.connect(app) as conn:
        result["assert_facts"] = assert_facts_rate(
            conn, made, max(1, args.batches // 4), args.batch
        )
        result["search"] = search_latency(conn, made, args.searches)
    with psycopg.connect(owner) as conn:
        result["read_by_org"] = read_latency(conn, made, args.reads, routed=True)
        result["read_by_policy"] = read_latency(conn, made, args.reads, routed=False)
    with psycopg.connect(owner) as conn, psycopg.connect(app) as app_conn:
        result["queue"] = queue_drain(conn, app_conn, made, args.jobs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--coordinator", required=True, help="superuser DSN of the Citus coordinator"
    )
    parser.add_argument("--single", required=True, help="superuser DSN of a single server")
    parser.add_argument("--orgs", type=int, default=4)
    parser.add_argument("--batches", type=int, default=40, help="write transactions per org")
    parser.add_argument("--batch", type=int, default=50, help="facts per write transaction")
    parser.add_argument("--reads", type=int, default=400)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--scope-calls", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=100, help="queued jobs per org to drain")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "citus.json")
    args = parser.parse_args()
    results = {
        "benchmark": "citus small run (tests/citus/bench.py)",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_state(),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
        "args": {k: v for k, v in vars(args).items() if k not in ("coordinator", "single", "out")},
        "single": measure(args.single, False, args),
        "citus": measure(args.coordinator, True, args),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
