"""Operations: liveness, readiness (database reachable, schema at head), metrics."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from chronomem.migrate import current_revision, head_revision
from thin_api.deps import DB, Metrics
from thin_api.models import Health, Readiness

log = logging.getLogger("chronomem.api")
router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
def healthz() -> Any:
    """The process is up (no database involved)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready."}},
)
def readyz(db: DB) -> Any:
    """Ready when the database answers and its schema is at this code's head revision."""
    head = head_revision()
    try:
        db.operator_rows("select 1 as ok")
        revision = current_revision(db.dsn)
    except Exception as err:
        log.warning("not ready: %s", err)
        body = Readiness(status="unavailable", database="unreachable", revision=None, head=head)
        return JSONResponse(body.model_dump(), status_code=503)
    ready = revision == head
    body = Readiness(
        status="ok" if ready else "unavailable", database="ok", revision=revision, head=head
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(metrics: Metrics) -> Response:
    """Prometheus text format."""
    body = await run_in_threadpool(generate_latest, metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
