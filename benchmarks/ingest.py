"""Ingest and queue throughput, each against a bare baseline in the same run.

(a) memory.ingest of 20-message chat batches (1 and 4 writers) against a bare INSERT of
    the same rows into a `like memory.episodes including all` copy.
(b) jobs drained through memory_worker.claim_jobs + memory_worker.complete_job (no-op
    handler; 1 and 4 workers; claims of 1 and 10) against a minimal FOR UPDATE SKIP LOCKED
    queue on a copy of memory.jobs loaded with the same jobs; then one claim's latency by
    table size.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks import common

HELP = (
    "memory.ingest episodes/s (20-message batches; 1 and 4 writers) vs a bare INSERT, and "
    "job queue drain (claim_jobs + complete_job; 1 and 4 workers) vs a bare SKIP LOCKED queue"
)

BARE_EPISODES, BARE_JOBS = f"{common.SCRATCH}.bare_episodes", f"{common.SCRATCH}.bare_jobs"
SEED_JOBS = f"{common.SCRATCH}.job_seed"
KINDS = ["enrich", "embed"]  # what part (a) enqueues
LEASE = "5 minutes"  # claim_jobs' default lease
SESSION_NS = uuid.UUID("0b5e7c52-93a4-4f0e-8d7e-2f4a51c3d9a1")
PROBE_QUEUED = 500  # queued jobs behind the done ones in the "retained" shape
INGEST_TABLES = (
    "memory.episodes, memory.sessions, memory.jobs, memory_internal.ingest_requests, "
    + BARE_EPISODES
)

BARE_INSERT_SQL = f"""
insert into {BARE_EPISODES}
  (org_id, project_id, session_id, seq, role, content, metadata, occurred_at, token_count)
select %(org)s, %(project)s, %(session)s, r.seq, r.role, r.content, r.metadata, r.occurred_at,
       r.token_count
  from jsonb_to_recordset(%(rows)s::jsonb)
       r(seq integer, role text, content text, metadata jsonb, occurred_at timestamptz,
         token_count integer)
"""
BARE_CLAIM_SQL = f"""
update {BARE_JOBS} j
   set status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
       locked_until = clock_timestamp() + interval '{LEASE}'
 where (j.org_id, j.job_id) in (
         select c.org_id, c.job_id from {BARE_JOBS} c
          where c.status = 'queued' and c.kind = any (%(kinds)s) and c.run_at <= clock_timestamp()
          order by c.run_at, c.job_id limit %(limit)s for update skip locked)
returning j.org_id, j.job_id
"""
BARE_DONE_SQL = f"""
update {BARE_JOBS} j
   set status = 'done', result = %(result)s, locked_by = null, locked_until = null,
       finished_at = clock_timestamp()
 where j.org_id = %(org)s and j.job_id = %(job)s and j.status = 'running'
   and j.locked_by = %(worker)s
returning true
"""
QUEUES = {  # method -> (table, claim, complete)
    "claim_jobs": (
        "memory.jobs",
        f"select org_id, job_id from memory_worker.claim_jobs(%(worker)s, %(kinds)s, %(limit)s, "
        f"interval '{LEASE}')",
        "select memory_worker.complete_job(%(org)s, %(job)s, %(worker)s, %(result)s)",
    ),
    "baseline": (BARE_JOBS, BARE_CLAIM_SQL, BARE_DONE_SQL),
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--batches", type=int, default=1000, help="(a) timed batches per writer and method (1000)")
    a("--batch-size", type=int, default=20, help="(a) messages per batch (20)")
    a("--warmup", type=int, default=5, help="(a) untimed batches per writer first (5)")
    a("--writers", type=_ints, default=[1, 4], help="(a) writer counts (1,4)")
    a("--jobs", type=int, default=2000, help="(b) timed jobs per drain (2000)")
    a("--workers", type=_ints, default=[1, 4], help="(b) worker counts (1,4)")
    a("--claim-limits", type=_ints, default=[1, 10], help="(b) jobs per claim (1,10)")
    a("--warmup-claims", type=int, default=10, help="(b) untimed claims per worker first (10)")
    a("--probe-sizes", type=_ints, default=[1000, 10000, 50000],
      help="(b) table sizes of the claim latency probe (1000,10000,50000)")  # fmt: skip
    a("--probe-claims", type=int, default=50, help="(b) timed claims per probe (50)")
    a("--rounds", type=int, default=2, help="the methods alternate A B, B A, ... (2)")
    a("--seed", type=int, default=20240601, help="workload seed")


# --------------------------------------------------------------------------- chat text

SLOTS = {
    "name": ("Maria", "James", "Aiko", "Tom", "Priya", "Lukas", "Sofia", "Chen", "Fatima", "Leo"),
    "city": ("Lisbon", "Kyoto", "Chicago", "Berlin", "Toronto", "Seoul", "Prague", "Oslo"),
    "food": ("ramen", "tapas", "pho", "goulash", "sourdough", "dumplings", "paella", "curry"),
    "place": ("botanical garden", "old town", "farmers market", "harbor", "jazz bar", "library"),
    "topic": ("saving for a house", "the garden", "learning Spanish", "the move", "running"),
    "month": ("January", "March", "May", "July", "September", "November"),
    "pet": ("puppy", "kitten", "rabbit", "parrot"),
    "company": ("Northwind", "Globex", "Initech", "Vandelay"),
}
USER = (
    "I just got back from {city}, the {food} there was amazing.",
    "My sister {name} is visiting next week, any ideas for what we could do?",
    "Can you remind me what I said about {topic} last week?",
    "Work has been stressful, my manager at {company} keeps moving the deadlines.",
    "Yesterday I met {name} at the {place} and we talked for hours about {topic}.",
    "Can you help me plan a weekend in {city} on a budget of {n}0 dollars?",
)
ASSISTANT = (
    "{city} is known for its {food}, and many visitors say the {place} is worth a stop.",
    "You and {name} could spend the morning at the {place} and have {food} for lunch.",
    "Last week you mentioned that you wanted to spend more time on {topic}.",
    "Congratulations on the {pet}! They usually need a few weeks to settle into a new home.",
    "A budget weekend in {city} could start with a free walking tour and {food} at a market.",
    "I'll remember that. Is there anything else about {topic} you want me to keep in mind?",
)


def _text(rng: random.Random, pool: tuple[str, ...], most: int) -> str:
    slots = {k: rng.choice(v) for k, v in SLOTS.items()}
    return " ".join(t.format(n=rng.randint(2, 60), **slots) for t in rng.sample(pool, most))


@dataclass(frozen=True)
class IngestBatch:
    messages: str  # memory.ingest's p_messages
    rows: str  # the baseline's rows (seq and token_count computed here, outside the timing)
    key: str  # idempotency key
    size: int


def _chat(seed: int, writer: int, batches: int, size: int, tag: str) -> list[IngestBatch]:
    """One writer's session: user and assistant turns, occurred_at increasing."""
    rng, seq, at, out = random.Random(f"{seed}/{writer}"), 0, datetime(2024, 3, 1, tzinfo=UTC), []
    for _ in range(batches):
        messages, rows = [], []
        for _ in range(size):
            seq += 1
            at += timedelta(seconds=rng.randint(5, 240))
            user = seq % 2 == 1
            content = _text(rng, USER, rng.choice((1, 1, 2, 3))) if user else _text(
                rng, ASSISTANT, rng.choice((1, 2, 3, 4)))  # fmt: skip
            m: dict[str, Any] = {"role": "user" if user else "assistant", "content": content,
                                 "occurred_at": at.isoformat()}  # fmt: skip
            if user and rng.random() < 0.5:
                m["metadata"] = {"channel": rng.choice(("web", "mobile", "slack"))}
            messages.append(m)
            # memory_internal.estimate_tokens for ASCII text
            rows.append({**m, "seq": seq, "metadata": m.get("metadata", {}),
                         "token_count": max(1, math.ceil(len(content) / 4))})  # fmt: skip
        out.append(IngestBatch(json.dumps(messages), json.dumps(rows), f"{tag}/{writer}/{seq}",
                               size))  # fmt: skip
    return out


# --------------------------------------------------------------------------- (a) ingest

Step = Callable[[common.Conn, IngestBatch], int]


def _ingest_steps(tenant: common.Tenant, writer: int) -> dict[str, Step]:
    session = f"bench-session-{writer}"
    session_id = uuid.uuid5(SESSION_NS, f"{tenant.project}/{session}")

    def ingest(conn: common.Conn, b: IngestBatch) -> int:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            r = common.scalar(conn, "select memory.ingest(%s, %s, %s::jsonb, %s)",
                              (tenant.project, session, b.messages, b.key))  # fmt: skip
        assert not r["replayed"], f"batch {b.key} was taken for a retry"
        return len(r["episode_ids"])

    def baseline(conn: common.Conn, b: IngestBatch) -> int:
        params = {"org": tenant.org, "project": tenant.project, "session": session_id,
                  "rows": b.rows}  # fmt: skip
        with conn.transaction():
            return conn.execute(BARE_INSERT_SQL, params).rowcount

    return {"ingest": ingest, "baseline": baseline}


def ingest_scenario(db: common.BenchDatabase, org: uuid.UUID, writers: int, args: Any) -> Any:
    tenant = common.new_project(db.app, org, f"ingest-{writers}-writers")
    per = args.batches // args.rounds
    work = [_chat(args.seed, w, args.warmup + per * args.rounds, args.batch_size,
                  str(tenant.project)) for w in range(writers)]  # fmt: skip
    steps = [_ingest_steps(tenant, w) for w in range(writers)]
    done, wall = {"ingest": 0, "baseline": 0}, {"ingest": 0.0, "baseline": 0.0}
    samples = {m: common.Samples() for m in done}
    episodes = Counter[str]()
    for method in common.alternating(args.rounds, "ingest", "baseline"):
        print(f"  {writers} writer(s): {method} ...", flush=True)
        warm = 0 if done[method] else args.warmup
        lo = args.warmup + done[method]

        def warmup(
            conn: common.Conn, i: int, m: str = method, lo: int = lo, warm: int = warm
        ) -> None:
            for b in work[i][lo - warm : lo]:
                steps[i][m](conn, b)

        def body(
            conn: common.Conn, i: int, m: str = method, lo: int = lo
        ) -> tuple[common.Samples, int]:
            s, n = common.Samples(), 0
            for b in work[i][lo : lo + per]:
                w, cpu, got = common.timed(conn, partial(steps[i][m], conn, b))
                s.add(w, cpu)
                n += got
            return s, n

        common.vacuum(db.owner, INGEST_TABLES)
        seconds, results = common.concurrently(
            db.app, writers, warmup, body, partial(common.vacuum, db.owner, INGEST_TABLES)
        )
        wall[method] += seconds
        done[method] += per
        for s, n in results:
            samples[method].extend(s)
            episodes[method] += n
    report: dict[str, Any] = {"writers": writers}
    for m in done:
        report[m] = {"episodes_per_s": round(episodes[m] / wall[m], 1), **samples[m].report()}
    report["ratio"] = common.ratio(
        report["ingest"]["episodes_per_s"], report["baseline"]["episodes_per_s"]
    )
    report["checks"] = _ingest_checks(db.app, tenant, writers * (args.warmup + per * args.rounds))
    return report


def _ingest_checks(app: str, tenant: common.Tenant, calls: int) -> dict[str, Any]:
    """The same rows in both tables; one enrich job per episode and one embed per call."""
    cols = "seq, role, content, metadata, occurred_at, token_count, content_tsv"
    a = f"select {cols} from memory.episodes where project_id = %(p)s"
    b = f"select {cols} from {BARE_EPISODES} where project_id = %(p)s"
    with psycopg.connect(app) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(
            f"select (select count(*) from memory.episodes where project_id = %(p)s),"
            f" (select count(*) from (({a} except all {b}) union all ({b} except all {a})) d),"
            f" (select count(*) from memory.jobs where project_id = %(p)s and kind = 'enrich'),"
            f" (select count(*) from memory.jobs where project_id = %(p)s and kind = 'embed')",
            {"p": tenant.project},
        ).fetchone()
    assert row is not None
    episodes, differing, enrich, embed = row
    return {"episodes": episodes, "rows_differing": differing, "enrich_jobs": enrich,
            "embed_jobs": embed, "as_expected": differing == 0 and enrich == episodes
            and embed == calls}  # fmt: skip


# --------------------------------------------------------------------------- (b) queue


def _seed_jobs(owner: str, total: int) -> None:
    """The jobs every drain starts from: part (a)'s, in order, cycled to `total`."""
    with psycopg.connect(owner) as conn:
        conn.execute(
            f"""create table {SEED_JOBS} as
            with src as (select row_number() over (order by job_id) as k, org_id, project_id,
                                kind, payload from memory.jobs where kind = any (%(kinds)s))
            select g.n, s.org_id, s.project_id, s.kind, s.payload
              from generate_series(1, %(total)s::bigint) g(n)
              join src s on s.k = (g.n - 1) %% (select count(*) from src) + 1""",
            {"kinds": KINDS, "total": total},
        )


def _load_queue(owner: str, table: str, queued: int, done: int = 0) -> None:
    """`queued` jobs of the seed, after `done` finished ones (what the purge keeps)."""
    cols = "org_id, project_id, kind, payload"
    with psycopg.connect(owner) as conn:
        conn.execute(f"truncate {table}")
        conn.execute(
            f"insert into {table} ({cols}, status, attempts, run_at, finished_at, result) "
            f"select {cols}, 'done', 1, now() - interval '1 day', now() - interval '1 day', "
            f"'{{}}' from {SEED_JOBS} where n <= %s order by n",
            (done,),
        )
        conn.execute(
            f"insert into {table} ({cols}) select {cols} from {SEED_JOBS} where n <= %s order by n",
            (queued,),
        )
    common.vacuum(owner, table)


def _cycle(
    conn: common.Conn, method: str, params: dict[str, Any], claims: common.Samples | None
) -> int:
    """One claim (one transaction), then each job completed (one transaction each)."""
    _, claim, complete = QUEUES[method]
    wall, cpu, jobs = common.timed(conn, lambda: conn.execute(claim, params).fetchall())
    if claims is not None and jobs:
        claims.add(wall, cpu)
    for org, job in jobs:
        ok = conn.execute(complete, {**params, "org": org, "job": job}).fetchone()
        assert ok is not None and ok[0] is not False, f"{method}: job {job} not completed"
    return len(jobs)


def drain(db: common.BenchDatabase, method: str, workers: int, limit: int, args: Any) -> Any:
    table = QUEUES[method][0]
    _load_queue(db.owner, table, args.jobs + workers * limit * args.warmup_claims)

    def params(i: int) -> dict[str, Any]:
        return {"worker": f"bench-{workers}x{limit}-{i}", "kinds": KINDS, "limit": limit,
                "result": Jsonb({})}  # fmt: skip

    def warm(conn: common.Conn, i: int) -> None:
        for _ in range(args.warmup_claims):
            _cycle(conn, method, params(i), None)

    def body(conn: common.Conn, i: int) -> tuple[common.Samples, int]:
        claims, n = common.Samples(), 0
        while got := _cycle(conn, method, params(i), claims):
            n += got
        return claims, n

    seconds, results = common.concurrently(db.app, workers, warm, body)
    with psycopg.connect(db.owner) as conn:
        rows, done, once = conn.execute(
            f"select count(*), count(*) filter (where status = 'done'),"
            f" count(*) filter (where attempts = 1) from {table}"
        ).fetchone() or (0, 0, 0)
    claims = common.Samples()
    for s, _ in results:
        claims.extend(s)
    jobs = sum(n for _, n in results)
    return seconds, jobs, claims, rows == done == once


def queue_scenario(db: common.BenchDatabase, workers: int, limit: int, args: Any) -> Any:
    print(f"  {workers} worker(s), claims of {limit} ...", flush=True)
    wall, jobs = {"claim_jobs": 0.0, "baseline": 0.0}, {"claim_jobs": 0, "baseline": 0}
    claims, once = {m: common.Samples() for m in wall}, True
    for method in common.alternating(args.rounds, "claim_jobs", "baseline"):
        seconds, n, s, ok = drain(db, method, workers, limit, args)
        wall[method] += seconds
        jobs[method] += n
        claims[method].extend(s)
        once = once and ok
    report: dict[str, Any] = {"workers": workers, "claim_limit": limit}
    for m in wall:
        report[m] = {"jobs_per_s": round(jobs[m] / wall[m], 1), "claims": claims[m].report()}
    report["ratio"] = common.ratio(
        report["claim_jobs"]["jobs_per_s"], report["baseline"]["jobs_per_s"]
    )
    report["every_job_done_exactly_once"] = once
    return report


def claim_by_table_size(db: common.BenchDatabase, args: Any) -> list[dict[str, Any]]:
    """One worker's claim latency with `size` queued jobs, and with PROBE_QUEUED queued
    behind `size` done ones."""
    out = []
    params = {"worker": "probe", "kinds": KINDS, "limit": 1, "result": Jsonb({})}
    for size in args.probe_sizes:
        for shape, queued, done in (("queued", size, 0), ("retained", PROBE_QUEUED, size)):
            row: dict[str, Any] = {"shape": shape, "rows": queued + done}
            for method, (table, _, _) in QUEUES.items():
                _load_queue(db.owner, table, queued, done)
                claims = common.Samples()
                with psycopg.connect(db.app, autocommit=True) as conn:
                    for k in range(5 + args.probe_claims):
                        _cycle(conn, method, params, claims if k >= 5 else None)
                row[method] = claims.report()["latency_ms"]
            print(f"  claim, {shape} {row['rows']} rows: p50 {row['claim_jobs']['p50']} ms, "
                  f"bare {row['baseline']['p50']} ms", flush=True)  # fmt: skip
            out.append(row)
    return out


def run(args: argparse.Namespace, db: common.BenchDatabase) -> Path:
    run = common.Run("ingest", args, db)
    copies = {"bare_episodes": ("memory.episodes", "select, insert"),
              "bare_jobs": ("memory.jobs", "select, update")}  # fmt: skip
    tables = common.scratch_copies(db.owner, copies)
    with psycopg.connect(db.owner) as conn:  # its check calls a function the app may not run
        conn.execute(f"alter table {BARE_JOBS} drop constraint if exists jobs_kind_check")
    try:
        org = common.new_org(db.app, "benchmark ingest")
        print("(a) ingest", flush=True)
        ingest = [ingest_scenario(db, org, w, args) for w in args.writers]
        print("(b) queue", flush=True)
        most = max(args.workers) * max(args.claim_limits) * args.warmup_claims
        _seed_jobs(db.owner, max([args.jobs + most, PROBE_QUEUED, *args.probe_sizes]))
        queue = [queue_scenario(db, w, n, args) for w in args.workers for n in args.claim_limits]
        probes = claim_by_table_size(db, args)
    finally:
        common.drop_scratch(db.owner)
    for s in ingest:
        print(f"  ingest, {s['writers']} writer(s): {s['ingest']['episodes_per_s']:.0f} episodes"
              f"/s, bare {s['baseline']['episodes_per_s']:.0f}, ratio {s['ratio']}")  # fmt: skip
    for q in queue:
        print(f"  queue, {q['workers']} x {q['claim_limit']}: {q['claim_jobs']['jobs_per_s']:.0f}"
              f" jobs/s, bare {q['baseline']['jobs_per_s']:.0f}, ratio {q['ratio']}")  # fmt: skip
    result = {"baseline_tables": tables, "ingest_scenarios": ingest, "queue_scenarios": queue,
              "claim_latency_by_table_size": probes}  # fmt: skip
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    _, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.8))
    i, q = r["ingest_scenarios"], r["queue_scenarios"]
    common.pair_bars(
        a,
        [f"{s['writers']} writer(s)" for s in i],
        [s["ingest"]["episodes_per_s"] for s in i],
        [s["baseline"]["episodes_per_s"] for s in i],
        ("memory.ingest", "bare INSERT"),
    )
    a.set_ylabel("episodes per second")
    common.pair_bars(b, [f"{s['workers']}w x {s['claim_limit']}" for s in q],
                     [s["claim_jobs"]["jobs_per_s"] for s in q],
                     [s["baseline"]["jobs_per_s"] for s in q],
                     ("claim_jobs + complete_job", "bare SKIP LOCKED"))  # fmt: skip
    b.set_ylabel("jobs per second (workers x jobs per claim)")
    for method, color in (("claim_jobs", "C0"), ("baseline", "C1")):
        for shape, style in (("queued", "-o"), ("retained", "--s")):
            rows = [x for x in r["claim_latency_by_table_size"] if x["shape"] == shape]
            c.plot([x["rows"] for x in rows], [x[method]["p50"] for x in rows], style,
                   color=color, label=f"{method}, {shape}")  # fmt: skip
    c.set_xscale("log")
    c.set_xlabel("rows in the jobs table")
    c.set_ylabel("claim latency p50, ms")
    c.legend(fontsize=7)
