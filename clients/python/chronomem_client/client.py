"""The typed client for Chronomem's HTTP API, sync (`Client`) and async
(`AsyncClient`), over httpx.

    with Client("http://127.0.0.1:8765", token) as memory:
        memory.declare_predicate(project, "plan", "one")
        memory.assert_facts(project, [{"subject": "user 42", "predicate": "plan",
                                       "object": "pro", "valid_from": "2024-01-01"}])
        memory.list_facts(project, as_of="2024-02-01").facts

Answers are the API's own response models (chronomem_client.models); an error
answer raises `ChronomemError` with its status, stable code, message and field. Timestamps may be
datetimes or ISO 8601 strings (zone-less = UTC).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar
from urllib.parse import quote
from uuid import UUID

import httpx
from pydantic import BaseModel

from chronomem_client.models import (
    ApiKeyCreated,
    ApiKeyList,
    ApiKeyRevoked,
    AssertResult,
    Attachment,
    AttachmentIngestResult,
    Backlog,
    CardinalitySuggestionList,
    CommunityList,
    CommunityRefresh,
    Conflict,
    ConflictList,
    ConflictPolicy,
    ConflictResolved,
    ContextResult,
    Entity,
    EntityMerged,
    EntityPage,
    EntitySplitOff,
    EpisodeExtraction,
    ExtractionRejectionPage,
    ExtractionSchema,
    ExtractionSchemaVersionList,
    FactChanges,
    FactHistory,
    FactPage,
    FactReviewed,
    IngestResult,
    MessagePage,
    ModelBudget,
    ModelUsage,
    Neighbors,
    Org,
    Predicate,
    PredicateChangeList,
    PredicateChangeUndone,
    PredicateList,
    Project,
    ProjectDeleted,
    ProjectList,
    Readiness,
    RedactionRule,
    RedactionRuleDeleted,
    RedactionRuleList,
    Retention,
    RetentionSet,
    RetractResult,
    SearchResult,
    SessionPage,
    SubjectExport,
    Timeline,
    WebhookCreated,
    WebhookDeleted,
    WebhookDeliveryPage,
    WebhookEndpoint,
    WebhookEventTypeList,
    WebhookList,
    WipeResult,
)

T = TypeVar("T", bound=BaseModel)
P = ParamSpec("P")
Id = UUID | str
When = datetime | str | None


class ChronomemError(Exception):
    """An error answer: `{"error": {"code", "message", "field"}}`."""

    def __init__(self, status: int, code: str, message: str, field: str | None) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, and the model its answer parses into."""

    method: str
    path: str
    model: type[T]
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # A multipart upload: form fields and files (name, (filename, bytes, media type)).
    data: Mapping[str, str] | None = None
    files: Sequence[tuple[str, tuple[str, bytes, str | None]]] | None = None


def _when(value: When) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _query(**params: Any) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, UUID) else v for k, v in params.items() if v is not None}


def _body(**fields: Any) -> dict[str, Any]:
    return {
        k: _when(v) if isinstance(v, datetime) else v for k, v in fields.items() if v is not None
    }


def _answer(response: httpx.Response, model: type[T]) -> T:
    if response.is_error:
        try:
            error = response.json()["error"]
            code, message, fault = error["code"], error["message"], error.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, fault = "http_error", response.text[:200], None
        raise ChronomemError(response.status_code, code, message, fault)
    return model.model_validate(response.json())


def _content(response: httpx.Response) -> bytes:
    if response.is_error:
        _answer(response, BaseModel)  # raises ChronomemError
    return response.content


class Calls:
    """Every API route as a `Call` (shared by the sync and async clients)."""

    def get_org(self) -> Call[Org]:
        """The calling key's org."""
        return Call("GET", "/v1/org", Org)

    def list_projects(self) -> Call[ProjectList]:
        """The org's projects the key may see (all with project:manage, else its own)."""
        return Call("GET", "/v1/projects", ProjectList)

    def create_project(self, name: str) -> Call[Project]:
        return Call("POST", "/v1/projects", Project, json={"name": name})

    def get_project(self, project: Id) -> Call[Project]:
        return Call("GET", f"/v1/projects/{project}", Project)

    def delete_project(self, project: Id) -> Call[ProjectDeleted]:
        return Call("DELETE", f"/v1/projects/{project}", ProjectDeleted)

    def create_api_key(
        self, project: Id, name: str, permissions: Sequence[str]
    ) -> Call[ApiKeyCreated]:
        return Call(
            "POST",
            f"/v1/projects/{project}/api-keys",
            ApiKeyCreated,
            json={"name": name, "permissions": list(permissions)},
        )

    def list_api_keys(self, project: Id) -> Call[ApiKeyList]:
        return Call("GET", f"/v1/projects/{project}/api-keys", ApiKeyList)

    def revoke_api_key(self, project: Id, key: Id) -> Call[ApiKeyRevoked]:
        return Call("DELETE", f"/v1/projects/{project}/api-keys/{key}", ApiKeyRevoked)

    def ingest(
        self,
        project: Id,
        session: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        session_metadata: Mapping[str, Any] | None = None,
    ) -> Call[IngestResult]:
        return Call(
            "POST",
            f"/v1/projects/{project}/memory",
            IngestResult,
            json=_body(
                session=session,
                messages=[_body(**m) for m in messages],
                session_metadata=session_metadata,
            ),
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else {},
        )

    def ingest_files(
        self,
        project: Id,
        session: str,
        files: Sequence[tuple[str, bytes, str | None]],
        *,
        content: str,
        role: str = "user",
        occurred_at: When = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        session_metadata: Mapping[str, Any] | None = None,
    ) -> Call[AttachmentIngestResult]:
        """A message with files, each (filename, bytes, media type or None: by the name's
        extension): text, Markdown, HTML or PDF. Each file is stored and its text chunked
        into episodes of the session, pointing back to the file, page and offset."""
        message = _body(
            session=session,
            messages=[
                _body(role=role, content=content, occurred_at=occurred_at, metadata=metadata)
            ],
            session_metadata=session_metadata,
        )
        return Call(
            "POST",
            f"/v1/projects/{project}/memory/attachments",
            AttachmentIngestResult,
            data={"message": json.dumps(message)},
            files=[("file", (name, data, kind)) for name, data, kind in files],
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else {},
        )

    def get_attachment(self, project: Id, attachment: Id) -> Call[Attachment]:
        """A stored file's metadata and its chunks (episode, page, offset)."""
        return Call("GET", f"/v1/projects/{project}/attachments/{attachment}", Attachment)

    def wipe(
        self, project: Id, *, session: str | None = None, subject: str | None = None
    ) -> Call[WipeResult]:
        return Call(
            "DELETE",
            f"/v1/projects/{project}/memory",
            WipeResult,
            params=_query(session=session, subject=subject),
        )

    def set_retention(self, project: Id, seconds: int | None) -> Call[Retention]:
        """Keep the project's episodes `seconds` after they are stored (None: for ever)."""
        return Call(
            "PUT",
            f"/v1/projects/{project}/retention",
            Retention,
            json=RetentionSet(retention_seconds=seconds).model_dump(mode="json"),
        )

    def export_subject(self, project: Id, subject: str) -> Call[SubjectExport]:
        """Everything the project holds about one subject (by name or alias): its entity,
        every version of its facts with their events, the messages that are their sources
        or name it, its edges and notes. For a data-subject access request."""
        return Call(
            "GET",
            f"/v1/projects/{project}/subject-export",
            SubjectExport,
            params=_query(subject=subject),
        )

    def backlog(self, project: Id) -> Call[Backlog]:
        return Call("GET", f"/v1/projects/{project}/backlog", Backlog)

    def model_usage(
        self, project: Id, *, since: When = None, until: When = None
    ) -> Call[ModelUsage]:
        """The project's model calls in [since, until) per job kind and model."""
        return Call(
            "GET",
            f"/v1/projects/{project}/usage",
            ModelUsage,
            params=_query(since=_when(since), until=_when(until)),
        )

    def model_budget(self, project: Id) -> Call[ModelBudget]:
        return Call("GET", f"/v1/projects/{project}/model-budget", ModelBudget)

    def set_model_budget(
        self, project: Id, tokens: int | None, period: str = "month"
    ) -> Call[ModelBudget]:
        """Set the project's model token budget per day or month; None removes it."""
        return Call(
            "PUT",
            f"/v1/projects/{project}/model-budget",
            ModelBudget,
            json={"tokens": tokens, "period": period},
        )

    def sessions(
        self, project: Id, *, cursor: str | None = None, limit: int | None = None
    ) -> Call[SessionPage]:
        return Call(
            "GET",
            f"/v1/projects/{project}/sessions",
            SessionPage,
            params=_query(cursor=cursor, limit=limit),
        )

    def session_messages(
        self, project: Id, session: str, *, after: int | None = None, limit: int | None = None
    ) -> Call[MessagePage]:
        return Call(
            "GET",
            f"/v1/projects/{project}/sessions/{quote(session, safe='')}/messages",
            MessagePage,
            params=_query(after=after, limit=limit),
        )

    def assert_facts(
        self,
        project: Id,
        facts: Sequence[Mapping[str, Any]],
        *,
        override_tombstones: bool = False,
    ) -> Call[AssertResult]:
        return Call(
            "POST",
            f"/v1/projects/{project}/facts",
            AssertResult,
            json={"facts": [_body(**f) for f in facts], "override_tombstones": override_tombstones},
        )

    def list_facts(
        self,
        project: Id,
        *,
        as_of: When = None,
        known_at: When = None,
        subject: str | None = None,
        predicate: str | None = None,
        cursor: Id | None = None,
        limit: int | None = None,
    ) -> Call[FactPage]:
        return Call(
            "GET",
            f"/v1/projects/{project}/facts",
            FactPage,
            params=_query(
                as_of=_when(as_of),
                known_at=_when(known_at),
                subject=subject,
                predicate=predicate,
                cursor=cursor,
                limit=limit,
            ),
        )

    def retract_fact(self, project: Id, fact: Id, reason: str | None = None) -> Call[RetractResult]:
        return Call(
            "POST",
            f"/v1/projects/{project}/facts/{fact}/retract",
            RetractResult,
            json=_body(reason=reason),
        )

    def fact_history(self, project: Id, fact: Id) -> Call[FactHistory]:
        return Call("GET", f"/v1/projects/{project}/facts/{fact}/history", FactHistory)

    def changes(
        self,
        project: Id,
        *,
        since: When = None,
        until: When = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Call[FactChanges]:
        return Call(
            "GET",
            f"/v1/projects/{project}/changes",
            FactChanges,
            params=_query(since=_when(since), until=_when(until), cursor=cursor, limit=limit),
        )

    def timeline(self, project: Id, subject: str, predicate: str | None = None) -> Call[Timeline]:
        return Call(
            "GET",
            f"/v1/projects/{project}/timeline",
            Timeline,
            params=_query(subject=subject, predicate=predicate),
        )

    def declare_predicate(self, project: Id, predicate: str, cardinality: str) -> Call[Predicate]:
        return Call(
            "PUT",
            f"/v1/projects/{project}/predicates/{quote(predicate, safe='')}",
            Predicate,
            json={"cardinality": cardinality},
        )

    def list_predicates(self, project: Id) -> Call[PredicateList]:
        return Call("GET", f"/v1/projects/{project}/predicates", PredicateList)

    def list_conflicts(
        self,
        project: Id,
        *,
        status: str | None = None,
        predicate: str | None = None,
        limit: int | None = None,
        before: When = None,
        before_id: Id | None = None,
    ) -> Call[ConflictList]:
        """What the memory holds that disagrees: conflicts (`status` open, the default,
        resolved or all), newest first; pass next_before and next_before_id as `before` and
        `before_id` for the next page."""
        return Call(
            "GET",
            f"/v1/projects/{project}/conflicts",
            ConflictList,
            params=_query(
                status=status,
                predicate=predicate,
                limit=limit,
                before=_when(before),
                before_id=None if before_id is None else str(before_id),
            ),
        )

    def get_conflict(self, project: Id, conflict: Id) -> Call[Conflict]:
        return Call("GET", f"/v1/projects/{project}/conflicts/{conflict}", Conflict)

    def resolve_conflict(
        self,
        project: Id,
        conflict: Id,
        resolution: str,
        *,
        member: Id | None = None,
        at: When = None,
        reason: str | None = None,
    ) -> Call[ConflictResolved]:
        """keep_both, supersede (`member` wins from `at`) or retract (`member` never
        held); needs memory:review."""
        return Call(
            "POST",
            f"/v1/projects/{project}/conflicts/{conflict}/resolve",
            ConflictResolved,
            json=_body(
                resolution=resolution,
                member_id=None if member is None else str(member),
                at=at,
                reason=reason,
            ),
        )

    def review_fact(
        self, project: Id, fact: Id, standing: str, reason: str | None = None
    ) -> Call[FactReviewed]:
        """Set a fact's standing: confirmed, unreviewed or rejected (which retracts it);
        needs memory:review."""
        return Call(
            "POST",
            f"/v1/projects/{project}/facts/{fact}/review",
            FactReviewed,
            json=_body(standing=standing, reason=reason),
        )

    def suggest_cardinality(self, project: Id) -> Call[CardinalitySuggestionList]:
        """Per predicate, the cardinality its facts and past resolutions suggest."""
        return Call(
            "GET", f"/v1/projects/{project}/cardinality/suggestions", CardinalitySuggestionList
        )

    def conflict_policy(self, project: Id) -> Call[ConflictPolicy]:
        return Call("GET", f"/v1/projects/{project}/conflict-policy", ConflictPolicy)

    def set_conflict_policy(
        self,
        project: Id,
        *,
        contradictions: str | None = None,
        protect_confirmed: bool | None = None,
        learn_cardinality: bool | None = None,
        learn_threshold: float | None = None,
        learn_min_evidence: int | None = None,
    ) -> Call[ConflictPolicy]:
        """Change the conflict policy; None keeps a value."""
        return Call(
            "PUT",
            f"/v1/projects/{project}/conflict-policy",
            ConflictPolicy,
            json=_body(
                contradictions=contradictions,
                protect_confirmed=protect_confirmed,
                learn_cardinality=learn_cardinality,
                learn_threshold=learn_threshold,
                learn_min_evidence=learn_min_evidence,
            ),
        )

    def predicate_changes(
        self, project: Id, *, limit: int | None = None
    ) -> Call[PredicateChangeList]:
        """Every change of a predicate's cardinality (declared, learned, undone), newest
        first."""
        return Call(
            "GET",
            f"/v1/projects/{project}/cardinality/changes",
            PredicateChangeList,
            params=_query(limit=limit),
        )

    def undo_predicate_change(self, project: Id, change: int) -> Call[PredicateChangeUndone]:
        return Call(
            "POST",
            f"/v1/projects/{project}/cardinality/changes/{change}/undo",
            PredicateChangeUndone,
        )

    def set_extraction_schema(
        self, project: Id, document: Mapping[str, Any]
    ) -> Call[ExtractionSchema]:
        """Store a new version of the project's extraction schema (entity_types,
        predicates, labels, fields, allow_other_predicates, allow_other_entity_types)."""
        return Call(
            "PUT",
            f"/v1/projects/{project}/extraction-schema",
            ExtractionSchema,
            json=dict(document),
        )

    def extraction_schema(self, project: Id, version: int | None = None) -> Call[ExtractionSchema]:
        """A version of the project's extraction schema (default: the current one)."""
        return Call(
            "GET",
            f"/v1/projects/{project}/extraction-schema",
            ExtractionSchema,
            params=_query(version=version),
        )

    def extraction_schema_versions(self, project: Id) -> Call[ExtractionSchemaVersionList]:
        return Call(
            "GET", f"/v1/projects/{project}/extraction-schema/versions", ExtractionSchemaVersionList
        )

    def episode_extraction(self, project: Id, episode: Id) -> Call[EpisodeExtraction]:
        """An episode's enrichment (labels, fields, provenance) and its rejections."""
        return Call(
            "GET", f"/v1/projects/{project}/episodes/{episode}/extraction", EpisodeExtraction
        )

    def extraction_rejections(
        self,
        project: Id,
        *,
        reason: str | None = None,
        limit: int | None = None,
        cursor: int | None = None,
    ) -> Call[ExtractionRejectionPage]:
        """A page of the project's rejected extraction items, oldest first."""
        return Call(
            "GET",
            f"/v1/projects/{project}/extraction-rejections",
            ExtractionRejectionPage,
            params=_query(reason=reason, limit=limit, cursor=cursor),
        )

    def set_redaction_rule(
        self, project: Id, detector: str, action: str, pattern: str | None = None
    ) -> Call[RedactionRule]:
        """Mask, hash, drop or refuse what a detector finds (email, phone, card, iban,
        ip, ssn, or custom:<name> with a POSIX `pattern`) in the project's later writes."""
        return Call(
            "PUT",
            f"/v1/projects/{project}/redaction-rules/{quote(detector, safe='')}",
            RedactionRule,
            json={"action": action, "pattern": pattern},
        )

    def list_redaction_rules(self, project: Id) -> Call[RedactionRuleList]:
        return Call("GET", f"/v1/projects/{project}/redaction-rules", RedactionRuleList)

    def delete_redaction_rule(self, project: Id, detector: str) -> Call[RedactionRuleDeleted]:
        return Call(
            "DELETE",
            f"/v1/projects/{project}/redaction-rules/{quote(detector, safe='')}",
            RedactionRuleDeleted,
        )

    def search(
        self,
        project: Id,
        query: str,
        *,
        query_embedding: Sequence[float] | None = None,
        as_of: When = None,
        known_at: When = None,
        k: int | None = None,
        legs: Sequence[str] | None = None,
        fusion: str | None = None,
        labels: Sequence[str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> Call[SearchResult]:
        """Search; `labels` (all of them) and `fields` (containment) keep the episodes
        whose extraction carries them, and the facts drawn from those episodes."""
        return Call(
            "POST",
            f"/v1/projects/{project}/search",
            SearchResult,
            json=_body(
                query=query,
                query_embedding=None if query_embedding is None else list(query_embedding),
                as_of=as_of,
                known_at=known_at,
                k=k,
                legs=None if legs is None else list(legs),
                fusion=fusion,
                labels=None if labels is None else list(labels),
                fields=None if fields is None else dict(fields),
            ),
        )

    def context(
        self,
        project: Id,
        query: str,
        *,
        query_embedding: Sequence[float] | None = None,
        as_of: When = None,
        known_at: When = None,
        max_tokens: int | None = None,
        k: int | None = None,
        labels: Sequence[str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> Call[ContextResult]:
        return Call(
            "POST",
            f"/v1/projects/{project}/context",
            ContextResult,
            json=_body(
                query=query,
                query_embedding=None if query_embedding is None else list(query_embedding),
                as_of=as_of,
                known_at=known_at,
                max_tokens=max_tokens,
                k=k,
                labels=None if labels is None else list(labels),
                fields=None if fields is None else dict(fields),
            ),
        )

    def neighbors(
        self,
        project: Id,
        entity: str,
        *,
        depth: int | None = None,
        as_of: When = None,
        known_at: When = None,
        limit: int | None = None,
    ) -> Call[Neighbors]:
        return Call(
            "GET",
            f"/v1/projects/{project}/graph/neighbors",
            Neighbors,
            params=_query(
                entity=entity,
                depth=depth,
                as_of=_when(as_of),
                known_at=_when(known_at),
                limit=limit,
            ),
        )

    def entities(
        self, project: Id, *, cursor: str | None = None, limit: int | None = None
    ) -> Call[EntityPage]:
        return Call(
            "GET",
            f"/v1/projects/{project}/entities",
            EntityPage,
            params=_query(cursor=cursor, limit=limit),
        )

    def upsert_entity(
        self,
        project: Id,
        name: str,
        *,
        entity_type: str | None = None,
        summary: str | None = None,
        aliases: Sequence[str] = (),
    ) -> Call[Entity]:
        return Call(
            "POST",
            f"/v1/projects/{project}/entities",
            Entity,
            json=_body(name=name, entity_type=entity_type, summary=summary, aliases=list(aliases)),
        )

    def merge_entities(
        self, project: Id, keep: str, absorb: str, *, dry_run: bool = False
    ) -> Call[EntityMerged]:
        """Merge the entity `absorb` names into the one `keep` names (dry_run: only say
        what that would do)."""
        return Call(
            "POST",
            f"/v1/projects/{project}/entities/merge",
            EntityMerged,
            json=_body(keep=keep, absorb=absorb, dry_run=dry_run),
        )

    def split_entity(
        self, project: Id, name: str, *, dry_run: bool = False
    ) -> Call[EntitySplitOff]:
        """The alias `name` becomes an entity of its own, with the facts written with it."""
        return Call(
            "POST",
            f"/v1/projects/{project}/entities/split",
            EntitySplitOff,
            json=_body(name=name, dry_run=dry_run),
        )

    def communities(
        self,
        project: Id,
        *,
        cursor: str | None = None,
        limit: int | None = None,
        members: int | None = None,
    ) -> Call[CommunityList]:
        return Call(
            "GET",
            f"/v1/projects/{project}/communities",
            CommunityList,
            params=_query(cursor=cursor, limit=limit, members=members),
        )

    def refresh_communities(self, project: Id) -> Call[CommunityRefresh]:
        return Call("POST", f"/v1/projects/{project}/communities/refresh", CommunityRefresh)

    def create_webhook(
        self, project: Id, url: str, event_types: Sequence[str] | None = None
    ) -> Call[WebhookCreated]:
        """Add a webhook endpoint; its signing secret is in this answer only."""
        return Call(
            "POST",
            f"/v1/projects/{project}/webhooks",
            WebhookCreated,
            json=_body(url=url, event_types=None if event_types is None else list(event_types)),
        )

    def list_webhooks(self, project: Id) -> Call[WebhookList]:
        return Call("GET", f"/v1/projects/{project}/webhooks", WebhookList)

    def update_webhook(
        self,
        project: Id,
        endpoint: Id,
        *,
        url: str | None = None,
        event_types: Sequence[str] | None = None,
        enabled: bool | None = None,
    ) -> Call[WebhookEndpoint]:
        """Change the URL, the event types or the enabled flag; None keeps a value."""
        return Call(
            "PATCH",
            f"/v1/projects/{project}/webhooks/{endpoint}",
            WebhookEndpoint,
            json=_body(
                url=url,
                event_types=None if event_types is None else list(event_types),
                enabled=enabled,
            ),
        )

    def delete_webhook(self, project: Id, endpoint: Id) -> Call[WebhookDeleted]:
        return Call("DELETE", f"/v1/projects/{project}/webhooks/{endpoint}", WebhookDeleted)

    def rotate_webhook_secret(self, project: Id, endpoint: Id) -> Call[WebhookCreated]:
        """A new signing secret; it is in this answer only."""
        return Call("POST", f"/v1/projects/{project}/webhooks/{endpoint}/rotate", WebhookCreated)

    def webhook_deliveries(
        self, project: Id, endpoint: Id, *, limit: int | None = None, before: int | None = None
    ) -> Call[WebhookDeliveryPage]:
        """The endpoint's delivery log, newest first; pass next_cursor as `before`."""
        return Call(
            "GET",
            f"/v1/projects/{project}/webhooks/{endpoint}/deliveries",
            WebhookDeliveryPage,
            params=_query(limit=limit, before=before),
        )

    def webhook_event_types(self) -> Call[WebhookEventTypeList]:
        return Call("GET", "/v1/webhook-event-types", WebhookEventTypeList)

    def ready(self) -> Call[Readiness]:
        return Call("GET", "/readyz", Readiness)


def _sync(
    build: Callable[Concatenate[Calls, P], Call[T]],
) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(build(self.calls, *args, **kwargs))

    method.__name__ = build.__name__
    method.__doc__ = build.__doc__
    return method


def _async(
    build: Callable[Concatenate[Calls, P], Call[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(self.calls, *args, **kwargs))

    method.__name__ = build.__name__
    method.__doc__ = build.__doc__
    return method


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class Client:
    """Synchronous client; one httpx connection pool per instance."""

    calls = Calls()

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.http = httpx.Client(base_url=base_url, headers=_headers(token), timeout=timeout)

    def send(self, call: Call[T]) -> T:
        response = self.http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            headers=call.headers,
            data=call.data,
            files=call.files,
        )
        return _answer(response, call.model)

    def attachment_content(self, project: Id, attachment: Id) -> bytes:
        """A stored file's bytes."""
        response = self.http.get(f"/v1/projects/{project}/attachments/{attachment}/content")
        return _content(response)

    def metrics(self) -> str:
        """/metrics, Prometheus text."""
        response = self.http.get("/metrics")
        response.raise_for_status()
        return response.text

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    get_org = _sync(Calls.get_org)
    list_projects = _sync(Calls.list_projects)
    create_project = _sync(Calls.create_project)
    get_project = _sync(Calls.get_project)
    delete_project = _sync(Calls.delete_project)
    create_api_key = _sync(Calls.create_api_key)
    list_api_keys = _sync(Calls.list_api_keys)
    revoke_api_key = _sync(Calls.revoke_api_key)
    ingest = _sync(Calls.ingest)
    ingest_files = _sync(Calls.ingest_files)
    get_attachment = _sync(Calls.get_attachment)
    wipe = _sync(Calls.wipe)
    export_subject = _sync(Calls.export_subject)
    set_retention = _sync(Calls.set_retention)
    backlog = _sync(Calls.backlog)
    model_usage = _sync(Calls.model_usage)
    model_budget = _sync(Calls.model_budget)
    set_model_budget = _sync(Calls.set_model_budget)
    sessions = _sync(Calls.sessions)
    session_messages = _sync(Calls.session_messages)
    assert_facts = _sync(Calls.assert_facts)
    list_facts = _sync(Calls.list_facts)
    retract_fact = _sync(Calls.retract_fact)
    fact_history = _sync(Calls.fact_history)
    changes = _sync(Calls.changes)
    timeline = _sync(Calls.timeline)
    declare_predicate = _sync(Calls.declare_predicate)
    list_predicates = _sync(Calls.list_predicates)
    list_conflicts = _sync(Calls.list_conflicts)
    get_conflict = _sync(Calls.get_conflict)
    resolve_conflict = _sync(Calls.resolve_conflict)
    review_fact = _sync(Calls.review_fact)
    suggest_cardinality = _sync(Calls.suggest_cardinality)
    conflict_policy = _sync(Calls.conflict_policy)
    set_conflict_policy = _sync(Calls.set_conflict_policy)
    set_extraction_schema = _sync(Calls.set_extraction_schema)
    extraction_schema = _sync(Calls.extraction_schema)
    extraction_schema_versions = _sync(Calls.extraction_schema_versions)
    episode_extraction = _sync(Calls.episode_extraction)
    extraction_rejections = _sync(Calls.extraction_rejections)
    predicate_changes = _sync(Calls.predicate_changes)
    undo_predicate_change = _sync(Calls.undo_predicate_change)
    set_redaction_rule = _sync(Calls.set_redaction_rule)
    list_redaction_rules = _sync(Calls.list_redaction_rules)
    delete_redaction_rule = _sync(Calls.delete_redaction_rule)
    search = _sync(Calls.search)
    context = _sync(Calls.context)
    neighbors = _sync(Calls.neighbors)
    entities = _sync(Calls.entities)
    upsert_entity = _sync(Calls.upsert_entity)
    merge_entities = _sync(Calls.merge_entities)
    split_entity = _sync(Calls.split_entity)
    communities = _sync(Calls.communities)
    refresh_communities = _sync(Calls.refresh_communities)
    create_webhook = _sync(Calls.create_webhook)
    list_webhooks = _sync(Calls.list_webhooks)
    update_webhook = _sync(Calls.update_webhook)
    delete_webhook = _sync(Calls.delete_webhook)
    rotate_webhook_secret = _sync(Calls.rotate_webhook_secret)
    webhook_deliveries = _sync(Calls.webhook_deliveries)
    webhook_event_types = _sync(Calls.webhook_event_types)
    ready = _sync(Calls.ready)


class AsyncClient:
    """Asynchronous client (same methods as Client, awaited)."""

    calls = Calls()

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, headers=_headers(token), timeout=timeout)

    async def send(self, call: Call[T]) -> T:
        response = await self.http.request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            headers=call.headers,
            data=call.data,
            files=call.files,
        )
        return _answer(response, call.model)

    async def attachment_content(self, project: Id, attachment: Id) -> bytes:
        """A stored file's bytes."""
        response = await self.http.get(f"/v1/projects/{project}/attachments/{attachment}/content")
        return _content(response)

    async def metrics(self) -> str:
        response = await self.http.get("/metrics")
        response.raise_for_status()
        return response.text

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    get_org = _async(Calls.get_org)
    list_projects = _async(Calls.list_projects)
    create_project = _async(Calls.create_project)
    get_project = _async(Calls.get_project)
    delete_project = _async(Calls.delete_project)
    create_api_key = _async(Calls.create_api_key)
    list_api_keys = _async(Calls.list_api_keys)
    revoke_api_key = _async(Calls.revoke_api_key)
    ingest = _async(Calls.ingest)
    ingest_files = _async(Calls.ingest_files)
    get_attachment = _async(Calls.get_attachment)
    wipe = _async(Calls.wipe)
    export_subject = _async(Calls.export_subject)
    set_retention = _async(Calls.set_retention)
    backlog = _async(Calls.backlog)
    model_usage = _async(Calls.model_usage)
    model_budget = _async(Calls.model_budget)
    set_model_budget = _async(Calls.set_model_budget)
    sessions = _async(Calls.sessions)
    session_messages = _async(Calls.session_messages)
    assert_facts = _async(Calls.assert_facts)
    list_facts = _async(Calls.list_facts)
    retract_fact = _async(Calls.retract_fact)
    fact_history = _async(Calls.fact_history)
    changes = _async(Calls.changes)
    timeline = _async(Calls.timeline)
    declare_predicate = _async(Calls.declare_predicate)
    list_predicates = _async(Calls.list_predicates)
    list_conflicts = _async(Calls.list_conflicts)
    get_conflict = _async(Calls.get_conflict)
    resolve_conflict = _async(Calls.resolve_conflict)
    review_fact = _async(Calls.review_fact)
    suggest_cardinality = _async(Calls.suggest_cardinality)
    conflict_policy = _async(Calls.conflict_policy)
    set_conflict_policy = _async(Calls.set_conflict_policy)
    set_extraction_schema = _async(Calls.set_extraction_schema)
    extraction_schema = _async(Calls.extraction_schema)
    extraction_schema_versions = _async(Calls.extraction_schema_versions)
    episode_extraction = _async(Calls.episode_extraction)
    extraction_rejections = _async(Calls.extraction_rejections)
    predicate_changes = _async(Calls.predicate_changes)
    undo_predicate_change = _async(Calls.undo_predicate_change)
    set_redaction_rule = _async(Calls.set_redaction_rule)
    list_redaction_rules = _async(Calls.list_redaction_rules)
    delete_redaction_rule = _async(Calls.delete_redaction_rule)
    search = _async(Calls.search)
    context = _async(Calls.context)
    neighbors = _async(Calls.neighbors)
    entities = _async(Calls.entities)
    upsert_entity = _async(Calls.upsert_entity)
    merge_entities = _async(Calls.merge_entities)
    split_entity = _async(Calls.split_entity)
    communities = _async(Calls.communities)
    refresh_communities = _async(Calls.refresh_communities)
    create_webhook = _async(Calls.create_webhook)
    list_webhooks = _async(Calls.list_webhooks)
    update_webhook = _async(Calls.update_webhook)
    delete_webhook = _async(Calls.delete_webhook)
    rotate_webhook_secret = _async(Calls.rotate_webhook_secret)
    webhook_deliveries = _async(Calls.webhook_deliveries)
    webhook_event_types = _async(Calls.webhook_event_types)
    ready = _async(Calls.ready)
