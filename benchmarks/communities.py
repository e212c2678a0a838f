"""What the periodic communities job costs per project: `memory.refresh_communities` on a
project whose graph has not changed since its last run (a read of the current edges and
a comparison with the digest `memory.community_runs` keeps), against
`memory.compute_communities` on the same project (label propagation and the store), in
the same run.

The graph is session 15's audit graph: N people, each working at one of N/75 employers
(cardinality one) and knowing one other person at random, every object an entity, so
2N edges. Each measurement is one call in its own transaction, by the app role, the two
kinds alternating; then one new edge and a refresh, which computes again. ratio =
computation p50 / unchanged-refresh p50 (how many checks one computation costs).
"""

from __future__ import annotations

import argparse
import json
import random
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
    now_iso,
    server_info,
    speed_line,
    speed_reference,
    write_json,
)

HELP = "refresh_communities on an unchanged graph against compute_communities"
BATCH_SIZE = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--people", type=int, default=3000, help="people in the graph: 2x edges (default: 3000)"
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="calls of each kind, alternating (default: 7)"
    )
    parser.add_argument("--seed", type=int, default=20241201, help="graph seed")


def _facts(people: int, rng: random.Random) -> list[dict[str, Any]]:
    employers = max(1, people // 75)
    edge = {"object_type": "entity"}
    return [
        {**edge, "subject": f"person {i}", "predicate": "works at",
         "object": f"employer {rng.randrange(employers)}"}
        for i in range(people)
    ] + [
        {**edge, "subject": f"person {i}", "predicate": "knows",
         "object": f"person {rng.randrange(people)}"}
        for i in range(people)
    ]  # fmt: skip


def _call(conn: psycopg.Connection[Any], tenant: Tenant, query: Any) -> tuple[float, float, Any]:
    """Wall and backend CPU seconds of one call in its own transaction, and its answer."""
    pid = conn.info.backend_pid
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        cpu0, t0 = backend_cpu_ns(pid), perf_counter()
        row = conn.execute(query, (tenant.project,)).fetchone()
        wall = perf_counter() - t0
        cpu1 = backend_cpu_ns(pid)
    assert row is not None
    cpu = (cpu1 - cpu0) / 1e9 if cpu0 is not None and cpu1 is not None else float("nan")
    return wall, cpu, row[0]


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    started = perf_counter()
    rng = random.Random(args.seed)
    tenant = new_project(db.app, new_org(db.app, "communities"), "graph")
    facts = _facts(args.people, rng)
    print(f"  loading {len(facts)} entity-object facts ...", flush=True)
    with psycopg.connect(db.app) as conn:
        for s in range(0, len(facts), BATCH_SIZE):
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (tenant.org,))
                if s == 0:
                    conn.execute(
                        "select memory.declare_predicate(%s, 'works at', 'one')", (tenant.project,)
                    )
                conn.execute(
                    "select memory.assert_facts(%s, %s::jsonb)",
                    (tenant.project, json.dumps(facts[s : s + BATCH_SIZE])),
                )
    with psycopg.connect(db.owner, autocommit=True) as owner:
        owner.execute("vacuum analyze memory.edges, memory.entities, memory.facts")
    speed_before = speed_reference(db.admin)
    times: dict[str, dict[str, list[float]]] = {
        kind: {"wall": [], "cpu": []} for kind in ("compute", "unchanged")
    }
    answers: dict[str, Any] = {}
    with psycopg.connect(db.app) as conn:
        for r in range(args.repeats):
            print(f"  round {r + 1}: compute, refresh ...", flush=True)
            for kind, query in (
                ("compute", "select memory.compute_communities(%s)"),
                ("unchanged", "select memory.refresh_communities(%s)"),
            ):
                wall, cpu, answers[kind] = _call(conn, tenant, query)
                times[kind]["wall"].append(wall)
                times[kind]["cpu"].append(cpu)
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (tenant.project, json.dumps([{"subject": "person 0", "predicate": "knows",
                 "object": "newcomer", "object_type": "entity"}])),
            )  # fmt: skip
        changed_wall, changed_cpu, answers["changed"] = _call(
            conn, tenant, "select memory.refresh_communities(%s)"
        )
    speed_after = speed_reference(db.admin)
    lat = {kind: {m: latency_ms(v) for m, v in t.items()} for kind, t in times.items()}
    ratio = round(lat["compute"]["wall"]["p50"] / lat["unchanged"]["wall"]["p50"], 1)
    cpu_ratio = round(lat["compute"]["cpu"]["p50"] / lat["unchanged"]["cpu"]["p50"], 1)
    checks = {
        "compute_computed": answers["compute"]["computed"] is True,
        "unchanged_skipped": answers["unchanged"]["computed"] is False,
        "changed_computed": answers["changed"]["computed"] is True,
        "changed_saw_the_new_edge": answers["changed"]["edges"] == answers["compute"]["edges"] + 1,
    }
    graph = {k: answers["compute"][k] for k in ("edges", "members", "communities", "rounds")}
    report: dict[str, Any] = {
        "benchmark": "communities",
        "timestamp": now_iso(),
        "git": git_info(),
        "settings": {
            "people": args.people,
            "repeats": args.repeats,
            "seed": args.seed,
            "server": db.server,
            "postgres": server_info(db.admin),
            "machine": {
                **machine_info(),
                "speed_reference": {"before": speed_before, "after": speed_after},
            },
        },
        "workload": __doc__,
        "graph": graph,
        "latency_ms": lat,
        "ratio_compute_to_unchanged_refresh": ratio,
        "cpu_ratio_compute_to_unchanged_refresh": cpu_ratio,
        "changed_refresh_ms": {
            "wall": round(changed_wall * 1000, 1),
            "cpu": round(changed_cpu * 1000, 1),
        },
        "checks": checks,
        "runtime_s": round(perf_counter() - started, 1),
    }
    assert all(checks.values()), checks
    out = args.out / "communities.json"
    write_json(out, report)
    _plot(args.out / "communities.png", lat, ratio, graph)
    print(
        f"  {graph['edges']} edges: compute p50 {lat['compute']['wall']['p50']:.1f} ms, "
        f"unchanged refresh p50 {lat['unchanged']['wall']['p50']:.1f} ms, ratio {ratio} "
        f"(CPU {cpu_ratio}); refresh after a new edge {changed_wall * 1000:.0f} ms\n"
        f"  {speed_line(speed_before, speed_after)}"
    )
    return out


def _plot(path: Path, lat: dict[str, Any], ratio: float, graph: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    labels = ["compute_communities", "refresh, graph unchanged"]
    values = [lat["compute"]["wall"]["p50"], lat["unchanged"]["wall"]["p50"]]
    bars = ax.bar(labels, values, color=["#4c72b0", "#dd8452"])
    ax.bar_label(bars, fmt="%.1f ms", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms per call (log)")
    ax.set_title(f"communities job per project, {graph['edges']} edges: ratio {ratio}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit("run as: python -m benchmarks communities")
