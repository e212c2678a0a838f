"""Write throughput: memory.assert_facts against a hand-written set-based INSERT of the
same rows, same batches, writers and transactions, in the same run."""

from __future__ import annotations

import argparse
import json
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import common

HELP = "assert_facts throughput (batches of 100; 1 and 4 writers) vs a plain set-based INSERT"

BATCH = 100
MIX = {"new": 0.5, "supersede": 0.3, "identical": 0.2}
PLANS = ("free", "starter", "basic", "plus", "pro", "team", "business", "enterprise")
PREDICATES = ("plan:one", "likes:many")
BASE = datetime(2024, 1, 1, tzinfo=UTC)
SUBJECT_NS = uuid.UUID("6f1d7c1e-2a4b-4c8e-9a51-6d0c1b7e3f20")
COUNTS = ("inserted", "superseded", "skipped", "refused", "invalid")
BARE = f"{common.SCRATCH}.bare_facts"
TABLES = (
    "memory.facts, memory.fact_events, memory.entities, memory.edges, memory.jobs, "
    f"memory_internal.counters, memory_internal.fact_terms, {BARE}"
)
SMALL_WARMUP = 30

# The baseline: what an app would send once it knows each fact's fate (decided in
# Python, outside the timing): close the superseded versions, insert the new rows.
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
select %(org)s, %(project)s, r.fact_id, r.subject_id, r.predicate, r.predicate, r.object_literal,
       r.object_key, r.identity_object, r.content, r.content_key, 'api', session_user,
       r.valid_from, tstzrange(r.valid_from, null)
  from jsonb_to_recordset(%(rows)s::jsonb)
       r(fact_id uuid, subject_id uuid, predicate text, object_literal text, object_key text,
         identity_object text, content text, content_key text, valid_from timestamptz)
"""


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--batches", type=int, default=300, help="timed batches per writer and method (300)")
    a("--warmup", type=int, default=10, help="untimed batches per writer first (10)")
    a("--writers", type=_ints, default=[1, 4], help="writer counts, one scenario each (1,4)")
    a("--rounds", type=int, default=6, help="the methods alternate A B, B A, ... (6)")
    a("--small-batches", type=_ints, default=[1, 10], help="small batch sizes, per call (1,10)")
    a("--small-calls", type=int, default=300, help="timed calls per small size and method (300)")
    a("--entity-batches", type=int, default=100, help="batches of entity objects (100; 0: none)")
    a("--seed", type=int, default=20240601, help="workload seed")


# --------------------------------------------------------------------------- workload


def _norm(text: str) -> str:
    """memory.normalize_text for this generator's ASCII (checked by _consistency)."""
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


@dataclass(frozen=True)
class Batch:
    facts: str  # assert_facts' p_facts
    rows: str  # baseline: rows to insert
    closes: str  # baseline: predecessors to close
    mix: Counter[str]


@dataclass
class Writer:
    """One writer's deterministic stream; its subjects (w<i>s<n>) are its own."""

    writer: int
    rng: random.Random
    entity_objects: bool = False  # every fact also an edge; the plans are hubs
    tick: int = 0
    subjects: list[str] = field(default_factory=list)
    plan: dict[str, dict[str, str]] = field(default_factory=dict)  # subject -> current plan
    likes: list[dict[str, str]] = field(default_factory=list)
    liked: set[tuple[str, str]] = field(default_factory=set)

    def _fact(self, subject: str, predicate: str, obj: str, content: str) -> dict[str, str]:
        self.tick += 1  # strictly increasing: a superseding fact starts after its predecessor
        fact = {"subject": subject, "predicate": predicate, "object": obj, "content": content,
                "valid_from": (BASE + timedelta(minutes=self.tick)).isoformat()}  # fmt: skip
        if self.entity_objects:
            fact["object_type"] = "entity"
        return fact

    def _plan(self, subject: str, obj: str) -> dict[str, str]:
        self.plan[subject] = self._fact(subject, "plan", obj, f"{subject} is on the {obj} plan")
        return self.plan[subject]

    def _new_subject(self) -> str:
        self.subjects.append(f"w{self.writer}s{len(self.subjects)}")
        return self.subjects[-1]

    def batch(self, size: int = BATCH) -> Batch:
        """~50% new identities, ~30% superseding plans, ~20% identical re-assertions;
        each identity at most once."""
        superseded = set(self.rng.sample(list(self.plan), min(round(size * 0.3), len(self.plan))))
        repeatable = [f for s, f in self.plan.items() if s not in superseded] + self.likes
        same = self.rng.sample(repeatable, min(round(size * 0.2), len(repeatable)))
        items = [("identical", dict(f)) for f in same]
        for s in sorted(superseded):
            items.append(("supersede", self._plan(s, self.rng.choice(
                [p for p in PLANS if p != self.plan[s]["object"]]))))  # fmt: skip
        for k in range(size - len(items)):
            if k % 2 == 0:
                items.append(("new", self._plan(self._new_subject(), self.rng.choice(PLANS))))
                continue
            pool = [s for s in self.subjects if s not in superseded]
            subject = self.rng.choice(pool) if pool else self._new_subject()
            obj = f"topic{self.rng.randrange(5000)}"
            while (subject, obj) in self.liked:
                obj = f"topic{self.rng.randrange(5000)}"
            self.liked.add((subject, obj))
            self.likes.append(self._fact(subject, "likes", obj, f"{subject} likes {obj}"))
            items.append(("new", self.likes[-1]))
        self.rng.shuffle(items)
        return Batch(
            json.dumps([f for _, f in items]),
            json.dumps([self._row(f) for kind, f in items if kind != "identical"]),
            json.dumps([{"subject_id": self._id(f), "predicate": "plan", "identity_object": "",
                         "valid_from": f["valid_from"]} for k, f in items if k == "supersede"]),
            Counter(kind for kind, _ in items),
        )  # fmt: skip

    def _id(self, fact: dict[str, str]) -> str:
        return str(uuid.uuid5(SUBJECT_NS, fact["subject"]))

    def _row(self, f: dict[str, str]) -> dict[str, str]:
        return {
            "fact_id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "subject_id": self._id(f),
            "predicate": f["predicate"],
            "object_literal": f["object"],
            "object_key": _norm(f["object"]),
            "identity_object": "" if f["predicate"] == "plan" else _norm(f["object"]),
            "content": f["content"],
            "content_key": _norm(f["content"]),
            "valid_from": f["valid_from"],
        }


# --------------------------------------------------------------------------- methods

Step = Callable[[common.Conn, Batch], Counter[str]]


def _steps(tenant: common.Tenant) -> dict[str, Step]:
    def assert_facts(conn: common.Conn, batch: Batch) -> Counter[str]:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            r = common.scalar(conn, "select memory.assert_facts(%s, %s::jsonb)",
                              (tenant.project, batch.facts))  # fmt: skip
        return Counter({k: int(r[k]) for k in COUNTS})

    def baseline(conn: common.Conn, batch: Batch) -> Counter[str]:
        p = {"org": tenant.org, "project": tenant.project}
        with conn.transaction():
            closed = conn.execute(CLOSE_SQL, {**p, "closes": batch.closes}).rowcount
            inserted = conn.execute(INSERT_SQL, {**p, "rows": batch.rows}).rowcount
        return Counter({"inserted": inserted, "superseded": closed})

    return {"assert_facts": assert_facts, "baseline": baseline}


def _segment(
    app: str, step: Step, work: list[list[Batch]], warm: int, after_warmup: Callable[[], None]
) -> tuple[float, common.Samples, Counter[str]]:
    def warmup(conn: common.Conn, i: int) -> None:
        for b in work[i][:warm]:
            step(conn, b)

    def body(conn: common.Conn, i: int) -> tuple[common.Samples, Counter[str]]:
        samples, counts = common.Samples(), Counter[str]()
        for b in work[i][warm:]:
            wall, cpu, got = common.timed(conn, partial(step, conn, b))
            samples.add(wall, cpu)
            counts.update(got)
        return samples, counts

    wall, results = common.concurrently(app, len(work), warmup, body, after_warmup)
    samples, counts = common.Samples(), Counter[str]()
    for s, c in results:
        samples.extend(s)
        counts.update(c)
    return wall, samples, counts


def scenario(
    db: common.BenchDatabase, org: uuid.UUID, writers: int, args: argparse.Namespace
) -> Any:
    tenant = common.new_project(db.app, org, f"write-{writers}-writers", PREDICATES)
    per = args.batches // args.rounds
    work = []
    for w in range(writers):
        gen = Writer(w, random.Random(f"{args.seed}/{writers}/{w}"))
        work.append([gen.batch() for _ in range(args.warmup + per * args.rounds)])
    steps = _steps(tenant)
    done = dict.fromkeys(steps, 0)
    wall = dict.fromkeys(steps, 0.0)
    samples = {m: common.Samples() for m in steps}
    counts = {m: Counter[str]() for m in steps}
    rounds: dict[str, list[float]] = {m: [] for m in steps}
    for method in common.alternating(args.rounds, "assert_facts", "baseline"):
        print(f"  {writers} writer(s): {method} ...", flush=True)
        warm = 0 if done[method] else args.warmup
        lo = args.warmup + done[method]
        common.vacuum(db.owner, TABLES)
        seconds, s, c = _segment(
            db.app, steps[method], [b[lo - warm : lo + per] for b in work], warm,
            lambda: common.vacuum(db.owner, TABLES),
        )  # fmt: skip
        done[method] += per
        wall[method] += seconds
        samples[method].extend(s)
        counts[method].update(c)
        rounds[method].append(writers * per * BATCH / seconds)
    mix = Counter[str]()
    for b in work:
        for batch in b[args.warmup :]:
            mix.update(batch.mix)
    report: dict[str, Any] = {"writers": writers, "mix": dict(mix)}
    for m in steps:
        n = len(samples[m].wall)
        report[m] = {
            "facts_per_s": round(n * BATCH / wall[m], 1),
            **samples[m].report(),
            "backend_cpu_ms_per_batch": round(sum(samples[m].cpu) * 1000 / n, 2)
            if len(samples[m].cpu) == n else None,
            "counts": dict(counts[m]),
        }  # fmt: skip
    a, b = report["assert_facts"], report["baseline"]
    report["ratio"] = common.ratio(a["facts_per_s"], b["facts_per_s"])
    report["cpu_ratio"] = common.ratio(b["backend_cpu_ms_per_batch"], a["backend_cpu_ms_per_batch"])
    report["ratio_per_round"] = [
        round(x / y, 3) for x, y in zip(rounds["assert_facts"], rounds["baseline"], strict=True)
    ]
    expected = {"inserted": mix["new"] + mix["supersede"], "superseded": mix["supersede"],
                "skipped": mix["identical"], "refused": 0, "invalid": 0}  # fmt: skip
    report["checks"] = {
        "counts_as_expected": {k: a["counts"].get(k, 0) for k in COUNTS} == expected,
        **_consistency(db.app, tenant),
    }
    return report


def _consistency(app: str, tenant: common.Tenant) -> dict[str, Any]:
    """Do both tables end with the same facts and windows?"""
    cols = "content_key, predicate, identity_object, object_key, valid_range"
    a = f"select {cols} from memory.facts where project_id = %(p)s"
    b = f"select {cols} from {BARE} where project_id = %(p)s"
    with psycopg.connect(app) as conn, conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        rows, differing = conn.execute(
            f"select (select count(*) from memory.facts where project_id = %(p)s), "
            f"(select count(*) from (({a} except all {b}) union all ({b} except all {a})) d)",
            {"p": tenant.project},
        ).fetchone() or (0, -1)
    return {"rows": rows, "rows_differing": differing, "same_final_state": differing == 0}


def per_call(
    db: common.BenchDatabase, tenant: common.Tenant, batches: list[Batch], generic: bool
) -> Any:
    """One writer per method on the same batches, alternating call by call (A B, B A);
    SMALL_WARMUP untimed calls, then VACUUM ANALYZE, then each call timed."""
    steps = _steps(tenant)
    samples = {m: common.Samples() for m in steps}
    with (
        psycopg.connect(db.app, autocommit=True) as a,
        psycopg.connect(db.app, autocommit=True) as b,
    ):
        if generic:
            # Custom plans joined each call's rows to every open row of the project, so
            # the baseline's small calls grew slower as the project grew.
            b.execute("set plan_cache_mode = force_generic_plan")
        conns = {"assert_facts": a, "baseline": b}
        for i, batch in enumerate(batches):
            if i == SMALL_WARMUP:
                common.vacuum(db.owner, TABLES)
            for m in ("assert_facts", "baseline")[:: 1 if i % 2 == 0 else -1]:
                wall, cpu, _ = common.timed(conns[m], partial(steps[m], conns[m], batch))
                if i >= SMALL_WARMUP:
                    samples[m].add(wall, cpu)
    af, bl = samples["assert_facts"].report(), samples["baseline"].report()
    return {
        "batch_size": sum(batches[0].mix.values()),
        "assert_facts": af,
        "baseline": bl,
        "ratio_by_median_latency": common.ratio(bl["latency_ms"]["p50"], af["latency_ms"]["p50"]),
        "ratio_by_median_cpu": common.ratio(bl["cpu_ms"]["p50"], af["cpu_ms"]["p50"])
        if af["cpu_ms"] and bl["cpu_ms"] else None,
    }  # fmt: skip


def run(args: argparse.Namespace, db: common.BenchDatabase) -> Path:
    run = common.Run("write", args, db)
    tables = common.scratch_copies(
        db.owner, {"bare_facts": ("memory.facts", "select, insert, update")}
    )
    try:
        org = common.new_org(db.app, "benchmark write")
        scenarios = [scenario(db, org, w, args) for w in args.writers]
        calls = []
        for size in args.small_batches:
            print(f"  batches of {size}: {args.small_calls} calls per method ...", flush=True)
            gen = Writer(0, random.Random(f"{args.seed}/small/{size}"))
            tenant = common.new_project(db.app, org, f"write-small-{size}", PREDICATES)
            batches = [gen.batch(size) for _ in range(SMALL_WARMUP + args.small_calls)]
            calls.append(per_call(db, tenant, batches, generic=True))
        if args.entity_batches:
            print(f"  entity objects: {args.entity_batches} batches per method ...", flush=True)
            gen = Writer(0, random.Random(f"{args.seed}/entities"), entity_objects=True)
            tenant = common.new_project(db.app, org, "write-entity-objects", PREDICATES)
            batches = [gen.batch() for _ in range(SMALL_WARMUP + args.entity_batches)]
            calls.append({**per_call(db, tenant, batches, generic=False), "entity_objects": True})
    finally:
        common.drop_scratch(db.owner)
    for s in scenarios:
        print(f"  {s['writers']} writer(s): assert_facts {s['assert_facts']['facts_per_s']:.0f} "
              f"facts/s, baseline {s['baseline']['facts_per_s']:.0f}, ratio {s['ratio']} "
              f"(by CPU {s['cpu_ratio']}; per round {min(s['ratio_per_round'])}-"
              f"{max(s['ratio_per_round'])})", flush=True)  # fmt: skip
    for c in calls:
        print(f"  batches of {c['batch_size']}{' (entity objects)' * ('entity_objects' in c)}: "
              f"ratio {c['ratio_by_median_latency']} (by CPU {c['ratio_by_median_cpu']})",
              flush=True)  # fmt: skip
    result = {"baseline_tables": tables, "scenarios": scenarios, "per_call": calls}
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    _, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    s = r["scenarios"]
    names = ("memory.assert_facts", "baseline: UPDATE + INSERT")
    common.pair_bars(left, [f"{x['writers']} writer(s)" for x in s],
                     [x["assert_facts"]["facts_per_s"] for x in s],
                     [x["baseline"]["facts_per_s"] for x in s], names)  # fmt: skip
    left.set_ylabel("facts per second (batches of 100)")
    c = r["per_call"]
    if c:
        labels = [f"{x['batch_size']}{' entity' * ('entity_objects' in x)}" for x in c]
        common.pair_bars(right, labels, [x["assert_facts"]["latency_ms"]["p50"] for x in c],
                         [x["baseline"]["latency_ms"]["p50"] for x in c], names)  # fmt: skip
        right.set_ylabel("median ms per call, by facts per call")
