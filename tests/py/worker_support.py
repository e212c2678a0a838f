"""Scaffolding for the tests that run the real worker against the scripted model
(scripted_openai.py): a fact builder, a tenant that ingests, a worker built from the
scripted server, and draining until a condition holds. The fixtures `quiet` and `llm`
that these tests share are in conftest.py."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Self

import openai
import org_scope
import psycopg
from scripted_openai import ScriptedOpenAI

from workers.embedding import OpenAIEmbedder
from workers.extraction import Extractor
from workers.handlers import build_handlers
from workers.jobs import Handler
from workers.runner import Worker
from workers.summaries import Summarizer


def fact(subject: str, predicate: str, obj: str, content: str, **kw: Any) -> dict[str, Any]:
    """One fact as the model answers it (and memory.assert_facts takes it): a literal
    object with confidence 0.9 and no validity window, unless `kw` says otherwise."""
    return {
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "object_type": "literal",
        "content": content,
        "confidence": 0.9,
        "valid_from": None,
        "valid_to": None,
        **kw,
    }


class Tenant(org_scope.Tenant):
    """A fresh org with one project 'p', which ingests messages."""

    @classmethod
    def create(cls, dsn: str, name: str) -> Self:
        with psycopg.connect(dsn) as conn:
            org = conn.execute("select memory.create_org(%s)", (name,)).fetchone()[0]  # type: ignore[index]
            conn.execute("select memory.use_org(%s)", (org,))
            project = conn.execute(  # type: ignore[index]
                "select memory.create_project(%s, 'p')", (org,)
            ).fetchone()[0]
        return cls(dsn, org, project)

    def ingest(self, session: str, *messages: dict[str, Any]) -> list[str]:
        """The ids of the episodes the messages became."""
        response = self.one(
            "select memory.ingest(%s, %s, %s::jsonb)",
            (self.project, session, json.dumps(list(messages), default=str)),
        )
        return [str(e) for e in response["episode_ids"]]


def make_worker(
    dsn: str,
    llm: ScriptedOpenAI,
    *,
    extract: bool = True,
    extractor: Extractor | None = None,
    summarize: bool = False,
    timeout: float = 20,
    lease: float = 30.0,
    concurrency: int = 1,
    name: str | None = None,
    wrap: Callable[[Handler], Handler] | None = None,
) -> Worker:
    """A worker whose model and embedder are `llm`. It extracts with `extractor`, else
    with the model "scripted" (extract=False: enrich jobs wait), and summarizes
    communities with "scripted-summaries" if `summarize` (else those jobs wait).
    Neither client retries (a retry is the job's next attempt, which the tests count);
    timeout is the model client's (a test of timeouts shortens it), the embedder's is
    20 s. wrap: applied to each handler."""
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=timeout)
    if extractor is None and extract:
        extractor = Extractor(client, "scripted")
    embed_client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=20)
    handlers = build_handlers(
        extractor,
        OpenAIEmbedder(embed_client, "scripted-embed", llm.dim),
        0.5,
        summarizer=Summarizer(client, "scripted-summaries") if summarize else None,
    )
    if wrap is not None:
        handlers = {kind: wrap(h) for kind, h in handlers.items()}
    return Worker(dsn, handlers, name=name, concurrency=concurrency, lease=lease, poll_interval=0.1)


def drain(worker: Worker) -> None:
    """Run the worker until no job is due."""
    assert worker.drain(timeout=30), "the worker did not drain"


def org_jobs(admin_dsn: str, org: uuid.UUID) -> list[tuple[Any, ...]]:
    """The org's jobs: kind, status, attempts, last error."""
    with psycopg.connect(admin_dsn) as conn:
        return conn.execute(
            "select kind, status, attempts, last_error from memory.jobs where org_id = %s", (org,)
        ).fetchall()


def limit_attempts(admin_dsn: str, org: uuid.UUID, kind: str, attempts: int) -> None:
    """Set max_attempts of the org's jobs of `kind`."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.jobs set max_attempts = %s where org_id = %s and kind = %s",
            (attempts, org, kind),
        )


def drain_until(
    worker: Worker, admin_dsn: str, org: uuid.UUID, done: Callable[[], bool], timeout: float = 30
) -> None:
    """Drain repeatedly, skipping retry backoff (run_at) of the org's jobs, until done()."""
    deadline = time.monotonic() + timeout
    while True:
        drain(worker)
        if done():
            return
        assert time.monotonic() < deadline, f"condition not reached: {org_jobs(admin_dsn, org)}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                "update memory.jobs set run_at = now() where org_id = %s and status = 'queued'",
                (org,),
            )
        time.sleep(0.1)
