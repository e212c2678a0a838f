"""HTTP overhead: POST /facts (batches of 50), POST /search and POST /memory through a real
uvicorn server on loopback, against the same SQL function called directly, in one run.

Both methods do the same work per request: one transaction of memory.authorize (with
the same API key) and the route's one SQL function (memory.api_assert_facts,
memory.api_search, memory.api_ingest) with the same arguments. The direct method runs
that transaction on 16 psycopg connections (one per client thread); the HTTP method
sends the same JSON bodies from 16 client threads (one keep-alive httpx client each)
to `chronomem serve` (one uvicorn process, its pool sized to 16 connections). Each
phase runs for a fixed time after a warm-up; requests/s counts the requests that
started and finished inside the timed window. The HTTP overhead ratio is direct
requests/s over HTTP requests/s (> 1: HTTP is slower).

The client threads share one Python process (the GIL): at these rates the client side
is part of what "HTTP" costs here, as it would be for a Python agent.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

import httpx
import psycopg
from psycopg.types.json import Jsonb

from benchmarks.common import (
    BenchDatabase,
    git_info,
    latency_ms,
    machine_info,
    now_iso,
    server_info,
    write_json,
)

HELP = "HTTP API vs direct SQL: POST /facts (batch 50), /search, /memory with 16 clients"

FACT_BATCH = 50
PLANS = ("free", "starter", "basic", "plus", "pro", "team", "business", "enterprise")
TOPICS = ("chess", "jazz", "hiking", "rust", "sourdough", "cycling", "opera", "tennis")
SEARCH_SUBJECTS = 2000  # preloaded into the search project (2 facts each)
PERMISSIONS = ["project:read", "project:write", "configuration:read", "configuration:write"]
WORKLOADS = ("facts", "search", "memory")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seconds",
        type=float,
        default=7.0,
        help="timed seconds per workload and method (default: 7; 3 workloads x 2 methods, "
        "with warm-up and set-up about a minute in all)",
    )
    parser.add_argument(
        "--warmup", type=float, default=1.5, help="untimed seconds first, per phase (default 1.5)"
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument(
        "--workloads",
        type=lambda s: [w for w in s.split(",") if w],
        default=list(WORKLOADS),
        help="comma-separated subset of facts,search,memory (default: all)",
    )
    parser.add_argument("--seed", type=int, default=20240601, help="workload seed")


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Tenant:
    org: uuid.UUID
    project: uuid.UUID
    token: str


@dataclass(frozen=True)
class Request:
    """One request: its HTTP form and its direct SQL form (the route's own call)."""

    path: str
    body: dict[str, Any]
    sql: LiteralString
    params: tuple[Any, ...]
    permission: str


def _tenant(app_dsn: str, name: str) -> Tenant:
    with psycopg.connect(app_dsn) as conn:
        row = conn.execute(
            "select memory.bootstrap_api_key(null, %s, 'bench', 'bench', %s)", (name, PERMISSIONS)
        ).fetchone()
    assert row is not None
    r = row[0]
    return Tenant(uuid.UUID(r["org_id"]), uuid.UUID(r["project_id"]), r["token"])


def facts_request(project: uuid.UUID, tag: str, client: int, i: int) -> Request:
    """50 new facts: 25 first plans of new subjects, 25 'likes' of earlier subjects."""
    rng = random.Random(f"{tag}/{client}/{i}")
    facts: list[dict[str, Any]] = []
    for j in range(FACT_BATCH // 2):
        subject = f"{tag} c{client} b{i} u{j}"
        plan = rng.choice(PLANS)
        facts.append(
            {
                "subject": subject,
                "predicate": "plan",
                "object": plan,
                "content": f"{subject} is on the {plan} plan",
                "valid_from": "2024-01-01T00:00:00Z",
            }
        )
        topic = rng.choice(TOPICS)
        facts.append(
            {
                "subject": subject,
                "predicate": "likes",
                "object": topic,
                "content": f"{subject} likes {topic}",
            }
        )
    return Request(
        f"/v1/projects/{project}/facts",
        {"facts": facts},
        "select memory.api_assert_facts(%s::uuid, %s::jsonb, %s::boolean)",
        (project, Jsonb(facts), False),
        "project:write",
    )


def search_request(project: uuid.UUID, tag: str, client: int, i: int) -> Request:
    rng = random.Random(f"{tag}/{client}/{i}")
    n = rng.randrange(SEARCH_SUBJECTS)
    query = rng.choice(
        [f"what plan is user {n} on", f"who likes {rng.choice(TOPICS)}", f"user {n} hobbies"]
    )
    return Request(
        f"/v1/projects/{project}/search",
        {"query": query, "k": 10},
        "select memory.api_search(%s::uuid, %s::text, %s::vector, %s::vector, "
        "%s::timestamptz, %s::timestamptz, %s::integer, %s::text[])",
        (project, query, None, None, None, None, 10, None),
        "project:read",
    )


def memory_request(project: uuid.UUID, tag: str, client: int, i: int) -> Request:
    """Two messages (a user turn and the answer) into the client's session."""
    messages = [
        {"role": "user", "content": f"I moved to city {i % 97} and started {TOPICS[i % 8]}"},
        {"role": "assistant", "content": f"Noted: city {i % 97}, {TOPICS[i % 8]}."},
    ]
    session = f"{tag}-c{client}-s{i // 20}"
    return Request(
        f"/v1/projects/{project}/memory",
        {"session": session, "messages": messages},
        "select memory.api_ingest(%s::uuid, %s::text, %s::jsonb, %s::text, %s::jsonb)",
        (project, session, Jsonb(messages), None, None),
        "project:write",
    )


MAKERS: dict[str, Callable[[uuid.UUID, str, int, int], Request]] = {
    "facts": facts_request,
    "search": search_request,
    "memory": memory_request,
}


def preload_search(app_dsn: str, t: Tenant) -> int:
    """The search project's corpus: two facts per user, through memory.assert_facts."""
    rng = random.Random("search corpus")
    facts = []
    for n in range(SEARCH_SUBJECTS):
        plan, topic = rng.choice(PLANS), rng.choice(TOPICS)
        facts.append({"subject": f"user {n}", "predicate": "plan", "object": plan})
        facts.append({"subject": f"user {n}", "predicate": "likes", "object": topic})
    with psycopg.connect(app_dsn) as conn:
        for start in range(0, len(facts), 500):
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (t.org,))
                conn.execute(
                    "select memory.assert_facts(%s, %s::jsonb)",
                    (t.project, Jsonb(facts[start : start + 500])),
                )
    return len(facts)


# --------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def api_server(app_dsn: str, pool: int) -> Iterator[str]:
    """`chronomem serve` on a free loopback port, pool sized for the clients."""
    port = _free_port()
    log = Path(tempfile.mkstemp(prefix="chronomem-bench-api-", suffix=".log")[1])
    env = {
        **os.environ,
        "CHRONOMEM_API_QUERY_EMBEDDINGS": "off",
        "CHRONOMEM_API_POOL_MIN": str(pool),
        "CHRONOMEM_API_POOL_MAX": str(pool),
        "CHRONOMEM_LOG_LEVEL": "warning",
    }
    cmd = [sys.executable, "-m", "chronomem", "serve", "--dsn", app_dsn]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the API exited with {proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)


# --------------------------------------------------------------------------- phases


@dataclass
class Phase:
    latencies_s: list[float]
    errors: int
    seconds: float


Send = Callable[[Request], bool]  # True: a 2xx answer


def _direct_sender(app_dsn: str, token: str) -> tuple[Send, Callable[[], None]]:
    """What thin_api.db.Database.call does, on a connection of this client's own."""
    conn = psycopg.connect(app_dsn, autocommit=True)
    conn.execute("select set_config('timezone', 'UTC', false)")

    def send(r: Request) -> bool:
        with conn.transaction():
            conn.execute(
                "select 1 from memory.authorize(%s::text, %s::text, %s::uuid)",
                (token, r.permission, r.params[0]),
            )
            row = conn.execute(r.sql, r.params).fetchone()
        return row is not None and row[0] is not None

    return send, conn.close


def _http_sender(base: str, token: str) -> tuple[Send, Callable[[], None]]:
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def send(r: Request) -> bool:
        response = client.post(r.path, json=r.body)
        response.read()
        return response.is_success

    return send, client.close


def run_phase(
    make_sender: Callable[[], tuple[Send, Callable[[], None]]],
    make_request: Callable[[int, int], Request],
    clients: int,
    warmup: float,
    seconds: float,
) -> Phase:
    """All clients start together and send back to back until the window closes."""
    ready = threading.Barrier(clients + 1)
    window: list[float] = []  # [start, end], set once every client is ready
    results: list[tuple[list[float], int]] = [([], 0)] * clients
    failures: list[BaseException] = []

    def client(c: int) -> None:
        try:
            send, close = make_sender()
        except BaseException as e:
            failures.append(e)
            ready.abort()
            raise
        latencies: list[float] = []
        errors = 0
        try:
            requests = (make_request(c, i) for i in range(10**9))
            ready.wait()
            start, end = window
            while True:
                r = next(requests)  # built before the clock starts for it
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                ok = send(r)
                t1 = time.perf_counter()
                if t0 >= start and t1 <= end:
                    latencies.append(t1 - t0)
                    errors += not ok
        except BaseException as e:
            failures.append(e)
            raise
        finally:
            close()
        results[c] = (latencies, errors)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    window[:] = [now + warmup, now + warmup + seconds]
    ready.wait()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return Phase([x for lat, _ in results for x in lat], sum(e for _, e in results), seconds)


def _report(p: Phase) -> dict[str, Any]:
    n = len(p.latencies_s)
    return {
        "requests": n,
        "errors": p.errors,
        "requests_per_s": round(n / p.seconds, 1),
        "latency_ms": latency_ms(p.latencies_s) if n else None,
    }


def workload(name: str, db: BenchDatabase, base: str, args: argparse.Namespace) -> dict[str, Any]:
    t = _tenant(db.app, f"bench api {name}")
    loaded = preload_search(db.app, t) if name == "search" else 0
    make = MAKERS[name]
    out: dict[str, Any] = {"project_facts_preloaded": loaded}
    # Direct first, then HTTP; distinct tags keep the writes of one from being
    # repetitions of the other's (facts would be skipped, sessions replayed).
    for method in ("direct", "http"):
        print(f"  {name}: {method} ...", flush=True)

        def sender(method: str = method) -> tuple[Send, Callable[[], None]]:
            if method == "direct":
                return _direct_sender(db.app, t.token)
            return _http_sender(base, t.token)

        def request(c: int, i: int, method: str = method) -> Request:
            return make(t.project, f"{args.seed}{method[0]}", c, i)

        phase = run_phase(sender, request, args.clients, args.warmup, args.seconds)
        out[method] = _report(phase)
        if phase.errors:
            raise RuntimeError(f"{name} {method}: {phase.errors} failed requests")
    d, h = out["direct"], out["http"]
    out["http_overhead_ratio"] = round(d["requests_per_s"] / h["requests_per_s"], 2)
    out["p95_ratio"] = round(h["latency_ms"]["p95"] / d["latency_ms"]["p95"], 2)
    print(
        f"  {name}: direct {d['requests_per_s']} req/s p95 {d['latency_ms']['p95']} ms, "
        f"http {h['requests_per_s']} req/s p95 {h['latency_ms']['p95']} ms, "
        f"overhead x{out['http_overhead_ratio']}",
        flush=True,
    )
    return out


# --------------------------------------------------------------------------- report


def plot(path: Path, results: dict[str, dict[str, Any]], subtitle: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    xs = range(len(names))
    width = 0.38
    fig, (ax_rps, ax_p95) = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, key, label in [
        (ax_rps, "requests_per_s", "requests per second"),
        (ax_p95, "p95", "p95 latency (ms)"),
    ]:

        def value(r: dict[str, Any], key: str = key) -> float:
            return float(r["latency_ms"]["p95"] if key == "p95" else r[key])

        direct = [value(results[n]["direct"]) for n in names]
        http = [value(results[n]["http"]) for n in names]
        bars_d = ax.bar([x - width / 2 for x in xs], direct, width, label="SQL function, direct")
        bars_h = ax.bar([x + width / 2 for x in xs], http, width, label="HTTP (uvicorn)")
        ax.bar_label(bars_d, fmt="%.0f" if key != "p95" else "%.1f", padding=2, fontsize=8)
        ax.bar_label(bars_h, fmt="%.0f" if key != "p95" else "%.1f", padding=2, fontsize=8)
        ax.set_xticks(
            list(xs),
            [f"POST /{n}\nx{results[n]['http_overhead_ratio']:.2f}" for n in names],
            fontsize=8,
        )
        ax.set_ylabel(label)
        ax.set_ylim(0, max(direct + http) * 1.25)
    handles, labels = ax_rps.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=8)
    fig.suptitle(
        f"HTTP overhead: direct req/s / HTTP req/s (x under each workload)\n{subtitle}",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads: {sorted(unknown)}")
    load_before = os.getloadavg()
    with api_server(db.app, pool=args.clients) as base:
        results = {name: workload(name, db, base, args) for name in args.workloads}
    machine = {
        **machine_info(),
        "load_average_1_5_15_min": [
            [round(x, 2) for x in load_before],
            [round(x, 2) for x in os.getloadavg()],
        ],
    }
    result: dict[str, Any] = {
        "benchmark": "api",
        "timestamp": now_iso(),
        "git": git_info(),
        "settings": {
            "clients": args.clients,
            "seconds_per_phase": args.seconds,
            "warmup_seconds": args.warmup,
            "fact_batch": FACT_BATCH,
            "search_corpus_facts": SEARCH_SUBJECTS * 2,
            "search": "k=10, no query embedding (full-text, entity and graph legs)",
            "memory": "2 messages per request",
            "server": "one uvicorn process (chronomem serve), pool of --clients connections",
            "database_server": db.server,
            "postgres": server_info(db.admin),
            "seed": args.seed,
        },
        "machine": machine,
        "workloads": results,
        "units": (
            "requests_per_s: requests that started and finished in the timed window / its "
            "seconds, all clients together; latency_ms per request as each client saw it; "
            "http_overhead_ratio = direct requests_per_s / http requests_per_s; p95_ratio = "
            "http p95 / direct p95."
        ),
    }
    out = args.out / "api.json"
    write_json(out, result)
    plot(
        args.out / "api.png",
        results,
        f"{args.clients} clients, {machine['cores']} cores, PostgreSQL "
        f"{result['settings']['postgres']['version']}",
    )
    return out
