"""The wire contract of Chronomem's HTTP API: the request and response models, and
the value types both sides validate the same way (`Instant`, `Text`, `Metadata`).

The server (thin_api) builds its OpenAPI document from these models and checks every
answer the SQL gives against them; the client parses answers into them. Pure pydantic:
nothing here imports the server.

Timestamps are ISO 8601 strings; one without a zone is read as UTC, everywhere (the
SQL reads zone-less text the same way). Answers are in UTC.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

# ISO 8601 as the SQL reads it (memory_internal.try_timestamptz): a date, then an
# optional time (T or a space) with optional seconds and fraction, then an optional
# zone (Z, +hh:mm, +hhmm, +hh); a bare date may end in Z; nothing before or after it.
# No zone: UTC.
_ISO_INSTANT = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
    r"(?:[T ](?P<h>[0-9]{2}):(?P<mi>[0-9]{2})(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,9}))?)?"
    r"(?P<z>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?|Z)?"
)
INSTANT_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?"
    r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)?|Z)?$"
)
_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)


def _zone(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 15 or minutes > 59:
        raise ValueError("must be an ISO 8601 timestamp (the zone is out of range)")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_instant(value: Any) -> datetime:
    """An instant from client text, exactly as the SQL accepts one: ISO 8601 (see
    _ISO_INSTANT), a real date and time, in years 1..9999 once converted to UTC."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp (a string)")
    m = _ISO_INSTANT.fullmatch(value)
    if m is None:
        raise ValueError("must be an ISO 8601 timestamp (date, optional time and zone)")
    g = m.groupdict()
    fraction = (g["f"] or "").ljust(9, "0")
    try:
        local = datetime(
            int(g["y"]),
            int(g["mo"]),
            int(g["d"]),
            int(g["h"] or 0),
            int(g["mi"] or 0),
            int(g["s"] or 0),
        )
        zone = _zone(g["z"])
        # Microseconds, rounded as PostgreSQL rounds them (rint: ties to even).
        micros = round(int(fraction) / 1000)
        instant = local.replace(tzinfo=zone) + timedelta(microseconds=micros)
        utc = instant.astimezone(UTC)
    except (ValueError, OverflowError) as err:
        raise ValueError(f"must be an ISO 8601 timestamp in years 1 to 9999 UTC ({err})") from None
    if utc < _EARLIEST:
        raise ValueError("must be an ISO 8601 timestamp in years 1 to 9999 UTC")
    return utc


def _instant(value: Any) -> datetime:
    if isinstance(value, datetime):  # a caller in Python (MCP tools, tests)
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return parse_instant(value)


Instant = Annotated[
    datetime,
    PlainValidator(_instant, json_schema_input_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "pattern": INSTANT_PATTERN,
            "description": "ISO 8601 timestamp; without a zone it is read as UTC. Years "
            "1 to 9999 in UTC.",
        }
    ),
]
"""A timestamp from a client: ISO 8601 text, UTC when it has no zone."""


def unreachable(value: Any, path: str = "") -> tuple[str, str] | None:
    """Where `value` (parsed JSON) holds something no database text or jsonb can hold: a
    NUL character or a lone surrogate in a string or a key, or a number that is not
    finite (1e309). Returns (the JSON path, what is wrong), else None."""
    if isinstance(value, str):
        return _bad_text(value, path)
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, "a number that is not finite")
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{_shown(key)}" if path else _shown(key)
            if (bad := _bad_text(key, where)) is not None:
                return bad[0], f"the key {bad[1]}"
            if (bad := unreachable(item, where)) is not None:
                return bad
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if (bad := unreachable(item, f"{path}[{i}]")) is not None:
                return bad
    return None


def _bad_text(text: str, path: str) -> tuple[str, str] | None:
    if "\x00" in text:
        return path, "holds a NUL character (\\u0000)"
    if _SURROGATE.search(text):
        return path, "holds a lone surrogate (not Unicode text)"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(key: str) -> str:
    """A key as a field path can show it (NULs and lone surrogates escaped)."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")


def _reachable(value: Any) -> Any:
    if (bad := unreachable(value)) is not None:
        where, problem = bad
        # `path` (within the field) is added to the field the error names.
        raise PydanticCustomError(
            "unreachable_value",
            "{where}" + problem,
            {"where": where + " " if where else "", "path": where},
        )
    return value


Text = Annotated[str, AfterValidator(_reachable)]
"""A string from a client that the database can store (no NUL, no lone surrogate)."""
Metadata = Annotated[dict[str, JsonValue], AfterValidator(_reachable)]
"""A JSON object from a client that jsonb can store (as Text; numbers finite)."""
StrictBool = Annotated[bool, Field(strict=True)]
"""true or false only (no "yes", no 1)."""

Permission = Literal[
    "project:read",
    "project:write",
    "project:manage",
    "configuration:read",
    "configuration:write",
    "members:read",
    "members:write",
    "memory:review",
]
Cardinality = Literal["one", "many", "unknown"]
"""unknown: no declaration (the default); a second object at once opens a conflict."""
Standing = Literal["unreviewed", "confirmed", "rejected"]
"""A fact's standing, set by a reviewer (memory:review); unreviewed by default."""
Role = Literal["user", "assistant", "system", "tool"]
SearchLeg = Literal[
    "episode_vector", "fact_vector", "episode_fulltext", "fact_fulltext", "entity", "graph"
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""An integer the database can take (query parameters, sent as text)."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ---------------------------------------------------------------------------
class ErrorDetail(Model):
    code: str = Field(
        description="Stable code: unauthorized, forbidden, not_found, conflict, retry, "
        "invalid_request, unavailable, timeout, internal, method_not_allowed, busy, "
        "payload_too_large."
    )
    message: str
    field: str | None = Field(None, description="The request field at fault, when known.")


class ErrorResponse(Model):
    error: ErrorDetail


# -- projects and keys ----------------------------------------------------------------
class ProjectCreate(Model):
    name: Text = Field(min_length=1, max_length=200)


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
    name: Text = Field(min_length=1, max_length=200)
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
    content: Text
    occurred_at: Instant | None = None
    metadata: Metadata | None = Field(
        None,
        description="Any JSON object, stored with the episode. `speaker`, the name of the "
        "participant who wrote it, lets a search that names one participant prefer their "
        "turns.",
    )


class IngestRequest(Model):
    session: Text = Field(
        min_length=1, max_length=200, description="The client's id for the conversation."
    )
    messages: list[MessageIn] = Field(min_length=1, max_length=100, description="1 to 100.")
    session_metadata: Metadata | None = None


class IngestResult(Model):
    session_id: UUID
    episode_ids: list[UUID]
    replayed: bool = Field(description="True when this answers a retry of an earlier request.")
    dropped: list[int] | None = Field(
        None, description="Under a redaction policy: the messages a drop rule left out."
    )
    redactions: dict[str, int] | None = Field(
        None, description="Under a redaction policy: the values it replaced, per detector."
    )


AttachmentMediaType = Literal["text/plain", "text/markdown", "text/html", "application/pdf"]


class AttachmentStored(Model):
    """A file stored with a message: its id, and the episodes its text was chunked into."""

    attachment_id: UUID
    filename: str
    media_type: AttachmentMediaType
    size_bytes: int
    sha256: str = Field(description="SHA-256 of the bytes, hex.")
    pages: int = Field(description="Pages of a PDF; 1 for text, Markdown and HTML.")
    episode_ids: list[UUID] = Field(description="The chunks' episodes, in order.")


class AttachmentIngestResult(IngestResult):
    attachments: list[AttachmentStored] = Field(description="The files, in the order sent.")


class AttachmentChunk(Model):
    chunk: int = Field(description="1-based, in the file's order.")
    episode_id: UUID
    page: int = Field(description="1-based page of the file.")
    offset: int = Field(description="0-based character offset in the page's extracted text.")
    length: int = Field(description="Characters of the page's text the chunk covers.")


class Attachment(Model):
    attachment_id: UUID
    session_id: UUID
    session: str = Field(description="Your id for the conversation it was sent in.")
    filename: str
    media_type: AttachmentMediaType
    size_bytes: int
    sha256: str
    pages: int
    created_at: datetime
    chunks: list[AttachmentChunk]


class AttachmentRef(Model):
    """Where a search hit's episode came from when it is a chunk of a file."""

    attachment_id: UUID
    filename: str
    page: int
    offset: int
    chunk: int


class StoreChanges(Model):
    """Rows a wipe changed in one store, counted by the database for its transaction."""

    deleted: int
    updated: int = Field(
        description="Changed in place: job payloads losing wiped ids or bodies, staying "
        "facts' windows laid out again, lexeme counts going down."
    )
    inserted: int = Field(
        description="Written anew: the staying facts' events and edges laid out again."
    )


class WipeResult(Model):
    scope: Literal["project", "session", "subject", "expired"]
    facts: int
    fact_events: int
    edges: int
    entities: int
    episodes: int
    sessions: int
    tombstones: int
    stores: dict[str, StoreChanges] | None = Field(
        description="The receipt: every store that holds content (memory_internal."
        "data_stores()), with the rows the wipe deleted, changed and wrote there; null "
        "when the server's track_counts setting is off."
    )


class RetentionSet(Model):
    retention_seconds: int | None = Field(
        ge=3600,
        le=100 * 366 * 86400,
        description="Keep episodes this many seconds after they are stored (null: for "
        "ever); the periodic purge job erases older ones and the facts drawn from them.",
    )


class Retention(Model):
    project_id: UUID
    retention_seconds: int | None


class ProjectDeleted(Model):
    project_id: UUID
    deleted: Literal[True]
    wiped: WipeResult = Field(description="What the project wipe deleted of its content.")
    jobs: int = Field(description="The project's jobs deleted, whatever their state.")
    api_keys: int = Field(description="The project's own API keys deleted (org keys stay).")
    webhook_endpoints: int
    stores: dict[str, StoreChanges] | None = Field(
        description="The receipt of the whole deletion, the wipe included: every store "
        "that holds content or settings, with the rows deleted, changed and written."
    )


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
    paused: Literal["budget"] | None = Field(
        None,
        description="Why the kind's queued jobs are not handed out: budget (enrich and "
        "summarize_communities, the kinds that call the model) while "
        "the project's model token budget is reached; they run when the period rolls or the "
        "budget is raised.",
    )


class Backlog(Model):
    caught_up: bool = Field(
        description="No enrich or embed job of the project is queued, running or waiting: "
        "extraction and embeddings reflect everything written before this call."
    )
    kinds: dict[
        Literal["communities", "deliver_webhook", "embed", "enrich", "summarize_communities"],
        KindBacklog,
    ]


class MessagePage(Model):
    session_id: UUID
    session: str
    metadata: dict[str, JsonValue]
    messages: list[Message]
    next_cursor: int | None = Field(description="Pass as `after` for the next page.")


# -- facts ----------------------------------------------------------------------------
# (A batch's facts, FactIn and FactsRequest, are the server's: thin_api.models.)
class FactError(Model):
    field: str | None
    message: str


class FactOutcome(Model):
    index: int
    status: Literal["inserted", "skipped", "refused", "invalid", "dropped", "conflict"]
    fact_id: UUID | None = None
    superseded: list[UUID] | None = Field(None, description="Facts this one closed.")
    reason: str | None = None
    retracted_fact_id: UUID | None = None
    error: FactError | None = None
    redactions: dict[str, int] | None = Field(
        None, description="Values the redaction policy replaced in this fact, per detector."
    )
    conflict_id: UUID | None = Field(
        None, description="The conflict this fact opened or joined, or that holds its claim."
    )
    held_by: UUID | None = Field(
        None, description="conflict: the confirmed fact the claim would have superseded."
    )


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
    held: int | None = Field(
        None,
        description="When the batch touched a conflict: the claims held in one instead of "
        "stored (status conflict).",
    )
    conflicts: list[UUID] | None = Field(
        None, description="The conflicts the batch opened, joined or holds a claim in."
    )
    dropped: int | None = Field(
        None, description="Under a redaction policy: the facts a drop rule left out."
    )
    redactions: dict[str, int] | None = Field(
        None, description="Under a redaction policy: the values it replaced, per detector."
    )


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
    reason: Text | None = Field(None, max_length=2000)


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
    standing: Standing | None = Field(
        None, description="The version's standing as the store believes it now."
    )


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


class TimelineReview(Model):
    standing: Standing
    reviewer: str
    reason: str | None
    reviewed_at: datetime = Field(description="When the store recorded the review.")


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
    standing: Standing | None = Field(None, description="Its standing (memory:review sets it).")
    reviews: list[TimelineReview] | None = Field(None, description="Oldest first.")
    events: list[TimelineEvent]


class Timeline(Model):
    subject: str
    facts: list[TimelineFact]


class PredicateDeclare(Model):
    cardinality: Cardinality


class Predicate(Model):
    predicate: str
    cardinality: Cardinality
    declared_at: datetime | None = Field(description="Null for unknown (no declaration).")


class PredicateList(Model):
    predicates: list[Predicate]


# -- conflicts, review and learned cardinality ----------------------------------------
ConflictStatus = Literal["open", "resolved"]
ConflictCause = Literal["unknown_cardinality", "contradiction", "confirmed_fact"]
ConflictOutcome = Literal["kept", "superseded", "retracted", "declared_one", "declared_many"]
Resolution = Literal["keep_both", "supersede", "retract"]


class ConflictSummary(Model):
    conflict_id: UUID
    subject: str
    predicate: str
    status: ConflictStatus
    resolution: ConflictOutcome | None = Field(description="Null while open.")
    cause: ConflictCause = Field(
        description="unknown_cardinality: two objects at once for an undeclared predicate; "
        "contradiction: the extraction model reported one (policy contradictions=conflict); "
        "confirmed_fact: a claim against a confirmed fact (policy protect_confirmed)."
    )
    members: int
    opened_at: datetime
    resolved_at: datetime | None


class ConflictList(Model):
    conflicts: list[ConflictSummary] = Field(
        description="Newest first (by opened_at, then conflict_id)."
    )
    next_before: datetime | None = Field(description="Pass as `before` for the next page.")
    next_before_id: UUID | None = Field(description="Pass as `before_id` for the next page.")


class ConflictMember(Model):
    member_id: UUID
    fact_id: UUID | None = Field(description="Null for a claim held back (see `claim`).")
    claim: dict[str, JsonValue] | None = Field(
        description="A claim held back instead of stored: the fact as it was asserted."
    )
    object: str
    content: str
    valid_from: datetime | None
    valid_to: datetime | None
    current: bool = Field(description="The fact holds now.")
    standing: Standing | None
    confidence: float | None
    source_episode_id: UUID | None
    outcome: Literal["won", "lost", "kept", "retracted"] | None = Field(
        description="What the resolution made of it; null while open."
    )


class ConflictEvent(Model):
    event_type: Literal["opened", "member_added", "member_retracted", "resolved"]
    at: datetime
    actor: str | None
    reason: str | None
    detail: dict[str, JsonValue] | None


class Conflict(Model):
    conflict_id: UUID
    subject: str
    predicate: str
    status: ConflictStatus
    resolution: ConflictOutcome | None
    cause: ConflictCause
    opened_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    reason: str | None
    source_episode_id: UUID | None
    members: list[ConflictMember]
    events: list[ConflictEvent] = Field(description="Oldest first.")


class ConflictResolve(Model):
    resolution: Resolution = Field(
        description="keep_both: both hold (the predicate is many for this subject); "
        "supersede: `member_id` wins from `at`; retract: `member_id` never held."
    )
    member_id: UUID | None = Field(
        None, description="supersede: the winner; retract: the member to retract."
    )
    at: Instant | None = Field(
        None, description="supersede: the winner holds from here (default its valid_from)."
    )
    reason: Text | None = Field(None, max_length=2000)


class ConflictResolved(Model):
    conflict_id: UUID
    status: ConflictStatus = Field(
        description="open when a retraction left two members that still disagree."
    )
    resolution: ConflictOutcome | None
    closed: list[UUID] = Field(description="Facts whose window the resolution closed.")
    retracted: list[UUID]
    asserted: list[UUID] = Field(description="Facts it stored (a held claim, a winner's window).")


class FactReview(Model):
    standing: Standing = Field(description="rejected also retracts the fact.")
    reason: Text | None = Field(None, max_length=2000)


class FactReviewed(Model):
    fact_id: UUID
    standing: Standing
    previous: Standing
    reviewed_at: datetime


class CardinalitySuggestion(Model):
    predicate: str
    declared: Cardinality = Field(description="The cardinality it has now.")
    suggestion: Literal["one", "many"] | None = Field(
        description="The side holding at least the policy's learn_threshold share of at least "
        "learn_min_evidence cases; null: no such side yet."
    )
    confidence: float | None = Field(description="The larger side's share of the evidence.")
    subjects: int = Field(description="Subjects with facts of the predicate.")
    sequential_subjects: int = Field(description="Those whose objects follow one another.")
    concurrent_subjects: int = Field(description="Those with distinct objects at once.")
    kept: int = Field(description="Conflicts of the predicate resolved keep_both.")
    superseded: int
    retracted: int
    open: int
    evidence: dict[str, JsonValue] = Field(
        description="one_votes, many_votes, and the policy's threshold and min_evidence."
    )


class CardinalitySuggestionList(Model):
    suggestions: list[CardinalitySuggestion]


ContradictionPolicy = Literal["close", "conflict"]


class ConflictPolicy(Model):
    contradictions: ContradictionPolicy = Field(
        description="What the extraction model's contradictions do: close the fact's window "
        "(default), or open a conflict."
    )
    protect_confirmed: bool = Field(
        description="Extraction does not supersede a confirmed fact: its claim is held in a "
        "conflict instead."
    )
    learn_cardinality: bool = Field(
        description="Declare a predicate when its suggestion passes the threshold."
    )
    learn_threshold: float = Field(description="The share of the evidence needed (0.5 to 1).")
    learn_min_evidence: int = Field(description="The cases needed (at least 2).")


class ConflictPolicySet(Model):
    """Absent or null: unchanged."""

    contradictions: ContradictionPolicy | None = None
    protect_confirmed: StrictBool | None = None
    learn_cardinality: StrictBool | None = None
    learn_threshold: FiniteFloat | None = Field(None, ge=0.5, le=1)
    learn_min_evidence: int | None = Field(None, strict=True, ge=2, le=2**31 - 1)


class PredicateChange(Model):
    change_id: int
    predicate: str
    old_cardinality: Cardinality
    new_cardinality: Cardinality
    cause: Literal["declared", "learned", "undone"]
    evidence: dict[str, JsonValue] | None = Field(description="learned: the suggestion's evidence.")
    undoes: int | None = Field(description="undone: the change it undid.")
    actor: str
    changed_at: datetime


class PredicateChangeList(Model):
    changes: list[PredicateChange] = Field(description="Newest first.")


class PredicateChangeUndone(Model):
    predicate: str
    cardinality: Cardinality = Field(description="What the predicate is again.")
    undoes: int = Field(description="The change undone (a new change, cause undone, logs it).")


# -- redaction ------------------------------------------------------------------------
RedactionAction = Literal["mask", "hash", "drop", "refuse"]


class RedactionRuleSet(Model):
    action: RedactionAction
    pattern: Text | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="A POSIX regular expression: custom:<name> detectors only.",
    )


class RedactionRule(Model):
    detector: str = Field(description="email, phone, card, iban, ip, ssn or custom:<name>.")
    action: RedactionAction
    pattern: str | None
    created_at: datetime


class RedactionRuleList(Model):
    rules: list[RedactionRule]


class RedactionRuleDeleted(Model):
    detector: str
    deleted: bool = Field(description="False when the detector had no rule.")


# -- retrieval ------------------------------------------------------------------------
class SearchRequest(Model):
    query: Text = Field(max_length=10_000)
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
    k: int = Field(10, strict=True, ge=1, le=200, description="Results.")
    legs: list[SearchLeg] | None = None
    fusion: Literal["scores", "rrf"] = Field(
        "scores",
        description="How the legs' lists are merged: `scores` (default) sums each leg's "
        "normalised scores, shares episode scores with neighbouring turns and prefers the "
        "participant and period the question names; `rrf` is plain reciprocal rank fusion, "
        "the sum of 1/(60 + rank) over the legs.",
    )
    labels: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None,
        max_length=100,
        description="Only episodes whose extraction carries all of these classification "
        "labels, and facts drawn from such episodes (entities are not filtered).",
    )
    fields: dict[str, JsonValue] | None = Field(
        None,
        description="Only episodes whose extracted custom fields contain this object (JSON "
        "containment), and facts drawn from such episodes.",
    )


class ContextRequest(Model):
    query: Text = Field(max_length=10_000)
    query_embedding: list[FiniteFloat] | None = Field(None, min_length=1, max_length=16000)
    as_of: Instant | None = None
    known_at: Instant | None = None
    max_tokens: int = Field(
        1500, strict=True, ge=50, le=2**31 - 1, description="Budget for the text block."
    )
    k: int = Field(20, strict=True, ge=1, le=200, description="Search results considered.")
    labels: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None,
        max_length=100,
        description="Only episodes whose extraction carries all of these classification "
        "labels, and facts drawn from such episodes (entities are not filtered).",
    )
    fields: dict[str, JsonValue] | None = Field(
        None,
        description="Only episodes whose extracted custom fields contain this object (JSON "
        "containment), and facts drawn from such episodes.",
    )


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
    standing: Standing | None = Field(
        None, description="A fact's standing at the search's known_at (never rejected)."
    )
    role: str | None = None
    occurred_at: datetime | None = None
    session: str | None = None
    seq: int | None = None
    entity_type: str | None = None
    summary: str | None = None
    attachment: AttachmentRef | None = Field(
        None, description="An episode that is a chunk of a file: the file, page and offset."
    )


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
    summary: str | None = Field(
        default=None,
        description="The model's summary of the community, for the first three communities, "
        "when written no later than `at` and `known_at`; else null.",
    )
    summarized_at: datetime | None = Field(default=None, description="When `summary` was written.")


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
    name: Text = Field(
        description="The entity's name; an existing entity of that name or alias is updated."
    )
    entity_type: Text | None = Field(None, description="Kept when omitted.")
    summary: Text | None = Field(None, description="Kept when omitted.")
    aliases: list[Text] = Field(
        default_factory=list,
        max_length=100,
        description="Other names for it (at most 100). Facts stored with any of its names as "
        "a plain-name object (object_type auto) become the entity's.",
    )


class EntityMerge(Model):
    keep: Text = Field(description="The entity that stays (its name or an alias).")
    absorb: Text = Field(
        description="The entity merged into it (its name or an alias): its facts, edges, "
        "aliases and notes become the kept entity's and its name an alias of it."
    )
    dry_run: StrictBool = Field(
        False, description="Answer what the merge would do, and change nothing."
    )


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
    name: Text = Field(description="An alias of an entity, to become an entity of its own.")
    dry_run: StrictBool = Field(
        False, description="Answer what the split would do, and change nothing."
    )


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
    summary: str | None = Field(
        default=None,
        description="The model's short summary of the community (null until written, or "
        "after a wipe of what it was written from).",
    )
    summarized_at: datetime | None = Field(default=None, description="When `summary` was written.")


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


# -- subject export -------------------------------------------------------------------
class ExportedEvent(Model):
    event_id: int
    event_type: Literal[
        "asserted", "superseded", "contradicted", "expired", "retracted", "restored"
    ]
    at: datetime = Field(description="When the store recorded it (record time).")
    actor: str | None
    reason: str | None
    old_fact_id: UUID | None
    new_fact_id: UUID | None
    old_valid_from: datetime | None
    old_valid_until: datetime | None
    new_valid_from: datetime | None
    new_valid_until: datetime | None
    new_window_empty: bool


class ExportedReview(Model):
    standing: Standing
    reviewer: str
    reason: str | None
    reviewed_at: datetime


class ExportedFact(Model):
    fact_id: UUID
    named_as: Literal["subject", "object"] = Field(
        description="Where the fact names the subject (subject wins when it is both)."
    )
    subject: str
    subject_id: UUID
    predicate: str
    object: str
    object_entity_id: UUID | None
    object_type: Literal["entity", "literal", "auto"] = Field(
        description="auto: written as a plain name that no entity had taken over yet."
    )
    content: str
    confidence: float
    source: str
    source_episode_id: UUID | None
    actor: str | None
    valid_from: datetime
    valid_to: datetime | None = Field(description="The window's end; null: open (or empty).")
    window_empty: bool = Field(description="Superseded before it began: it never held.")
    recorded_at: datetime
    invalid_at: datetime | None = Field(description="Retracted then; null: still believed.")
    status: Literal["current", "future", "ended", "superseded", "retracted"]
    standing: Standing | None = None
    reviews: list[ExportedReview] | None = Field(None, description="Oldest first.")
    events: list[ExportedEvent] = Field(description="Oldest first.")


class ExportedEpisode(Model):
    episode_id: UUID
    session_id: UUID
    session: str = Field(description="Your id for the conversation.")
    seq: int
    role: Role
    content: str
    metadata: dict[str, JsonValue]
    occurred_at: datetime
    created_at: datetime
    is_source: bool = Field(description="The source of one of the exported facts.")
    mentions: bool = Field(description="Its text names the subject or an alias as whole words.")


class ExportedEdge(GraphEdge):
    source: str
    target: str
    recorded_at: datetime
    expired_at: datetime | None = Field(description="When the store stopped holding this row.")


class ExportedNote(Model):
    note_id: UUID
    kind: Literal["preference", "summary"]
    content: str
    episode_id: UUID | None
    created_at: datetime


class SubjectExport(Model):
    """Everything the project holds about one subject (a data-subject access request)."""

    project_id: UUID
    subject: str = Field(description="The name asked for.")
    exported_at: datetime
    entity: Entity
    facts: list[ExportedFact] = Field(
        description="Every version naming it, closed and retracted ones too: those naming it "
        "as subject first, then by predicate, subject and world time."
    )
    episodes: list[ExportedEpisode] = Field(
        description="The facts' sources and the messages naming it, by session and sequence."
    )
    edges: list[ExportedEdge] = Field(description="Every edge row touching it, expired included.")
    notes: list[ExportedNote]
    conflicts: list[Conflict] | None = Field(
        None,
        description="The conflicts of its facts, resolved ones too, as get_conflict shows them.",
    )


# -- webhooks -------------------------------------------------------------------------
WebhookEventType = Literal[
    "fact.asserted",
    "fact.superseded",
    "fact.retracted",
    "fact.contradicted",
    "fact.expired",
    "fact.restored",
    "fact.reviewed",
    "conflict.detected",
    "conflict.resolved",
    "predicate.declared",
    "episode.enriched",
    "memory.wiped",
]
# What an endpoint subscribes to: event types, or "*" alone for every type, including
# types added later.
WebhookSubscription = Literal[WebhookEventType, "*"]
WebhookUrl = Annotated[
    Text,
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
    enabled: StrictBool | None = Field(None, description="null or absent: unchanged.")


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
class Readiness(Model):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]
    revision: str | None
    head: str | None


# -- model usage and budgets ----------------------------------------------------------
class ModelUsageRow(Model):
    job_kind: str
    model: str
    operation: Literal["chat", "embeddings"]
    calls: int
    tokens_in: int
    tokens_out: int
    latency_ms_total: float
    latency_ms_avg: float
    latency_ms_p95: float
    errors: int = Field(description="Calls whose outcome was not ok.")


class ModelUsage(Model):
    since: datetime | None
    until: datetime | None
    usage: list[ModelUsageRow] = Field(description="Per job kind, model and operation.")


BudgetPeriod = Literal["day", "month"]


class ModelBudget(Model):
    tokens: int | None = Field(description="Tokens in plus out per period; null: no budget.")
    period: BudgetPeriod | None = Field(description="UTC day or month.")
    used: int | None = Field(description="Tokens the current period's calls used.")
    period_start: datetime | None
    period_end: datetime | None
    paused: bool = Field(description="The budget is reached: the project's enrich jobs wait.")


class ModelBudgetSet(Model):
    tokens: int | None = Field(
        ge=0, le=2**63 - 1, description="Tokens in plus out per period; null removes the budget."
    )
    period: BudgetPeriod = "month"


# -- extraction schemas, enrichment, rejections ---------------------------------------
ObjectKind = Literal["entity", "literal", "date", "number"]
RejectionReason = Literal[
    "low_confidence",
    "invalid_window",
    "unknown_entity_type",
    "unknown_predicate",
    "schema_violation",
    "parse_failure",
    "unknown_fact_id",
]
ExtractionSection = Literal[
    "answer", "entities", "facts", "contradictions", "notes", "classification", "fields"
]


class ExtractionEntityType(Model):
    name: str
    description: str | None = None


class ExtractionPredicate(Model):
    name: str
    description: str | None = None
    cardinality: Literal["one", "many"] | None = Field(
        None, description="Declared on the project (supersession follows it); absent: not."
    )
    object_type: ObjectKind | None = Field(None, description="Absent: any.")


class ExtractionLabel(Model):
    name: str
    description: str | None = None


class ExtractionSchemaDocument(Model):
    """A stored schema document, defaults filled in."""

    entity_types: list[ExtractionEntityType]
    predicates: list[ExtractionPredicate]
    labels: list[ExtractionLabel]
    fields: dict[str, JsonValue] | None = Field(
        description="A JSON Schema of type object the model fills per episode, or null."
    )
    allow_other_predicates: bool
    allow_other_entity_types: bool


class ExtractionSchema(Model):
    project_id: UUID
    version: int = Field(description="From 1; the current one is the highest.")
    document: ExtractionSchemaDocument
    document_hash: str = Field(description="sha256 (hex) of the stored document.")
    created_at: datetime
    created_by: str | None
    created: bool | None = Field(
        None, description="PUT only: false when the document equals the current version."
    )


class ExtractionSchemaVersion(Model):
    version: int
    document_hash: str
    created_at: datetime
    created_by: str | None


class ExtractionSchemaVersionList(Model):
    versions: list[ExtractionSchemaVersion] = Field(description="Newest first.")


class EpisodeRejection(Model):
    rejection_id: int
    section: ExtractionSection
    item: JsonValue = Field(description="The item as the model gave it (null: none).")
    reason: RejectionReason
    message: str | None
    schema_version: int | None
    recorded_at: datetime


class ExtractionRejection(EpisodeRejection):
    episode_id: UUID


class ExtractionRejectionPage(Model):
    rejections: list[ExtractionRejection] = Field(description="Oldest first.")
    next_cursor: int | None = Field(description="Pass as `cursor` for the next page.")


class EpisodeExtraction(Model):
    episode_id: UUID
    extracted: bool = Field(description="Whether an extraction answer was applied.")
    schema_version: int | None
    prompt_hash: str | None
    model: str | None
    structured: Literal["json_schema", "json_object", "text"] | None
    calls: int | None
    labels: list[str] = Field(description="Classification labels.")
    fields: dict[str, JsonValue] | None = Field(description="Custom fields the model filled.")
    counts: dict[str, JsonValue] = Field(description="The apply's report per section.")
    extracted_at: datetime | None
    rejections: list[EpisodeRejection]
