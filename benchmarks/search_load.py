"""Loading synthetic memory through the product's write path, timed per step.

Facts: memory.assert_facts in batches (world-time order, so later versions supersede);
episodes: memory.ingest, 100 messages a call; embeddings: memory.store_embeddings.
All as the app role, one transaction per call.  The HNSW indexes are dropped (as the
owner) before the embeddings are stored and built afterwards, timed: a bulk load into
an indexed table inserts into the graph row by row, several times slower than one build.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

from benchmarks.synthetic import PREDICATES, Clusters, Project

Conn = psycopg.Connection[Any]
STORE_BATCH = 1000


@dataclass
class LoadedProject:
    spec: Project
    project_id: uuid.UUID
    fact_ids: list[uuid.UUID] = field(default_factory=list)
    episode_ids: list[uuid.UUID] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


@dataclass
class LoadReport:
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: Counter[str] = field(default_factory=Counter)
    hnsw_build: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, projects: list[LoadedProject]) -> dict[str, Any]:
        facts = sum(p.counts["facts_submitted"] for p in projects)
        episodes = sum(len(p.episode_ids) for p in projects)
        s = self.seconds
        assert_s, ingest_s = s["assert_facts"], s["ingest"]
        return {
            "seconds": {k: round(v, 1) for k, v in s.items()},
            "calls": dict(self.calls),
            "facts_per_s_assert": round(facts / assert_s, 1) if assert_s else None,
            "episodes_per_s_ingest": round(episodes / ingest_s, 1) if ingest_s else None,
            "hnsw_build": self.hnsw_build,
            "embeddings_per_s_store": round(
                (sum(len(p.fact_ids) for p in projects) + episodes)
                / max(s["store_embeddings_fact"] + s["store_embeddings_episode"], 1e-9),
                1,
            ),
        }


def connect_app(dsn: str, org: uuid.UUID | None = None) -> Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    register_vector(conn)
    if org is not None:
        conn.execute("select memory.use_org(%s, false)", (org,))
    return conn


def create_projects(conn: Conn, specs: list[Project]) -> tuple[uuid.UUID, list[LoadedProject]]:
    row = conn.execute("select memory.create_org('benchmark search')").fetchone()
    assert row is not None
    org: uuid.UUID = row[0]
    conn.execute("select memory.use_org(%s, false)", (org,))
    loaded = []
    for spec in specs:
        row = conn.execute("select memory.create_project(%s, %s)", (org, spec.name)).fetchone()
        assert row is not None
        for p in PREDICATES:
            conn.execute("select memory.declare_predicate(%s, %s, %s)",
                         (row[0], p.name, p.cardinality))  # fmt: skip
        loaded.append(LoadedProject(spec, row[0]))
    return org, loaded


def load_facts(conn: Conn, lp: LoadedProject, batch: int, report: LoadReport) -> None:
    facts = lp.spec.fact_stream()
    lp.counts["facts_submitted"] += len(facts)
    for start in range(0, len(facts), batch):
        body = json.dumps(facts[start : start + batch])
        t0 = perf_counter()
        row = conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (lp.project_id, body)
        ).fetchone()
        report.seconds["assert_facts"] += perf_counter() - t0
        report.calls["assert_facts"] += 1
        assert row is not None
        result = row[0]
        for key in ("inserted", "superseded", "skipped", "refused", "invalid"):
            lp.counts[key] += int(result[key])
        lp.fact_ids += [
            uuid.UUID(r["fact_id"]) for r in result["results"] if r["status"] == "inserted"
        ]


def load_episodes(conn: Conn, lp: LoadedProject, report: LoadReport) -> None:
    for session, turns in lp.spec.sessions():
        body = json.dumps(turns)
        t0 = perf_counter()
        row = conn.execute(
            "select memory.ingest(%s, %s, %s::jsonb)", (lp.project_id, session, body)
        ).fetchone()
        report.seconds["ingest"] += perf_counter() - t0
        report.calls["ingest"] += 1
        assert row is not None
        lp.episode_ids += [uuid.UUID(i) for i in row[0]["episode_ids"]]


def store_vectors(
    conn: Conn, kind: str, ids: list[uuid.UUID], clusters: Clusters, report: LoadReport
) -> None:
    for start in range(0, len(ids), STORE_BATCH):
        chunk = ids[start : start + STORE_BATCH]
        vectors = list(clusters.sample(len(chunk)))
        t0 = perf_counter()
        conn.execute("select memory.store_embeddings(%s, %s, %s)", (kind, chunk, vectors))
        report.seconds[f"store_embeddings_{kind}"] += perf_counter() - t0
        report.calls[f"store_embeddings_{kind}"] += 1


HNSW_TABLES = ("memory.fact_embeddings", "memory.episodes")


def drop_hnsw_indexes(owner_dsn: str) -> list[tuple[str, str]]:
    """Drop the HNSW indexes of the embedded tables; their definitions, to build them again."""
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        found = conn.execute(
            "select format('%%I.%%I', schemaname, indexname), indexdef from pg_indexes "
            "where format('%%I.%%I', schemaname, tablename) = any(%s) "
            "and indexdef ilike '%% using hnsw %%' order by 1",
            (list(HNSW_TABLES),),
        ).fetchall()
        for name, _ in found:
            conn.execute(f"drop index {name}")
    return [(str(n), str(d)) for n, d in found]


def build_hnsw_indexes(
    owner_dsn: str, indexes: list[tuple[str, str]], maintenance_work_mem: str
) -> list[dict[str, Any]]:
    """CREATE INDEX for each dropped definition, timed (the issue's "index build time")."""
    out: list[dict[str, Any]] = []
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(f"set maintenance_work_mem = '{maintenance_work_mem}'")
        workers = conn.execute("show max_parallel_maintenance_workers").fetchone()
        assert workers is not None
        for name, definition in indexes:
            notices.clear()
            t0 = perf_counter()
            conn.execute(definition)
            elapsed = perf_counter() - t0
            size = conn.execute("select pg_relation_size(%s)", (name,)).fetchone()
            assert size is not None
            out.append({
                "index": name,
                "seconds": round(elapsed, 1),
                "maintenance_work_mem": maintenance_work_mem,
                "max_parallel_maintenance_workers": workers[0],
                "bytes": size[0],
                "notices": list(notices),
            })  # fmt: skip
    return out


def vacuum_analyze(owner_dsn: str, report: LoadReport) -> None:
    """What autovacuum would get to: the episodes' embedding UPDATEs leave their rows twice."""
    t0 = perf_counter()
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(
            "vacuum (analyze) memory.facts, memory.fact_embeddings, memory.episodes, "
            "memory.entities, memory.edges, memory.fact_events, memory.entity_aliases, "
            "memory.sessions, "
            "memory_internal.fact_terms, memory_internal.entity_name_tokens"
        )
    report.seconds["vacuum_analyze"] += perf_counter() - t0


def load_all(
    app_dsn: str,
    owner_dsn: str,
    specs: list[Project],
    batch: int,
    clusters: Clusters,
    maintenance_work_mem: str,
) -> tuple[uuid.UUID, list[LoadedProject], LoadReport]:
    report = LoadReport()
    with connect_app(app_dsn) as conn:
        org, projects = create_projects(conn, specs)
        for lp in projects:
            print(f"  {lp.spec.name}: {lp.spec.facts} facts ...", flush=True)
            load_facts(conn, lp, batch, report)
            print(f"  {lp.spec.name}: {lp.spec.episodes} episodes ...", flush=True)
            load_episodes(conn, lp, report)
        print("  embeddings (HNSW indexes dropped) ...", flush=True)
        dropped = drop_hnsw_indexes(owner_dsn)
        for lp in projects:
            store_vectors(conn, "fact", lp.fact_ids, clusters, report)
            store_vectors(conn, "episode", lp.episode_ids, clusters, report)
    print("  HNSW builds ...", flush=True)
    report.hnsw_build = build_hnsw_indexes(owner_dsn, dropped, maintenance_work_mem)
    report.seconds["hnsw_build"] = sum(b["seconds"] for b in report.hnsw_build)
    vacuum_analyze(owner_dsn, report)
    return org, projects, report
