"""Conversations: ingest messages, read a session, wipe; a subject's export."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Header, Query
from psycopg.types.json import Jsonb

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    Backlog,
    IngestRequest,
    IngestResult,
    Int32,
    MessagePage,
    SessionPage,
    SubjectExport,
    WipeResult,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["memory"], responses=ERRORS)


@router.post("/projects/{project_id}/memory", response_model=IngestResult)
def ingest(
    project_id: UUID,
    body: IngestRequest,
    token: Token,
    db: DB,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="Retries with the same key and body get the first answer back "
            "(replayed: true); the same key with another body is a 409.",
        ),
    ] = None,
) -> Any:
    """Store messages as episodes of a session now; extraction and embedding follow in
    the background."""
    messages = [m.model_dump(mode="json", exclude_none=True) for m in body.messages]
    return db.call(
        Access(token, project_id),
        "select memory_http.ingest(%s::uuid, %s::text, %s::jsonb, %s::text, %s::jsonb)",
        (
            project_id,
            body.session,
            Jsonb(messages),
            idempotency_key,
            None if body.session_metadata is None else Jsonb(body.session_metadata),
        ),
    )


@router.delete("/projects/{project_id}/memory", response_model=WipeResult)
def wipe(
    project_id: UUID,
    token: Token,
    db: DB,
    session: Annotated[str | None, Query(description="Wipe only this session.")] = None,
    subject: Annotated[str | None, Query(description="Wipe only this subject.")] = None,
) -> Any:
    """Hard-delete the project's memory (or one session's, or one subject's). Nothing
    wiped stays readable at any instant; an audit row keeps the counts."""
    return db.call(
        Access(token, project_id),
        "select memory_http.wipe(%s::uuid, %s::text, %s::text)",
        (project_id, session, subject),
    )


@router.get("/projects/{project_id}/subject-export", response_model=SubjectExport)
def export_subject(
    project_id: UUID,
    token: Token,
    db: DB,
    subject: Annotated[str, Query(min_length=1, description="The subject's name or an alias.")],
) -> Any:
    """Everything the project holds about one subject, for a data-subject access request:
    its entity and aliases, every version of the facts naming it with windows and events,
    the messages that are their sources or name it, its edges and notes."""
    return db.call(
        Access(token, project_id),
        "select memory_http.export_subject(%s::uuid, %s::text)",
        (project_id, subject),
    )


@router.get("/projects/{project_id}/backlog", response_model=Backlog)
def backlog(project_id: UUID, token: Token, db: DB) -> Any:
    """The project's jobs not done yet, per kind; caught_up once extraction and
    embeddings have run for everything written before the call."""
    return db.call(
        Access(token, project_id), "select memory.project_backlog(%s::uuid)", (project_id,)
    )


@router.get("/projects/{project_id}/sessions", response_model=SessionPage)
def list_sessions(
    project_id: UUID,
    token: Token,
    db: DB,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
) -> Any:
    """The project's sessions by their id, each with its last message's number and time."""
    return db.call(
        Access(token, project_id),
        "select memory.list_sessions(%s::uuid, %s::text, %s::integer)",
        (project_id, cursor, limit),
    )


@router.get("/projects/{project_id}/sessions/{session:path}/messages", response_model=MessagePage)
def session_messages(
    project_id: UUID,
    session: str,
    token: Token,
    db: DB,
    after: Annotated[Int32, Query(description="Sequence number to continue after.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
) -> Any:
    return db.call(
        Access(token, project_id),
        "select memory.session_messages(%s::uuid, %s::text, %s::integer, %s::integer)",
        (project_id, session, after, limit),
    )
