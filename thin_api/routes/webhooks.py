"""Webhook endpoints: create (the secret shown once), list, update, delete, rotate the
secret, an endpoint's delivery log, and the event types."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, status
from pydantic import Field

from thin_api.db import Access
from thin_api.deps import DB, Token
from thin_api.models import (
    WebhookCreate,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveryPage,
    WebhookEndpoint,
    WebhookEventTypeList,
    WebhookList,
    WebhookUpdate,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["webhooks"], responses=ERRORS)

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


@router.post(
    "/projects/{project_id}/webhooks",
    response_model=WebhookCreated,
    status_code=status.HTTP_201_CREATED,
)
def create_webhook(project_id: UUID, body: WebhookCreate, token: Token, db: DB) -> Any:
    """Add an endpoint (needs configuration:write). Its signing secret is in this answer
    only; deliveries are signed Svix-style (webhook-id, webhook-timestamp,
    webhook-signature)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.create_webhook(%s::uuid, %s::text, %s::text[])",
        (project_id, body.url, body.event_types),
    )


@router.get("/projects/{project_id}/webhooks", response_model=WebhookList)
def list_webhooks(project_id: UUID, token: Token, db: DB) -> Any:
    """The project's endpoints, oldest first; never their secrets."""
    rows = db.call(
        Access(token, project_id),
        "select * from memory.list_webhooks(%s::uuid)",
        (project_id,),
        many=True,
    )
    return {"webhooks": rows}


@router.patch("/projects/{project_id}/webhooks/{endpoint_id}", response_model=WebhookEndpoint)
def update_webhook(
    project_id: UUID, endpoint_id: UUID, body: WebhookUpdate, token: Token, db: DB
) -> Any:
    """Change the URL, the event types or the enabled flag; absent or null keeps a value.
    A disabled endpoint gets no new events, and its queued deliveries are dropped."""
    return db.call(
        Access(token, project_id),
        "select memory_http.update_webhook(%s::uuid, %s::uuid, %s::text, %s::text[], %s::boolean)",
        (project_id, endpoint_id, body.url, body.event_types, body.enabled),
    )


@router.delete("/projects/{project_id}/webhooks/{endpoint_id}", response_model=WebhookDeleted)
def delete_webhook(project_id: UUID, endpoint_id: UUID, token: Token, db: DB) -> Any:
    """Delete an endpoint: nothing more is sent to it and its secret is destroyed; its
    delivery log stays readable."""
    return db.call(
        Access(token, project_id),
        "select memory_http.delete_webhook(%s::uuid, %s::uuid)",
        (project_id, endpoint_id),
    )


@router.post("/projects/{project_id}/webhooks/{endpoint_id}/rotate", response_model=WebhookCreated)
def rotate_webhook_secret(project_id: UUID, endpoint_id: UUID, token: Token, db: DB) -> Any:
    """Replace the signing secret; the new one is in this answer only. Every attempt from
    now on, retries of older events included, is signed with it."""
    return db.call(
        Access(token, project_id),
        "select memory_http.rotate_webhook_secret(%s::uuid, %s::uuid)",
        (project_id, endpoint_id),
    )


@router.get(
    "/projects/{project_id}/webhooks/{endpoint_id}/deliveries",
    response_model=WebhookDeliveryPage,
)
def webhook_deliveries(
    project_id: UUID,
    endpoint_id: UUID,
    token: Token,
    db: DB,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
    before: Annotated[Int64 | None, Query(description="next_cursor of the previous page.")] = None,
) -> Any:
    """The endpoint's delivery log, one row per attempt, newest first (a deleted
    endpoint's too)."""
    return db.call(
        Access(token, project_id),
        "select memory_http.webhook_deliveries(%s::uuid, %s::uuid, %s::integer, %s::bigint)",
        (project_id, endpoint_id, limit, before),
    )


@router.get("/webhook-event-types", response_model=WebhookEventTypeList)
def webhook_event_types(token: Token, db: DB) -> Any:
    """The event types an endpoint can subscribe to (needs configuration:read on the key's
    own project)."""
    rows = db.call(
        Access(token, own_project=True),
        "select * from memory.webhook_event_types()",
        many=True,
    )
    return {"event_types": rows}
