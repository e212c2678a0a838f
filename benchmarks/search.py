"""Search latency and recall at scale: memory.search with all legs, each leg alone (the
vector legs are the baseline), and facts_at, on synthetic memory loaded through the
product's write path; then the vector legs' recall@k against the exact top k."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

from benchmarks.common import BenchDatabase, Conn, Run, Samples, fetch, ratio, scalar, timed
from benchmarks.synthetic import PREDICATES, SPAN_DAYS, SPAN_START, Clusters, Project, split

HELP = "memory.search / each leg / facts_at p50-p95 and vector recall on synthetic data (100k)"

LEGS = ("episode_vector", "fact_vector", "episode_fulltext", "fact_fulltext", "entity", "graph")
SEARCH_SQL = (
    "select memory.search(p_project => %s, p_query => %s, p_query_embedding => %s, "
    "p_k => %s, p_legs => %s::text[], p_fusion => %s)"
)
FACTS_AT_COUNT = "select count(*) from memory.facts_at(%s, %s)"
FACTS_AT_SUBJECT = "select count(*) from memory.facts_at(%s, %s) f where f.subject_id = %s"
HNSW_TABLES = ["memory.fact_embeddings", "memory.episodes"]
SIZED = ("memory.facts", "memory.fact_embeddings", "memory.episodes", "memory.edges",
         "memory.entities", "memory_internal.episode_terms",
         "memory_internal.fact_terms")  # fmt: skip
# The exact answers at the instants memory.search uses (now, now), with index scans off.
EXACT_SQL = {
    "episode_vector": "select e.episode_id from memory.episodes e where e.project_id = %s "
    "and e.embedding is not null and memory_internal.episode_visible(e.occurred_at, "
    "e.created_at, now(), now()) order by e.embedding <=> %s, e.episode_id limit %s",
    "fact_vector": "select f.fact_id from memory.facts_at(%s, now(), now()) f join "
    "memory.fact_embeddings e using (org_id, fact_id) order by e.embedding <=> %s, f.fact_id "
    "limit %s",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--facts", type=int, default=100_000, help="facts in all (100000)")
    a("--episodes", type=int, default=None, help="episodes in all (default: as many as facts)")
    a("--projects", type=int, default=5, help="projects (5)")
    a("--main-share", type=float, default=0.6, help="share of the rows in the first (0.6)")
    a("--queries", type=int, default=200, help="timed queries per workload (200)")
    a("--warmup", type=int, default=50, help="untimed queries first (50)")
    a("--k", type=int, default=10, help="memory.search p_k (10)")
    a("--batch", type=int, default=1000, help="facts per assert_facts call (1000)")
    a("--clusters", type=int, default=200, help="embedding cluster centres (200)")
    a("--seed", default="chronomem-search", help="data and query seed")
    a("--maintenance-work-mem", default="1GB", help="for the HNSW builds (1GB)")
    a("--ef-search", default="40,500", help="hnsw.ef_search values for recall (40,500)")
    a("--recall-queries", type=int, default=50, help="queries per vector leg for recall (50)")


# --------------------------------------------------------------------------- load


@dataclass
class Loaded:
    spec: Project
    project: uuid.UUID
    facts: list[uuid.UUID] = field(default_factory=list)
    episodes: list[uuid.UUID] = field(default_factory=list)


def _connect(dsn: str, org: uuid.UUID | None = None) -> Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    register_vector(conn)
    if org is not None:
        conn.execute("select memory.use_org(%s, false)", (org,))
    return conn


def load(db: BenchDatabase, specs: list[Project], clusters: Clusters, args: Any) -> Any:
    """Facts through assert_facts, episodes through ingest, vectors through
    store_embeddings with the HNSW indexes dropped, then built once (timed)."""
    seconds: dict[str, float] = {}

    def clock(step: str, t0: float) -> None:
        seconds[step] = seconds.get(step, 0.0) + perf_counter() - t0

    with _connect(db.app) as conn:
        org = scalar(conn, "select memory.create_org('benchmark search')")
        conn.execute("select memory.use_org(%s, false)", (org,))
        projects = []
        for spec in specs:
            project = scalar(conn, "select memory.create_project(%s, %s)", (org, spec.name))
            lp = Loaded(spec, project)
            for p in PREDICATES:
                conn.execute("select memory.declare_predicate(%s, %s, %s)",
                             (lp.project, p.name, p.cardinality))  # fmt: skip
            print(f"  {spec.name}: {spec.facts} facts, {spec.episodes} episodes ...", flush=True)
            facts = spec.fact_stream()
            for s in range(0, len(facts), args.batch):
                t0 = perf_counter()
                r = scalar(conn, "select memory.assert_facts(%s, %s::jsonb)",
                           (lp.project, json.dumps(facts[s : s + args.batch])))  # fmt: skip
                clock("assert_facts", t0)
                lp.facts += [uuid.UUID(x["fact_id"]) for x in r["results"]
                             if x["status"] == "inserted"]  # fmt: skip
            for session, turns in spec.sessions():
                t0 = perf_counter()
                r = scalar(conn, "select memory.ingest(%s, %s, %s::jsonb)",
                           (lp.project, session, json.dumps(turns)))  # fmt: skip
                clock("ingest", t0)
                lp.episodes += [uuid.UUID(i) for i in r["episode_ids"]]
            projects.append(lp)
        print("  embeddings (HNSW indexes dropped) ...", flush=True)
        indexes = conn.execute(
            "select format('%%I.%%I', schemaname, indexname), indexdef from pg_indexes "
            "where format('%%I.%%I', schemaname, tablename) = any(%s) "
            "and indexdef ilike '%% using hnsw %%' order by 1",
            (HNSW_TABLES,),
        ).fetchall()
        with psycopg.connect(db.owner, autocommit=True) as owner:
            for name, _ in indexes:
                owner.execute(f"drop index {name}")
        for lp in projects:
            for kind, ids in (("fact", lp.facts), ("episode", lp.episodes)):
                for s in range(0, len(ids), 1000):
                    chunk = ids[s : s + 1000]
                    t0 = perf_counter()
                    conn.execute("select memory_worker.store_embeddings(%s, %s, %s)",
                                 (kind, chunk, list(clusters.sample(len(chunk)))))  # fmt: skip
                    clock("store_embeddings", t0)
    print("  HNSW builds ...", flush=True)
    with psycopg.connect(db.owner, autocommit=True) as owner:
        owner.execute(f"set maintenance_work_mem = '{args.maintenance_work_mem}'")
        for name, definition in indexes:
            t0 = perf_counter()
            owner.execute(definition)
            clock(f"hnsw_build {name}", t0)
        t0 = perf_counter()
        owner.execute("vacuum (analyze)")
        clock("vacuum_analyze", t0)
    n_facts = sum(len(p.facts) for p in projects)
    n_episodes = sum(len(p.episodes) for p in projects)
    report = {
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "facts_per_s_assert": round(sum(s.facts for s in specs) / seconds["assert_facts"], 1),
        "episodes_per_s_ingest": round(n_episodes / seconds["ingest"], 1),
        "embeddings_per_s_store": round((n_facts + n_episodes) / seconds["store_embeddings"], 1),
    }
    return org, projects, report


def _dim(app: str) -> int:
    with psycopg.connect(app) as conn:
        return int(scalar(conn, "select memory.embedding_dim()"))


# --------------------------------------------------------------------------- queries


def workloads(conn: Conn, lp: Loaded, n: int, k: int, clusters: Clusters, seed: str) -> list[Any]:
    """n queries of every workload against one project, shuffled: (workload, sql, params)."""
    rng = random.Random(f"{seed}/queries/{lp.spec.name}")
    texts, vectors = lp.spec.queries(n, rng), clusters.sample(n)
    instants = [SPAN_START + timedelta(seconds=rng.randrange(SPAN_DAYS * 86400)) for _ in range(n)]
    people = [r[0] for r in conn.execute(
        "select entity_id from memory.entities where project_id = %s and entity_type = 'person' "
        "order by entity_id limit %s", (lp.project, n * 20)).fetchall()]  # fmt: skip
    people = rng.sample(people, min(n, len(people)))
    p, out = lp.project, []
    for i in range(n):
        dated = f"{texts[i].rstrip('?')} in {instants[i]:%B %Y}?"  # the month-scoped question
        out += [
            ("search_all_legs", SEARCH_SQL, (p, texts[i], vectors[i], k, None, "scores")),
            ("search_all_legs_dated", SEARCH_SQL, (p, dated, vectors[i], k, None, "scores")),
            *((f"leg_{leg}", SEARCH_SQL, (p, texts[i], vectors[i], k, [leg], "scores"))
              for leg in LEGS),
            ("facts_at_count", FACTS_AT_COUNT, (p, instants[i])),
            ("facts_at_subject", FACTS_AT_SUBJECT, (p, instants[i], people[i % len(people)])),
        ]  # fmt: skip
    rng.shuffle(out)
    return out


def run_queries(app: str, org: uuid.UUID, warmup: list[Any], queries: list[Any]) -> Any:
    """Warm-up untimed, then each query timed (client side, and the backend's CPU)."""
    samples: dict[str, Samples] = {}
    with _connect(app, org) as conn:
        for _, q, params in warmup:
            conn.execute(q, params).fetchone()
        for workload, q, params in queries:
            wall, cpu, _ = timed(conn, partial(fetch, conn, q, params))
            samples.setdefault(workload, Samples()).add(wall, cpu)
    return {w: s.report() for w, s in sorted(samples.items())}


def vector_recall(app: str, admin: str, org: uuid.UUID, lp: Loaded, queries: list[Any],
                  k: int, ef_values: list[int], n: int) -> Any:  # fmt: skip
    """Per vector leg and session hnsw.ef_search: recall@k of the leg alone (plain RRF, so
    its own ranking) against the exact top k, over its first n timed queries."""
    report: dict[str, Any] = {}
    for leg in ("episode_vector", "fact_vector"):
        picked = [params for w, _, params in queries if w == f"leg_{leg}"][:n]
        with _connect(admin) as conn:
            conn.execute("set enable_indexscan = off")  # HNSW only by index scan: a sort
            exact = [{r[0] for r in conn.execute(EXACT_SQL[leg], (lp.project, p[2], k))}
                     for p in picked]  # fmt: skip
        report[leg] = {}
        for ef in ef_values:
            recalls, samples = [], Samples()
            with _connect(app, org) as conn:
                conn.execute(f"set hnsw.ef_search = {int(ef)}")
                for p, want in zip(picked, exact, strict=True):
                    leg_only = (*p[:5], "rrf")
                    wall, cpu, row = timed(conn, partial(fetch, conn, SEARCH_SQL, leg_only))
                    samples.add(wall, cpu)
                    got = {uuid.UUID(r["id"]) for r in row[0]["results"]}
                    recalls.append(len(got & want) / max(len(want), 1))
            report[leg][str(ef)] = {"recall_mean": round(statistics.fmean(recalls), 4),
                                    "recall_min": round(min(recalls), 4),
                                    **samples.report()}  # fmt: skip
    return report


def _sizes(admin: str, fact_rows: int) -> dict[str, Any]:
    per = 100_000 / max(fact_rows, 1) / 2**20
    with psycopg.connect(admin) as conn:
        return {t: {"total_mb_per_100k_facts": round(scalar(
            conn, "select pg_total_relation_size(%s)", (t,)) * per, 1)} for t in SIZED}  # fmt: skip


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    run = Run("search", args, db)
    rest = (1 - args.main_share) / max(args.projects - 1, 1)
    shares = [args.main_share] + [rest] * (args.projects - 1)
    names = ["main"] + [f"small-{i}" for i in range(1, args.projects)]
    specs = [Project(n, f, e, args.seed) for n, f, e in zip(names, split(args.facts, shares),
             split(args.episodes or args.facts, shares), strict=True)]  # fmt: skip
    clusters = Clusters(_dim(db.app), args.clusters, seed=zlib.crc32(args.seed.encode()))
    org, projects, report = load(db, specs, clusters, args)
    fact_rows = {p.spec.name: len(p.facts) for p in projects}
    latency, recall, loads = {}, {}, {}
    ef_values = [int(x) for x in args.ef_search.split(",") if x]
    for lp in projects[:2]:  # the large project and one small one
        with _connect(db.app, org) as conn:
            warm = workloads(conn, lp, args.warmup, args.k, clusters, f"{args.seed}/warmup")
            queries = workloads(conn, lp, args.queries, args.k, clusters, args.seed)
        print(f"  {lp.spec.name}: {len(warm)} + {len(queries)} queries ...", flush=True)
        before = os.getloadavg()
        latency[lp.spec.name] = lat = run_queries(db.app, org, warm, queries)
        loads[lp.spec.name] = [round(x, 2) for x in (*before, *os.getloadavg())]
        for leg in ("episode_vector", "fact_vector"):
            p95 = [lat[w]["latency_ms"]["p95"] for w in ("search_all_legs", f"leg_{leg}")]
            lat[f"ratio_all_legs_p95_to_{leg}"] = ratio(*p95)
        if ef_values:
            print(f"  {lp.spec.name}: recall at ef_search {ef_values} ...", flush=True)
            recall[lp.spec.name] = vector_recall(db.app, db.admin, org, lp, queries, args.k,
                                                 ef_values, args.recall_queries)  # fmt: skip
        for w, v in lat.items():
            print(f"    {w}: {v}" if "ratio" in w else f"    {w}: p50 {v['latency_ms']['p50']} "
                  f"p95 {v['latency_ms']['p95']} ms", flush=True)  # fmt: skip
    result = {"data": {"fact_rows": fact_rows, "load": report},
              "sizes": _sizes(db.admin, sum(fact_rows.values())),
              "load_average_before_after_queries": loads, "latency_ms": latency,
              "vector_recall": recall}  # fmt: skip
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    lat = {p: {w: v for w, v in x.items() if "ratio" not in w} for p, x in r["latency_ms"].items()}
    workloads = list(next(iter(lat.values())))
    series = [(p, q) for p in lat for q in ("p50", "p95")]
    width = 0.8 / len(series)
    _, ax = plt.subplots(figsize=(12, 5))
    for i, (project, q) in enumerate(series):
        xs = [w + (i - (len(series) - 1) / 2) * width for w in range(len(workloads))]
        bars = ax.bar(xs, [lat[project][w]["latency_ms"][q] for w in workloads], width,
                      label=f"{project} {q}")  # fmt: skip
        ax.bar_label(bars, fmt="%.1f", padding=1, fontsize=6, rotation=90)
    ax.set_xticks(range(len(workloads)), [w.replace("_", "\n", 1) for w in workloads], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(f"latency, ms ({sum(r['data']['fact_rows'].values())} fact rows)")
    ax.legend(fontsize=7, ncol=4)
