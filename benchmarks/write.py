"""Write throughput: memory.assert_facts against a hand-written set-based INSERT.

Both methods get the same batches (100 facts: ~50% new identities, ~30% superseding a
current 'plan', ~20% identical re-assertions), the same number of writers (threads,
one connection each, one transaction per batch), in the same run, on the same server.
All writers share one project per scenario and use disjoint subjects, so they contend
on the same tables and indexes but never on the same identity.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import statistics
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg

from benchmarks.common import (
    BenchDatabase,
    Tenant,
    backend_cpu_ns,
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
    speed_line,
    speed_reference,
    write_json,
)

HELP = "assert_facts throughput (batches of 100; 1 and 4 writers) vs a plain set-based INSERT"

BATCH_SIZE = 100
MIX = {"new": 0.5, "supersede": 0.3, "identical": 0.2}
PLANS = ("free", "starter", "basic", "plus", "pro", "team", "business", "enterprise")
TOPICS = 5000  # vocabulary of 'likes' objects
BASE = datetime(2024, 1, 1, tzinfo=UTC)
SUBJECT_NS = uuid.UUID("6f1d7c1e-2a4b-4c8e-9a51-6d0c1b7e3f20")
GOAL_MIN, GOAL_TARGET = 0.5, 0.7
COUNT_KEYS = ("inserted", "superseded", "skipped", "refused", "invalid")

# --ablate: a diagnostic, never the goal's measurement.  Each name switches off, in the
# benchmark's own throwaway database, one piece of what assert_facts does and the
# baseline does not, so a run tells how far the ratio moves without it.
ABLATIONS = {
    "postings": "the fact full-text postings (memory.facts trigger 40_terms_insert disabled)",
    "foreign-keys": "every foreign key of the memory and memory_internal schemas dropped "
    "(no referential check on any write)",
}

SCRATCH_SCHEMA = "bench_scratch"
BARE = f"{SCRATCH_SCHEMA}.bench_bare_facts"
CREATE_BARE = f"create table {BARE} (like memory.facts including all)"

# The baseline: what a hand-written app would send once it already knows, per fact,
# whether it is new, superseding or a repeat (decided in Python, outside the timing).
CLOSE_SQL = f"""
update {BARE} f
   set valid_range = tstzrange(lower(f.valid_range), c.valid_from), range_changed_at = now()
  from jsonb_to_recordset(%(closes)s::jsonb)
       c(subject_id uuid, predicate text, identity_object text, valid_from timestamptz)
 where f.org_id = %(org)s and f.project_id = %(project)s and f.subject_id = c.subject_id
   and f.predicate = c.predicate and f.identity_object = c.identity_object
   and f.invalid_at is null and upper_inf(f.valid_range)
"""
INSERT_SQL = f"""
insert into {BARE} (
  org_id, project_id, fact_id, subject_id, predicate, predicate_label, object_literal,
  object_key, identity_object, content, content_key, source, actor, valid_from, valid_range)
select %(org)s, %(project)s, r.fact_id, r.subject_id, r.predicate, r.predicate_label,
       r.object_literal, r.object_key, r.identity_object, r.content, r.content_key, 'api',
       session_user, r.valid_from, tstzrange(r.valid_from, null)
  from jsonb_to_recordset(%(rows)s::jsonb)
       r(fact_id uuid, subject_id uuid, predicate text, predicate_label text,
         object_literal text, object_key text, identity_object text, content text,
         content_key text, valid_from timestamptz)
"""

TRIGGERS_SQL = (
    "select tgname || ': ' || tgfoid::regproc from pg_trigger "
    "where tgrelid = %s::regclass and not tgisinternal order by tgname"
)

Fact = dict[str, str]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batches",
        type=int,
        default=300,
        help="timed batches of 100 facts per writer and method (default: 300, about a "
        "minute in all on 2 cores)",
    )
    parser.add_argument(
        "--warmup", type=int, default=10, help="untimed batches per writer first (default: 10)"
    )
    parser.add_argument(
        "--writers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 4],
        help="comma-separated writer counts, one scenario each (default: 1,4)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="the two methods alternate, A B then B A, ..., each round running its share of "
        "--batches, so a machine that gets busier or quieter during the run skews neither "
        "(default: 6)",
    )
    parser.add_argument(
        "--small-batches",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[1, 10],
        help="comma-separated smaller batch sizes whose per-call cost is also measured, 1 "
        "writer, the two methods alternating call by call (default: 1,10; empty: none)",
    )
    parser.add_argument(
        "--small-calls",
        type=int,
        default=300,
        help="timed calls per small batch size and method (default: 300)",
    )
    parser.add_argument(
        "--entity-batches",
        type=int,
        default=100,
        help="timed batches of 100 facts whose objects are entities (edges), 1 writer per "
        "method, alternating batch by batch (default: 100; 0: none)",
    )
    parser.add_argument("--seed", type=int, default=20240601, help="workload seed")
    parser.add_argument(
        "--ablate",
        type=_ablations,
        default=[],
        help="diagnostic, comma-separated: "
        + "; ".join(f"{k}: {v}" for k, v in ABLATIONS.items())
        + ". Applied to the benchmark's own database after it is migrated; the results go "
        "to write_ablated_<names>.json/.png, never to write.json",
    )
    parser.add_argument(
        "--stats",
        choices=["fresh", "stale"],
        default="fresh",
        help="fresh (default): VACUUM ANALYZE after the warm-up, so the timed batches are "
        "planned on statistics that know the project's rows; stale: only before the "
        "warm-up, i.e. the project is new to the planner (as before autovacuum catches up)",
    )


def _ablations(text: str) -> list[str]:
    names = sorted({x.strip() for x in text.split(",") if x.strip()})
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown ablation {', '.join(unknown)} (known: {', '.join(ABLATIONS)})"
        )
    return names


# --------------------------------------------------------------------------- workload


def _norm(text: str) -> str:
    """memory.normalize_text for the ASCII this generator produces (checked at the end:
    the consistency check compares content_key with what assert_facts stored)."""
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


@dataclass(frozen=True)
class Batch:
    facts: str  # assert_facts' p_facts
    rows: str  # baseline: rows to insert
    closes: str  # baseline: predecessors to close
    mix: Counter[str]  # new / supersede / identical, as generated

    @property
    def size(self) -> int:
        return sum(self.mix.values())


@dataclass
class WriterWorkload:
    """Deterministic fact stream of one writer; its subjects are its own (w<i>s<n>)."""

    writer: int
    rng: random.Random
    tick: int = 0
    subjects: list[str] = field(default_factory=list)
    plan: dict[str, Fact] = field(default_factory=dict)  # subject -> current plan
    likes: list[Fact] = field(default_factory=list)
    liked: set[tuple[str, str]] = field(default_factory=set)
    # Objects as entities (object_type 'entity'): every fact is then also an edge, the
    # eight plans hubs with an edge from every subject on them.
    entity_objects: bool = False

    def _valid_from(self) -> str:
        # Strictly increasing per writer: a superseding fact starts after its predecessor.
        self.tick += 1
        return (BASE + timedelta(minutes=self.tick)).isoformat()

    def _new_subject(self) -> str:
        name = f"w{self.writer}s{len(self.subjects)}"
        self.subjects.append(name)
        return name

    def _plan_fact(self, subject: str, obj: str) -> Fact:
        fact = {
            "subject": subject,
            "predicate": "plan",
            "object": obj,
            "content": f"{subject} is on the {obj} plan",
            "valid_from": self._valid_from(),
        }
        if self.entity_objects:
            fact["object_type"] = "entity"
        self.plan[subject] = fact
        return fact

    def _likes_fact(self, taken: set[str]) -> Fact:
        pool = [s for s in self.subjects if s not in taken]
        subject = self.rng.choice(pool) if pool else self._new_subject()
        obj = f"topic{self.rng.randrange(TOPICS)}"
        while (subject, obj) in self.liked:
            obj = f"topic{self.rng.randrange(TOPICS)}"
        self.liked.add((subject, obj))
        fact = {
            "subject": subject,
            "predicate": "likes",
            "object": obj,
            "content": f"{subject} likes {obj}",
            "valid_from": self._valid_from(),
        }
        if self.entity_objects:
            fact["object_type"] = "entity"
        self.likes.append(fact)
        return fact

    def batch(self, size: int = BATCH_SIZE) -> Batch:
        """One batch; each identity occurs at most once in it (no in-batch rounds)."""
        n_sup = min(round(size * MIX["supersede"]), len(self.plan))
        superseded = set(self.rng.sample(list(self.plan), n_sup))
        repeatable = [f for s, f in self.plan.items() if s not in superseded] + self.likes
        n_same = min(round(size * MIX["identical"]), len(repeatable))
        identical = [dict(f) for f in self.rng.sample(repeatable, n_same)]
        items: list[tuple[str, Fact]] = [("identical", f) for f in identical]
        for subject in sorted(superseded):
            old = self.plan[subject]
            obj = self.rng.choice([p for p in PLANS if p != old["object"]])
            items.append(("supersede", self._plan_fact(subject, obj)))
        for k in range(size - len(items)):
            # New identities: half a first plan of a new subject, half a new 'likes'.
            if k % 2 == 0:
                fact = self._plan_fact(self._new_subject(), self.rng.choice(PLANS))
            else:
                fact = self._likes_fact(superseded)
            items.append(("new", fact))
        self.rng.shuffle(items)
        return self._encode(items)

    def _subject_id(self, subject: str) -> str:
        return str(uuid.uuid5(SUBJECT_NS, subject))

    def _row(self, fact: Fact) -> dict[str, str]:
        many = fact["predicate"] != "plan"
        return {
            "fact_id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "subject_id": self._subject_id(fact["subject"]),
            "predicate": fact["predicate"],
            "predicate_label": fact["predicate"],
            "object_literal": fact["object"],
            "object_key": _norm(fact["object"]),
            "identity_object": _norm(fact["object"]) if many else "",
            "content": fact["content"],
            "content_key": _norm(fact["content"]),
            "valid_from": fact["valid_from"],
        }

    def _encode(self, items: list[tuple[str, Fact]]) -> Batch:
        rows = [self._row(f) for kind, f in items if kind != "identical"]
        closes = [
            {
                "subject_id": self._subject_id(f["subject"]),
                "predicate": "plan",
                "identity_object": "",
                "valid_from": f["valid_from"],
            }
            for kind, f in items
            if kind == "supersede"
        ]
        return Batch(
            facts=json.dumps([f for _, f in items]),
            rows=json.dumps(rows),
            closes=json.dumps(closes),
            mix=Counter(kind for kind, _ in items),
        )


def workload(seed: int, writers: int, batches: int) -> list[list[Batch]]:
    """All batches of all writers, serialized up front so no timing includes Python."""
    out = []
    for w in range(writers):
        gen = WriterWorkload(writer=w, rng=random.Random(f"{seed}/{writers}/{w}"))
        out.append([gen.batch() for _ in range(batches)])
    return out


# --------------------------------------------------------------------------- database


def _new_project(app_dsn: str, org: uuid.UUID, name: str) -> Tenant:
    tenant = new_project(app_dsn, org, name)
    with psycopg.connect(app_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (org,))
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (tenant.project,))
        conn.execute("select memory.declare_predicate(%s, 'likes', 'many')", (tenant.project,))
    return tenant


def create_bare_table(owner_dsn: str) -> dict[str, Any]:
    """The baseline's table; returns proof that it has memory.facts' indexes."""
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(f"create schema {SCRATCH_SCHEMA}")
        conn.execute(CREATE_BARE)
        conn.execute(f"grant usage on schema {SCRATCH_SCHEMA} to chronomem_app")
        conn.execute(f"grant select, insert, update on {BARE} to chronomem_app")
        facts = normalized_indexes(conn, "memory.facts")
        bare = normalized_indexes(conn, BARE)
        excl = conn.execute(
            "select pg_get_constraintdef(oid) from pg_constraint "
            "where conrelid = %s::regclass and contype = 'x'",
            (BARE,),
        ).fetchall()
        rls = scalar(conn, "select relrowsecurity from pg_class where oid = %s::regclass", (BARE,))
        fks = scalar(
            conn,
            "select count(*) from pg_constraint where conrelid = %s::regclass and contype = 'f'",
            (BARE,),
        )
        triggers = {
            t: [r[0] for r in conn.execute(TRIGGERS_SQL, (t,)).fetchall()]
            for t in ("memory.facts", BARE)
        }
    return {
        "indexes_identical_to_memory_facts": facts == bare,
        "index_count": len(bare),
        "indexes": bare,
        "exclusion_constraint": [r[0] for r in excl],
        "row_level_security": rls,
        "foreign_keys": fks,
        "triggers": triggers,
    }


def ablate(owner_dsn: str, names: list[str]) -> list[str]:
    """Apply the --ablate diagnostics to the benchmark database; returns the statements."""
    done: list[str] = []
    with psycopg.connect(owner_dsn) as conn:
        statements = []
        if "postings" in names:
            statements.append('alter table memory.facts disable trigger "40_terms_insert"')
        if "foreign-keys" in names:
            statements += [
                f"alter table {table} drop constraint {name}"
                for table, name in conn.execute(
                    "select c.conrelid::regclass::text, quote_ident(c.conname) "
                    "from pg_constraint c join pg_namespace n on n.oid = c.connamespace "
                    "where c.contype = 'f' and n.nspname in ('memory', 'memory_internal') "
                    "order by 1, 2"
                ).fetchall()
            ]
        for statement in statements:
            conn.execute(statement)
            done.append(statement)
    return done


def drop_bare_table(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn) as conn:
        conn.execute(f"drop schema if exists {SCRATCH_SCHEMA} cascade")


def _vacuum(owner_dsn: str) -> None:
    # Both methods start a phase from the same kind of state: no dead tuples, fresh stats.
    tables = (
        "memory.facts, memory.fact_events, memory.entities, memory.edges, memory.jobs, "
        "memory_internal.counters, memory_internal.fact_terms"
    )
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(f"vacuum (analyze) {tables}, {BARE}")


Step = Callable[[psycopg.Connection[Any], Batch], dict[str, int]]


def assert_step(tenant: Tenant) -> Step:
    """One API-style transaction: scope to the org, assert the batch."""

    def step(conn: psycopg.Connection[Any], batch: Batch) -> dict[str, int]:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            result = scalar(
                conn, "select memory.assert_facts(%s, %s::jsonb)", (tenant.project, batch.facts)
            )
        return {k: int(result[k]) for k in COUNT_KEYS}

    return step


def baseline_step(tenant: Tenant) -> Step:
    """One transaction: close the predecessors, insert the new rows."""

    def step(conn: psycopg.Connection[Any], batch: Batch) -> dict[str, int]:
        params = {"org": tenant.org, "project": tenant.project}
        with conn.transaction():
            closed = conn.execute(CLOSE_SQL, {**params, "closes": batch.closes}).rowcount
            inserted = conn.execute(INSERT_SQL, {**params, "rows": batch.rows}).rowcount
        return {"inserted": inserted, "closed": closed}

    return step


# --------------------------------------------------------------------------- timing


@dataclass
class PhaseResult:
    wall_s: float
    latencies_s: list[float]
    counts: Counter[str]
    mix: Counter[str]
    batches: int
    # The writers' backends' CPU seconds over the timed batches (None: not readable).
    # Far less sensitive than wall time to other work on a busy machine.
    cpu_s: float | None = None
    per_writer_s: list[list[float]] = field(default_factory=list)  # each writer's, in order
    per_round: list[dict[str, float]] = field(default_factory=list)

    def add(self, other: PhaseResult) -> None:
        """Append a later segment of the same method (the next round)."""
        self.wall_s += other.wall_s
        self.latencies_s += other.latencies_s
        self.counts.update(other.counts)
        self.mix.update(other.mix)
        self.batches += other.batches
        self.cpu_s = None if self.cpu_s is None or other.cpu_s is None else self.cpu_s + other.cpu_s
        for mine, theirs in zip(self.per_writer_s, other.per_writer_s, strict=True):
            mine += theirs
        self.per_round += other.per_round

    def tenths_s(self) -> tuple[list[float], list[float]]:
        """Each writer's first and last tenth of its timed batches, over all rounds."""
        first: list[float] = []
        last: list[float] = []
        for latencies in self.per_writer_s:
            tenth = max(1, len(latencies) // 10)
            first += latencies[:tenth]
            last += latencies[-tenth:]
        return first, last


def _writer(
    dsn: str, batches: list[Batch], warmup: int, step: Step, barrier: threading.Barrier
) -> tuple[list[float], Counter[str], Counter[str], float | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set statement_timeout = '120s'")  # a stuck lock fails, never hangs
        try:
            for batch in batches[:warmup]:
                step(conn, batch)
            barrier.wait()
        except BaseException:
            barrier.abort()  # releases the others, which then fail too
            raise
        latencies, counts, mix = [], Counter[str](), Counter[str]()
        pid = conn.info.backend_pid
        cpu0 = backend_cpu_ns(pid)
        for batch in batches[warmup:]:
            t0 = perf_counter()
            counts.update(step(conn, batch))
            latencies.append(perf_counter() - t0)
            mix.update(batch.mix)
        cpu1 = backend_cpu_ns(pid)
    cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / 1e9
    return latencies, counts, mix, cpu


def run_phase(
    dsn: str,
    work: list[list[Batch]],
    warmup: int,
    step: Step,
    after_warmup: Callable[[], None] | None = None,
) -> PhaseResult:
    """All writers warm up, then start together; wall time runs until the last is done.

    after_warmup runs once all writers are warmed up and before any timed batch.
    """
    barrier = threading.Barrier(len(work) + 1, action=after_warmup)
    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        futures = [pool.submit(_writer, dsn, b, warmup, step, barrier) for b in work]
        # A broken barrier means a writer failed: its future re-raises below.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        t0 = perf_counter()
        results = [f.result() for f in futures]
        wall = perf_counter() - t0
    cpus = [r[3] for r in results]
    cpu = None if any(c is None for c in cpus) else sum(c for c in cpus if c is not None)
    out = PhaseResult(wall, [], Counter(), Counter(), 0, cpu_s=cpu)
    for latencies, counts, mix, _ in results:
        out.per_writer_s.append(list(latencies))
        out.latencies_s += latencies
        out.counts.update(counts)
        out.mix.update(mix)
        out.batches += len(latencies)
    out.per_round.append(
        {"wall_s": round(wall, 3), "facts_per_s": round(out.batches * BATCH_SIZE / wall, 1)}
    )
    return out


def consistency(app_dsn: str, tenant: Tenant) -> dict[str, Any]:
    """Do both tables hold the same facts and windows? (content_key names the claim)."""
    cols = "content_key, predicate, identity_object, object_key, valid_range"
    a = f"select {cols} from memory.facts where project_id = %(p)s"
    b = f"select {cols} from {BARE} where project_id = %(p)s"
    query = f"""
      select (select count(*) from memory.facts where project_id = %(p)s),
             (select count(*) from {BARE} where project_id = %(p)s),
             (select count(*) from memory.facts where project_id = %(p)s
                                                  and upper_inf(valid_range)),
             (select count(*) from {BARE} where project_id = %(p)s and upper_inf(valid_range)),
             (select count(*) from (({a} except all {b}) union all ({b} except all {a})) d)
    """
    with psycopg.connect(app_dsn) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(query, {"p": tenant.project}).fetchone()
    assert row is not None
    return {
        "rows_memory_facts": row[0],
        "rows_baseline": row[1],
        "open_windows_memory_facts": row[2],
        "open_windows_baseline": row[3],
        "rows_differing": row[4],
        "same_final_state": row[0] == row[1] and row[4] == 0,
    }


SMALL_WARMUP = 30
BASELINE_SMALL_SETTING = "set plan_cache_mode = force_generic_plan"


def _interleaved(
    db: BenchDatabase, tenant: Tenant, batches: list[Batch], baseline_setting: str | None
) -> dict[str, Any]:
    """Both methods on the same batches, one connection each, alternating call by call
    (A B, then B A); SMALL_WARMUP untimed calls, then VACUUM ANALYZE, then each call
    timed by wall clock and by its backend's CPU."""
    steps = {"assert_facts": assert_step(tenant), "baseline": baseline_step(tenant)}
    wall: dict[str, list[float]] = {m: [] for m in steps}
    cpu: dict[str, list[float]] = {m: [] for m in steps}
    mix: Counter[str] = Counter()
    with (
        psycopg.connect(db.app, autocommit=True) as a,
        psycopg.connect(db.app, autocommit=True) as b,
    ):
        if baseline_setting:
            b.execute(baseline_setting)
        conns = {"assert_facts": a, "baseline": b}
        for i, batch in enumerate(batches):
            if i == SMALL_WARMUP:
                _vacuum(db.owner)
            order = list(steps) if i % 2 == 0 else list(steps)[::-1]
            for method in order:
                conn = conns[method]
                pid = conn.info.backend_pid
                c0 = backend_cpu_ns(pid)
                t0 = perf_counter()
                steps[method](conn, batch)
                t1 = perf_counter()
                c1 = backend_cpu_ns(pid)
                if i >= SMALL_WARMUP:
                    wall[method].append(t1 - t0)
                    if c0 is not None and c1 is not None:
                        cpu[method].append((c1 - c0) / 1e9)
            if i >= SMALL_WARMUP:
                mix.update(batch.mix)
    report: dict[str, Any] = {
        "batch_size": batches[0].size,
        "calls": len(batches) - SMALL_WARMUP,
        "mix": dict(mix),
        "baseline_session": baseline_setting,
    }
    for method in steps:
        report[method] = {
            "call_latency_ms": latency_ms(wall[method]),
            "backend_cpu_ms_per_call": latency_ms(cpu[method]) if cpu[method] else None,
        }
    af, bl = report["assert_facts"], report["baseline"]
    report["ratio_by_median_latency"] = round(
        bl["call_latency_ms"]["p50"] / af["call_latency_ms"]["p50"], 3
    )
    report["ratio_by_median_cpu"] = (
        round(bl["backend_cpu_ms_per_call"]["p50"] / af["backend_cpu_ms_per_call"]["p50"], 3)
        if af["backend_cpu_ms_per_call"] and bl["backend_cpu_ms_per_call"]
        else None
    )
    return report


def small_batches(
    db: BenchDatabase, org: uuid.UUID, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Per-call cost at small batch sizes (an agent writing a few facts per turn): what a
    call costs beyond its facts."""
    out = []
    for size in args.small_batches:
        tenant = _new_project(db.app, org, f"write-small-{size}")
        gen = WriterWorkload(writer=0, rng=random.Random(f"{args.seed}/small/{size}"))
        batches = [gen.batch(size) for _ in range(SMALL_WARMUP + args.small_calls)]
        print(f"  small batches of {size}: {args.small_calls} calls per method ...", flush=True)
        # The baseline's statements as generic plans: its custom plans joined the
        # batch to every open row of the project, so a call cost more as the project
        # grew (batches of 10: 2.5 -> 3.9 ms of CPU over 300 calls, against 1.6 ms
        # throughout); assert_facts runs its own statements the same way.
        out.append(_interleaved(db, tenant, batches, BASELINE_SMALL_SETTING))
    return out


def entity_objects(db: BenchDatabase, org: uuid.UUID, args: argparse.Namespace) -> dict[str, Any]:
    """The scenarios' batches of 100 with every object an entity, so every fact is also
    an edge (invariant 4: kept in step by sync_edges) and a superseding plan closes its
    edge. One writer per method, alternating batch by batch. The baseline writes the same
    fact rows as before: no entities, no edges."""
    tenant = _new_project(db.app, org, "write-entity-objects")
    gen = WriterWorkload(writer=0, rng=random.Random(f"{args.seed}/entities"), entity_objects=True)
    batches = [gen.batch() for _ in range(SMALL_WARMUP + args.entity_batches)]
    print(f"  entity objects: {args.entity_batches} batches of 100 per method ...", flush=True)
    report = _interleaved(db, tenant, batches, None)
    with psycopg.connect(db.app) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        report["edges_in_project"] = scalar(
            conn,
            "select count(*) from memory.edges where project_id = %s and expired_at is null",
            (tenant.project,),
        )
    return report


# --------------------------------------------------------------------------- report


def _method_report(phase: PhaseResult, inserted: int) -> dict[str, Any]:
    facts = phase.batches * BATCH_SIZE
    return {
        "batches": phase.batches,
        "facts_submitted": facts,
        "wall_s": round(phase.wall_s, 3),
        "facts_per_s": round(facts / phase.wall_s, 1),
        "rows_inserted_per_s": round(inserted / phase.wall_s, 1),
        "backend_cpu_ms_per_batch": (
            None if phase.cpu_s is None else round(phase.cpu_s * 1000 / phase.batches, 2)
        ),
        "batch_latency_ms": latency_ms(phase.latencies_s),
        # Drift: does a batch get slower as the project grows during the phase?
        "mean_latency_ms_first_vs_last_tenth": [
            round(statistics.fmean(t) * 1000, 2) for t in phase.tenths_s()
        ],
        "per_round": phase.per_round,
    }


def scenario(
    db: BenchDatabase, org: uuid.UUID, writers: int, args: argparse.Namespace
) -> dict[str, Any]:
    tenant = _new_project(db.app, org, f"write-{writers}-writers")
    work = workload(args.seed, writers, args.warmup + args.batches // args.rounds * args.rounds)

    def vacuum() -> None:
        _vacuum(db.owner)

    after_warmup = vacuum if args.stats == "fresh" else None
    steps = {"assert_facts": assert_step(tenant), "baseline": baseline_step(tenant)}
    per_round = args.batches // args.rounds
    done = dict.fromkeys(steps, 0)  # timed batches each method has run so far
    results: dict[str, PhaseResult] = {}
    for r in range(args.rounds):
        order = list(steps) if r % 2 == 0 else list(steps)[::-1]
        for method in order:
            # A method's first segment starts with its warm-up.
            warm = 0 if method in results else args.warmup
            start = args.warmup + done[method] - warm
            segment = [w[start : args.warmup + done[method] + per_round] for w in work]
            print(f"  {writers} writer(s), round {r + 1}: {method} ...", flush=True)
            vacuum()
            phase = run_phase(db.app, segment, warm, steps[method], after_warmup if warm else None)
            done[method] += per_round
            if method in results:
                results[method].add(phase)
            else:
                results[method] = phase
    asserted, base = results["assert_facts"], results["baseline"]

    expected = {
        "inserted": asserted.mix["new"] + asserted.mix["supersede"],
        "superseded": asserted.mix["supersede"],
        "skipped": asserted.mix["identical"],
        "refused": 0,
        "invalid": 0,
    }
    af = _method_report(asserted, asserted.counts["inserted"])
    af["returned_counts"] = {k: asserted.counts[k] for k in COUNT_KEYS}
    af["expected_counts"] = expected
    af["counts_as_expected"] = af["returned_counts"] == expected
    bl = _method_report(base, base.counts["inserted"])
    bl["rows_inserted"] = base.counts["inserted"]
    bl["predecessors_closed"] = base.counts["closed"]
    ratio = af["facts_per_s"] / bl["facts_per_s"]
    cpu_ratio = (
        None
        if asserted.cpu_s is None or base.cpu_s is None or asserted.cpu_s == 0
        else round(base.cpu_s / asserted.cpu_s, 3)
    )
    return {
        "writers": writers,
        "generated_mix": dict(asserted.mix),
        "assert_facts": af,
        "baseline": bl,
        "ratio": round(ratio, 3),
        # The same comparison by the backends' CPU time (same batches for both).
        "cpu_ratio": cpu_ratio,
        "ratio_per_round": [
            round(a["facts_per_s"] / b["facts_per_s"], 3)
            for a, b in zip(af["per_round"], bl["per_round"], strict=True)
        ],
        "consistency": consistency(db.app, tenant),
    }


def baseline_description(table: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": (
            "A plain table with memory.facts' columns, CHECK constraints, exclusion "
            "constraint and indexes, written by the SQL a hand-written app would send "
            "once it already knows each fact's fate: per batch, one transaction with one "
            "UPDATE closing the predecessors of superseding facts and one INSERT ... "
            "SELECT FROM jsonb_to_recordset of the new rows. Identical re-assertions are "
            "not sent. Same batches, same writers, same number of transactions, same "
            "role (chronomem_app) as assert_facts."
        ),
        "create": CREATE_BARE,
        "statements_per_batch": [" ".join(CLOSE_SQL.split()), " ".join(INSERT_SQL.split())],
        "table": table,
        "precomputed_in_python_outside_the_timing": [
            "which facts are new, superseding or identical (assert_facts decides it in SQL)",
            "subject ids (uuid5 of the name; no entity rows)",
            "fact ids, normalized object_key / content_key, identity_object",
        ],
        "not_done_by_the_baseline": [
            "validation and normalization of the input JSON",
            "entity lookup and creation (memory.entities)",
            "identity advisory locks, and the project/predicate shared locks",
            "skip detection and support_count/last_seen_at bump of re-asserted facts",
            "world-time placement (restitch): the baseline assumes the newest fact is last",
            "fact_events rows (asserted, superseded)",
            "sharded counters, per-fact result JSON",
            "the statement triggers on memory.facts and memory.entities that enqueue embed "
            "jobs (memory.jobs rows + NOTIFY); LIKE copies no triggers",
            "row-level security (memory.facts has FORCE ROW LEVEL SECURITY) and FK checks",
        ],
        "units": (
            "facts_per_s counts every fact of a timed batch (100 per batch) for both methods, "
            "so ratio = assert_facts facts/s / baseline facts/s is the inverse ratio of wall "
            "times for the same work; rows_inserted_per_s counts only the rows inserted."
        ),
    }


def plot(
    path: Path,
    scenarios: list[dict[str, Any]],
    per_call: list[dict[str, Any]],
    subtitle: str,
) -> None:
    """Left: facts/s of both methods per writer count (100-fact batches). Right, when
    measured: median time per call of both methods for the small batches and the
    entity-object batches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if per_call else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.8), squeeze=False)

    def bars(ax: Any, labels: list[str], af: list[float], bl: list[float],
             ratios: list[float], fmt: str) -> None:  # fmt: skip
        ours, base = ratio_bars(ax, labels, af, bl, ratios, fmt=fmt, fontsize=8, headroom=1.25)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.legend(
            [ours, base],
            ["memory.assert_facts", "baseline: UPDATE + INSERT"],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.12),
            ncol=2,
            fontsize=8,
            frameon=False,
        )

    ax = axes[0][0]
    bars(
        ax,
        [f"{s['writers']} writer{'s' if s['writers'] > 1 else ''}" for s in scenarios],
        [s["assert_facts"]["facts_per_s"] for s in scenarios],
        [s["baseline"]["facts_per_s"] for s in scenarios],
        [s["ratio"] for s in scenarios],
        "%.0f",
    )
    ax.set_ylabel("facts per second (100-fact batches)")
    ax.set_title(
        f"Write throughput: assert_facts vs plain set-based INSERT\n{subtitle}", fontsize=9
    )
    if per_call:
        ax = axes[0][1]
        bars(
            ax,
            [
                f"{r['batch_size']} fact{'s' if r['batch_size'] > 1 else ''}"
                + (" (entity objects)" if r.get("entity_objects") else "")
                for r in per_call
            ],
            [r["assert_facts"]["call_latency_ms"]["p50"] for r in per_call],
            [r["baseline"]["call_latency_ms"]["p50"] for r in per_call],
            [r["ratio_by_median_latency"] for r in per_call],
            "%.1f",
        )
        ax.set_ylabel("median ms per call (1 writer, alternating call by call)")
        ax.set_title("Per call: small batches, and batches of entity objects", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _load(avg: tuple[float, float, float]) -> list[float]:
    return [round(x, 2) for x in avg]


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    started = perf_counter()
    load_before = os.getloadavg()  # other work on the machine skews both methods unevenly
    speed_before = speed_reference(db.admin)
    table = create_bare_table(db.owner)
    ablated = ablate(db.owner, args.ablate) if args.ablate else []
    try:
        org = new_org(db.app, "benchmark write")
        scenarios = [scenario(db, org, w, args) for w in args.writers]
        small = small_batches(db, org, args)
        entities = entity_objects(db, org, args) if args.entity_batches > 0 else None
    finally:
        drop_bare_table(db.owner)
    server = server_info(db.admin)
    machine = {
        **machine_info(),
        "load_average_1_5_15_min": [_load(load_before), _load(os.getloadavg())],
        "speed_reference": {"before": speed_before, "after": speed_reference(db.admin)},
    }
    result = {
        "benchmark": "write",
        "timestamp": now_iso(),
        "git": git_info(),
        "settings": {
            "batch_size": BATCH_SIZE,
            "timed_batches_per_writer": args.batches // args.rounds * args.rounds,
            "warmup_batches_per_writer": args.warmup,
            "rounds": args.rounds,
            "writers": args.writers,
            "seed": args.seed,
            "stats": args.stats,
            "ablate": args.ablate,
            "mix": MIX,
            "server": db.server,
            "postgres": server,
            "machine": machine,
        },
        "workload": (
            "One org; per scenario one project shared by all writers, each writer with its "
            "own subjects (w<i>s<n>). Predicates: 'plan' declared cardinality one, 'likes' "
            "declared many; objects are literals (no entity objects, so no edges). Per batch "
            "of 100: ~50% new identities (half a first 'plan' of a new subject, half a new "
            "'likes' object), ~30% a new 'plan' for a subject that has one (later valid_from: "
            "supersedes), ~20% an earlier current fact re-sent verbatim (skipped). Each "
            "identity occurs once per batch. Writers are threads, each with its own "
            "connection as chronomem_app; each batch is one transaction (use_org + "
            "assert_facts). The timed batches are split into rounds in which the two "
            "methods alternate (A B, then B A, ...), each method continuing its own batch "
            "sequence, so load from elsewhere on the machine skews neither. A method's first "
            "segment starts with its warm-up batches (not timed); in each segment all writers "
            "start together and it ends when the last one finishes. Before each segment the "
            "tables written are VACUUM ANALYZEd; with stats=fresh also after the warm-up "
            "(same for both methods)."
        ),
        "baseline": baseline_description(table),
        "goal": {"ratio_min": GOAL_MIN, "ratio_target": GOAL_TARGET},
        "ablation": (
            {
                "what": [ABLATIONS[n] for n in args.ablate],
                "statements": ablated,
                "note": "A diagnostic: assert_facts ran without these, so its ratio is not the "
                "goal's measurement (write.json is).",
            }
            if args.ablate
            else None
        ),
        "scenarios": scenarios,
        "small_batches": small,
        "entity_objects": entities,
        "runtime_s": round(perf_counter() - started, 1),
    }
    out: Path = args.out
    stem = "write" + (
        "_ablated_" + "_".join(n.replace("-", "_") for n in args.ablate) if args.ablate else ""
    )
    json_path = out / f"{stem}.json"
    write_json(json_path, result)
    subtitle = (
        f"PostgreSQL {server['version']}, {machine['cores']} cores, {args.batches} timed "
        f"batches/writer,\nmix 50/30/20 new/superseding/identical, stats {args.stats}"
        + (f"; ablated: {', '.join(args.ablate)}" if args.ablate else "")
    )
    per_call = small + ([{**entities, "entity_objects": True}] if entities else [])
    plot(out / f"{stem}.png", scenarios, per_call, subtitle)
    speed = machine["speed_reference"]
    print(f"  {speed_line(speed['before'], speed['after'])}", flush=True)
    for s in scenarios:
        print(
            f"  {s['writers']} writer(s): assert_facts {s['assert_facts']['facts_per_s']:.0f} "
            f"facts/s, baseline {s['baseline']['facts_per_s']:.0f} facts/s, "
            f"ratio {s['ratio']:.2f}"
            + (f" (by backend CPU {s['cpu_ratio']:.2f})" if s["cpu_ratio"] is not None else "")
            + f"; per round {min(s['ratio_per_round']):.2f}-{max(s['ratio_per_round']):.2f}",
            flush=True,
        )
    for r in small + ([entities] if entities else []):
        af, bl = r["assert_facts"], r["baseline"]
        line = (
            f"  batches of {r['batch_size']}{' (entity objects)' if r is entities else ''}: "
            f"assert_facts {af['call_latency_ms']['p50']:.2f} ms "
            f"per call, baseline {bl['call_latency_ms']['p50']:.2f} ms (medians), "
            f"ratio {r['ratio_by_median_latency']:.2f}"
        )
        if r["ratio_by_median_cpu"] is not None:
            line += (
                f"; backend CPU {af['backend_cpu_ms_per_call']['p50']:.2f} / "
                f"{bl['backend_cpu_ms_per_call']['p50']:.2f} ms, "
                f"ratio {r['ratio_by_median_cpu']:.2f}"
            )
        print(line, flush=True)
    return json_path
