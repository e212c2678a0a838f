"""An agent turn side by side with mem0 OSS on one PostgreSQL server: LoCoMo evidence
recall@1/5/10 per category and the full path (question text in, ranked list out,
embedding included) of Chronomem's HTTP search and of mem0's Memory.search, interleaved
question by question; then Chronomem's ingest -> findable at a steady rate through the
real API and worker, and its HTTP context at --facts facts.

Chronomem runs as `chronomem serve` (query embeddings on: the local model) and `chronomem
worker`; conversations go in through POST /memory and are embedded by the worker. mem0
runs in this process (benchmarks/peer_mem0.py says how it is configured). ratio =
mem0's latency / Chronomem's."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any

import httpx
import psycopg
from psycopg import sql

from benchmarks import peer_mem0
from benchmarks.api import _tenant, api_server
from benchmarks.common import BenchDatabase, Run, latency_ms, pair_bars, ratio, scalar
from benchmarks.locomo import CATEGORIES, KS, Conversation, parse, recall
from benchmarks.search import _connect
from benchmarks.synthetic import PREDICATES, Clusters, Project
from chronomem.dsn import with_params

HELP = "Chronomem's HTTP search against mem0 OSS on the same PostgreSQL (LoCoMo), ingest, context"

SYSTEMS = ("chronomem", "mem0")
MEM0_DATABASE = "chronomem_bench_peer_mem0"
SENDERS = 8  # concurrent POST /memory clients of the steady ingest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--data", type=Path, required=True, help="a file in LoCoMo's format")
    a("--limit-conversations", type=int, help="only the first N conversations")
    a("--limit-questions", type=int, help="only the first N questions of each conversation")
    a("--k", type=int, default=10, help="results asked of each system (10)")
    a("--warmup", type=int, default=20, help="untimed questions per system first (20)")
    a("--profile", type=int, default=100, help="questions timed step by step (100)")
    a("--ingest-seconds", type=float, default=20.0, help="seconds of steady ingest (20)")
    a("--ingest-rate", type=float, default=50.0, help="messages per second (50)")
    a("--facts", type=int, default=100_000, help="facts of the context project (100000)")
    a("--context-requests", type=int, default=300, help="timed context requests (300)")
    a(
        "--without-mem0",
        action="store_true",
        help="Chronomem's half only (mem0 is the `peer` extra: pip install -e '.[peer]')",
    )
    a(
        "--smoke",
        action="store_true",
        help="tiny: 1 conversation, 8 questions, 2 s of ingest, 500 facts: a quick check",
    )


# --------------------------------------------------------------------------- processes


@contextmanager
def worker_process(app: str) -> Iterator[dict[str, Any]]:
    """`chronomem worker` with a ready file; yields its readiness (the file's JSON and the
    seconds from start to ready: its embedding model loads at start)."""
    tmp = Path(tempfile.mkdtemp(prefix="chronomem-bench-worker-"))
    ready, log = tmp / "ready.json", tmp / "worker.log"
    env = {**os.environ, "CHRONOMEM_LOG_LEVEL": "warning", "CHRONOMEM_WORKER_POLL_INTERVAL": "1"}
    cmd = [sys.executable, "-m", "chronomem", "worker", "--dsn", app, "--ready-file", str(ready)]
    t0 = perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        while not ready.exists():
            if proc.poll() is not None or perf_counter() - t0 > 300:
                raise RuntimeError(f"the worker did not become ready:\n{log.read_text()}")
            time.sleep(0.05)
        yield {**json.loads(ready.read_text()), "start_to_ready_s": round(perf_counter() - t0, 2)}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            log.unlink()
            tmp.rmdir()


def _client(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)


# --------------------------------------------------------------------------- ingest


def steady_ingest(db: BenchDatabase, base: str, texts: list[str], args: Any) -> dict[str, Any]:
    """One message every 1/rate s through POST /memory; a poller sees when each one's
    embedding is stored (what the vector leg reads). The first message is sent right
    after the worker is ready. A sample is then searched for by its own text, vector
    leg alone."""
    _, project, token = _tenant(db.app, "bench peer ingest")
    sent: dict[uuid.UUID, float] = {}
    found: dict[uuid.UUID, float] = {}
    post_s: list[float] = []
    done = threading.Event()
    lock = threading.Lock()

    def poll() -> None:
        with psycopg.connect(db.admin, autocommit=True) as conn:
            while not done.is_set() or len(found) < len(sent):
                with lock:
                    waiting = [i for i in sent if i not in found]
                if waiting:
                    rows = conn.execute(
                        "select episode_id from memory.episodes "
                        "where episode_id = any(%s) and embedding is not null",
                        (waiting,),
                    ).fetchall()
                    now = perf_counter()
                    for (i,) in rows:
                        found[i] = now
                if done.is_set() and perf_counter() - last > 60:
                    return  # some never became findable: reported below
                time.sleep(0.02)  # the resolution of the figures; a tighter loop loads the cores

    n = max(1, int(args.ingest_seconds * args.ingest_rate))
    last = perf_counter()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    clients = [_client(base, token) for _ in range(SENDERS)]
    ids: list[uuid.UUID | None] = [None] * n

    def send(i: int) -> None:
        body = {"session": f"steady-{i // 100}", "messages": [
            {"role": "user", "content": f"{texts[i % len(texts)]} (message {i})"}]}  # fmt: skip
        t0 = perf_counter()
        r = clients[i % SENDERS].post(f"/v1/projects/{project}/memory", json=body)
        post_s.append(perf_counter() - t0)
        r.raise_for_status()
        episode = ids[i] = uuid.UUID(r.json()["episode_ids"][0])
        with lock:
            sent[episode] = t0

    # Each message leaves on its schedule, whatever the previous one's answer time: a
    # pool of senders, so a slow POST delays none after it.
    with ThreadPoolExecutor(SENDERS) as pool:
        start = perf_counter()
        futures = []
        for i in range(n):
            time.sleep(max(0.0, start + i / args.ingest_rate - perf_counter()))
            futures.append(pool.submit(send, i))
        for f in futures:
            f.result()
    rate = n / (perf_counter() - start)
    last = perf_counter()
    done.set()
    poller.join()
    order = [i for i in ids if i is not None]
    sample = list(range(0, n, max(1, n // 10)))[:10]
    verified = 0
    for n_sent in sample:
        text = f"{texts[n_sent % len(texts)]} (message {n_sent})"
        hits = clients[0].post(f"/v1/projects/{project}/search", json={
            "query": text, "k": 5, "legs": ["episode_vector"]}).json()["results"]  # fmt: skip
        verified += any(h["id"] == str(order[n_sent]) for h in hits)
    for c in clients:
        c.close()
    lags = [found[i] - sent[i] for i in order if i in found]
    return {
        "messages": n,
        "rate_per_s": round(rate, 1),
        "findable_ms": latency_ms(lags),
        "first_message_findable_ms": round((found[order[0]] - sent[order[0]]) * 1000, 1)
        if order[0] in found
        else None,
        "never_findable": n - len(lags),
        "post_memory_ms": latency_ms(post_s),
        "found_by_own_text_vector_leg": f"{verified}/{len(sample)}",
    }


# --------------------------------------------------------------------------- LoCoMo


def load_chronomem(
    db: BenchDatabase, base: str, convs: list[Conversation]
) -> dict[str, tuple[uuid.UUID, httpx.Client, dict[str, str]]]:
    """Each conversation a project of its own (its own key), turns through POST /memory
    with their speaker as metadata; returns once the worker has embedded every one."""
    loaded = {}
    for conv in convs:
        _, project, token = _tenant(db.app, f"bench peer {conv.sample_id}")
        client, dia_of = _client(base, token), {}
        for n, messages in conv.sessions:
            for s in range(0, len(messages), 100):
                chunk = messages[s : s + 100]
                r = client.post(f"/v1/projects/{project}/memory",
                                json={"session": f"session_{n}", "messages": chunk})  # fmt: skip
                r.raise_for_status()
                for i, m in zip(r.json()["episode_ids"], chunk, strict=True):
                    dia_of[i] = m["metadata"]["dia_id"]
        loaded[conv.sample_id] = (project, client, dia_of)
    deadline = perf_counter() + 1800
    with psycopg.connect(db.admin, autocommit=True) as conn:
        while scalar(conn, "select count(*) from memory.episodes where embedding is null"):
            if perf_counter() > deadline:
                raise RuntimeError("the worker did not embed the conversations in 30 minutes")
            time.sleep(0.2)
    return loaded


def _mem0_database(db: BenchDatabase) -> str:
    """A database of mem0's own on the same server (mem0 creates its tables in public)."""
    with psycopg.connect(db.admin, autocommit=True) as conn:
        name = sql.Identifier(MEM0_DATABASE)
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(name))
        conn.execute(sql.SQL("create database {}").format(name))
    dsn = with_params(db.admin, dbname=MEM0_DATABASE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create extension if not exists vector")
    return dsn


def _drop_mem0_database(db: BenchDatabase) -> None:
    with psycopg.connect(db.admin, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(MEM0_DATABASE)))  # fmt: skip


def _analyze(db: BenchDatabase, mem0_dsn: str | None) -> None:
    with psycopg.connect(db.owner, autocommit=True) as conn:
        conn.execute("analyze memory.episodes, memory_internal.episode_terms")
    if mem0_dsn:
        with psycopg.connect(mem0_dsn, autocommit=True) as conn:
            conn.execute("analyze")


def _timed(fn: Callable[[], list[str]]) -> tuple[float, list[str]]:
    t0 = perf_counter()
    found = fn()
    return perf_counter() - t0, found


def questions(
    convs: list[Conversation], loaded: dict[str, Any], mem0: peer_mem0.Mem0 | None, args: Any
) -> dict[str, Any]:
    """Every question to both systems, the order alternating question by question."""

    def chronomem(conv: Conversation, q: str) -> list[str]:
        project, client, dia_of = loaded[conv.sample_id]
        r = client.post(f"/v1/projects/{project}/search", json={"query": q, "k": args.k})
        r.raise_for_status()
        return [dia_of.get(h["id"], "") for h in r.json()["results"] if h["kind"] == "episode"]

    ask: dict[str, Callable[[Conversation, str], list[str]]] = {"chronomem": chronomem}
    if mem0 is not None:
        ask["mem0"] = lambda conv, q: mem0.search(conv, q, args.k)
    pairs = [(c, q) for c in convs for q in c.questions[: args.limit_questions]]
    for fn in ask.values():  # untimed: connections, caches, the models' first calls
        for c, q in pairs[: args.warmup]:
            fn(c, q.text)
    scores: dict[str, dict[int, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    seconds: dict[str, list[float]] = defaultdict(list)
    names = list(ask)
    for i, (c, q) in enumerate(pairs):
        for system in names if i % 2 == 0 else names[::-1]:
            wall, found = _timed(partial(ask[system], c, q.text))
            seconds[system].append(wall)
            scores[system][q.category].append({k: recall(found, q.evidence, k) for k in KS})

    def mean(rows: list[dict[int, float]]) -> dict[str, float]:
        return {f"recall@{k}": round(statistics.fmean(r[k] for r in rows), 4) for k in KS}

    by_category = {
        f"{c} {name}": {s: mean(by[c]) for s, by in scores.items()}
        for c, name in CATEGORIES.items()
        if scores["chronomem"][c]
    }
    latency = {s: latency_ms(v) for s, v in seconds.items()}
    out: dict[str, Any] = {
        "questions": len(pairs),
        "question_counts": {f"{c} {n}": len(scores["chronomem"][c]) for c, n in CATEGORIES.items()},
        "overall": {s: mean([r for rows in by.values() for r in rows]) for s, by in scores.items()},
        "by_category": by_category,
        "full_path_latency_ms": latency,
    }
    if "mem0" in latency:
        ours, theirs = latency["chronomem"], latency["mem0"]
        out["ratio_mem0_over_chronomem"] = {
            "p50": ratio(theirs["p50"], ours["p50"]),
            "p95": ratio(theirs["p95"], ours["p95"]),
        }
        out["chronomem_recall_at_least_mem0"] = {
            group: all(r["chronomem"][m] >= r["mem0"][m] for m in r["chronomem"])
            for group, r in {"overall": out["overall"], **by_category}.items()
        }
    return out


def profile(
    db: BenchDatabase, convs: list[Conversation], loaded: dict[str, Any],
    mem0: peer_mem0.Mem0 | None, args: Any,
) -> dict[str, Any]:  # fmt: skip
    """Where each full path goes, step by step on a sample, in this process: Chronomem's
    query embedding (ONNX Runtime, one thread, as the API's; torch for comparison), its
    one authorizing statement with vector_query_text, memory_http.search; mem0's query
    embedding (the rest of its search is its two SQL reads and its scoring)."""
    from thin_api.embedding import vector_text
    from workers.embedding import LocalMiniLM
    from workers.onnx_embedding import OnnxMiniLM

    onnx, torch_model = OnnxMiniLM(threads=1), LocalMiniLM()
    onnx.load()
    torch_model.load()
    steps: dict[str, list[float]] = defaultdict(list)
    pairs = [(c, q) for c in convs for q in c.questions[: args.limit_questions]][: args.profile]
    with psycopg.connect(db.app, autocommit=True) as conn:
        for conv, q in pairs:
            project, client, _ = loaded[conv.sample_id]
            token = client.headers["Authorization"].split()[1]
            with conn.transaction():
                t0 = perf_counter()
                text = conn.execute(
                    "select (memory.vector_query_text(%s::uuid, %s::text)) as value "
                    "from memory_http.authorize_call(%s::text, 'memory_http.search', %s::uuid) a",
                    (project, q.text, token, project),
                ).fetchone()
                steps["chronomem authorize + vector_query_text"].append(perf_counter() - t0)
                t0 = perf_counter()
                vector = vector_text(onnx.embed([text[0] if text else q.text])[0])
                steps["chronomem query embedding (onnx, 1 thread)"].append(perf_counter() - t0)
                t0 = perf_counter()
                conn.execute(
                    "select memory_http.search(%s::uuid, %s::text, null::vector, %s::vector, "
                    "null, null, %s::integer)",
                    (project, q.text, vector, args.k),
                ).fetchone()
                steps["chronomem memory_http.search"].append(perf_counter() - t0)
            t0 = perf_counter()
            torch_model.embed([q.text])
            steps["chronomem query embedding (torch, for comparison)"].append(perf_counter() - t0)
            if mem0 is not None:
                t0 = perf_counter()
                mem0.embed(q.text)
                steps["mem0 query embedding (sentence-transformers)"].append(perf_counter() - t0)
    return {step: latency_ms(v) for step, v in steps.items()}


# --------------------------------------------------------------------------- context


def context_at_scale(db: BenchDatabase, base: str, args: Any) -> dict[str, Any]:
    """A project of --facts synthetic facts (benchmarks/synthetic.py) with clustered unit
    vectors stored beside them (HNSW built once, as the search benchmark loads), then POST
    /context with its people questions, embedded by the server."""
    org, project, token = _tenant(db.app, "bench peer context")
    spec = Project("context", facts=args.facts, episodes=0, seed="peer")
    t0 = perf_counter()
    ids: list[uuid.UUID] = []
    with _connect(db.app, org) as conn:
        for p in PREDICATES:
            conn.execute("select memory.declare_predicate(%s, %s, %s)",
                         (project, p.name, p.cardinality))  # fmt: skip
        facts = spec.fact_stream()
        for s in range(0, len(facts), 1000):
            r = scalar(conn, "select memory.assert_facts(%s, %s::jsonb)",
                       (project, json.dumps(facts[s : s + 1000])))  # fmt: skip
            ids += [uuid.UUID(x["fact_id"]) for x in r["results"] if x["status"] == "inserted"]
        indexes = conn.execute(
            "select format('%%I.%%I', schemaname, indexname), indexdef from pg_indexes "
            "where format('%%I.%%I', schemaname, tablename) = any(%s) "
            "and indexdef ilike '%% using hnsw %%' order by 1",
            (["memory.fact_embeddings"],),
        ).fetchall()
        with psycopg.connect(db.owner, autocommit=True) as owner:
            for name, _ in indexes:
                owner.execute(f"drop index {name}")
        clusters = Clusters(384, 400, 20240601)
        for s in range(0, len(ids), 1000):
            chunk = ids[s : s + 1000]
            conn.execute("select memory_worker.store_embeddings('fact', %s, %s)",
                         (chunk, list(clusters.sample(len(chunk)))))  # fmt: skip
    with psycopg.connect(db.owner, autocommit=True) as owner:
        owner.execute("set maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            owner.execute(definition)
        owner.execute("vacuum (analyze)")
    load_s = perf_counter() - t0
    rng_questions = spec.queries(args.context_requests + 20, random.Random("peer"))
    seconds, tokens = [], []
    with _client(base, token) as client:
        for i, q in enumerate(rng_questions):
            t0 = perf_counter()
            r = client.post(f"/v1/projects/{project}/context", json={"query": q})
            wall = perf_counter() - t0
            r.raise_for_status()
            if i >= 20:  # the first 20 warm up
                seconds.append(wall)
                tokens.append(r.json()["tokens"])
    return {
        "facts": len(ids),
        "load_s": round(load_s, 1),
        "requests": len(seconds),
        "latency_ms": latency_ms(seconds),
        "mean_tokens": round(statistics.fmean(tokens), 1) if tokens else 0,
        "vectors": "clustered unit vectors (benchmarks/synthetic.py), HNSW built after the load",
    }


# --------------------------------------------------------------------------- run


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    if args.smoke:
        args.limit_conversations, args.limit_questions = 1, args.limit_questions or 8
        args.warmup, args.profile, args.ingest_seconds = 2, 4, 2.0
        args.facts, args.context_requests = min(args.facts, 500), 10
    use_mem0 = not args.without_mem0
    if use_mem0 and not peer_mem0.available():
        if not args.smoke:
            raise SystemExit("mem0 is not installed: pip install -e '.[peer]' (or --without-mem0)")
        use_mem0 = False
    run = Run("peer", args, db)
    samples = json.loads(args.data.read_text())[: args.limit_conversations]
    convs = [parse(s) for s in samples]
    texts = [m["content"] for c in convs for _, ms in c.sessions for m in ms]
    result: dict[str, Any] = {"systems": ["chronomem", *(["mem0"] if use_mem0 else [])]}
    mem0_dsn = _mem0_database(db) if use_mem0 else None
    mem0 = peer_mem0.Mem0(mem0_dsn) if mem0_dsn else None
    try:
        with api_server(db.app, pool=4, query_embeddings=True) as base:
            with worker_process(db.app) as ready:
                result["worker"] = ready
                print(f"  worker ready in {ready['start_to_ready_s']} s; steady ingest ...",
                      flush=True)  # fmt: skip
                result["ingest_to_findable"] = steady_ingest(db, base, texts, args)
                print(f"  ingest: {result['ingest_to_findable']['findable_ms']}", flush=True)
                t0 = perf_counter()
                loaded = load_chronomem(db, base, convs)
                result["load_s"] = {"chronomem": round(perf_counter() - t0, 1)}
            # The worker is stopped: nothing runs beside the questions.
            if mem0 is not None:
                t0 = perf_counter()
                for c in convs:
                    mem0.load(c)
                result["load_s"]["mem0"] = round(perf_counter() - t0, 1)
                result["mem0"] = {"config": mem0.config, "torch_threads": mem0.torch_threads(),
                                  "version": _version("mem0ai")}  # fmt: skip
            _analyze(db, mem0_dsn)
            asked = sum(len(c.questions[: args.limit_questions]) for c in convs)
            print(f"  {asked} questions ...", flush=True)
            result["locomo"] = questions(convs, loaded, mem0, args)
            result["locomo"]["episodes"] = len(texts)
            result["locomo"]["data_file"] = str(args.data)
            for s, lat in result["locomo"]["full_path_latency_ms"].items():
                print(f"  {s:9} p50 {lat['p50']} ms p95 {lat['p95']} ms, recall@10 "
                      f"{result['locomo']['overall'][s]['recall@10']}", flush=True)  # fmt: skip
            result["profile_ms"] = profile(db, convs, loaded, mem0, args)
            for _, client, _ in loaded.values():
                client.close()
            print(f"  context at {args.facts} facts ...", flush=True)
            result["context"] = context_at_scale(db, base, args)
            print(f"  context: {result['context']['latency_ms']}", flush=True)
    finally:
        if mem0 is not None:
            mem0.close()
        if mem0_dsn:
            _drop_mem0_database(db)
    return run.finish(result, _plot)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _plot(plt: Any, r: dict[str, Any]) -> None:
    loco = r["locomo"]
    systems = r["systems"]
    groups = ["overall", *loco["by_category"]]
    _, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    rows = [loco["overall"], *(loco["by_category"][g] for g in groups[1:])]
    if len(systems) == 2:
        pair_bars(a, groups, [row["chronomem"]["recall@10"] for row in rows],
                  [row["mem0"]["recall@10"] for row in rows], ("Chronomem", "mem0"))  # fmt: skip
        lat = loco["full_path_latency_ms"]
        theirs, ours = lat["mem0"], lat["chronomem"]
        pair_bars(b, ["p50", "p95"], [theirs["p50"], theirs["p95"]],
                  [ours["p50"], ours["p95"]], ("mem0", "Chronomem"))  # fmt: skip
    a.set_ylabel("LoCoMo evidence recall@10")
    b.set_ylabel("full path latency (ms); label: mem0 / Chronomem")
