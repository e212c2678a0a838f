"""Ingest and queue throughput, each against a bare baseline measured in the same run.

(a) Episodes per second through memory.ingest: batches of 20 chat messages, 1 and 4
    writers (threads, one connection and one session each, one transaction per batch),
    against a bare INSERT of the same rows into a `like memory.episodes including all`
    copy: same batches, same writers, same number of transactions.
(b) Jobs per second drained through memory.claim_jobs + memory.complete_job with a
    no-op handler (1 and 4 workers; claims of 1 and of 10 jobs), against a minimal
    FOR UPDATE SKIP LOCKED queue on a `like memory.jobs including all` copy, loaded with
    the same jobs (the enrich and embed jobs part (a) made, cycled to --jobs); then the
    latency of one claim as the table grows (--probe-sizes).

The two methods alternate in rounds (A B, B A, ...) so that a machine that gets busier
or quieter during the run skews neither; every phase records the 1-minute load average
and what the benchmark's sessions waited on (pg_stat_activity samples).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.common import (
    BenchDatabase,
    Tenant,
    git_info,
    latency_ms,
    machine_info,
    new_org,
    new_project,
    normalized_indexes,
    now_iso,
    ratio_bars,
    scalar,
    server_info,
    write_json,
)

HELP = (
    "memory.ingest episodes/s (20-message batches; 1 and 4 writers) vs a bare INSERT, and "
    "job queue drain (claim_jobs + complete_job; 1 and 4 workers) vs a bare SKIP LOCKED queue"
)

SCRATCH_SCHEMA = "bench_scratch"
BARE_EPISODES = f"{SCRATCH_SCHEMA}.bare_episodes"
BARE_JOBS = f"{SCRATCH_SCHEMA}.bare_jobs"
JOB_SEED = f"{SCRATCH_SCHEMA}.job_seed"
CREATE_BARE_EPISODES = f"create table {BARE_EPISODES} (like memory.episodes including all)"
CREATE_BARE_JOBS = f"create table {BARE_JOBS} (like memory.jobs including all)"

KINDS = ["enrich", "embed"]  # what part (a) enqueues; the worker's default lanes claim them
LEASE = "5 minutes"  # claim_jobs' default lease; the baseline sets the same
SESSION_NS = uuid.UUID("0b5e7c52-93a4-4f0e-8d7e-2f4a51c3d9a1")
BASE = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)

# The baseline of (a): the rows memory.ingest inserts, with seq and token_count computed
# in Python (outside the timing) and one session id per writer.
BARE_INSERT_SQL = f"""
insert into {BARE_EPISODES}
  (org_id, project_id, session_id, seq, role, content, metadata, occurred_at, token_count)
select %(org)s, %(project)s, %(session)s, r.seq, r.role, r.content, r.metadata, r.occurred_at,
       r.token_count
  from jsonb_to_recordset(%(rows)s::jsonb)
       r(seq integer, role text, content text, metadata jsonb, occurred_at timestamptz,
         token_count integer)
"""

# The baseline of (b): a minimal SKIP LOCKED queue on the same columns.
BARE_CLAIM_SQL = f"""
update {BARE_JOBS} j
   set status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
       locked_until = clock_timestamp() + interval '{LEASE}'
 where (j.org_id, j.job_id) in (
         select c.org_id, c.job_id from {BARE_JOBS} c
          where c.status = 'queued' and c.kind = any (%(kinds)s) and c.run_at <= clock_timestamp()
          order by c.run_at, c.job_id
          limit %(limit)s
            for update skip locked)
returning j.org_id, j.job_id, j.kind, j.payload
"""
BARE_DONE_SQL = f"""
update {BARE_JOBS} j
   set status = 'done', result = %(result)s, locked_by = null, locked_until = null,
       finished_at = clock_timestamp()
 where j.org_id = %(org)s and j.job_id = %(job)s and j.status = 'running'
   and j.locked_by = %(worker)s
"""
CLAIM_SQL = (
    f"select org_id, job_id, kind, payload from memory.claim_jobs(%(worker)s, %(kinds)s, "
    f"%(limit)s, interval '{LEASE}')"
)
COMPLETE_SQL = "select memory.complete_job(%(org)s, %(job)s, %(worker)s, %(result)s)"

APP_NAME = "chronomem-bench-ingest"  # how the sampler finds the benchmark's sessions
WAITS_SQL = (
    "select coalesce(wait_event_type || ':' || wait_event, 'CPU') from pg_stat_activity "
    "where application_name = %s and state = 'active' and pid <> pg_backend_pid()"
)

TRIGGERS_SQL = (
    "select tgname || ': ' || tgfoid::regproc from pg_trigger "
    "where tgrelid = %s::regclass and not tgisinternal order by tgname"
)

# --------------------------------------------------------------------------- chat text

NAMES = (
    "Maria", "James", "Aiko", "Tom", "Priya", "Lukas", "Sofia", "Daniel", "Chen", "Fatima",
    "Oliver", "Grace", "Mateo", "Hannah", "Ravi", "Elena", "Noah", "Yuki", "Amara", "Leo",
)  # fmt: skip
RELATIVES = ("sister", "brother", "mom", "dad", "cousin", "aunt", "uncle", "grandmother")
CITIES = (
    "Lisbon", "Kyoto", "Chicago", "Berlin", "Toronto", "Barcelona", "Seoul", "Melbourne",
    "Prague", "Austin", "Oslo", "Mexico City", "Edinburgh", "Hanoi", "Cape Town", "Vienna",
)  # fmt: skip
FOODS = (
    "ramen", "tapas", "deep dish pizza", "pastel de nata", "bibimbap", "pho", "goulash",
    "tacos al pastor", "sourdough", "dumplings", "paella", "falafel", "curry", "sushi",
)  # fmt: skip
PLACES = (
    "botanical garden", "old town", "science museum", "farmers market", "harbor",
    "climbing gym", "jazz bar", "public library", "city park", "art gallery", "bookshop",
)  # fmt: skip
TOPICS = (
    "saving for a house", "my sleep schedule", "the garden", "learning Spanish",
    "the wedding plans", "my side project", "our budget", "the move", "running",
    "meal prep", "the kids' school", "my promotion", "the car repairs", "photography",
)  # fmt: skip
FIELDS = ("data engineering", "nursing", "product design", "teaching", "cybersecurity", "law")
PETS = ("puppy", "kitten", "rabbit", "parrot", "rescue dog", "tortoise")
PET_NAMES = ("Biscuit", "Luna", "Pepper", "Milo", "Noodle", "Olive", "Ziggy", "Mochi")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
DISTANCES = ("5k", "10k", "half marathon", "marathon")
COMPANIES = ("Northwind", "Globex", "Initech", "Umbrella Health", "Acme Logistics", "Vandelay")
SKILLS = ("Python", "SQL", "Rust", "statistics", "public speaking", "Excel", "design", "Go")
TOOLS = ("Jira", "Trello", "Notion", "Asana", "Linear", "spreadsheets", "Confluence")
BOOKS = (
    "The Left Hand of Darkness", "Middlemarch", "Project Hail Mary", "Piranesi",
    "The Remains of the Day", "Educated", "Station Eleven", "Pachinko",
)  # fmt: skip
ALLERGENS = ("peanuts", "shellfish", "gluten", "dairy", "sesame", "eggs")
SLOTS: dict[str, Sequence[str]] = {
    "name": NAMES, "relative": RELATIVES, "city": CITIES, "food": FOODS, "place": PLACES,
    "topic": TOPICS, "topic2": TOPICS, "field": FIELDS, "pet": PETS, "petname": PET_NAMES,
    "month": MONTHS, "day": DAYS, "distance": DISTANCES, "company": COMPANIES,
    "skill": SKILLS, "skill2": SKILLS, "tool": TOOLS, "tool2": TOOLS, "book": BOOKS,
    "allergen": ALLERGENS,
}  # fmt: skip

USER_SENTENCES = (
    "I just got back from {city}, the {food} there was amazing.",
    "My {relative} {name} is visiting next {day}, any ideas for what we could do?",
    "Can you remind me what I said about {topic} last week?",
    "I've been thinking about switching jobs, maybe something in {field}.",
    "We adopted a {pet} named {petname} on {month} {n}.",
    "I'm training for a {distance} in {month} and I'm running {n} km a week right now.",
    "Work has been stressful, my manager at {company} keeps moving the deadlines.",
    "Do you think I should learn {skill} or {skill2} first?",
    "I finally finished reading {book}, what an ending.",
    "My favorite food is still {food}, even though {name} keeps teasing me about it.",
    "Yesterday I met {name} at the {place} and we talked for hours about {topic}.",
    "I'm allergic to {allergen}, so please keep that in mind for recipes.",
    "Our team is moving from {tool} to {tool2} next quarter.",
    "Can you help me plan a weekend in {city} on a budget of {n}0 dollars?",
    "Honestly {topic} is taking up most of my evenings at the moment.",
    "{name} said the {place} near us closes early on {day}s now.",
    "Quick update: I talked to {name} about {topic2} and we agreed to wait until {month}.",
    "lol yes, that's exactly what happened with {petname} and the {food}",
)
ASSISTANT_SENTENCES = (
    "That sounds like a great trip!",
    "{city} is known for its {food}, and many visitors say the {place} is worth a stop.",
    "Here's an idea: you and {name} could spend the morning at the {place} and have {food} "
    "for lunch.",
    "Last week you mentioned that you wanted to spend more time on {topic} and less on {topic2}.",
    "Switching to {field} is a big step; it may help to talk to people who already work there "
    "and to list the skills you have.",
    "Congratulations on adopting {petname}! A {pet} usually needs a few weeks to settle into a "
    "new home.",
    "Building up to a {distance} is very doable if you increase your weekly distance by about "
    "ten percent at a time.",
    "I'm sorry work has been stressful. Would it help to write the deadlines down and ask your "
    "manager which ones matter most?",
    "Both are useful: {skill} is easier to start with, while {skill2} pays off once you work "
    "on larger projects.",
    "I've noted that you are allergic to {allergen} and I will leave it out of any recipe I "
    "suggest.",
    "Moving from {tool} to {tool2} usually takes a few weeks, so plan some time for training "
    "and for migrating the old tickets.",
    "A budget weekend in {city} could start with a free walking tour, then {food} at a local "
    "market and an evening at the {place}.",
    "Good question. Do you mean {topic} at home or at work?",
    "I'll remember that. Is there anything else about {topic} you want me to keep in mind?",
    "If it helps, we could break {topic2} into smaller steps and pick one for this {day}.",
    "You told me in {month} that {name} prefers quiet places, so the {place} might suit them.",
    "That makes sense.",
    "Let me know how it goes with {name}!",
)


def _fill(template: str, rng: random.Random) -> str:
    return template.format(n=rng.randint(2, 60), **{k: rng.choice(v) for k, v in SLOTS.items()})


def _message_text(role: str, rng: random.Random) -> str:
    if role == "user":
        pool, count = USER_SENTENCES, rng.choice((1, 1, 1, 2, 2, 3))
    else:
        pool, count = ASSISTANT_SENTENCES, rng.choice((1, 2, 2, 3, 3, 4, 5))
    return " ".join(_fill(t, rng) for t in rng.sample(pool, count))


def estimate_tokens(text: str) -> int:
    """memory_internal.estimate_tokens (ASCII text: characters = code points)."""
    return max(1, math.ceil(len(text) / 4))


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class IngestBatch:
    messages: str  # memory.ingest's p_messages
    rows: str  # the baseline's rows
    key: str  # idempotency key (used with --idempotency key)
    size: int  # messages
    chars: int


@dataclass
class SessionWorkload:
    """Deterministic chat of one writer's session: user and assistant take turns."""

    writer: int
    rng: random.Random
    seq: int = 0
    at: datetime = BASE

    def batch(self, size: int, tag: str) -> IngestBatch:
        messages: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        for _ in range(size):
            self.seq += 1
            self.at += timedelta(seconds=self.rng.randint(5, 240))
            role = "user" if self.seq % 2 == 1 else "assistant"
            content = _message_text(role, self.rng)
            message: dict[str, Any] = {
                "role": role,
                "content": content,
                "occurred_at": self.at.isoformat(),
            }
            if role == "user" and self.rng.random() < 0.5:
                message["metadata"] = {"channel": self.rng.choice(("web", "mobile", "slack"))}
            messages.append(message)
            rows.append(
                {
                    "seq": self.seq,
                    "role": role,
                    "content": content,
                    "metadata": message.get("metadata", {}),
                    "occurred_at": message["occurred_at"],
                    "token_count": estimate_tokens(content),
                }
            )
        return IngestBatch(
            messages=json.dumps(messages),
            rows=json.dumps(rows),
            key=f"{tag}/w{self.writer}/{self.seq}",
            size=size,
            chars=sum(len(m["content"]) for m in messages),
        )


def ingest_workload(
    seed: int, writers: int, batches: int, size: int, tag: str
) -> list[list[IngestBatch]]:
    """All batches of all writers, serialized up front so no timing includes Python."""
    out = []
    for w in range(writers):
        gen = SessionWorkload(writer=w, rng=random.Random(f"{seed}/{writers}/{w}"))
        out.append([gen.batch(size, tag) for _ in range(batches)])
    return out


# --------------------------------------------------------------------------- database


def _table_facts(conn: psycopg.Connection[Any], original: str, copy: str) -> dict[str, Any]:
    """What the copy has and lacks compared with the original (checked, not assumed)."""

    def one(table: str) -> dict[str, Any]:
        row = conn.execute(
            "select c.relrowsecurity, c.relforcerowsecurity,"
            " (select count(*) from pg_policy p where p.polrelid = c.oid),"
            " (select count(*) from pg_constraint k where k.conrelid = c.oid"
            "   and k.contype = 'f'),"
            " (select count(*) from pg_constraint k where k.conrelid = c.oid"
            "   and k.contype = 'c'),"
            " (select array_agg(a.attname::text order by a.attnum) from pg_attribute a"
            "   where a.attrelid = c.oid and a.attgenerated <> '')"
            " from pg_class c where c.oid = %s::regclass",
            (table,),
        ).fetchone()
        assert row is not None
        return {
            "row_level_security": row[0],
            "force_row_level_security": row[1],
            "policies": row[2],
            "foreign_keys": row[3],
            "check_constraints": row[4],
            "generated_columns": row[5] or [],
            "triggers": [r[0] for r in conn.execute(TRIGGERS_SQL, (table,)).fetchall()],
        }

    original_indexes, copy_indexes = (
        normalized_indexes(conn, original),
        normalized_indexes(conn, copy),
    )
    return {
        "indexes_identical": original_indexes == copy_indexes,
        "indexes": copy_indexes,
        "original": one(original),
        "copy": one(copy),
    }


def create_scratch(owner_dsn: str) -> dict[str, Any]:
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(f"create schema {SCRATCH_SCHEMA}")
        conn.execute(CREATE_BARE_EPISODES)
        conn.execute(CREATE_BARE_JOBS)
        conn.execute(f"grant usage on schema {SCRATCH_SCHEMA} to chronomem_app")
        conn.execute(f"grant select, insert on {BARE_EPISODES} to chronomem_app")
        conn.execute(f"grant select, update on {BARE_JOBS} to chronomem_app")
        return {
            "episodes": _table_facts(conn, "memory.episodes", BARE_EPISODES),
            "jobs": _table_facts(conn, "memory.jobs", BARE_JOBS),
        }


def drop_scratch(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(f"drop schema if exists {SCRATCH_SCHEMA} cascade")


def _vacuum(owner_dsn: str, tables: str) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(f"vacuum (analyze) {tables}")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class WaitSampler:
    """What the benchmark's sessions wait on while a phase runs: pg_stat_activity polled
    every `interval` s (as the superuser, who sees every session's wait event); the share
    of active-session samples per wait event, "CPU" meaning active and not waiting."""

    def __init__(self, admin_dsn: str, interval: float = 0.02) -> None:
        self.admin_dsn = admin_dsn
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            while not self._stop.wait(self.interval):
                for (event,) in conn.execute(WAITS_SQL, (APP_NAME,)).fetchall():
                    self.counts[event] += 1

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# --------------------------------------------------------------------------- (a) ingest

Step = Callable[[psycopg.Connection[Any], IngestBatch], int]
METHODS = ("ingest", "baseline")


def ingest_step(tenant: Tenant, session: str, use_key: bool) -> Step:
    """One API-style transaction: scope to the org, ingest the batch."""

    def step(conn: psycopg.Connection[Any], batch: IngestBatch) -> int:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            result = scalar(
                conn,
                "select memory.ingest(%s, %s, %s::jsonb, %s)",
                (tenant.project, session, batch.messages, batch.key if use_key else None),
            )
        if result["replayed"]:
            raise AssertionError(f"batch {batch.key} was taken for a retry")
        return len(result["episode_ids"])

    return step


def bare_step(tenant: Tenant, session_id: uuid.UUID) -> Step:
    """One transaction: one INSERT ... SELECT of the batch's rows."""

    def step(conn: psycopg.Connection[Any], batch: IngestBatch) -> int:
        params = {
            "org": tenant.org,
            "project": tenant.project,
            "session": session_id,
            "rows": batch.rows,
        }
        with conn.transaction():
            return conn.execute(BARE_INSERT_SQL, params).rowcount

    return step


def segments(rounds: int, pair: tuple[str, str] = METHODS) -> list[str]:
    """Method order: A, B; then B, A; ... (A B B A cancels a linear drift of the machine)."""
    return [m for r in range(rounds) for m in (pair if r % 2 == 0 else pair[::-1])]


@dataclass
class MethodResult:
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    episodes: int = 0
    batches: int = 0
    chars: int = 0
    per_round: list[dict[str, float]] = field(default_factory=list)
    load_at_start: list[list[float]] = field(default_factory=list)
    waits: Counter[str] = field(default_factory=Counter)


@dataclass
class WriterPlan:
    steps: dict[str, Step]  # method -> step
    warmup: list[IngestBatch]  # run once with each method, untimed
    timed: list[list[IngestBatch]]  # per round: the batches each method gets


@dataclass
class WriterLog:
    latencies_s: dict[str, list[float]] = field(default_factory=dict)
    episodes: dict[str, int] = field(default_factory=dict)


def _writer(
    dsn: str, plan: WriterPlan, order: list[str], start: threading.Barrier, turn: threading.Barrier
) -> WriterLog:
    log = WriterLog({m: [] for m in METHODS}, dict.fromkeys(METHODS, 0))
    with psycopg.connect(dsn, autocommit=True, application_name=APP_NAME) as conn:
        conn.execute("set statement_timeout = '120s'")  # a stuck lock fails, never hangs
        try:
            for method in METHODS:
                for batch in plan.warmup:
                    plan.steps[method](conn, batch)
            start.wait()
            for k, method in enumerate(order):
                for batch in plan.timed[k // 2]:
                    t0 = perf_counter()
                    log.episodes[method] += plan.steps[method](conn, batch)
                    log.latencies_s[method].append(perf_counter() - t0)
                turn.wait()
        except BaseException:
            start.abort()  # releases the others and the main thread, which then fail too
            turn.abort()
            raise
    return log


def run_ingest_phases(
    db: BenchDatabase, plans: list[WriterPlan], rounds: int, after_warmup: Callable[[], None]
) -> dict[str, MethodResult]:
    """All writers warm up with both methods, then run the rounds together: every writer
    does its share of a segment, the next segment starts when the last one is done."""
    order = segments(rounds)
    start = threading.Barrier(len(plans) + 1, action=after_warmup)
    turn = threading.Barrier(len(plans) + 1)
    out = {m: MethodResult() for m in METHODS}
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        futures = [pool.submit(_writer, db.app, p, order, start, turn) for p in plans]
        try:
            start.wait()
            for k, method in enumerate(order):
                out[method].load_at_start.append(_load())
                with WaitSampler(db.admin) as waits:
                    t0 = perf_counter()
                    turn.wait()
                    wall = perf_counter() - t0
                out[method].wall_s += wall
                out[method].waits.update(waits.counts)
                batches = sum(len(p.timed[k // 2]) for p in plans)
                episodes = sum(b_.size for p in plans for b_ in p.timed[k // 2])
                out[method].per_round.append(
                    {"wall_s": round(wall, 3), "episodes_per_s": round(episodes / wall, 1)}
                )
                out[method].batches += batches
                out[method].chars += sum(b_.chars for p in plans for b_ in p.timed[k // 2])
        except threading.BrokenBarrierError:
            pass  # a writer failed: its future re-raises below
        logs = [f.result() for f in futures]
    for method in METHODS:
        for log in logs:
            out[method].latencies_s += log.latencies_s[method]
            out[method].episodes += log.episodes[method]
    return out


def ingest_checks(app_dsn: str, tenant: Tenant, calls: int) -> dict[str, Any]:
    """Did ingest store what the baseline stored, and enqueue one enrich per episode and
    one embed per call?"""
    cols = "seq, role, content, metadata, occurred_at, token_count, content_tsv"
    a = f"select {cols} from memory.episodes where project_id = %(p)s"
    b = f"select {cols} from {BARE_EPISODES} where project_id = %(p)s"
    query = f"""
      select (select count(*) from memory.episodes where project_id = %(p)s),
             (select count(*) from {BARE_EPISODES} where project_id = %(p)s),
             (select count(*) from (({a} except all {b}) union all ({b} except all {a})) d),
             (select count(*) from memory.jobs where project_id = %(p)s and kind = 'enrich'),
             (select count(*) from memory.jobs where project_id = %(p)s and kind = 'embed'),
             (select count(*) from memory.episodes e where e.project_id = %(p)s
                 and not exists (select from memory.jobs j
                                  where j.project_id = %(p)s and j.kind = 'enrich'
                                    and j.payload ->> 'episode_id' = e.episode_id::text)),
             (select coalesce(sum(jsonb_array_length(payload -> 'ids')), 0) from memory.jobs
               where project_id = %(p)s and kind = 'embed')
    """
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(query, {"p": tenant.project}).fetchone()
    assert row is not None
    episodes, bare, differing, enrich, embed, without_enrich, embed_ids = row
    return {
        "episodes_memory": episodes,
        "episodes_baseline": bare,
        "rows_differing": differing,
        "same_rows": episodes == bare and differing == 0,
        "ingest_calls": calls,
        "enrich_jobs": enrich,
        "embed_jobs": embed,
        "episodes_without_enrich_job": without_enrich,
        "episode_ids_in_embed_jobs": embed_ids,
        "jobs_as_expected": (
            enrich == episodes and without_enrich == 0 and embed == calls and embed_ids == episodes
        ),
    }


def _shares(counts: Counter[str], top: int = 8) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {k: round(v / total, 3) for k, v in counts.most_common(top)}


def _ingest_report(r: MethodResult) -> dict[str, Any]:
    return {
        "batches": r.batches,
        "episodes": r.episodes,
        "wall_s": round(r.wall_s, 3),
        "episodes_per_s": round(r.episodes / r.wall_s, 1),
        "per_round": r.per_round,
        "batch_latency_ms": latency_ms(r.latencies_s),
        "mean_chars_per_episode": round(r.chars / max(1, r.episodes), 1),
        "load_average_at_start": r.load_at_start,
        "wait_events": _shares(r.waits),
    }


def ingest_scenario(
    db: BenchDatabase, org: uuid.UUID, writers: int, args: argparse.Namespace
) -> dict[str, Any]:
    tenant = new_project(db.app, org, f"ingest-{writers}-writers")
    per_round = args.batches // args.rounds
    total = args.warmup + per_round * args.rounds
    work = ingest_workload(args.seed, writers, total, args.batch_size, str(tenant.project))
    use_key = args.idempotency == "key"
    plans = []
    for w, batches in enumerate(work):
        session = f"bench-session-{w}"
        steps = {
            "ingest": ingest_step(tenant, session, use_key),
            "baseline": bare_step(tenant, uuid.uuid5(SESSION_NS, f"{tenant.project}/{session}")),
        }
        timed = batches[args.warmup :]
        rounds = [timed[r * per_round : (r + 1) * per_round] for r in range(args.rounds)]
        plans.append(WriterPlan(steps, batches[: args.warmup], rounds))
    tables = (
        f"memory.episodes, memory.sessions, memory.jobs, memory_internal.ingest_requests, "
        f"{BARE_EPISODES}"
    )

    def vacuum() -> None:
        # Fresh statistics and no dead tuples before the timed rounds (both tables).
        _vacuum(db.owner, tables)

    print(f"  {writers} writer(s): {args.rounds} round(s) of ingest and bare INSERT", flush=True)
    vacuum()
    results = run_ingest_phases(db, plans, args.rounds, vacuum)
    ing, bl = _ingest_report(results["ingest"]), _ingest_report(results["baseline"])
    return {
        "writers": writers,
        "ingest": ing,
        "baseline": bl,
        "ratio": round(ing["episodes_per_s"] / bl["episodes_per_s"], 3),
        "ratio_per_round": [
            round(a["episodes_per_s"] / b["episodes_per_s"], 3)
            for a, b in zip(ing["per_round"], bl["per_round"], strict=True)
        ],
        "checks": ingest_checks(db.app, tenant, writers * total),
    }


# --------------------------------------------------------------------------- (b) queue


def make_job_seed(owner_dsn: str, total: int) -> dict[str, Any]:
    """The jobs every drain starts from: part (a)'s enrich and embed jobs, in order,
    cycled (payloads repeat) or cut to `total`."""
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(
            f"""
            create table {JOB_SEED} as
            with src as (
              select row_number() over (order by job_id) as k, org_id, project_id, kind, payload
                from memory.jobs where kind = any (%(kinds)s)),
            size as (select count(*) as c from src)
            select g.n, s.org_id, s.project_id, s.kind, s.payload
              from generate_series(1, %(total)s::bigint) g(n)
              cross join size
              join src s on s.k = (g.n - 1) %% size.c + 1
            """,
            {"kinds": KINDS, "total": total},
        )
        source = scalar(conn, "select count(*) from memory.jobs where kind = any(%s)", (KINDS,))
        mix: dict[str, int] = dict(
            conn.execute(f"select kind, count(*) from {JOB_SEED} group by kind").fetchall()
        )
        size = scalar(conn, f"select avg(pg_column_size(payload))::integer from {JOB_SEED}")
    return {"jobs": total, "source_jobs": source, "kinds": mix, "mean_payload_bytes": size}


def load_queue(owner_dsn: str, table: str, jobs: int, done: int = 0) -> None:
    """Empty the table, then queue the seed's first `jobs` jobs in order (same run_at, ids
    ascending), after `done` finished ones (older ids; what purge_done_jobs keeps for a
    week) when asked."""
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(f"truncate {table}")
        if done:
            conn.execute(
                f"insert into {table} (org_id, project_id, kind, payload, status, attempts, "
                f" run_at, finished_at, result) "
                f"select org_id, project_id, kind, payload, 'done', 1, now() - interval '1 day',"
                f" now() - interval '1 day', '{{}}' from {JOB_SEED} where n <= %s order by n",
                (done,),
            )
        conn.execute(
            f"insert into {table} (org_id, project_id, kind, payload) "
            f"select org_id, project_id, kind, payload from {JOB_SEED} where n <= %s order by n",
            (jobs,),
        )
    _vacuum(owner_dsn, table)


@dataclass
class QueueMethod:
    name: str
    table: str
    claim_sql: str
    complete: Callable[[psycopg.Connection[Any], dict[str, Any]], bool]


def _complete_job(conn: psycopg.Connection[Any], params: dict[str, Any]) -> bool:
    return bool(scalar(conn, COMPLETE_SQL, params))


def _bare_done(conn: psycopg.Connection[Any], params: dict[str, Any]) -> bool:
    return conn.execute(BARE_DONE_SQL, params).rowcount == 1


CLAIM_JOBS = QueueMethod("claim_jobs", "memory.jobs", CLAIM_SQL, _complete_job)
BARE_QUEUE = QueueMethod("baseline", BARE_JOBS, BARE_CLAIM_SQL, _bare_done)


@dataclass
class WorkerResult:
    claimed: list[tuple[uuid.UUID, int]] = field(default_factory=list)  # timed
    warmup_claimed: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    claim_s: list[float] = field(default_factory=list)
    complete_s: list[float] = field(default_factory=list)
    completed_true: int = 0
    completed_false: int = 0


def _queue_worker(
    dsn: str,
    method: QueueMethod,
    name: str,
    limit: int,
    warmup_claims: int,
    barrier: threading.Barrier,
) -> WorkerResult:
    """Claim (one transaction), then complete each job (one transaction each), until a
    claim comes back empty. No-op handler: the result is {}."""
    out = WorkerResult()
    params: dict[str, Any] = {"worker": name, "kinds": KINDS, "limit": limit, "result": Jsonb({})}

    def cycle(timed: bool) -> bool:
        t0 = perf_counter()
        jobs = conn.execute(method.claim_sql, params).fetchall()
        t1 = perf_counter()
        if not jobs:
            return False
        if timed:
            out.claim_s.append(t1 - t0)
        for org, job_id, _kind, _payload in jobs:
            (out.claimed if timed else out.warmup_claimed).append((org, job_id))
            t2 = perf_counter()
            ok = method.complete(conn, {**params, "org": org, "job": job_id})
            if timed:
                out.complete_s.append(perf_counter() - t2)
            if ok:
                out.completed_true += 1
            else:
                out.completed_false += 1
        return True

    with psycopg.connect(dsn, autocommit=True, application_name=APP_NAME) as conn:
        conn.execute("set statement_timeout = '120s'")
        try:
            for _ in range(warmup_claims):
                cycle(timed=False)
            barrier.wait()
        except BaseException:
            barrier.abort()
            raise
        while cycle(timed=True):
            pass
    return out


def queue_state(owner_dsn: str, table: str) -> dict[str, int]:
    with psycopg.connect(owner_dsn) as conn:
        row = conn.execute(
            f"select count(*), count(*) filter (where status = 'done'),"
            f" count(*) filter (where attempts = 1), count(*) filter (where attempts > 1),"
            f" count(*) filter (where status in ('queued', 'running')) from {table}"
        ).fetchone()
    assert row is not None
    keys = ("rows", "done", "attempts_1", "attempts_over_1", "queued_or_running")
    return dict(zip(keys, row, strict=True))


@dataclass
class Drain:
    wall_s: float
    timed_jobs: int
    jobs_per_worker: list[int]
    claim_s: list[float]
    complete_s: list[float]
    load_at_start: list[float]
    waits: Counter[str]
    checks: dict[str, Any]


def drain(
    db: BenchDatabase, method: QueueMethod, workers: int, limit: int, args: argparse.Namespace
) -> Drain:
    load_queue(db.owner, method.table, args.jobs + workers * limit * args.warmup_claims)
    barrier = threading.Barrier(workers + 1)
    names = [f"bench-{method.name}-{workers}x{limit}-{w}" for w in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(_queue_worker, db.app, method, n, limit, args.warmup_claims, barrier)
            for n in names
        ]
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        load = _load()
        with WaitSampler(db.admin) as waits:
            t0 = perf_counter()
            results = [f.result() for f in futures]
            wall = perf_counter() - t0
    claimed = [j for r in results for j in r.claimed]
    everything = claimed + [j for r in results for j in r.warmup_claimed]
    true = sum(r.completed_true for r in results)
    false = sum(r.completed_false for r in results)
    state = queue_state(db.owner, method.table)
    return Drain(
        wall_s=wall,
        timed_jobs=len(claimed),
        jobs_per_worker=[len(r.claimed) for r in results],
        claim_s=[s for r in results for s in r.claim_s],
        complete_s=[s for r in results for s in r.complete_s],
        load_at_start=load,
        waits=waits.counts,
        checks={
            "jobs_loaded": state["rows"],
            "jobs_claimed": len(everything),
            "distinct_jobs_claimed": len(set(everything)),
            "completions_true": true,
            "completions_false": false,
            "final_state": state,
            "every_job_done_exactly_once": (
                len(everything)
                == len(set(everything))
                == state["rows"]
                == state["done"]
                == state["attempts_1"]
                == true
                and false == 0
                and state["attempts_over_1"] == 0
            ),
        },
    )


def _drain_report(drains: list[Drain]) -> dict[str, Any]:
    wall = sum(d.wall_s for d in drains)
    jobs = sum(d.timed_jobs for d in drains)
    waits: Counter[str] = Counter()
    for d in drains:
        waits.update(d.waits)
    return {
        "timed_jobs": jobs,
        "claims": sum(len(d.claim_s) for d in drains),
        "wall_s": round(wall, 3),
        "jobs_per_s": round(jobs / wall, 1),
        "per_round": [
            {"wall_s": round(d.wall_s, 3), "jobs_per_s": round(d.timed_jobs / d.wall_s, 1)}
            for d in drains
        ],
        "claim_latency_ms": latency_ms([s for d in drains for s in d.claim_s]),
        "complete_latency_ms": latency_ms([s for d in drains for s in d.complete_s]),
        "jobs_per_worker": [d.jobs_per_worker for d in drains],
        "load_average_at_start": [d.load_at_start for d in drains],
        "wait_events": _shares(waits),
        "every_job_done_exactly_once": all(d.checks["every_job_done_exactly_once"] for d in drains),
        "checks_per_round": [d.checks for d in drains],
    }


def queue_scenario(
    db: BenchDatabase, workers: int, limit: int, args: argparse.Namespace
) -> dict[str, Any]:
    label = f"{workers} worker(s), claim limit {limit}"
    print(f"  {label}: {args.rounds} round(s) of claim_jobs and bare queue", flush=True)
    methods = {"claim_jobs": CLAIM_JOBS, "baseline": BARE_QUEUE}
    drains: dict[str, list[Drain]] = {m: [] for m in methods}
    for method in segments(args.rounds, ("claim_jobs", "baseline")):
        drains[method].append(drain(db, methods[method], workers, limit, args))
    real, bare = _drain_report(drains["claim_jobs"]), _drain_report(drains["baseline"])
    return {
        "workers": workers,
        "claim_limit": limit,
        "claim_jobs": real,
        "baseline": bare,
        "ratio": round(real["jobs_per_s"] / bare["jobs_per_s"], 3),
        "ratio_per_round": [
            round(a["jobs_per_s"] / b["jobs_per_s"], 3)
            for a, b in zip(real["per_round"], bare["per_round"], strict=True)
        ],
    }


PROBE_QUEUED = 500  # queued jobs in the "retained" shape


def probe(
    db: BenchDatabase, method: QueueMethod, queued: int, done: int, claims: int
) -> dict[str, Any]:
    """Claim latency at one table size: one worker, `claims` claims of one job, each
    completed (5 untimed first)."""
    load_queue(db.owner, method.table, queued, done)
    params: dict[str, Any] = {"worker": "probe", "kinds": KINDS, "limit": 1, "result": Jsonb({})}
    times = []
    with psycopg.connect(db.app, autocommit=True, application_name=APP_NAME) as conn:
        for k in range(5 + claims):
            t0 = perf_counter()
            jobs = conn.execute(method.claim_sql, params).fetchall()
            if k >= 5:
                times.append(perf_counter() - t0)
            for org, job_id, _kind, _payload in jobs:
                if not method.complete(conn, {**params, "org": org, "job": job_id}):
                    raise AssertionError(f"{method.name}: job {job_id} not completed")
    return {"queued": queued, "done": done, "claim_latency_ms": latency_ms(times)}


def claim_scaling(db: BenchDatabase, args: argparse.Namespace) -> list[dict[str, Any]]:
    """How a claim's cost grows with the table: `size` queued jobs, and PROBE_QUEUED
    queued jobs behind `size` done ones (the week of finished jobs the purge keeps)."""
    out = []
    for size in args.probe_sizes:
        for shape, queued, done in (("queued", size, 0), ("retained", PROBE_QUEUED, size)):
            row: dict[str, Any] = {"shape": shape, "rows": queued + done}
            for method in (CLAIM_JOBS, BARE_QUEUE):
                row[method.name] = probe(db, method, queued, done, args.probe_claims)
            print(
                f"  {shape}, {queued + done} rows: claim p50 "
                f"{row['claim_jobs']['claim_latency_ms']['p50']:.2f} ms, bare "
                f"{row['baseline']['claim_latency_ms']['p50']:.2f} ms",
                flush=True,
            )
            out.append(row)
    return out


def explain_claim(owner_dsn: str, limit: int) -> dict[str, str]:
    """Plans of claim_jobs' two statements and the baseline's claim on a full queue, run
    and rolled back (EXPLAIN cannot see inside the plpgsql function, so the statements are
    repeated here with the function's parameters as literals)."""
    sweep = """
      update memory.jobs j
         set status = 'dead', locked_by = null, locked_until = null,
             finished_at = clock_timestamp()
       where (j.org_id, j.job_id) in (
               select c.org_id, c.job_id from memory.jobs c
                where c.status = 'running' and c.locked_until < clock_timestamp()
                  and c.attempts >= c.max_attempts
                  for update skip locked)"""
    claim = f"""
      update memory.jobs j
         set status = 'running', attempts = j.attempts + 1, locked_by = 'explain',
             locked_until = clock_timestamp() + interval '{LEASE}'
       where (j.org_id, j.job_id) in (
               select c.org_id, c.job_id from memory.jobs c
                where c.kind = any (%(kinds)s)
                  and ((c.status = 'queued' and c.run_at <= clock_timestamp())
                       or (c.status = 'running' and c.locked_until < clock_timestamp()
                           and c.attempts < c.max_attempts))
                order by c.run_at, c.job_id
                limit %(limit)s
                  for update skip locked)
      returning j.*"""
    plans = {}
    with psycopg.connect(owner_dsn) as conn:
        for name, statement in (
            ("claim_jobs_sweep", sweep),
            ("claim_jobs_claim", claim),
            ("baseline_claim", BARE_CLAIM_SQL),
        ):
            with contextlib.suppress(psycopg.errors.QueryCanceled), conn.transaction():
                rows = conn.execute(
                    f"explain (analyze, buffers, costs off, summary on) {statement}",
                    {"kinds": KINDS, "limit": limit, "worker": "explain"},
                ).fetchall()
                plans[name] = "\n".join(r[0] for r in rows)
                raise psycopg.Rollback
    return plans


# --------------------------------------------------------------------------- report


def describe(tables: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {
        "ingest_baseline": {
            "summary": (
                "A copy of memory.episodes in a scratch schema, written by one INSERT ... "
                "SELECT FROM jsonb_to_recordset(...) per batch: the same rows (org, project, "
                "session, seq, role, content, metadata, occurred_at, token_count), the same "
                "batches, writers and number of transactions, as chronomem_app."
            ),
            "create": CREATE_BARE_EPISODES,
            "statement_per_batch": " ".join(BARE_INSERT_SQL.split()),
            "copy_has": (
                "every column with its default, the generated content_tsv column, the CHECK "
                "constraints, the primary key, unique (org_id, session_id, seq) and every "
                "index of memory.episodes: btree (org_id, project_id, occurred_at) and the "
                "HNSW on embedding (NULL here as in memory.episodes "
                "at ingest, so HNSW does no work in either table)"
            ),
            "copy_lacks": (
                "the 50_enqueue statement trigger (one enrich job per episode, one embed "
                "job per statement: memory.jobs rows, their indexes and the 90_notify "
                "NOTIFY), row-level security (memory.episodes has FORCE ROW LEVEL "
                "SECURITY) and the foreign keys to memory.sessions and memory.projects"
            ),
            "precomputed_in_python_outside_the_timing": [
                "seq (ingest allocates it under the session row lock)",
                "token_count (memory_internal.estimate_tokens)",
                "session id (uuid5 per writer; no memory.sessions row)",
            ],
            "not_done_by_the_baseline": [
                "use_org (a separate statement in ingest's transaction)",
                "validation of every message (role, content, occurred_at, metadata)",
                "sha256 of the body; the idempotency-key advisory lock and lookup (or the "
                "session's latest-batch lookup without a key)",
                "the memory.sessions upsert and row lock, and its last_seq update",
                "the memory_internal.ingest_requests row (response JSON) and its indexes",
                "the enqueue trigger: a memory.jobs row per message (enrich) and per call (embed), "
                "and the NOTIFY at commit",
                "row-level security and FK checks",
            ],
        },
        "queue_baseline": {
            "summary": (
                "A copy of memory.jobs in a scratch schema, loaded with the same jobs, "
                "drained by the same workers (threads as chronomem_app, autocommit: the "
                "claim is one transaction, each completion another) with a minimal SKIP "
                "LOCKED claim and a plain UPDATE to done."
            ),
            "create": CREATE_BARE_JOBS,
            "claim": " ".join(BARE_CLAIM_SQL.split()),
            "done": " ".join(BARE_DONE_SQL.split()),
            "copy_has": (
                "the columns, defaults, identity, CHECK constraints, primary key and the "
                "three indexes of memory.jobs (jobs_ready_idx, jobs_lease_idx, "
                "jobs_kind_status_idx)"
            ),
            "not_done_by_the_baseline": [
                "plpgsql call, argument checks, security definer (search_path switch)",
                "claim_jobs' first statement: marking dead the running jobs whose lease "
                "expired on their last attempt",
                "the second branch of the claim (a running job whose lease expired is ready "
                "again), which is an OR in the claim's WHERE",
                "returning every column (the benchmark fetches org_id, job_id, kind, "
                "payload from both)",
                "row-level security (memory.jobs has FORCE ROW LEVEL SECURITY; the owner's "
                "worker_queue policy is USING (true)) and the FK to memory.orgs",
            ],
        },
        "tables": tables,
        "units": (
            "episodes_per_s counts the episodes of timed batches; jobs_per_s counts the jobs "
            "claimed after the warm-up; ratio = chronomem / baseline (1.0 = as fast as the "
            "bare SQL). Latencies: per ingest batch (its whole transaction), per claim "
            "statement and per completion statement, p50/p95 inclusive quantiles."
        ),
        "ingest_idempotency": args.idempotency,
    }


def plot(
    path: Path,
    ingest: list[dict[str, Any]],
    queue: list[dict[str, Any]],
    scaling: list[dict[str, Any]],
    subtitle: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = sum(1 for p in (ingest, queue, scaling) if p)
    fig, axes = plt.subplots(1, max(1, n), figsize=(5.2 * max(1, n), 4.8), squeeze=False)
    panels = iter(axes[0])
    if ingest:
        ax = next(panels)
        ratio_bars(
            ax,
            [f"{s['writers']} writer{'s' if s['writers'] > 1 else ''}" for s in ingest],
            [s["ingest"]["episodes_per_s"] for s in ingest],
            [s["baseline"]["episodes_per_s"] for s in ingest],
            [s["ratio"] for s in ingest],
        )
        ax.set_ylabel("episodes per second")
        ax.set_title("(a) memory.ingest vs bare INSERT, 20-message batches", fontsize=9)
        ax.legend(["memory.ingest", "bare INSERT"], fontsize=7, loc="upper right", framealpha=0.9)
    if queue:
        ax = next(panels)
        ratio_bars(
            ax,
            [f"{s['workers']}w x {s['claim_limit']}" for s in queue],
            [s["claim_jobs"]["jobs_per_s"] for s in queue],
            [s["baseline"]["jobs_per_s"] for s in queue],
            [s["ratio"] for s in queue],
        )
        ax.set_ylabel("jobs per second (no-op handler)")
        ax.set_xlabel("workers x jobs per claim")
        ax.set_title("(b) claim_jobs + complete_job vs bare SKIP LOCKED", fontsize=9)
        ax.legend(
            ["claim_jobs + complete_job", "bare queue"],
            fontsize=7,
            loc="upper right",
            framealpha=0.9,
        )
    if scaling:
        ax = next(panels)
        for method, color in (("claim_jobs", "C0"), ("baseline", "C1")):
            for shape, style in (("queued", "-o"), ("retained", "--s")):
                rows = [r for r in scaling if r["shape"] == shape]
                ax.plot(
                    [r["rows"] for r in rows],
                    [r[method]["claim_latency_ms"]["p50"] for r in rows],
                    style,
                    color=color,
                    label=f"{method}, {shape}",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows in the jobs table")
        ax.set_ylabel("claim latency p50, ms (1 worker, limit 1)")
        ax.set_title(
            f"(b) claim cost by table size: queued = all rows queued,\n"
            f"retained = {PROBE_QUEUED} queued behind done jobs",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    fig.suptitle(subtitle, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batches",
        type=int,
        default=1000,
        help="(a) timed batches per writer and method, split evenly over the rounds "
        "(default: 1000)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=20, help="(a) messages per batch (default: 20)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=5,
        help="(a) untimed batches per writer and method first (default: 5)",
    )
    parser.add_argument(
        "--writers",
        type=_int_list,
        default=[1, 4],
        help="(a) comma-separated writer counts, one scenario each (default: 1,4)",
    )
    parser.add_argument(
        "--idempotency",
        choices=["key", "none"],
        default="key",
        help="(a) key (default): every ingest call sends its own idempotency key; none: no "
        "key (ingest then compares the body with the session's latest batch)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2000,
        help="(b) timed jobs per drain, i.e. per round, method, worker count and claim limit "
        "(default: 2000); the queue is loaded with these plus the warm-up's. A "
        "claim_jobs claim reads and sorts every ready job, so its jobs/s falls as this grows",
    )
    parser.add_argument(
        "--workers",
        type=_int_list,
        default=[1, 4],
        help="(b) comma-separated worker counts (default: 1,4)",
    )
    parser.add_argument(
        "--claim-limits",
        type=_int_list,
        default=[1, 10],
        help="(b) comma-separated jobs per claim (default: 1,10)",
    )
    parser.add_argument(
        "--warmup-claims",
        type=int,
        default=10,
        help="(b) untimed claims per worker first (default: 10)",
    )
    parser.add_argument(
        "--probe-sizes",
        type=lambda t: _int_list(t) if t else [],
        default=[1000, 10000, 50000],
        help="(b) table sizes at which one worker times --probe-claims claims, in two shapes: "
        "that many queued jobs, and 500 queued behind that many done (default: "
        "1000,10000,50000; empty to skip)",
    )
    parser.add_argument(
        "--probe-claims", type=int, default=50, help="(b) timed claims per probe (default: 50)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="alternate the two methods this many times, in the order A B, B A, ... "
        "(default: 2), so a machine that gets busier or quieter skews neither",
    )
    parser.add_argument(
        "--only",
        choices=["ingest", "queue"],
        help="run one part (queue alone first ingests a few untimed batches for its jobs)",
    )
    parser.add_argument("--seed", type=int, default=20240601, help="workload seed")


def _prime_jobs(db: BenchDatabase, org: uuid.UUID, args: argparse.Namespace) -> None:
    """With --only queue: a few untimed ingest calls, so the seed has real jobs."""
    tenant = new_project(db.app, org, "queue-source")
    work = ingest_workload(args.seed, 1, 20, args.batch_size, "prime")
    step = ingest_step(tenant, "prime", use_key=False)
    with psycopg.connect(db.app, autocommit=True) as conn:
        for batch in work[0]:
            step(conn, batch)


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    if args.rounds < 1 or args.batches < args.rounds or args.jobs < 1:
        raise SystemExit("need --rounds >= 1, --batches >= --rounds and --jobs >= 1")
    started = perf_counter()
    load_before = _load()
    tables = create_scratch(db.owner)
    ingest: list[dict[str, Any]] = []
    queue: list[dict[str, Any]] = []
    seed: dict[str, Any] = {}
    plans: dict[str, Any] = {}
    scaling: list[dict[str, Any]] = []
    try:
        org = new_org(db.app, "benchmark ingest")
        if args.only != "queue":
            print("(a) ingest", flush=True)
            ingest = [ingest_scenario(db, org, w, args) for w in args.writers]
        if args.only != "ingest":
            print("(b) queue", flush=True)
            if args.only == "queue":
                _prime_jobs(db, org, args)
            most = max(args.workers) * max(args.claim_limits) * args.warmup_claims
            sizes = [args.jobs + most, PROBE_QUEUED + 5 + args.probe_claims, *args.probe_sizes]
            seed = make_job_seed(db.owner, max(sizes))
            queue = [
                queue_scenario(db, w, limit, args)
                for w in args.workers
                for limit in args.claim_limits
            ]
            if args.probe_sizes:
                print("(b) claim latency by table size", flush=True)
                scaling = claim_scaling(db, args)
            for table in ("memory.jobs", BARE_JOBS):
                load_queue(db.owner, table, args.jobs)
            plans = {f"limit_{n}": explain_claim(db.owner, n) for n in args.claim_limits}
    finally:
        drop_scratch(db.owner)
    server = server_info(db.admin)
    machine = {**machine_info(), "load_average_1_5_15_min": [load_before, _load()]}
    result = {
        "benchmark": "ingest",
        "timestamp": now_iso(),
        "git": git_info(),
        "settings": {
            "ingest": {
                "batch_size": args.batch_size,
                "timed_batches_per_writer_and_method": args.batches // args.rounds * args.rounds,
                "warmup_batches_per_writer": args.warmup,
                "writers": args.writers,
                "idempotency": args.idempotency,
            },
            "queue": {
                "timed_jobs_per_drain": args.jobs,
                "warmup_claims_per_worker": args.warmup_claims,
                "probe_sizes": args.probe_sizes,
                "probe_claims": args.probe_claims,
                "probe_queued_in_retained_shape": PROBE_QUEUED,
                "workers": args.workers,
                "claim_limits": args.claim_limits,
                "kinds": KINDS,
                "lease": LEASE,
                "seed_jobs": seed,
            },
            "rounds": args.rounds,
            "only": args.only,
            "seed": args.seed,
            "server": db.server,
            "postgres": server,
            "machine": machine,
        },
        "workload": (
            "(a) One org; per writer-count scenario one project, each writer a thread with "
            "its own connection (chronomem_app) and its own session, alternating user and "
            "assistant messages of template-generated English chat (user 1-3 sentences, "
            "assistant 1-5; occurred_at increasing, metadata on half the user messages). "
            "memory.ingest: one transaction per batch (use_org + ingest); baseline: one "
            "transaction per batch (one INSERT). Each writer first runs its warm-up batches "
            "through both methods (untimed), then the tables written are VACUUM ANALYZEd; "
            "then the rounds: in each, all writers run their next batches through one "
            "method together, and when the last is done through the other (order A B, B A, "
            "...); each method's wall time is the sum of its segments. (b) Before each "
            "drain the queue table is truncated, loaded with the seed (part (a)'s enrich "
            "and embed jobs in job_id order, cycled to size) and VACUUM ANALYZEd; each "
            "worker (a thread, chronomem_app, autocommit) makes --warmup-claims untimed "
            "claims, then all loop together: claim up to `limit` jobs (one transaction), "
            "complete each (one transaction each; no-op handler, result {}), until a claim "
            "returns nothing. Rounds alternate the order of the two drains the same way."
        ),
        "baselines": describe(tables, args),
        "ingest_scenarios": ingest,
        "queue_scenarios": queue,
        "claim_latency_by_table_size": scaling,
        "claim_plans_on_a_full_queue": plans,
        "runtime_s": round(perf_counter() - started, 1),
    }
    out: Path = args.out
    json_path = out / "ingest.json"
    write_json(json_path, result)
    subtitle = (
        f"PostgreSQL {server['version']}, {machine['cores']} cores, 1-min load average "
        f"{load_before[0]:.1f} at start; {args.rounds} alternating rounds; "
        f"{args.batches} batches/writer/method, {args.jobs} jobs/drain"
    )
    plot(out / "ingest.png", ingest, queue, scaling, subtitle)
    for s in ingest:
        print(
            f"  ingest, {s['writers']} writer(s): {s['ingest']['episodes_per_s']:.0f} episodes/s,"
            f" bare INSERT {s['baseline']['episodes_per_s']:.0f}, ratio {s['ratio']:.2f}",
            flush=True,
        )
    for q in queue:
        print(
            f"  queue, {q['workers']} worker(s) x {q['claim_limit']}: "
            f"{q['claim_jobs']['jobs_per_s']:.0f} jobs/s, bare {q['baseline']['jobs_per_s']:.0f}"
            f", ratio {q['ratio']:.2f}",
            flush=True,
        )
    return json_path
