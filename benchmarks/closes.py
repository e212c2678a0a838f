"""What embeddings cost the write path: `memory.assert_facts` superseding facts whose
stored versions carry embeddings, against the same writes where they carry none.

Closing a version's window is an UPDATE of an indexed column, so never a HOT update:
the new tuple goes into every index of memory.facts. Until migration 0026 the embedding
was a column of memory.facts, so for an embedded version that included an HNSW
insertion (ratio 0.17 in session 15); since, it is a row of memory.fact_embeddings,
which the window's updates do not touch, and this benchmark checks that embedded and
unembedded versions close at the same rate. The write benchmark's facts have no
embeddings (nothing embeds them during the run), so it cannot see this.

Two projects of one org get the same N identities (`plan`, cardinality one). Each round
supersedes every identity once in each project, in batches of 100, one transaction per
batch. After each batch of the "embedded" project its new versions get an embedding
(random unit vectors, untimed), as the embed worker would give them, so the next round
closes embedded versions there; the "plain" project's versions never get one. The two
projects alternate in rounds (A B, B A, ...). ratio = embedded facts/s / plain facts/s.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg

from benchmarks.common import (
    BenchDatabase,
    Tenant,
    git_info,
    latency_ms,
    machine_info,
    new_org,
    new_project,
    now_iso,
    ratio_bars,
    scalar,
    server_info,
    speed_line,
    speed_reference,
    write_json,
)

HELP = "assert_facts superseding embedded facts against the same writes on unembedded ones"
BATCH_SIZE = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--identities", type=int, default=2000, help="identities per project (default: 2000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="supersessions of every identity (default: 4)"
    )
    parser.add_argument("--seed", type=int, default=20240601, help="embedding seed")


def _batches(identities: int, plan: str) -> list[str]:
    """Every identity on `plan`, in batches of BATCH_SIZE facts."""
    facts = [
        {"subject": f"customer {i}", "predicate": "plan", "object": plan,
         "content": f"customer {i} is on the {plan} plan"}
        for i in range(identities)
    ]  # fmt: skip
    return [json.dumps(facts[s : s + BATCH_SIZE]) for s in range(0, identities, BATCH_SIZE)]


def _vectors(rng: random.Random, n: int, dim: int) -> list[str]:
    out = []
    for _ in range(n):
        v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append("[" + ",".join(f"{x / norm:.5f}" for x in v) + "]")
    return out


def _embed_new(
    conn: psycopg.Connection[Any], result: dict[str, Any], rng: random.Random, dim: int
) -> int:
    """Give the versions a batch inserted an embedding, as the embed worker would."""
    ids = [o["fact_id"] for o in result["results"] if o.get("status") == "inserted"]
    if ids:
        conn.execute(
            "select memory.store_embeddings('fact', %s::uuid[], %s::vector[])",
            (ids, _vectors(rng, len(ids), dim)),
        )
    return len(ids)


def _write(
    conn: psycopg.Connection[Any],
    tenant: Tenant,
    batches: list[str],
    embed: bool,
    rng: random.Random,
    dim: int,
) -> tuple[list[float], int]:
    """The batches, one transaction each; returns each call's seconds and the versions
    closed. Embedding the new versions (embed=True) is outside the timing."""
    seconds, closed = [], 0
    for batch in batches:
        with conn.transaction():
            conn.execute("select memory.use_org(%s)", (tenant.org,))
            started = perf_counter()
            result = scalar(
                conn, "select memory.assert_facts(%s, %s::jsonb)", (tenant.project, batch)
            )
            seconds.append(perf_counter() - started)
            closed += int(result["superseded"])
            if embed:
                _embed_new(conn, result, rng, dim)
    return seconds, closed


def _state(conn: psycopg.Connection[Any], tenant: Tenant) -> dict[str, int]:
    with conn.transaction():
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        row = conn.execute(
            "select count(*), count(e.fact_id), count(*) - count(e.fact_id) "
            "from memory_internal.fact_versions(%s) v "
            "left join memory.fact_embeddings e using (org_id, fact_id)",
            (tenant.project,),
        ).fetchone()
    assert row is not None
    return {"versions": row[0], "embedded": row[1], "unembedded": row[2]}


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    started = perf_counter()
    rng = random.Random(args.seed)
    org = new_org(db.app, "closes")
    tenants = {"embedded": new_project(db.app, org, "embedded"),
               "plain": new_project(db.app, org, "plain")}  # fmt: skip
    speed_before = speed_reference(db.admin)
    with psycopg.connect(db.app) as conn:
        dim = scalar(conn, "select memory.embedding_dim()")
        conn.commit()
        for name, tenant in tenants.items():
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (org,))
                conn.execute(
                    "select memory.declare_predicate(%s, 'plan', 'one')", (tenant.project,)
                )
            print(f"  {name}: {args.identities} identities ...", flush=True)
            _write(conn, tenant, _batches(args.identities, "p0"), name == "embedded", rng, dim)
    with psycopg.connect(db.owner, autocommit=True) as owner:
        owner.execute("vacuum analyze memory.facts, memory.edges, memory.fact_events")
    seconds: dict[str, list[float]] = {name: [] for name in tenants}
    per_round: dict[str, list[float]] = {name: [] for name in tenants}
    closed = dict.fromkeys(tenants, 0)
    with psycopg.connect(db.app) as conn:
        for r in range(1, args.rounds + 1):
            order = list(tenants) if r % 2 else list(reversed(tenants))
            for name in order:
                print(f"  round {r}: {name} ...", flush=True)
                batches = _batches(args.identities, f"p{r}")
                secs, n = _write(conn, tenants[name], batches, name == "embedded", rng, dim)
                seconds[name] += secs
                closed[name] += n
                per_round[name].append(round(args.identities / sum(secs), 1))
        states = {name: _state(conn, tenant) for name, tenant in tenants.items()}
    speed_after = speed_reference(db.admin)
    rates = {name: round(args.identities * args.rounds / sum(s), 1) for name, s in seconds.items()}
    ratio = round(rates["embedded"] / rates["plain"], 3)
    ratios = [
        round(e / p, 3) for e, p in zip(per_round["embedded"], per_round["plain"], strict=True)
    ]
    # Checks: both projects closed every identity once per round; the embedded project's
    # versions all carry an embedding, the plain one's none.
    expected_closed = args.identities * args.rounds
    checks = {
        "closed": closed,
        "closed_as_expected": all(n == expected_closed for n in closed.values()),
        "states": states,
        "embedded_all_embedded": states["embedded"]["unembedded"] == 0,
        "plain_none_embedded": states["plain"]["embedded"] == 0,
    }
    report = {
        "benchmark": "closes",
        "timestamp": now_iso(),
        "git": git_info(),
        "settings": {
            "identities": args.identities,
            "rounds": args.rounds,
            "batch_size": BATCH_SIZE,
            "embedding_dim": dim,
            "seed": args.seed,
            "server": db.server,
            "postgres": server_info(db.admin),
            "machine": {
                **machine_info(),
                "speed_reference": {"before": speed_before, "after": speed_after},
            },
        },
        "workload": __doc__,
        "facts_per_s": rates,
        "facts_per_s_per_round": per_round,
        "call_latency_ms": {name: latency_ms(s) for name, s in seconds.items()},
        "ratio": ratio,
        "ratio_per_round": ratios,
        "checks": checks,
        "runtime_s": round(perf_counter() - started, 1),
    }
    assert checks["closed_as_expected"] and checks["embedded_all_embedded"], checks
    assert checks["plain_none_embedded"], checks
    out = args.out / "closes.json"
    write_json(out, report)
    _plot(args.out / "closes.png", rates, ratio)
    print(
        f"  embedded {rates['embedded']:.0f} facts/s, plain {rates['plain']:.0f} facts/s, "
        f"ratio {ratio:.2f} (per round {ratios})\n  {speed_line(speed_before, speed_after)}"
    )
    return out


def _plot(path: Path, rates: dict[str, float], ratio: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    a, b = ratio_bars(ax, ["supersessions"], [rates["embedded"]], [rates["plain"]], [ratio])
    ax.set_ylabel("facts/s (batches of 100)")
    ax.legend([a, b], ["closed versions embedded", "closed versions plain"], fontsize=8)
    ax.set_title("assert_facts: what embeddings cost a supersession", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit("run as: python -m benchmarks closes")
