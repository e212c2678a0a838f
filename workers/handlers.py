"""What each job kind does. Each handler runs inside the runner's transaction, after
memory.use_org(job's org), and returns the result stored on the job."""

from __future__ import annotations

from typing import Any

import psycopg

from workers.embedding import Embedder, embed_rows
from workers.errors import PermanentError
from workers.extraction import Extractor, enrich_episode
from workers.jobs import Handler, Job
from workers.plpy import PsycopgPlpy
from workers.summaries import Summarizer, summarize_communities
from workers.webhooks import WebhookSettings, make_deliver_handler


def _field(job: Job, key: str) -> Any:
    if key not in job.payload:
        raise PermanentError(f"{job.kind} job payload has no {key!r}: {job.payload}")
    return job.payload[key]


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def build_handlers(
    extractor: Extractor | None,
    embedder: Embedder,
    min_confidence: float,
    webhooks: WebhookSettings | None = None,
    summarizer: Summarizer | None = None,
) -> dict[str, Handler]:
    """webhooks: delivery settings; None reads CHRONOMEM_WEBHOOK_* from the environment.
    summarizer: the model that writes community summaries; None parks those jobs."""

    def enrich(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        episode = str(_field(job, "episode_id"))
        return enrich_episode(
            PsycopgPlpy(conn),
            episode,
            extractor,
            min_confidence=min_confidence,
            attempt=job.attempt,
        )

    def embed(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        if job.project_id is None:
            raise PermanentError("embed job without a project")
        kind, ids = _field(job, "kind"), _field(job, "ids")
        return embed_rows(
            PsycopgPlpy(conn), str(job.project_id), kind, ids, embedder, job_id=job.job_id
        )

    def reconcile_edges(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        report: dict[str, Any] = _scalar(conn, "select memory.reconcile_edges(1000)")
        return report

    def purge(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        # Episodes past their project's retention first: the wipe that erases them
        # marks their queued jobs done, which the second call may then delete.
        expired = _scalar(conn, "select memory_worker.purge_expired_episodes()")
        return {
            "episodes_expired": expired,
            "jobs_purged": _scalar(conn, "select memory_worker.purge_done_jobs()"),
        }

    def communities(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        if job.project_id is None:
            # The periodic job, per org: a job of this kind for each project whose
            # graph changed since its last computation (memory_worker.queue_community_refreshes).
            queued: dict[str, Any] = _scalar(
                conn, "select memory_worker.queue_community_refreshes()"
            )
            return queued
        # One project's: computed again only if its current edges still differ, under
        # its locks, which it holds for this computation only.
        result: dict[str, Any] = _scalar(
            conn,
            "select memory.refresh_communities(%s, %s)",
            (job.project_id, _field(job, "max_rounds")),
        )
        return result

    def summarize(conn: psycopg.Connection[Any], job: Job) -> dict[str, Any]:
        # The communities whose members changed since their summary was written.
        return summarize_communities(conn, job, summarizer)

    return {
        "enrich": enrich,
        "embed": embed,
        "reconcile_edges": reconcile_edges,
        "purge": purge,
        "communities": communities,
        "summarize_communities": summarize,
        "deliver_webhook": make_deliver_handler(webhooks),
    }
