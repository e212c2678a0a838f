"""Conflicts and review: the inbox of disagreeing facts and its resolutions, a fact's
standing, the conflict policy, learned cardinality and the log of predicate changes."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query
from psycopg.types.json import Jsonb

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    CardinalitySuggestionList,
    Conflict,
    ConflictList,
    ConflictPolicy,
    ConflictPolicySet,
    ConflictResolve,
    ConflictResolved,
    FactReview,
    FactReviewed,
    Instant,
    PredicateChangeList,
    PredicateChangeUndone,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["conflicts"], responses=ERRORS)

ChangeId = Annotated[int, Path(ge=1, le=2**63 - 1, description="A change_id.")]


@router.get("/projects/{project_id}/conflicts", response_model=ConflictList)
def list_conflicts(
    project_id: UUID,
    token: Token,
    db: DB,
    status: Annotated[Literal["open", "resolved", "all"], Query()] = "open",
    predicate: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="1-500.")] = 50,
    before: Annotated[
        Instant | None, Query(description="next_before of the previous page.")
    ] = None,
    before_id: Annotated[
        UUID | None, Query(description="next_before_id of the previous page.")
    ] = None,
) -> Any:
    """What the memory holds that disagrees: the project's conflicts (open ones by
    default), newest first."""
    return db.call(
        Access(token, project_id),
        "select memory_http.list_conflicts(%s::uuid, %s::text, %s::text, %s::integer, "
        "%s::timestamptz, %s::uuid)",
        (project_id, status, predicate, limit, before, before_id),
    )


@router.get("/projects/{project_id}/conflicts/{conflict_id}", response_model=Conflict)
def get_conflict(project_id: UUID, conflict_id: UUID, token: Token, db: DB) -> Any:
    """One conflict: its members (facts, or claims held back) with their windows, standing
    and outcome, and its events."""
    return db.call(
        Access(token, project_id),
        "select memory_http.get_conflict(%s::uuid, %s::uuid)",
        (project_id, conflict_id),
    )


@router.post(
    "/projects/{project_id}/conflicts/{conflict_id}/resolve", response_model=ConflictResolved
)
def resolve_conflict(
    project_id: UUID, conflict_id: UUID, body: ConflictResolve, token: Token, db: DB
) -> Any:
    """Settle an open conflict (needs memory:review): keep_both, supersede (`member_id`
    wins from `at`) or retract (`member_id` never held). Audited; fires conflict.resolved."""
    return db.call(
        Access(token, project_id),
        "select memory_http.resolve_conflict(%s::uuid, %s::uuid, %s::text, %s::uuid, "
        "%s::timestamptz, %s::text)",
        (project_id, conflict_id, body.resolution, body.member_id, body.at, body.reason),
    )


@router.post("/projects/{project_id}/facts/{fact_id}/review", response_model=FactReviewed)
def review_fact(project_id: UUID, fact_id: UUID, body: FactReview, token: Token, db: DB) -> Any:
    """Set a fact's standing (needs memory:review, which project:write does not imply):
    confirmed, unreviewed or rejected (which retracts it). Reads at an earlier known_at
    see the standing of then."""
    return db.call(
        Access(token, project_id),
        "select memory_http.review_fact(%s::uuid, %s::uuid, %s::text, %s::text)",
        (project_id, fact_id, body.standing, body.reason),
    )


@router.get(
    "/projects/{project_id}/cardinality/suggestions",
    response_model=CardinalitySuggestionList,
    tags=["predicates"],
)
def suggest_cardinality(project_id: UUID, token: Token, db: DB) -> Any:
    """Per predicate, the cardinality the project's facts and past resolutions suggest,
    with the evidence (needs configuration:read)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.suggest_cardinality(%s::uuid)",
        (project_id,),
    )


@router.get("/projects/{project_id}/conflict-policy", response_model=ConflictPolicy)
def conflict_policy(project_id: UUID, token: Token, db: DB) -> Any:
    """The project's conflict policy (needs configuration:read)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.conflict_policy(%s::uuid)",
        (project_id,),
    )


@router.put("/projects/{project_id}/conflict-policy", response_model=ConflictPolicy)
def set_conflict_policy(project_id: UUID, body: ConflictPolicySet, token: Token, db: DB) -> Any:
    """Change the conflict policy (needs configuration:write); a field absent or null is
    kept. Answers the policy after."""
    return db.call(
        Access(token, project_id),
        "select memory_http.set_conflict_policy(%s::uuid, %s::jsonb)",
        (project_id, Jsonb(body.model_dump(mode="json", exclude_none=True))),
    )


@router.get(
    "/projects/{project_id}/cardinality/changes",
    response_model=PredicateChangeList,
    tags=["predicates"],
)
def predicate_changes(
    project_id: UUID,
    token: Token,
    db: DB,
    limit: Annotated[int, Query(ge=1, le=500, description="1-500.")] = 50,
) -> Any:
    """Every change of a predicate's cardinality, newest first: declared, learned (with
    its evidence) or undone (needs configuration:read)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.predicate_changes(%s::uuid, %s::integer)",
        (project_id, limit),
    )


@router.post(
    "/projects/{project_id}/cardinality/changes/{change_id}/undo",
    response_model=PredicateChangeUndone,
    tags=["predicates"],
)
def undo_predicate_change(project_id: UUID, change_id: ChangeId, token: Token, db: DB) -> Any:
    """Give the predicate back the cardinality it had before the change (needs
    configuration:write); logged as a change of its own."""
    return db.call(
        Access(token, project_id),
        "select memory_http.undo_predicate_change(%s::uuid, %s::bigint)",
        (project_id, change_id),
    )
