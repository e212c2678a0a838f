"""What the periodic communities job costs per project: memory.refresh_communities on a
graph unchanged since its last run (a read of the current edges and a digest compare)
against memory.compute_communities on the same project, in the same run.

N people, each working at one of N/75 employers (cardinality one) and knowing one other
person at random, every object an entity (2N edges). Each call is one transaction as the
app role, the two kinds alternating; then one new edge and a refresh, which computes
again. ratio = computation p50 / unchanged-refresh p50.
"""

from __future__ import annotations

import argparse
import json
import random
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import common

HELP = "refresh_communities on an unchanged graph against compute_communities"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--people", type=int, default=3000, help="people in the graph: 2x edges (3000)")
    a("--repeats", type=int, default=7, help="calls of each kind, alternating (7)")
    a("--seed", type=int, default=20241201, help="graph seed")


def _assert(conn: common.Conn, t: common.Tenant, facts: list[dict[str, Any]]) -> None:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (t.org,))
        conn.execute("select memory.assert_facts(%s, %s::jsonb)", (t.project, json.dumps(facts)))


def _call(conn: common.Conn, t: common.Tenant, function: str) -> tuple[float, float | None, Any]:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (t.org,))
        return common.timed(
            conn, partial(common.scalar, conn, f"select memory.{function}(%s)", (t.project,))
        )


def run(args: argparse.Namespace, db: common.BenchDatabase) -> Path:
    run = common.Run("communities", args, db)
    rng, n = random.Random(args.seed), args.people
    t = common.new_project(db.app, common.new_org(db.app, "communities"), "graph", ["works at:one"])
    facts = [
        {
            "subject": f"person {i}",
            "predicate": "works at",
            "object_type": "entity",
            "object": f"employer {rng.randrange(max(1, n // 75))}",
        }
        for i in range(n)
    ]
    facts += [{"subject": f"person {i}", "predicate": "knows", "object_type": "entity",
               "object": f"person {rng.randrange(n)}"} for i in range(n)]  # fmt: skip
    print(f"  loading {len(facts)} entity-object facts ...", flush=True)
    samples = {"compute": common.Samples(), "unchanged": common.Samples()}
    answers: dict[str, Any] = {}
    with psycopg.connect(db.app) as conn:
        for s in range(0, len(facts), 500):
            _assert(conn, t, facts[s : s + 500])
        common.vacuum(db.owner, "memory.edges, memory.entities, memory.facts")
        for _ in range(args.repeats):
            for kind, function in (("compute", "compute_communities"),
                                   ("unchanged", "refresh_communities")):  # fmt: skip
                wall, cpu, answers[kind] = _call(conn, t, function)
                samples[kind].add(wall, cpu)
        _assert(conn, t, [{"subject": "person 0", "predicate": "knows", "object": "newcomer",
                           "object_type": "entity"}])  # fmt: skip
        changed_wall, _, answers["changed"] = _call(conn, t, "refresh_communities")
    lat = {k: s.report() for k, s in samples.items()}
    checks = {
        "compute_computed": answers["compute"]["computed"] is True,
        "unchanged_skipped": answers["unchanged"]["computed"] is False,
        "changed_computed_with_the_new_edge": answers["changed"]["computed"] is True
        and answers["changed"]["edges"] == answers["compute"]["edges"] + 1,
    }
    assert all(checks.values()), checks
    result: dict[str, Any] = {
        "graph": {k: answers["compute"][k] for k in ("edges", "members", "communities", "rounds")},
        "latency_ms": lat,
        "ratio": common.ratio(*(lat[k]["latency_ms"]["p50"] for k in ("compute", "unchanged"))),
        "cpu_ratio": common.ratio(*(lat[k]["cpu_ms"]["p50"] for k in ("compute", "unchanged")))
        if lat["compute"]["cpu_ms"] and lat["unchanged"]["cpu_ms"] else None,
        "changed_refresh_ms": round(changed_wall * 1000, 1),
        "checks": checks,
    }  # fmt: skip
    print(f"  {result['graph']['edges']} edges: compute p50 {lat['compute']['latency_ms']['p50']}"
          f" ms, unchanged refresh p50 {lat['unchanged']['latency_ms']['p50']} ms, ratio "
          f"{result['ratio']} (CPU {result['cpu_ratio']})", flush=True)  # fmt: skip
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    _, ax = plt.subplots(figsize=(5, 4))
    lat = r["latency_ms"]
    bars = ax.bar(
        ["compute_communities", "refresh, unchanged"],
        [lat["compute"]["latency_ms"]["p50"], lat["unchanged"]["latency_ms"]["p50"]],
    )
    ax.bar_label(bars, fmt="%.1f ms", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"p50 ms per call, {r['graph']['edges']} edges (log)")
