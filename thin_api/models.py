"""Request and response models: the OpenAPI schema, and a check that every answer
the SQL gives has the documented shape (a mismatch is a failing test, not a silent
drift).

Timestamps are ISO 8601 strings; one without a zone is read as UTC, everywhere (the
SQL reads zone-less text the same way). Answers are in UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

_ISO_DATE = re.compile(r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _iso_text(value: Any) -> Any:
    # ISO 8601 only, as in SQL (memory_internal.try_timestamptz): no epoch numbers.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("must be an ISO 8601 timestamp")
    return value


def _utc_if_naive(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


Instant = Annotated[
    datetime,
    BeforeValidator(_iso_text),
    AfterValidator(_utc_if_naive),
    Field(description="ISO 8601 timestamp; without a zone it is read as UTC."),
]
"""A timestamp from a client: ISO 8601 text, UTC when it has no zone."""

Permission = Literal[
    "project:read",
    "project:write",
    "project:manage",
    "configuration:read",
    "configuration:write",
    "members:read",
    "members:write",
]
Cardinality = Literal["one", "many"]
Role = Literal["user", "assistant", "system", "tool"]
SearchLeg = Literal[
    "episode_vector", "fact_vector", "episode_fulltext", "fact_fulltext", "entity", "graph"
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""An integer the database can take (the database says what range makes sense)."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ---------------------------------------------------------------------------
class ErrorDetail(Model):
    code: str = Field(
        description="Stable code: unauthorized, forbidden, not_found, conflict, retry, "
        "invalid_request, unavailable, timeout, internal, method_not_allowed."
    )
    message: str
    field: str | None = Field(None, description="The request field at fault, when known.")


class ErrorResponse(Model):
    error: ErrorDetail


# -- projects and keys ----------------------------------------------------------------
class ProjectCreate(Model):
    name: str = Field(min_length=1, max_length=200)


class Project(Model):
    project_id: UUID
    org_id: UUID
    name: str
    created_at: datetime


class ProjectList(Model):
    projects: list[Project] = Field(
        description="Every project of the org for a project:manage key; its own otherwise."
    )


class Org(Model):
    org_id: UUID
    name: str
    created_at: datetime


class ApiKeyCreate(Model):
    name: str = Field(min_length=1, max_length=200)
    permissions: list[Permission] = Field(min_length=1)


class ApiKeyCreated(Model):
    key_id: UUID
    token: str = Field(description="The key itself (cmk_...): shown here only, never again.")
    prefix: str
    name: str
    project_id: UUID
    permissions: list[Permission]
    created_at: datetime


class ApiKey(Model):
    key_id: UUID
    project_id: UUID
    name: str
    prefix: str = Field(description="The start of the token, to tell keys apart.")
    permissions: list[Permission]
    created_at: datetime
    created_by: str
    revoked_at: datetime | None
    last_used_at: datetime | None


class ApiKeyList(Model):
    api_keys: list[ApiKey]


class ApiKeyRevoked(Model):
    key_id: UUID
    status: Literal["revoked", "already_revoked"]
    revoked_at: datetime


# -- memory (episodes) ----------------------------------------------------------------
class MessageIn(Model):
    role: Role
    content: str
    occurred_at: Instant | None = None
    metadata: dict[str, JsonValue] | None = Field(
        None,
        description="Any JSON object, stored with the episode. `speaker`, the name of the "
        "participant who wrote it, lets a search that names one participant prefer their "
        "turns.",
    )


class IngestRequest(Model):
    session: str = Field(description="The client's id for the conversation (1-200 chars).")
    messages: list[MessageIn] = Field(description="At most 100 per call.")
    session_metadata: dict[str, JsonValue] | None = None


class IngestResult(Model):
    session_id: UUID
    episode_ids: list[UUID]
    replayed: bool = Field(description="True when this answers a retry of an earlier request.")


class WipeResult(Model):
    scope: Literal["project", "session", "subject"]
    facts: int
    fact_events: int
    edges: int
    entities: int
    episodes: int
    sessions: int
    tombstones: int


class ProjectDeleted(Model):
    project_id: UUID
    deleted: Literal[True]
    wiped: WipeResult = Field(description="What the project wipe deleted of its content.")
    jobs: int = Field(description="The project's jobs deleted, whatever their state.")
    api_keys: int = Field(description="The project's own API keys deleted (org keys stay).")
    webhook_endpoints: int


class Message(Model):
    episode_id: UUID
    seq: int
    role: Role
    content: str
    metadata: dict[str, JsonValue]
    occurred_at: datetime
    created_at: datetime
    token_count: int


class SessionSummary(Model):
    session_id: UUID
    session: str = Field(description="Your id for the conversation.")
    metadata: dict[str, JsonValue]
    created_at: datetime
    last_seq: int | None = Field(description="The last message's sequence number; null if none.")
    last_message_at: datetime | None = Field(description="When the last message occurred.")


class SessionPage(Model):
    sessions: list[SessionSummary]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class KindBacklog(Model):
    queued: int
    running: int
    waiting: int = Field(description="Cannot run until configured (e.g. no LLM endpoint).")
    dead: int = Field(description="Failed for good; `chronomem retry-jobs` queues them again.")
    oldest_queued_at: datetime | None


class Backlog(Model):
    caught_up: bool = Field(
        description="No enrich or embed job of the project is queued, running or waiting: "
        "extraction and embeddings reflect everything written before this call."
    )
    kinds: dict[Literal["communities", "deliver_webhook", "embed", "enrich"], KindBacklog]


class MessagePage(Model):
    session_id: UUID
    session: str
    metadata: dict[str, JsonValue]
    messages: list[Message]
    next_cursor: int | None = Field(description="Pass as `after` for the next page.")


# -- facts ----------------------------------------------------------------------------
class FactIn(BaseModel):
    """One fact. Fields are checked by the database per fact: a bad one is reported in
    `results` with its field and costs nothing else in the batch."""

    model_config = ConfigDict(extra="allow")

    subject: JsonValue = Field(None, description="Entity name (string, required).")
    predicate: JsonValue = Field(None, description="Relation (string, required).")
    object: JsonValue = Field(None, description="Entity name or literal (required).")
    object_type: JsonValue = Field(
        None,
        description="entity, literal or auto (default): the entity of that name or alias, else a "
        "literal that an entity or alias of that name created later takes over.",
    )
    content: JsonValue = Field(None, description="The sentence; default from the triple.")
    confidence: JsonValue = Field(None, description="0..1, default 1.")
    valid_from: JsonValue = Field(None, description="ISO 8601; default now. Zone-less = UTC.")
    valid_to: JsonValue = Field(None, description="ISO 8601 end of validity; default open.")
    source_episode_id: JsonValue = Field(None, description="UUID of an episode of the project.")
    subject_type: JsonValue = Field(None, description="Entity type of the subject.")
    object_entity_type: JsonValue = Field(None, description="Entity type of the object.")


class FactsRequest(Model):
    facts: list[FactIn] = Field(description="At most 1000 per batch.")
    override_tombstones: bool = Field(
        False, description="Assert retracted claims again (lifts their tombstones)."
    )


class FactError(Model):
    field: str | None
    message: str


class FactOutcome(Model):
    index: int
    status: Literal["inserted", "skipped", "refused", "invalid"]
    fact_id: UUID | None = None
    superseded: list[UUID] | None = Field(None, description="Facts this one closed.")
    reason: str | None = None
    retracted_fact_id: UUID | None = None
    error: FactError | None = None


class SupersededPair(Model):
    old_fact_id: UUID
    new_fact_id: UUID | None


class AssertResult(Model):
    inserted: int
    superseded_count: int
    skipped: int
    refused: int
    invalid: int
    superseded_pairs: list[SupersededPair]
    results: list[FactOutcome]


class Fact(Model):
    fact_id: UUID
    subject: str
    subject_id: UUID
    predicate: str
    object: str
    object_entity_id: UUID | None
    content: str
    valid_from: datetime
    valid_until: datetime | None = Field(description="None: still holds.")
    confidence: float
    source: str
    source_episode_id: UUID | None
    recorded_at: datetime


class FactPage(Model):
    facts: list[Fact]
    next_cursor: UUID | None = Field(description="Pass as `cursor` for the next page.")
    as_of: datetime
    known_at: datetime


class RetractRequest(Model):
    reason: str | None = Field(None, max_length=2000)


class RetractResult(Model):
    fact_id: UUID
    status: Literal["retracted", "already_retracted"]
    restored: list[UUID] = Field(default_factory=list, description="Facts given their window back.")
    retracted_at: datetime | None = None


class HistoryEvent(Model):
    event_id: int
    occurred_at: datetime
    event_type: str
    fact_id: UUID
    old_fact_id: UUID | None
    new_fact_id: UUID | None
    old_valid_from: datetime | None
    old_valid_until: datetime | None
    new_valid_from: datetime | None
    new_valid_until: datetime | None
    new_window_empty: bool
    actor: str | None
    reason: str | None
    subject: str
    predicate: str
    object: str
    content: str


class FactHistory(Model):
    fact_id: UUID
    events: list[HistoryEvent]


class FactChanges(Model):
    changes: list[HistoryEvent] = Field(description="Oldest first, by (occurred_at, event_id).")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")
    since: datetime | None = Field(description="The span's start (exclusive); null: the beginning.")
    until: datetime = Field(description="The span's end (inclusive): `until`, else now.")


class TimelineEvent(Model):
    event: str
    at: datetime
    new_fact_id: UUID | None
    actor: str | None
    reason: str | None


class TimelineFact(Model):
    fact_id: UUID
    predicate: str
    object: str
    content: str
    valid_from: datetime
    window_from: datetime | None
    window_until: datetime | None
    window_empty: bool
    recorded_at: datetime
    retracted_at: datetime | None
    status: Literal["current", "future", "ended", "superseded", "retracted"]
    events: list[TimelineEvent]


class Timeline(Model):
    subject: str
    facts: list[TimelineFact]


class PredicateDeclare(Model):
    cardinality: Cardinality


class Predicate(Model):
    predicate: str
    cardinality: Cardinality
    declared_at: datetime


class PredicateList(Model):
    predicates: list[Predicate]


# -- retrieval ------------------------------------------------------------------------
class SearchRequest(Model):
    query: str = Field(max_length=10_000)
    query_embedding: list[FiniteFloat] | None = Field(
        None,
        min_length=1,
        max_length=16000,
        description="Your own query vector (the installation's dimension); otherwise the "
        "server embeds the query, without the names of the participants it names (speakers "
        "of the project's turns), when it has an embedder, else the vector legs are skipped.",
    )
    as_of: Instant | None = None
    known_at: Instant | None = None
    k: Int32 = Field(10, description="Results, 1-200.")
    legs: list[SearchLeg] | None = None
    fusion: Literal["scores", "rrf"] = Field(
        "scores",
        description="How the legs' lists are merged: `scores` (default) sums each leg's "
        "normalised scores, shares episode scores with neighbouring turns and prefers the "
        "participant and period the question names; `rrf` is plain reciprocal rank fusion, "
        "the sum of 1/(60 + rank) over the legs.",
    )


class ContextRequest(Model):
    query: str = Field(max_length=10_000)
    query_embedding: list[FiniteFloat] | None = Field(None, min_length=1, max_length=16000)
    as_of: Instant | None = None
    known_at: Instant | None = None
    max_tokens: Int32 = Field(1500, description="Budget for the text block, at least 50.")
    k: Int32 = Field(20, description="Search results considered, 1-200.")


class SearchHit(Model):
    position: int
    kind: Literal["fact", "episode", "entity"]
    id: UUID
    score: float
    ranks: dict[str, int]
    text: str | None = None
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    confidence: float | None = None
    role: str | None = None
    occurred_at: datetime | None = None
    session: str | None = None
    seq: int | None = None
    entity_type: str | None = None
    summary: str | None = None


class FailedLeg(Model):
    leg: str
    error: str
    sqlstate: str


class SearchResult(Model):
    results: list[SearchHit]
    degraded: bool
    failed_legs: list[FailedLeg]
    legs: list[str] = Field(description="The legs that ran.")
    at: datetime
    known_at: datetime


class ContextCommunity(Model):
    community_id: UUID
    label: str
    size: int
    computed_at: datetime
    members: list[str] = Field(
        description="Every member's name when the community has at most 8, else the names "
        "of the members the context mentions."
    )
    more: int = Field(description="Members not named in `members`.")


class ContextResult(Model):
    text: str
    facts: list[SearchHit]
    episodes: list[SearchHit]
    communities: list[ContextCommunity] = Field(
        description="The communities holding an entity the facts or the question name, as "
        "computed no later than `at` and `known_at`."
    )
    tokens: int
    degraded: bool
    failed_legs: list[FailedLeg]
    at: datetime
    known_at: datetime


# -- graph ----------------------------------------------------------------------------
class EntityRef(Model):
    entity_id: UUID
    name: str
    entity_type: str | None


class GraphNode(EntityRef):
    depth: int


class GraphEdge(Model):
    edge_id: UUID
    source_id: UUID
    target_id: UUID
    relation: str
    valid_from: datetime | None
    valid_until: datetime | None


class Neighbors(Model):
    entity: EntityRef
    depth: int
    as_of: datetime
    known_at: datetime
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    truncated: bool = Field(
        description="The limit left some nodes out (the closest are kept, then by name)."
    )


class Entity(Model):
    entity_id: UUID
    name: str
    entity_type: str | None
    summary: str | None
    created_at: datetime
    aliases: list[str]


class EntityUpsert(Model):
    name: str = Field(
        description="The entity's name; an existing entity of that name or alias is updated."
    )
    entity_type: str | None = Field(None, description="Kept when omitted.")
    summary: str | None = Field(None, description="Kept when omitted.")
    aliases: list[str] = Field(
        default_factory=list,
        description="Other names for it (at most 100). Facts stored with any of its names as "
        "a plain-name object (object_type auto) become the entity's.",
    )


class EntityMerge(Model):
    keep: str = Field(description="The entity that stays (its name or an alias).")
    absorb: str = Field(
        description="The entity merged into it (its name or an alias): its facts, edges, "
        "aliases and notes become the kept entity's and its name an alias of it."
    )
    dry_run: bool = Field(False, description="Answer what the merge would do, and change nothing.")


class EntityMerged(Model):
    entity: Entity
    merged: bool = Field(description="False when both names already meant one entity.")
    dry_run: bool = Field(description="True: nothing was changed; this is what would be.")
    facts_rekeyed: int = Field(description="Fact versions that named the absorbed entity.")
    facts_superseded: int = Field(
        description="Windows closed where the merge joined two claims into one."
    )
    edges_repointed: int
    notes_moved: int = 0
    aliases: list[str] = Field(description="Names (normalized) the kept entity took over.")


class EntitySplit(Model):
    name: str = Field(description="An alias of an entity, to become an entity of its own.")
    dry_run: bool = Field(False, description="Answer what the split would do, and change nothing.")


class EntitySplitOff(Model):
    entity: Entity | None = Field(description="The new entity (null for a dry run).")
    split_from: UUID = Field(description="The entity the name was an alias of.")
    dry_run: bool
    facts_moved: int = Field(description="Fact versions written with the name, now its own.")
    facts_superseded: int = Field(description="Windows closed where a moved claim met another.")
    windows_restored: int = Field(description="Windows given back or re-placed by the split.")


class EntityPage(Model):
    entities: list[Entity]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class CommunityMember(Model):
    entity_id: UUID
    name: str


class Community(Model):
    community_id: UUID
    label: str
    size: int
    computed_at: datetime
    members: list[CommunityMember] = Field(description="The first `members` by name.")
    more: int = Field(description="How many members are not listed.")


class CommunityRefresh(Model):
    computed: bool = Field(
        description="True when this call computed them; false when the graph had not changed "
        "since the last run, whose figures these are."
    )
    computed_at: datetime
    communities: int
    members: int
    edges: int = Field(description="The current edges the computation read.")
    rounds: int
    converged: bool
    colors: int | None = Field(
        default=None,
        description="Colours of the semi-synchronous rounds, when this call needed them.",
    )


class CommunityList(Model):
    computed_at: datetime | None = Field(
        description="When the project's communities were last computed; null if never (the "
        "periodic job computes them again whenever the project's current edges changed)."
    )
    communities: list[Community]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


# -- webhooks -------------------------------------------------------------------------
WebhookEventType = Literal[
    "fact.asserted",
    "fact.superseded",
    "fact.retracted",
    "fact.contradicted",
    "fact.expired",
    "fact.restored",
    "episode.enriched",
    "memory.wiped",
]
# What an endpoint subscribes to: event types, or "*" alone for every type, including
# types added later.
WebhookSubscription = Literal[WebhookEventType, "*"]
WebhookUrl = Annotated[
    str,
    Field(
        min_length=1,
        max_length=2048,
        description="An absolute http or https URL (checked by the database).",
    ),
]


class WebhookCreate(Model):
    url: WebhookUrl
    event_types: list[WebhookSubscription] | None = Field(
        None,
        min_length=1,
        description='The events to receive; ["*"], null or absent: every type, including '
        "types added later.",
    )


class WebhookUpdate(Model):
    url: WebhookUrl | None = None
    event_types: list[WebhookSubscription] | None = Field(
        None,
        min_length=1,
        description='A new non-empty list (["*"]: every type); null or absent: unchanged.',
    )
    enabled: bool | None = Field(None, description="null or absent: unchanged.")


class Webhook(Model):
    endpoint_id: UUID
    url: str
    event_types: list[WebhookSubscription] = Field(
        description='The event types received; ["*"]: every type, including types added later.'
    )
    enabled: bool
    created_at: datetime
    updated_at: datetime


class WebhookEndpoint(Webhook):
    project_id: UUID


class WebhookCreated(WebhookEndpoint):
    secret: str = Field(
        description="The signing secret (whsec_...): shown here only, never again (rotate to "
        "get a new one)."
    )


class WebhookList(Model):
    webhooks: list[Webhook]


class WebhookDeleted(Model):
    endpoint_id: UUID
    deleted: Literal[True]


class WebhookDelivery(Model):
    delivery_id: int
    event_id: str = Field(description="The webhook-id header: the same on every attempt.")
    event_type: WebhookEventType
    endpoint_id: UUID
    attempt: int
    status_code: int | None = Field(description="The receiver's HTTP status; null: no answer.")
    outcome: Literal["delivered", "retrying", "failed"]
    error: str | None
    duration_ms: int
    attempted_at: datetime


class WebhookDeliveryPage(Model):
    deliveries: list[WebhookDelivery] = Field(description="Newest attempt first.")
    next_cursor: int | None = Field(description="Pass as `before` for the next page.")


class WebhookEventTypeInfo(Model):
    event_type: WebhookEventType
    description: str


class WebhookEventTypeList(Model):
    event_types: list[WebhookEventTypeInfo]


# -- operations -----------------------------------------------------------------------
class Health(Model):
    status: Literal["ok"]


class Readiness(Model):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]
    revision: str | None
    head: str | None
