"""How much of the exact answer the vector legs return: recall against exact cosine top-k.

A latency figure for an approximate index means little without its recall (as in
ann-benchmarks, which plots one against the other). The vector legs walk the shared
HNSW index with the project (and the instants) as a filter and an iterative scan, so
what they return can differ from the project's true nearest rows. For each vector leg
and session `hnsw.ef_search` value, the leg alone is called through `memory.search`
(plain reciprocal rank fusion, so a single leg's answer is its own ranking: no context
shares, no preferences) and its top k compared with the exact top k, computed by a
scan of the project's rows with index scans off. memory.search never walks narrower
than `memory_internal.vector_ef_search` of the hits it asks for (a session's wider
setting is kept): each entry records the width the legs ran with.
"""

from __future__ import annotations

import statistics
import uuid
from time import perf_counter
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from benchmarks.common import backend_cpu_ns, latency_ms
from benchmarks.search_load import connect_app
from benchmarks.search_measure import Query

LEG_ONLY_SQL = (
    "select memory.search(p_project => %s, p_query => %s, p_query_embedding => %s, "
    "p_k => %s, p_legs => array[%s], p_fusion => 'rrf')"
)
# The exact answers, at the instants memory.search is called with (now, now). Episodes
# are filtered by the one visibility rule the legs use; facts are read through facts_at.
EXACT_SQL = {
    "episode_vector": (
        "select e.episode_id from memory.episodes e "
        "where e.project_id = %s and e.embedding is not null "
        "and memory_internal.episode_visible(e.occurred_at, e.created_at, now(), now()) "
        "order by e.embedding <=> %s, e.episode_id limit %s"
    ),
    "fact_vector": (
        "select f.fact_id from memory.facts_at(%s, now(), now()) f "
        "join memory.fact_embeddings e using (org_id, fact_id) "
        "order by e.embedding <=> %s, f.fact_id limit %s"
    ),
}


def _scalar(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def _exact(
    admin_dsn: str, leg: str, project: uuid.UUID, vecs: list[np.ndarray], k: int
) -> list[set[Any]]:
    """The exact top k of each query vector (superuser: the project filter is explicit)."""
    out = []
    with psycopg.connect(admin_dsn) as conn:
        register_vector(conn)
        # HNSW is reached only by an index scan: with index scans off, the rows are
        # ranked by a sort, which is exact.
        conn.execute("set enable_indexscan = off")
        for v in vecs:
            rows = conn.execute(EXACT_SQL[leg], (project, v, k)).fetchall()
            out.append({r[0] for r in rows})
    return out


def vector_recall(
    app_dsn: str,
    admin_dsn: str,
    org: uuid.UUID,
    project: uuid.UUID,
    queries: list[Query],
    k: int,
    ef_values: list[int],
    n: int,
) -> dict[str, Any]:
    """Per vector leg and ef_search: mean and minimum recall@k of the leg alone against the
    exact top k, over the first n of that leg's timed queries, with the leg's latency."""
    report: dict[str, Any] = {}
    for leg in ("episode_vector", "fact_vector"):
        picked = [q for q in queries if q.workload == f"leg_{leg}"][:n]
        texts = [q.params[1] for q in picked]
        vecs = [q.params[2] for q in picked]
        exact = _exact(admin_dsn, leg, project, vecs, k)
        by_ef: dict[str, Any] = {}
        for ef in ef_values:
            recalls: list[float] = []
            times: list[float] = []
            cpu: list[float] = []
            with connect_app(app_dsn, org) as conn:
                conn.execute(f"set hnsw.ef_search = {int(ef)}")
                effective = int(
                    _scalar(conn, "select greatest(%s, memory_internal.vector_ef_search("
                                  "memory_internal.search_leg_hits(%s)))", (ef, k))
                )  # fmt: skip
                pid = conn.info.backend_pid
                # One untimed pass first, so every timed call finds its plans cached.
                conn.execute(LEG_ONLY_SQL, (project, texts[0], vecs[0], k, leg)).fetchone()
                for text, vec, want in zip(texts, vecs, exact, strict=True):
                    c0 = backend_cpu_ns(pid)
                    t0 = perf_counter()
                    row = conn.execute(LEG_ONLY_SQL, (project, text, vec, k, leg)).fetchone()
                    times.append(perf_counter() - t0)
                    c1 = backend_cpu_ns(pid)
                    if c0 is not None and c1 is not None:
                        cpu.append((c1 - c0) / 1e9)
                    assert row is not None
                    got = {uuid.UUID(r["id"]) for r in row[0]["results"]}
                    recalls.append(len(got & want) / max(len(want), 1))
            by_ef[str(ef)] = {
                "effective_ef_search": effective,
                "recall_mean": round(statistics.fmean(recalls), 4),
                "recall_min": round(min(recalls), 4),
                "queries_with_recall_1": sum(r == 1 for r in recalls),
                "latency_ms": latency_ms(times),
                "cpu_ms": latency_ms(cpu) if cpu else None,
            }
        report[leg] = {"queries": len(picked), "k": k, "by_ef_search": by_ef}
    return report
