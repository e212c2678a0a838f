"""Projects and their API keys."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, status

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyList,
    ApiKeyRevoked,
    Org,
    Project,
    ProjectCreate,
    ProjectDeleted,
    ProjectList,
    RedactionRule,
    RedactionRuleDeleted,
    RedactionRuleList,
    RedactionRuleSet,
    Retention,
    RetentionSet,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["projects"], responses=ERRORS)


@router.get("/org", response_model=Org, tags=["orgs"])
def get_org(token: Token, db: DB) -> Any:
    """The calling key's org (any valid key)."""
    return db.call_row(Access(token), "select * from memory_http.org()")


@router.get("/projects", response_model=ProjectList)
def list_projects(token: Token, db: DB) -> Any:
    """The org's projects the key may see, oldest first: all of them for a project:manage
    key, only its own project otherwise (any valid key)."""
    rows = db.call(Access(token), "select * from memory_http.list_projects()", many=True)
    return {"projects": rows}


@router.post("/projects", response_model=Project, status_code=status.HTTP_201_CREATED)
def create_project(body: ProjectCreate, token: Token, db: DB) -> Any:
    """Create a project in the key's org (needs project:manage)."""
    return db.call_row(
        Access(token), "select * from memory_http.create_project(%s::text)", (body.name,)
    )


@router.get("/projects/{project_id}", response_model=Project)
def get_project(project_id: UUID, token: Token, db: DB) -> Any:
    return db.call_row(
        Access(token, project_id), "select * from memory.get_project(%s::uuid)", (project_id,)
    )


@router.delete("/projects/{project_id}", response_model=ProjectDeleted)
def delete_project(project_id: UUID, token: Token, db: DB) -> Any:
    """Delete the project (needs project:manage): its memory as a wipe deletes it, its
    jobs, API keys and webhooks, and the project itself. The audit log keeps the counts."""
    return db.call(
        Access(token, project_id),
        "select memory_http.delete_project(%s::uuid)",
        (project_id,),
    )


@router.put("/projects/{project_id}/retention", response_model=Retention)
def set_retention(project_id: UUID, body: RetentionSet, token: Token, db: DB) -> Any:
    """Keep the project's episodes for this long after they are stored (needs
    configuration:write); the periodic purge job erases older ones and the facts drawn
    from them, with a receipt in the audit log. Null keeps them for ever."""
    return db.call(
        Access(token, project_id),
        "select memory_http.set_retention(%s::uuid, %s::bigint)",
        (project_id, body.retention_seconds),
    )


@router.put("/projects/{project_id}/redaction-rules/{detector}", response_model=RedactionRule)
def set_redaction_rule(
    project_id: UUID, detector: str, body: RedactionRuleSet, token: Token, db: DB
) -> Any:
    """Set the project's redaction rule for a detector (needs configuration:write):
    email, phone, card, iban, ip, ssn, or custom:<name> with a pattern. Every later write
    of the project masks, hashes, drops or refuses what it finds, before storing."""
    return db.call_row(
        Access(token, project_id),
        "select * from memory_http.set_redaction_rule(%s::uuid, %s::text, %s::text, %s::text)",
        (project_id, detector, body.action, body.pattern),
    )


@router.get("/projects/{project_id}/redaction-rules", response_model=RedactionRuleList)
def list_redaction_rules(project_id: UUID, token: Token, db: DB) -> Any:
    """The project's redaction rules, in the order they run (needs configuration:read)."""
    rows = db.call(
        Access(token, project_id),
        "select * from memory.redaction_rules_of(%s::uuid)",
        (project_id,),
        many=True,
    )
    return {"rules": rows}


@router.delete(
    "/projects/{project_id}/redaction-rules/{detector}", response_model=RedactionRuleDeleted
)
def delete_redaction_rule(project_id: UUID, detector: str, token: Token, db: DB) -> Any:
    """Delete a detector's rule (needs configuration:write); deleted is false when it had
    none."""
    deleted = db.call(
        Access(token, project_id),
        "select memory_http.delete_redaction_rule(%s::uuid, %s::text)",
        (project_id, detector),
    )
    return {"detector": detector.strip().lower(), "deleted": deleted}


@router.post(
    "/projects/{project_id}/api-keys",
    response_model=ApiKeyCreated,
    status_code=status.HTTP_201_CREATED,
    tags=["api keys"],
)
def create_api_key(project_id: UUID, body: ApiKeyCreate, token: Token, db: DB) -> Any:
    """Create a key for the project (needs project:manage). The token is in this answer
    only; the server keeps a hash of it."""
    return db.call_row(
        Access(token, project_id),
        "select * from memory_http.create_api_key(%s::uuid, %s::text, %s::text[])",
        (project_id, body.name, list(body.permissions)),
    )


@router.get("/projects/{project_id}/api-keys", response_model=ApiKeyList, tags=["api keys"])
def list_api_keys(project_id: UUID, token: Token, db: DB) -> Any:
    rows = db.call(
        Access(token, project_id),
        "select * from memory_http.list_api_keys(%s::uuid)",
        (project_id,),
        many=True,
    )
    return {"api_keys": rows}


@router.delete(
    "/projects/{project_id}/api-keys/{key_id}", response_model=ApiKeyRevoked, tags=["api keys"]
)
def revoke_api_key(project_id: UUID, key_id: UUID, token: Token, db: DB) -> Any:
    """Revoke a key: every later request with it is refused (401). Idempotent."""
    return db.call_row(
        Access(token, project_id),
        "select * from memory_http.revoke_api_key(%s::uuid, %s::uuid)",
        (project_id, key_id),
    )
