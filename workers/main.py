"""`chronomem worker`: check the configuration against the database, then run."""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType
from typing import Any

import psycopg

from chronomem.settings import Settings
from workers.embedding import Embedder, dimension_problem, make_embedder
from workers.extraction import NO_LLM_REASON, Extractor
from workers.handlers import build_handlers
from workers.runner import Worker, connect, default_name

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
        kinds = ["embed", "enrich"] if extractor is not None else ["embed"]
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


def build_worker(dsn: str, settings: Settings, name: str | None = None) -> Worker:
    """Preflight, then a Worker with every handler this configuration can run."""
    extractor = Extractor.from_settings(settings.llm)
    embedder = make_embedder(settings.embedding)
    preflight(dsn, extractor, embedder)
    ws = settings.worker
    return Worker(
        dsn,
        build_handlers(extractor, embedder, ws.min_confidence, webhooks=settings.webhook),
        name=name,
        concurrency=ws.concurrency,
        lease=ws.lease,
        poll_interval=ws.poll_interval,
        webhook_settings=settings.webhook,
    )


def run(dsn: str, settings: Settings, *, drain: bool = False, name: str | None = None) -> int:
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
    # Started by `chronomem up`: stop with it, even if it died without stopping us.
    parent = os.environ.get("CHRONOMEM_WORKER_PARENT_PID")
    while not worker.wait(timeout=1.0):
        if parent and os.getppid() != int(parent) and signals == 0:
            log.warning("the process that started the worker is gone; stopping")
            signals = 1
            worker.stop()
    log.info("worker stopped", extra={"worker": worker.name})
    return 0
