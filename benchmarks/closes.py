"""What embeddings cost a supersession: memory.assert_facts superseding versions that carry
embeddings, against the same writes on versions that carry none, in the same run.

Two projects of one org get the same N identities (`plan`, cardinality one). Each round
supersedes every identity once in each project, batches of 100, one transaction each,
the projects alternating (A B, B A, ...). After each batch in the "embedded" project its
new versions get random unit vectors (untimed), as the embed worker would give them.
ratio = embedded facts/s / plain facts/s.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg

from benchmarks import common

ALL_EMBEDDED = (
    "select count(e.fact_id) = count(*) from memory_internal.fact_versions(%s) v "
    "left join memory.fact_embeddings e using (org_id, fact_id)"
)
HELP = "assert_facts superseding embedded facts against the same writes on unembedded ones"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--identities", type=int, default=2000, help="identities per project (2000)")
    a("--rounds", type=int, default=4, help="supersessions of every identity (4)")
    a("--seed", type=int, default=20240601, help="embedding seed")


def _write(
    conn: common.Conn, t: common.Tenant, n: int, plan: str, rng: random.Random | None
) -> Any:
    """Every identity on `plan`, batches of 100; returns each call's seconds and the
    versions closed. With rng, the new versions get embeddings, outside the timing."""
    seconds, closed = [], 0
    dim = common.scalar(conn, "select memory.embedding_dim()")
    for s in range(0, n, 100):
        batch = [{"subject": f"customer {i}", "predicate": "plan", "object": plan,
                  "content": f"customer {i} is on the {plan} plan"}
                 for i in range(s, min(s + 100, n))]  # fmt: skip
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (t.org,))
            t0 = perf_counter()
            r = common.scalar(
                conn, "select memory.assert_facts(%s, %s::jsonb)", (t.project, json.dumps(batch))
            )
            seconds.append(perf_counter() - t0)
            closed += int(r["superseded"])
            ids = [o["fact_id"] for o in r["results"] if o.get("status") == "inserted"]
            if rng is not None and ids:
                vectors = []
                for _ in ids:
                    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
                    norm = sum(x * x for x in v) ** 0.5 or 1.0
                    vectors.append("[" + ",".join(f"{x / norm:.5f}" for x in v) + "]")
                conn.execute(
                    "select memory_worker.store_embeddings('fact', %s::uuid[], %s::vector[])",
                    (ids, vectors),
                )
    return seconds, closed


def run(args: argparse.Namespace, db: common.BenchDatabase) -> Path:
    run = common.Run("closes", args, db)
    rng = random.Random(args.seed)
    org = common.new_org(db.app, "closes")
    tenants = {m: common.new_project(db.app, org, m, ["plan:one"]) for m in ("embedded", "plain")}
    seconds: dict[str, list[float]] = {m: [] for m in tenants}
    per_round: dict[str, list[float]] = {m: [] for m in tenants}
    closed = dict.fromkeys(tenants, 0)
    with psycopg.connect(db.app) as conn:
        for m, t in tenants.items():
            print(f"  {m}: {args.identities} identities ...", flush=True)
            _write(conn, t, args.identities, "p0", rng if m == "embedded" else None)
        common.vacuum(db.owner, "memory.facts, memory.edges, memory.fact_events")
        for k, m in enumerate(common.alternating(args.rounds, "embedded", "plain")):
            print(f"  round {k // 2 + 1}: {m} ...", flush=True)
            s, n = _write(conn, tenants[m], args.identities, f"p{k // 2 + 1}",
                          rng if m == "embedded" else None)  # fmt: skip
            seconds[m] += s
            closed[m] += n
            per_round[m].append(args.identities / sum(s))
        embedded = {}
        for m, t in tenants.items():
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (t.org,))
                embedded[m] = common.scalar(conn, ALL_EMBEDDED, (t.project,))
    rates = {m: round(args.identities * args.rounds / sum(s), 1) for m, s in seconds.items()}
    checks = {"closed": closed, "every_embedded_version_has_a_vector": embedded["embedded"]}
    assert all(n == args.identities * args.rounds for n in closed.values()), checks
    assert embedded["embedded"] and not embedded["plain"], embedded
    result = {
        "facts_per_s": rates,
        "call_latency_ms": {m: common.latency_ms(s) for m, s in seconds.items()},
        "ratio": common.ratio(rates["embedded"], rates["plain"]),
        "ratio_per_round": [round(e / p, 3) for e, p in zip(*per_round.values(), strict=True)],
        "checks": checks,
    }
    print(f"  embedded {rates['embedded']:.0f} facts/s, plain {rates['plain']:.0f}, ratio "
          f"{result['ratio']} (per round {result['ratio_per_round']})", flush=True)  # fmt: skip
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    _, ax = plt.subplots(figsize=(5, 4))
    rates = r["facts_per_s"]
    common.pair_bars(ax, ["supersessions"], [rates["embedded"]], [rates["plain"]],
                     ("closed versions embedded", "closed versions plain"))  # fmt: skip
    ax.set_ylabel("facts/s (batches of 100)")
