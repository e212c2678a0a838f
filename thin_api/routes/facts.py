"""Facts: batch assert, as-of listing, retraction, history, timelines, changes, predicates."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from psycopg.types.json import Jsonb

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    AssertResult,
    FactChanges,
    FactHistory,
    FactIn,
    FactPage,
    FactsRequest,
    Instant,
    Predicate,
    PredicateDeclare,
    PredicateList,
    RetractRequest,
    RetractResult,
    Timeline,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["facts"], responses=ERRORS)

AsOf = Annotated[
    Instant | None, Query(description="World instant (ISO 8601, zone-less = UTC); default now.")
]
KnownAt = Annotated[
    Instant | None,
    Query(description="What the store believed at this instant (ISO 8601); default now."),
]


@router.post("/projects/{project_id}/facts", response_model=AssertResult)
def assert_facts(project_id: UUID, body: FactsRequest, token: Token, db: DB) -> Any:
    """Assert a batch. Each fact is inserted (closing what it follows in world time),
    skipped (already holds), refused (retracted claim) or invalid (with its field);
    one bad fact never costs the rest of the batch."""
    batch = FactBatch(body.facts)
    answer: dict[str, Any] = db.call(
        Access(token, project_id),
        "select memory_http.assert_facts(%s::uuid, %s::jsonb, %s::boolean)",
        (project_id, Jsonb(batch.sent), body.override_tombstones),
    )
    return batch.answer(answer)


class FactBatch:
    """A batch as the database can take it: the facts holding a value no database text
    or jsonb can hold (a NUL, a lone surrogate, a number that is not finite) are kept
    back, each `invalid` with its field, and the rest are sent."""

    def __init__(self, facts: list[FactIn]) -> None:
        self.total = len(facts)
        self.sent: list[dict[str, Any]] = []
        self.positions: list[int] = []  # the request's index of each fact sent
        self.refused: dict[int, dict[str, Any]] = {}
        for index, fact in enumerate(facts):
            bad = fact.unreachable
            if bad is None:
                self.positions.append(index)
                self.sent.append(fact.model_dump(mode="json", exclude_unset=True))
                continue
            where, problem = bad
            self.refused[index] = {
                "index": index,
                "status": "invalid",
                "error": {"field": where or None, "message": f"{where} {problem}".strip()},
            }

    def answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        if not self.refused:
            return answer
        return merge_refused(answer, self.positions, self.refused, self.total)


def merge_refused(
    answer: dict[str, Any],
    positions: list[int],
    refused: dict[int, dict[str, Any]],
    total: int,
) -> dict[str, Any]:
    """The database's answer for the facts sent, with the facts that could not be sent
    (values no database can hold) as `invalid` in their places: results in the request's
    order, each with its index in the request, and the counts of the whole batch."""
    by_index = dict(refused)
    for outcome in answer.get("results", []):
        by_index[positions[outcome["index"]]] = {**outcome, "index": positions[outcome["index"]]}
    return {
        **answer,
        "invalid": answer.get("invalid", 0) + len(refused),
        "results": [by_index[i] for i in range(total) if i in by_index],
    }


@router.get("/projects/{project_id}/facts", response_model=FactPage)
def list_facts(
    project_id: UUID,
    token: Token,
    db: DB,
    as_of: AsOf = None,
    known_at: KnownAt = None,
    subject: Annotated[str | None, Query()] = None,
    predicate: Annotated[str | None, Query()] = None,
    cursor: Annotated[UUID | None, Query(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
) -> Any:
    """The facts that hold at `as_of` as the store believed at `known_at`."""
    return db.call(
        Access(token, project_id),
        "select memory.list_facts(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
        "%s::text, %s::uuid, %s::integer)",
        (project_id, as_of, known_at, subject, predicate, cursor, limit),
    )


@router.post("/projects/{project_id}/facts/{fact_id}/retract", response_model=RetractResult)
def retract_fact(
    project_id: UUID,
    fact_id: UUID,
    token: Token,
    db: DB,
    body: RetractRequest | None = None,
) -> Any:
    """The claim never held: record time ends, the claim is tombstoned, and what it
    had closed gets its window back."""
    return db.call(
        Access(token, project_id),
        "select memory_http.retract_fact(%s::uuid, %s::uuid, %s::text)",
        (project_id, fact_id, body.reason if body else None),
    )


@router.get("/projects/{project_id}/facts/{fact_id}/history", response_model=FactHistory)
def fact_history(project_id: UUID, fact_id: UUID, token: Token, db: DB) -> Any:
    """Every event of every version of the fact's identity, oldest first."""
    return db.call(
        Access(token, project_id),
        "select memory_http.fact_history(%s::uuid, %s::uuid)",
        (project_id, fact_id),
    )


@router.get("/projects/{project_id}/changes", response_model=FactChanges)
def fact_changes(
    project_id: UUID,
    token: Token,
    db: DB,
    since: Annotated[
        Instant | None, Query(description="Record time (exclusive); default the beginning.")
    ] = None,
    until: Annotated[
        Instant | None, Query(description="Record time (inclusive); default now.")
    ] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
) -> Any:
    """What the store came to believe between `since` and `until` (record time): every
    fact event (asserted, superseded, contradicted, expired, retracted, restored), oldest
    first, with its fact's triple. Events show once their writer commits, stamped with
    the writer's start: a span ending now can still gain events of writers running now,
    so a poller keeps `until` a little in the past."""
    return db.call(
        Access(token, project_id),
        "select memory.fact_changes(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
        "%s::integer)",
        (project_id, since, until, cursor, limit),
    )


@router.get("/projects/{project_id}/timeline", response_model=Timeline)
def timeline(
    project_id: UUID,
    token: Token,
    db: DB,
    subject: Annotated[str, Query(min_length=1)],
    predicate: Annotated[str | None, Query()] = None,
) -> Any:
    """Every version of a subject's facts in world-time order, with their events."""
    return db.call(
        Access(token, project_id),
        "select memory_http.timeline(%s::uuid, %s::text, %s::text)",
        (project_id, subject, predicate),
    )


@router.put(
    "/projects/{project_id}/predicates/{predicate}", response_model=Predicate, tags=["predicates"]
)
def declare_predicate(
    project_id: UUID, predicate: str, body: PredicateDeclare, token: Token, db: DB
) -> Any:
    """Declare a predicate `one` (a new object supersedes the old) or `many`."""
    return db.call_row(
        Access(token, project_id),
        "select * from memory_http.declare_predicate(%s::uuid, %s::text, %s::text)",
        (project_id, predicate, body.cardinality),
    )


@router.get("/projects/{project_id}/predicates", response_model=PredicateList, tags=["predicates"])
def list_predicates(project_id: UUID, token: Token, db: DB) -> Any:
    rows = db.call(
        Access(token, project_id),
        "select * from memory.predicates_of(%s::uuid)",
        (project_id,),
        many=True,
    )
    return {"predicates": rows}
