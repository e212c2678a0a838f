"""HTTP overhead: POST /facts (batches of 50), /search and /memory through a real
`chronomem serve` on loopback, against the same transaction (memory_http.authorize and the
route's one function) called directly, in one run. ratio = direct req/s / HTTP req/s."""

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
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.types.json import Jsonb

from benchmarks.common import BenchDatabase, Run, latency_ms, pair_bars, ratio

HELP = "HTTP API vs direct SQL: POST /facts (batch 50), /search, /memory with 16 clients"

PLANS = ("free", "starter", "basic", "plus", "pro", "team", "business", "enterprise")
TOPICS = ("chess", "jazz", "hiking", "rust", "sourdough", "cycling", "opera", "tennis")
USERS = 2000  # in the search project, 2 facts each
PERMISSIONS = ["project:read", "project:write", "configuration:read", "configuration:write"]
Request = tuple[str, dict[str, Any], str, tuple[Any, ...], str]  # path, body, sql, args, perm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--seconds", type=float, default=7.0, help="timed seconds per workload and method (7)")
    a("--warmup", type=float, default=1.5, help="untimed seconds first, per phase (1.5)")
    a("--clients", type=int, default=16, help="concurrent clients (16)")
    a("--workloads", type=lambda s: s.split(","), default=["facts", "search", "memory"],
      help="comma-separated subset of facts,search,memory (all)")  # fmt: skip
    a("--seed", type=int, default=20240601, help="workload seed")


def facts(project: uuid.UUID, tag: str, c: int, i: int) -> Request:
    """50 new facts: 25 first plans of new subjects and their 25 'likes'."""
    rng, body = random.Random(f"{tag}/{c}/{i}"), []
    for j in range(25):
        s, plan, topic = f"{tag} c{c} b{i} u{j}", rng.choice(PLANS), rng.choice(TOPICS)
        body += [{"subject": s, "predicate": "plan", "object": plan,
                  "content": f"{s} is on the {plan} plan", "valid_from": "2024-01-01T00:00:00Z"},
                 {"subject": s, "predicate": "likes", "object": topic,
                  "content": f"{s} likes {topic}"}]  # fmt: skip
    return (f"/v1/projects/{project}/facts", {"facts": body},
            "select memory_http.assert_facts(%s::uuid, %s::jsonb, %s::boolean)",
            (project, Jsonb(body), False), "project:write")  # fmt: skip


def search(project: uuid.UUID, tag: str, c: int, i: int) -> Request:
    rng = random.Random(f"{tag}/{c}/{i}")
    n = rng.randrange(USERS)
    q = rng.choice([f"what plan is user {n} on", f"who likes {rng.choice(TOPICS)}",
                    f"user {n} hobbies"])  # fmt: skip
    return (f"/v1/projects/{project}/search", {"query": q, "k": 10},
            "select memory_http.search(%s::uuid, %s::text, %s::vector, %s::vector, "
            "%s::timestamptz, %s::timestamptz, %s::integer, %s::text[])",
            (project, q, None, None, None, None, 10, None), "project:read")  # fmt: skip


def memory(project: uuid.UUID, tag: str, c: int, i: int) -> Request:
    """A user turn and its answer into the client's session."""
    city, topic = i % 97, TOPICS[i % 8]
    messages = [{"role": "user", "content": f"I moved to city {city} and started {topic}"},
                {"role": "assistant", "content": f"Noted: city {city}, {topic}."}]  # fmt: skip
    session = f"{tag}-c{c}-s{i // 20}"
    return (f"/v1/projects/{project}/memory", {"session": session, "messages": messages},
            "select memory_http.ingest(%s::uuid, %s::text, %s::jsonb, %s::text, %s::jsonb)",
            (project, session, Jsonb(messages), None, None), "project:write")  # fmt: skip


MAKERS = {"facts": facts, "search": search, "memory": memory}


def _tenant(app: str, name: str) -> tuple[uuid.UUID, uuid.UUID, str]:
    with psycopg.connect(app) as conn:
        row = conn.execute("select memory_http.bootstrap_api_key(null, %s, 'bench', 'bench', %s)",
                           (name, PERMISSIONS)).fetchone()  # fmt: skip
    assert row is not None
    return uuid.UUID(row[0]["org_id"]), uuid.UUID(row[0]["project_id"]), row[0]["token"]


@contextmanager
def api_server(app: str, pool: int, query_embeddings: bool = False) -> Iterator[str]:
    """`chronomem serve` on a free loopback port, its pool sized for the clients; with
    query_embeddings, the server embeds search queries (the local model)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkstemp(prefix="chronomem-bench-api-", suffix=".log")[1])
    env = {**os.environ, "CHRONOMEM_API_QUERY_EMBEDDINGS": "auto" if query_embeddings else "off",
           "CHRONOMEM_LOG_LEVEL": "warning",
           "CHRONOMEM_API_POOL_MIN": str(pool), "CHRONOMEM_API_POOL_MAX": str(pool)}  # fmt: skip
    cmd = [sys.executable, "-m", "chronomem", "serve", "--dsn", app, "--host", "127.0.0.1",
           "--port", str(port)]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the API did not start:\n{log.read_text()}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)


Sender = tuple[Callable[[Request], bool], Callable[[], None]]  # send (True: 2xx), close


def _direct(app: str, token: str) -> Sender:
    """What thin_api.db.Database.call does, on this client's own connection."""
    conn = psycopg.connect(app, autocommit=True)
    conn.execute("select set_config('timezone', 'UTC', false)")

    def send(r: Request) -> bool:
        with conn.transaction():
            conn.execute("select 1 from memory_http.authorize(%s::text, %s::text, %s::uuid)",
                         (token, r[4], r[3][0]))  # fmt: skip
            row = conn.execute(r[2], r[3]).fetchone()
        return row is not None and row[0] is not None

    return send, conn.close


def _http(base: str, token: str) -> Sender:
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return (lambda r: client.post(r[0], json=r[1]).is_success), client.close


def phase(make_sender: Callable[[], Sender], make: Callable[[int, int], Request], args: Any) -> Any:
    """All clients start together and send back to back until the window closes."""
    ready = threading.Barrier(args.clients + 1)
    window: list[float] = []
    latencies: list[list[float]] = [[] for _ in range(args.clients)]
    errors, failures = [0] * args.clients, []

    def client(c: int) -> None:
        try:
            send, close = make_sender()
        except BaseException as e:
            failures.append(e)
            ready.abort()
            return
        try:
            ready.wait()
            start, end = window
            for i in range(10**9):
                r = make(c, i)  # built before the clock starts for it
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                ok = send(r)
                t1 = time.perf_counter()
                if t0 >= start and t1 <= end:
                    latencies[c].append(t1 - t0)
                    errors[c] += not ok
        except BaseException as e:
            failures.append(e)
        finally:
            close()

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(args.clients)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    window[:] = [now + args.warmup, now + args.warmup + args.seconds]
    ready.wait()
    for t in threads:
        t.join()
    if failures or sum(errors):
        raise RuntimeError(f"{sum(errors)} failed requests, {failures[:1]}")
    flat = [x for lat in latencies for x in lat]
    return {"requests_per_s": round(len(flat) / args.seconds, 1), "latency_ms": latency_ms(flat)}


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    run = Run("api", args, db)
    results = {}
    with api_server(db.app, pool=args.clients) as base:
        for name in args.workloads:
            org, project, token = _tenant(db.app, f"bench api {name}")
            if name == "search":
                _preload(db.app, org, project)
            out: dict[str, Any] = {}
            for method in ("direct", "http"):  # distinct tags: no write repeats another's
                print(f"  {name}: {method} ...", flush=True)
                sender = partial(_direct, db.app, token) if method == "direct" else partial(
                    _http, base, token)  # fmt: skip
                make = partial(MAKERS[name], project, f"{args.seed}{method[0]}")
                out[method] = phase(sender, make, args)
            d, h = out["direct"], out["http"]
            out["http_overhead_ratio"] = ratio(d["requests_per_s"], h["requests_per_s"])
            out["p95_ratio"] = ratio(h["latency_ms"]["p95"], d["latency_ms"]["p95"])
            print(f"  {name}: direct {d['requests_per_s']} req/s, http {h['requests_per_s']}"
                  f" req/s, overhead x{out['http_overhead_ratio']}", flush=True)  # fmt: skip
            results[name] = out
    return run.finish({"workloads": results}, _plot)


def _preload(app: str, org: uuid.UUID, project: uuid.UUID) -> None:
    """The search project's corpus: a plan and a 'likes' per user, through assert_facts."""
    rng = random.Random("search corpus")
    rows = [{"subject": f"user {n}", "predicate": p, "object": rng.choice(v)}
            for n in range(USERS) for p, v in (("plan", PLANS), ("likes", TOPICS))]  # fmt: skip
    with psycopg.connect(app) as conn:
        for s in range(0, len(rows), 500):
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (org,))
                conn.execute("select memory.assert_facts(%s, %s::jsonb)",
                             (project, Jsonb(rows[s : s + 500])))  # fmt: skip


def _plot(plt: Any, r: dict[str, Any]) -> None:
    w = r["workloads"]
    _, (a, b) = plt.subplots(1, 2, figsize=(10, 4.5))
    labels, names = [f"POST /{n}" for n in w], ("SQL function, direct", "HTTP (uvicorn)")
    pair_bars(a, labels, [x["direct"]["requests_per_s"] for x in w.values()],
              [x["http"]["requests_per_s"] for x in w.values()], names)  # fmt: skip
    a.set_ylabel("requests per second")
    pair_bars(b, labels, [x["direct"]["latency_ms"]["p95"] for x in w.values()],
              [x["http"]["latency_ms"]["p95"] for x in w.values()], names)  # fmt: skip
    b.set_ylabel("p95 latency (ms)")
