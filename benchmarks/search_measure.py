"""Read-side measurements on a loaded database: query latency, sizes, HNSW build, plans."""

from __future__ import annotations

import random
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from time import perf_counter
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from benchmarks.common import backend_cpu_ns, latency_ms
from benchmarks.search_load import Conn, LoadedProject, connect_app
from benchmarks.synthetic import SPAN_DAYS, SPAN_START, Clusters

LEGS = ("episode_vector", "fact_vector", "episode_fulltext", "fact_fulltext", "entity", "graph")
SEARCH_SQL = (
    "select memory.search(p_project => %s, p_query => %s, p_query_embedding => %s, "
    "p_k => %s, p_legs => %s::text[])"
)
FACTS_AT_COUNT_SQL = "select count(*) from memory.facts_at(%s, %s)"
FACTS_AT_SUBJECT_SQL = (
    "select count(*) from memory.facts_at(%s, %s) f where f.subject_id = %s"
)  # fmt: skip
TABLES = ("memory.facts", "memory.fact_embeddings", "memory.episodes", "memory.edges",
          "memory.fact_events",
          "memory.entities", "memory.jobs",
          # the text legs' btree postings (they replace GIN under forced RLS)
          "memory_internal.episode_terms", "memory_internal.episode_term_df",
          "memory_internal.fact_terms", "memory_internal.entity_name_tokens")  # fmt: skip
HNSW_INDEXES = ("memory.fact_embeddings_embedding_idx", "memory.episodes_embedding_idx")


@dataclass(frozen=True)
class Query:
    workload: str
    sql: str
    params: tuple[Any, ...]


def _search(project: uuid.UUID, text: str, vec: np.ndarray, k: int, legs: Any) -> tuple[Any, ...]:
    return (project, text, vec, k, legs)


def workloads(
    conn: Conn, lp: LoadedProject, n: int, k: int, clusters: Clusters, seed: str
) -> list[Query]:
    """n queries of every workload against one project, in a shuffled order."""
    rng = random.Random(f"{seed}/queries/{lp.spec.name}")
    texts = lp.spec.queries(n, rng)
    vectors = clusters.sample(n)
    instants = [SPAN_START + timedelta(seconds=rng.randrange(SPAN_DAYS * 86400)) for _ in range(n)]
    subjects = [
        r[0]
        for r in conn.execute(
            "select entity_id from memory.entities where project_id = %s "
            "and entity_type = 'person' order by entity_id limit %s",
            (lp.project_id, n * 20),
        ).fetchall()
    ]
    subjects = rng.sample(subjects, min(n, len(subjects)))
    p = lp.project_id
    out: list[Query] = []
    for i in range(n):
        out.append(Query("search_all_legs", SEARCH_SQL, _search(p, texts[i], vectors[i], k, None)))
        # The same question scoped to a month ("... in March 2022?"): the episode vector
        # leg then also ranks that month's turns on their own (question_period).
        dated = f"{texts[i].rstrip('?')} in {instants[i]:%B %Y}?"
        out.append(Query("search_all_legs_dated", SEARCH_SQL,
                         _search(p, dated, vectors[i], k, None)))  # fmt: skip
        for leg in LEGS:
            out.append(Query(f"leg_{leg}", SEARCH_SQL,
                             _search(p, texts[i], vectors[i], k, [leg])))  # fmt: skip
        out.append(Query("facts_at_count", FACTS_AT_COUNT_SQL, (p, instants[i])))
        out.append(Query("facts_at_subject", FACTS_AT_SUBJECT_SQL,
                         (p, instants[i], subjects[i % len(subjects)])))  # fmt: skip
    rng.shuffle(out)
    return out


def run_queries(
    app_dsn: str, org: uuid.UUID, warmup: list[Query], queries: list[Query]
) -> dict[str, dict[str, Any]]:
    """Run `warmup` untimed, then time each of `queries` (client side: execute + fetch),
    and, when the server is local, the backend CPU each one took (`cpu_ms`)."""
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    degraded: dict[str, int] = {}
    with connect_app(app_dsn, org) as conn:
        pid = conn.info.backend_pid
        for q in warmup:
            conn.execute(q.sql, q.params).fetchone()
        for q in queries:
            c0 = backend_cpu_ns(pid)
            t0 = perf_counter()
            row = conn.execute(q.sql, q.params).fetchone()
            times.setdefault(q.workload, []).append(perf_counter() - t0)
            c1 = backend_cpu_ns(pid)
            if c0 is not None and c1 is not None:
                cpu.setdefault(q.workload, []).append((c1 - c0) / 1e9)
            assert row is not None
            if isinstance(row[0], dict) and row[0].get("degraded"):
                degraded[q.workload] = degraded.get(q.workload, 0) + 1
    return {
        w: {
            "n": len(t),
            **latency_ms(t),
            "degraded": degraded.get(w, 0),
            "cpu_ms": latency_ms(cpu[w]) if w in cpu else None,
        }
        for w, t in sorted(times.items())
    }


def result_shape(app_dsn: str, org: uuid.UUID, query: Query) -> dict[str, Any]:
    """What one all-legs answer holds: legs that ran, results per kind, hits per leg."""
    with connect_app(app_dsn, org) as conn:
        row = conn.execute(query.sql, query.params).fetchone()
    assert row is not None
    result = row[0]
    kinds: dict[str, int] = {}
    legs: dict[str, int] = {}
    for r in result["results"]:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        for leg in r["ranks"]:
            legs[leg] = legs.get(leg, 0) + 1
    return {"query": query.params[1], "legs_ran": result["legs"], "results_by_kind": kinds,
            "results_with_a_rank_from": legs, "failed_legs": result["failed_legs"]}  # fmt: skip


def sizes(admin_dsn: str, facts_rows: int) -> dict[str, Any]:
    """On-disk sizes (superuser: row counts see every org, RLS aside)."""
    per = 100_000 / max(facts_rows, 1)
    out: dict[str, Any] = {}
    with psycopg.connect(admin_dsn) as conn:
        for t in TABLES:
            row = conn.execute(
                "select (select count(*) from " + t + "), pg_total_relation_size(%s), "
                "pg_relation_size(%s), pg_indexes_size(%s)",
                (t, t, t),
            ).fetchone()
            assert row is not None
            out[t] = {
                "rows": row[0],
                "total_bytes": row[1],
                "heap_bytes": row[2],
                "indexes_bytes": row[3],
                "total_mb_per_100k_facts": round(row[1] * per / 2**20, 1),
                "heap_mb_per_100k_facts": round(row[2] * per / 2**20, 1),
                "indexes_mb_per_100k_facts": round(row[3] * per / 2**20, 1),
            }
        for ix in HNSW_INDEXES:
            row = conn.execute("select pg_relation_size(%s)", (ix,)).fetchone()
            assert row is not None
            out[ix] = {"bytes": row[0], "mb_per_100k_facts": round(row[0] * per / 2**20, 1)}
    return out


_DURATION = re.compile(r"duration: ([0-9.]+) ms")


def explain_nested(admin_dsn: str, org: uuid.UUID, query: Query) -> list[dict[str, Any]]:
    """The plans of every statement one call runs (auto_explain, sent back as notices),
    as the app role (RLS applies); slowest first."""
    plans: list[str] = []
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        for stmt in (
            "load 'auto_explain'",
            "set auto_explain.log_min_duration = 0",
            "set auto_explain.log_analyze = on",
            "set auto_explain.log_buffers = on",
            "set auto_explain.log_nested_statements = on",
            "set auto_explain.log_level = notice",
            "set role chronomem_app",
        ):
            conn.execute(stmt)
        conn.execute("select memory.use_org(%s, false)", (org,))
        plans.clear()
        conn.execute(query.sql, query.params).fetchone()
    out: list[dict[str, Any]] = []
    for p in plans:
        m = _DURATION.search(p)
        out.append({"ms": float(m[1]) if m else None, "plan": p})
    out.sort(key=lambda x: -(x["ms"] or 0))
    return out


# How each statement of memory.search reads in functions/077_search.sql.
STATEMENT_MARKERS = {
    # Legs in their own functions are named by their call site (the statement
    # that calls them includes all they run).
    "episode_vector": "memory_internal.search_episode_vector(",
    "fact_vector": "memory_internal.search_fact_vector(",
    "episode_fulltext": "memory_internal.search_episode_fulltext(",
    "fact_fulltext": "memory_internal.search_fact_fulltext(",
    "entity": "memory_internal.search_entities(",
    "graph": "with lvl as materialized",  # one statement per hop; the slowest is kept
    "fusion_and_details": "'position', n.position",
}


def by_statement(plans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nested statements of memory.search, named by the leg they belong to."""
    found: dict[str, dict[str, Any]] = {}
    for item in plans:
        for name, marker in STATEMENT_MARKERS.items():
            if name not in found and marker in item["plan"]:
                found[name] = item
                break
    return found
