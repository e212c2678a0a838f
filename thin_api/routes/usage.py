"""Model usage and budgets: what a project's jobs' model calls cost, and the token
budget that pauses its extraction when reached."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import Instant, ModelBudget, ModelBudgetSet, ModelUsage
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["usage"], responses=ERRORS)


@router.get("/projects/{project_id}/usage", response_model=ModelUsage)
def model_usage(
    project_id: UUID,
    token: Token,
    db: DB,
    since: Annotated[
        Instant | None, Query(description="Calls from this instant on (inclusive); default all.")
    ] = None,
    until: Annotated[
        Instant | None, Query(description="Calls before this instant (exclusive); default now.")
    ] = None,
) -> Any:
    """The project's model calls per job kind, model and operation: calls, tokens in and
    out as the endpoints reported them, latency total, average and 95th percentile, and
    errors (needs project:read)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.model_usage(%s::uuid, %s::timestamptz, %s::timestamptz)",
        (project_id, since, until),
    )


@router.get("/projects/{project_id}/model-budget", response_model=ModelBudget)
def model_budget(project_id: UUID, token: Token, db: DB) -> Any:
    """The project's model token budget, what the current period used and whether its
    extraction is paused (needs configuration:read)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.model_budget(%s::uuid)",
        (project_id,),
    )


@router.put("/projects/{project_id}/model-budget", response_model=ModelBudget)
def set_model_budget(project_id: UUID, body: ModelBudgetSet, token: Token, db: DB) -> Any:
    """Set the project's model token budget per UTC day or month (tokens in plus out of
    every call its jobs make); tokens null removes it. When reached, its enrich jobs stay
    queued until the period rolls or the budget is raised (needs project:manage)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.set_model_budget(%s::uuid, %s::bigint, %s::text)",
        (project_id, body.tokens, body.period),
    )
