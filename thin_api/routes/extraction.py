"""Extraction: a project's extraction schema (versioned), an episode's enrichment
(classification labels, custom fields, what produced them) and the items extraction
rejected, with their reasons."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Query
from psycopg.types.json import Jsonb
from pydantic import JsonValue

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    EpisodeExtraction,
    ExtractionRejectionPage,
    ExtractionSchema,
    ExtractionSchemaVersionList,
    RejectionReason,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["extraction"], responses=ERRORS)

SCHEMA_EXAMPLE = {
    "entity_types": [{"name": "person", "description": "A human being."}],
    "predicates": [
        {
            "name": "works_at",
            "description": "The subject's current employer.",
            "cardinality": "one",
            "object_type": "entity",
        }
    ],
    "labels": [{"name": "billing", "description": "The dialog is about an invoice."}],
    "fields": {"type": "object", "properties": {"priority": {"type": "integer"}}},
    "allow_other_predicates": True,
    "allow_other_entity_types": True,
}


@router.put("/projects/{project_id}/extraction-schema", response_model=ExtractionSchema)
def set_extraction_schema(
    project_id: UUID,
    token: Token,
    db: DB,
    document: Annotated[
        dict[str, JsonValue],
        Body(
            description="entity_types, predicates (name, description, cardinality one/many, "
            "object_type entity/literal/date/number), labels, fields (a JSON Schema of type "
            "object, or null), allow_other_predicates, allow_other_entity_types. An invalid "
            "document is a 422 naming its path (`predicates[2].cardinality`).",
            examples=[SCHEMA_EXAMPLE],
        ),
    ],
) -> Any:
    """Store a new version of the project's extraction schema (needs
    configuration:write). Predicates with a cardinality are declared on the project. The
    same document as the current version stores nothing (`created` false). Audited."""
    return db.call(
        Access(token, project_id),
        "select memory_http.set_extraction_schema(%s::uuid, %s::jsonb)",
        (project_id, Jsonb(document)),
    )


@router.get("/projects/{project_id}/extraction-schema", response_model=ExtractionSchema)
def get_extraction_schema(
    project_id: UUID,
    token: Token,
    db: DB,
    version: Annotated[
        int | None, Query(ge=1, le=2**31 - 1, description="Default: the current one.")
    ] = None,
) -> Any:
    """A version of the project's extraction schema (404 when none is set)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.extraction_schema(%s::uuid, %s::integer)",
        (project_id, version),
    )


@router.get(
    "/projects/{project_id}/extraction-schema/versions",
    response_model=ExtractionSchemaVersionList,
)
def extraction_schema_versions(project_id: UUID, token: Token, db: DB) -> Any:
    """Every version of the project's extraction schema, newest first."""
    return db.call(
        Access(token, project_id),
        "select memory_http.extraction_schema_versions(%s::uuid)",
        (project_id,),
    )


@router.get(
    "/projects/{project_id}/episodes/{episode_id}/extraction", response_model=EpisodeExtraction
)
def episode_extraction(project_id: UUID, episode_id: UUID, token: Token, db: DB) -> Any:
    """An episode's enrichment: its classification labels and custom fields, the schema
    version, prompt hash and model that produced them, and every item rejected with its
    reason."""
    return db.call(
        Access(token, project_id),
        "select memory_http.episode_extraction(%s::uuid, %s::uuid)",
        (project_id, episode_id),
    )


@router.get("/projects/{project_id}/extraction-rejections", response_model=ExtractionRejectionPage)
def extraction_rejections(
    project_id: UUID,
    token: Token,
    db: DB,
    reason: Annotated[RejectionReason | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="1-500.")] = 50,
    cursor: Annotated[
        int | None, Query(ge=0, le=2**63 - 1, description="next_cursor of the previous page.")
    ] = None,
) -> Any:
    """The project's rejected extraction items, oldest first, a page at a time."""
    return db.call(
        Access(token, project_id),
        "select memory_http.extraction_rejections(%s::uuid, %s::text, %s::integer, %s::bigint)",
        (project_id, reason, limit, cursor),
    )
