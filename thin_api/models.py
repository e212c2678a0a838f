"""Request and response models: the OpenAPI schema, and a check that every answer
the SQL gives has the documented shape (a mismatch is a failing test, not a silent
drift).

The wire contract, the models and value types both sides share (`Instant`, `Text`,
...), lives in the light client's package, `chronomem_client.models`, and is
re-exported here: the server depends on the client, never the reverse. What only the
server needs stays here: a batch's facts (`FactIn`, held back one by one when a value
cannot be stored, and `FactsRequest`) and `/healthz`'s answer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ModelWrapValidatorHandler,
    PrivateAttr,
    model_validator,
)

from chronomem_client.models import (
    INSTANT_PATTERN,
    ApiKey,
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyList,
    ApiKeyRevoked,
    AssertResult,
    Backlog,
    Cardinality,
    CardinalitySuggestion,
    CardinalitySuggestionList,
    Community,
    CommunityList,
    CommunityMember,
    CommunityRefresh,
    Conflict,
    ConflictCause,
    ConflictEvent,
    ConflictList,
    ConflictMember,
    ConflictOutcome,
    ConflictPolicy,
    ConflictPolicySet,
    ConflictResolve,
    ConflictResolved,
    ConflictStatus,
    ConflictSummary,
    ContextCommunity,
    ContextRequest,
    ContextResult,
    ContradictionPolicy,
    Entity,
    EntityMerge,
    EntityMerged,
    EntityPage,
    EntityRef,
    EntitySplit,
    EntitySplitOff,
    EntityUpsert,
    ErrorDetail,
    ErrorResponse,
    ExportedEdge,
    ExportedEpisode,
    ExportedEvent,
    ExportedFact,
    ExportedNote,
    ExportedReview,
    Fact,
    FactChanges,
    FactError,
    FactHistory,
    FactOutcome,
    FactPage,
    FactReview,
    FactReviewed,
    FailedLeg,
    FiniteFloat,
    GraphEdge,
    GraphNode,
    HistoryEvent,
    IngestRequest,
    IngestResult,
    Instant,
    Int32,
    KindBacklog,
    Message,
    MessageIn,
    MessagePage,
    Metadata,
    Model,
    Neighbors,
    Org,
    Permission,
    Predicate,
    PredicateChange,
    PredicateChangeList,
    PredicateChangeUndone,
    PredicateDeclare,
    PredicateList,
    Project,
    ProjectCreate,
    ProjectDeleted,
    ProjectList,
    Readiness,
    RedactionRule,
    RedactionRuleDeleted,
    RedactionRuleList,
    RedactionRuleSet,
    Resolution,
    Retention,
    RetentionSet,
    RetractRequest,
    RetractResult,
    Role,
    SearchHit,
    SearchLeg,
    SearchRequest,
    SearchResult,
    SessionPage,
    SessionSummary,
    Standing,
    StrictBool,
    SubjectExport,
    SupersededPair,
    Text,
    Timeline,
    TimelineEvent,
    TimelineFact,
    TimelineReview,
    Webhook,
    WebhookCreate,
    WebhookCreated,
    WebhookDeleted,
    WebhookDelivery,
    WebhookDeliveryPage,
    WebhookEndpoint,
    WebhookEventType,
    WebhookEventTypeInfo,
    WebhookEventTypeList,
    WebhookList,
    WebhookSubscription,
    WebhookUpdate,
    WebhookUrl,
    WipeResult,
    parse_instant,
    unreachable,
)

__all__ = [
    "INSTANT_PATTERN",
    "ApiKey",
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyList",
    "ApiKeyRevoked",
    "AssertResult",
    "Backlog",
    "Cardinality",
    "CardinalitySuggestion",
    "CardinalitySuggestionList",
    "Community",
    "CommunityList",
    "CommunityMember",
    "CommunityRefresh",
    "Conflict",
    "ConflictCause",
    "ConflictEvent",
    "ConflictList",
    "ConflictMember",
    "ConflictOutcome",
    "ConflictPolicy",
    "ConflictPolicySet",
    "ConflictResolve",
    "ConflictResolved",
    "ConflictStatus",
    "ConflictSummary",
    "ContextCommunity",
    "ContextRequest",
    "ContextResult",
    "ContradictionPolicy",
    "Entity",
    "EntityMerge",
    "EntityMerged",
    "EntityPage",
    "EntityRef",
    "EntitySplit",
    "EntitySplitOff",
    "EntityUpsert",
    "ErrorDetail",
    "ErrorResponse",
    "ExportedEdge",
    "ExportedEpisode",
    "ExportedEvent",
    "ExportedFact",
    "ExportedNote",
    "ExportedReview",
    "Fact",
    "FactChanges",
    "FactError",
    "FactHistory",
    "FactIn",
    "FactOutcome",
    "FactPage",
    "FactReview",
    "FactReviewed",
    "FactsRequest",
    "FailedLeg",
    "FiniteFloat",
    "GraphEdge",
    "GraphNode",
    "Health",
    "HistoryEvent",
    "IngestRequest",
    "IngestResult",
    "Instant",
    "Int32",
    "KindBacklog",
    "Message",
    "MessageIn",
    "MessagePage",
    "Metadata",
    "Model",
    "Neighbors",
    "Org",
    "Permission",
    "Predicate",
    "PredicateChange",
    "PredicateChangeList",
    "PredicateChangeUndone",
    "PredicateDeclare",
    "PredicateList",
    "Project",
    "ProjectCreate",
    "ProjectDeleted",
    "ProjectList",
    "Readiness",
    "RedactionRule",
    "RedactionRuleDeleted",
    "RedactionRuleList",
    "RedactionRuleSet",
    "Resolution",
    "Retention",
    "RetentionSet",
    "RetractRequest",
    "RetractResult",
    "Role",
    "SearchHit",
    "SearchLeg",
    "SearchRequest",
    "SearchResult",
    "SessionPage",
    "SessionSummary",
    "Standing",
    "StrictBool",
    "SubjectExport",
    "SupersededPair",
    "Text",
    "Timeline",
    "TimelineEvent",
    "TimelineFact",
    "TimelineReview",
    "Webhook",
    "WebhookCreate",
    "WebhookCreated",
    "WebhookDeleted",
    "WebhookDelivery",
    "WebhookDeliveryPage",
    "WebhookEndpoint",
    "WebhookEventType",
    "WebhookEventTypeInfo",
    "WebhookEventTypeList",
    "WebhookList",
    "WebhookSubscription",
    "WebhookUpdate",
    "WebhookUrl",
    "WipeResult",
    "parse_instant",
    "unreachable",
]


# -- facts (a batch) ------------------------------------------------------------------
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

    _unreachable: tuple[str, str] | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _hold_back(cls, data: Any, handler: ModelWrapValidatorHandler[FactIn]) -> FactIn:
        """A fact holding a value no database can take (see `unreachable`) is kept as
        an empty fact that remembers where; the route reports it `invalid`, and the rest
        of the batch goes on (pydantic could not even hold some such keys)."""
        bad = unreachable(data) if isinstance(data, dict) else None
        if bad is None:
            return handler(data)
        fact = handler({})
        fact._unreachable = bad
        return fact

    @property
    def unreachable(self) -> tuple[str, str] | None:
        """(field, problem) when the fact holds a value no database can take."""
        return self._unreachable or unreachable(self.model_dump(exclude_unset=True))


class FactsRequest(Model):
    facts: list[FactIn] = Field(max_length=1000, description="At most 1000 per batch.")
    override_tombstones: StrictBool = Field(
        False, description="Assert retracted claims again (lifts their tombstones)."
    )


# -- operations -----------------------------------------------------------------------
class Health(Model):
    status: Literal["ok"]
