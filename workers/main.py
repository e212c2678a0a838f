"""`chronomem worker`: check the configuration against the database, then run."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg

from chronomem.settings import Settings
from workers.embedding import Embedder, dimension_problem, make_embedder
from workers.extraction import NO_LLM_REASON, Extractor
from workers.handlers import build_handlers
from workers.runner import Worker, connect, default_name
from workers.summaries import Summarizer

log = logging.getLogger("chronomem.worker")


class WorkerConfigError(RuntimeError):
    """The worker must not start with this configuration (the message says why)."""


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def preflight(dsn: str, extractor: Extractor | None, embedder: Embedder) -> None:
    """Refuse to start when our vectors cannot go into the database's columns; then
    queue again what waited for a configuration like ours."""
    with connect(dsn, f"{default_name()}/preflight") as conn:
        db_dim = int(_scalar(conn, "select memory.embedding_dim()"))
        try:
            problem = dimension_problem(embedder, db_dim)
        except Exception as err:  # a remote endpoint asked for its dimension
            raise WorkerConfigError(f"cannot reach the embedding endpoint: {err}") from err
        if problem:
            raise WorkerConfigError(problem)
        recorded = _scalar(conn, "select memory.embedding_model()")
        if recorded is not None and recorded != embedder.name:
            raise WorkerConfigError(
                f"the database's embeddings come from {recorded}, this worker would embed "
                f"with {embedder.name}; configure {recorded} (CHRONOMEM_EMBEDDING_MODEL) or "
                f"run `chronomem reembed --dim {embedder.dim} --model {embedder.name}`"
            )
        kinds = ["embed", "enrich", "summarize_communities"] if extractor is not None else ["embed"]
        resumed = _scalar(conn, "select memory_worker.resume_waiting_jobs(%s)", (kinds,))
    log.info(
        "worker configured",
        extra={
            "llm_model": extractor.model if extractor else None,
            "llm": "configured" if extractor else NO_LLM_REASON,
            "embedding_model": embedder.name,
            "embedding_dim": db_dim,
            "resumed_waiting_jobs": resumed,
        },
    )


def load_embedder(embedder: Embedder) -> float:
    """Load the embedding model now, not on the first embed job (a fresh install's first
    message would wait for it); the seconds it took."""
    try:
        seconds = embedder.load()
    except Exception as err:  # no weights, a failed export: nothing could be embedded
        raise WorkerConfigError(f"cannot load the embedding model {embedder.name}: {err}") from err
    log.info(
        "embedding model loaded",
        extra={"embedding_model": embedder.name, "load_s": round(seconds, 3)},
    )
    return seconds


def build_worker(dsn: str, settings: Settings, name: str | None = None) -> Worker:
    """Preflight, the embedding model loaded, then a Worker with every handler this
    configuration can run."""
    extractor = Extractor.from_settings(settings.llm)
    embedder = make_embedder(settings.embedding)
    preflight(dsn, extractor, embedder)
    load_s = load_embedder(embedder)
    ws = settings.worker
    worker = Worker(
        dsn,
        build_handlers(
            extractor,
            embedder,
            ws.min_confidence,
            webhooks=settings.webhook,
            summarizer=Summarizer.from_settings(settings.llm),
        ),
        name=name,
        concurrency=ws.concurrency,
        lease=ws.lease,
        poll_interval=ws.poll_interval,
        webhook_settings=settings.webhook,
    )
    worker.readiness = {
        "embedding_model": embedder.name,
        "embedding_model_load_s": round(load_s, 3),
    }
    return worker


def announce_ready(worker: Worker, ready_file: Path | None) -> None:
    """The worker runs, its model loaded: a log line, and the ready file (JSON, written
    whole then renamed) that `chronomem up` and service managers wait for."""
    state = {"worker": worker.name, "kinds": worker.kinds, **worker.readiness}
    log.info("worker ready", extra=state)
    if ready_file is not None:
        partial = ready_file.with_name(f"{ready_file.name}.partial")
        partial.write_text(json.dumps(state) + "\n")
        partial.replace(ready_file)


def run(
    dsn: str,
    settings: Settings,
    *,
    drain: bool = False,
    name: str | None = None,
    ready_file: Path | None = None,
) -> int:
    """ready_file: written once the worker runs with its model loaded, removed when it
    stops."""
    worker = build_worker(dsn, settings, name)
    if drain:
        done = worker.drain()
        log.info("queue drained" if done else "drain stopped", extra={"worker": worker.name})
        return 0

    signals = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: finishing the jobs in hand (signal again to exit now)")
            worker.stop()
        else:
            # What we held goes back to the queue when its lease expires.
            log.warning("exiting now; jobs in hand are reclaimed after their lease")
            os._exit(1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    worker.start()
    log.info(
        "worker started",
        extra={"worker": worker.name, "kinds": worker.kinds, "concurrency": worker.concurrency},
    )
    announce_ready(worker, ready_file)
    # Started by `chronomem up`: stop with it, even if it died without stopping us.
    parent = os.environ.get("CHRONOMEM_WORKER_PARENT_PID")
    while not worker.wait(timeout=1.0):
        if parent and os.getppid() != int(parent) and signals == 0:
            log.warning("the process that started the worker is gone; stopping")
            signals = 1
            worker.stop()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)
    log.info("worker stopped", extra={"worker": worker.name})
    return 0
