"""Chronomem as a CrewAI crew's memory (`pip install 'chronomem-client[crewai]'`, crewai 1.15).

    from crewai import Crew
    from chronomem_client import Client
    from chronomem_client.crewai import ChronomemMemory

    crew = Crew(agents=..., tasks=..., memory=ChronomemMemory(client=Client(url, token)))

What CrewAI 1.15 has, read from its source: one unified memory, `crewai.memory.Memory`,
which a Crew, an Agent or a Flow takes as `memory=`. The short-term, long-term, entity
and external memories of earlier releases are gone, and with them `ExternalMemory` and
its `Storage` interface (`save(value, metadata)`, `search(query, limit,
score_threshold)`, `reset()`). A `Memory` stores through a pluggable
`crewai.memory.storage.backend.StorageBackend` (records in hierarchical scopes such as
`/crew/research/agent/writer`: save, search, delete, update, get_record, list_records,
get_scope_info, list_scopes, list_categories, count, reset), but it has an LLM analyse
each item first (scope, categories, importance, merging with similar records) and an
embedder turn items and queries into vectors: the backend's `search` is handed a query
vector, never the query's text. Chronomem extracts facts and embeds on its own side, and
searches by text. So this module has two parts:

- `ChronomemStorage`, a `StorageBackend`: each record is one episode of a Chronomem
  session named from its scope (`crewai:crew:research:agent:writer`), the record's
  fields (its id among them) in the episode's metadata (`crewai_record`), the agent's
  role as its `speaker`; the worker extracts facts from those episodes as from any
  conversation. Its `search_text` is Chronomem's search (an episode it finds carries
  its episode's id); its vector `search` raises `NotImplementedError`. `reset` and
  `delete` touch only the sessions of its namespace, never another session of the
  project.
- `ChronomemMemory`, a `Memory` over a `ChronomemStorage` that needs no LLM and no
  embedder: `extract_memories` keeps a task's result whole (one episode; the worker
  extracts its facts), `remember` and `remember_many` ingest before they return, and
  `recall` is Chronomem's search of the whole project (facts from any session, and
  episodes), at `as_of` / `known_at` when given. `forget`, `reset`, `list_records`,
  `info`, `tree`, `list_scopes`, `list_categories`, `scope()` and `slice()` are
  CrewAI's own, over the storage.

Bad arguments raise `ValueError` (pydantic's `ValidationError` is one); an error answer
of the server raises `PermissionError` (401, 403), `ValueError` (400, 404, 422) or the
`ChronomemError` itself, which is the cause of the other two. Importing
`chronomem_client` never imports this module; importing this module imports `crewai`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import unquote
from uuid import UUID

from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.memory_events import (
    MemoryQueryCompletedEvent,
    MemoryQueryFailedEvent,
    MemoryQueryStartedEvent,
    MemorySaveCompletedEvent,
    MemorySaveFailedEvent,
    MemorySaveStartedEvent,
)
from crewai.memory.types import MemoryMatch, MemoryRecord, ScopeInfo
from crewai.memory.unified_memory import Memory
from crewai.memory.utils import join_scope_paths, normalize_scope_path, sanitize_scope_name
from pydantic import BaseModel, Field

from chronomem_client.client import Call, ChronomemError, Client, Id, When
from chronomem_client.models import Message, SearchHit

__all__ = ["RECORD_KEY", "ChronomemMemory", "ChronomemStorage"]

RECORD_KEY = "crewai_record"
"""The episode metadata key holding a record's CrewAI fields (scope, categories, ...)."""

T = TypeVar("T", bound=BaseModel)
_BATCH = 100  # the most messages one ingest takes
_PAGE = 1000  # the most sessions, or messages, one page answers
_MAX_SESSION = 200  # the longest session id
_SOURCE = "chronomem"  # the source_type of the memory events this module emits


def _translate(err: ChronomemError) -> Exception:
    """The error a CrewAI user expects instead of an HTTP answer."""
    if err.status in (401, 403):
        return PermissionError(str(err))
    if err.status in (400, 404, 422):
        return ValueError(str(err))
    return err


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _check_query(query: Any, limit: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
        raise ValueError("limit must be an integer from 1 to 200")


def _naive_utc(value: datetime) -> datetime:
    """CrewAI's own instants are naive UTC (`datetime.utcnow`); Chronomem's carry a zone."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _under(scope: str, prefix: str | None) -> bool:
    """Whether `scope` is `prefix` or below it, path by path ("/a" holds "/a/b", not "/ab")."""
    if prefix is None or not prefix.strip("/"):
        return True
    prefix = normalize_scope_path(prefix)
    return scope == prefix or scope.startswith(prefix + "/")


def _children(scopes: Sequence[str], parent: str) -> list[str]:
    """The immediate child scopes of `parent` among `scopes` and their ancestors."""
    base = normalize_scope_path(parent).rstrip("/") + "/"
    return sorted({base + s[len(base) :].split("/", 1)[0] for s in scopes if s.startswith(base)})


class ChronomemStorage:
    """A CrewAI `StorageBackend` whose records are episodes of Chronomem sessions (see the
    module doc). `client` is a `Client` with a key holding project:read and
    project:write; `project` the project's id, or None for the key's own project (the
    only one it sees); `namespace` starts every session id this storage writes, reads
    and wipes."""

    def __init__(self, client: Client, project: Id | None = None, *, namespace: str = "crewai"):
        if not isinstance(client, Client):
            raise ValueError("client must be a chronomem_client.Client")
        if not isinstance(namespace, str) or not 1 <= len(namespace) <= 50 or ":" in namespace:
            raise ValueError("namespace must be 1 to 50 characters without ':'")
        self.client = client
        self.namespace = namespace
        self._project: str | None = None if project is None else str(project)

    # -- plumbing -----------------------------------------------------------------------
    def _send(self, call: Call[T]) -> T:
        try:
            return self.client.send(call)
        except ChronomemError as err:
            raise _translate(err) from err

    def project(self) -> str:
        """The project's id (for project=None, the key's own project, looked up once)."""
        if self._project is None:
            projects = self._send(Client.calls.list_projects()).projects
            if len(projects) != 1:
                raise ValueError(f"the key sees {len(projects)} projects: pass project=")
            self._project = str(projects[0].project_id)
        return self._project

    def session(self, scope: str) -> str:
        """The Chronomem session that holds a scope's records: the namespace and the
        scope's parts, each after a ':' ("/crew/research" in "crewai:crew:research",
        "/" in "crewai"). Not the scope itself: the API's route to a session's messages
        takes no '/' in a session id. A ':' or '%' in a part is escaped (%3A, %25)."""
        if not isinstance(scope, str):
            raise ValueError("a scope must be a string")
        parts = normalize_scope_path(scope).strip("/")
        name = self.namespace + "".join(
            ":" + p.replace("%", "%25").replace(":", "%3A") for p in parts.split("/") if p
        )
        if len(name) > _MAX_SESSION:
            raise ValueError(f"scope too long for a session id ({len(name)} > 200): {scope}")
        return name

    def scope_of(self, session: str) -> str | None:
        """The scope a session of this storage holds; None for any other session."""
        if session == self.namespace:
            return "/"
        if not session.startswith(self.namespace + ":"):
            return None
        return "/" + "/".join(unquote(p) for p in session[len(self.namespace) + 1 :].split(":"))

    def _scopes(self, scope_prefix: str | None = None) -> dict[str, str]:
        """This storage's sessions (under `scope_prefix`), each with its scope."""
        project, found, cursor = self.project(), {}, None
        while True:
            page = self._send(Client.calls.sessions(project, cursor=cursor, limit=_PAGE))
            for s in page.sessions:
                scope = self.scope_of(s.session)
                if scope is not None and _under(scope, scope_prefix):
                    found[s.session] = scope
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    def _messages(self, session: str) -> list[Message]:
        project, after = self.project(), None
        out: list[Message] = []
        while True:
            try:
                page = self.client.send(
                    Client.calls.session_messages(project, session, after=after, limit=_PAGE)
                )
            except ChronomemError as err:
                if err.status == 404 and not out:
                    return []  # wiped since it was listed
                raise _translate(err) from err
            out.extend(page.messages)
            if page.next_cursor is None:
                return out
            after = page.next_cursor

    def _records(self, scope_prefix: str | None = None) -> list[tuple[Message, MemoryRecord]]:
        """Every episode of this storage's sessions under `scope_prefix`, as a record."""
        return [
            (m, _record(m, scope))
            for session, scope in self._scopes(scope_prefix).items()
            for m in self._messages(session)
        ]

    def _ingest(self, session: str, messages: list[dict[str, Any]]) -> None:
        project = self.project()
        for start in range(0, len(messages), _BATCH):
            self._send(Client.calls.ingest(project, session, messages[start : start + _BATCH]))

    def _wipe(self, session: str) -> int:
        return self._send(Client.calls.wipe(self.project(), session=session)).episodes

    # -- StorageBackend -----------------------------------------------------------------
    def save(self, records: list[MemoryRecord]) -> None:
        """Ingest each record as an episode of its scope's session."""
        by_session: dict[str, list[MemoryRecord]] = {}
        for record in records:
            if not isinstance(record, MemoryRecord):
                raise ValueError(f"a record must be a MemoryRecord, not {type(record).__name__}")
            if not record.content.strip():
                raise ValueError("a record's content must not be empty")
            if record.private:
                raise ValueError(
                    "Chronomem has no private records: every key of the project reads them"
                )
            by_session.setdefault(self.session(record.scope), []).append(record)
        for session, batch in by_session.items():
            self._ingest(session, [_wire(r) for r in batch])

    def search(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        """Not served: Chronomem searches by a query's text (`search_text`, which
        `ChronomemMemory.recall` calls), not by a CrewAI embedder's vector."""
        raise NotImplementedError(
            "ChronomemStorage searches by text: use ChronomemMemory (its recall calls "
            "search_text), not a plain crewai Memory"
        )

    def search_text(
        self,
        query: str,
        *,
        scope_prefix: str | None = None,
        limit: int = 10,
        as_of: When = None,
        known_at: When = None,
    ) -> list[tuple[MemoryRecord, float]]:
        """Chronomem's search of the project, best first: facts and entities (the
        project's, whatever session they came from) and episodes, as records with the
        hit's kind, ids, window and legs (`ranks`) in their metadata. With a
        `scope_prefix`, only episodes of this storage's sessions under it."""
        _check_query(query, limit)
        scoped = scope_prefix is not None and bool(scope_prefix.strip("/"))
        answer = self._send(
            Client.calls.search(
                self.project(),
                query,
                as_of=as_of,
                known_at=known_at,
                # Episodes out of scope are dropped below: ask for more to fill `limit`.
                k=min(200, limit * 2) if scoped else limit,
            )
        )
        found = []
        for hit in answer.results:
            scope = None
            if hit.kind == "episode":
                scope = self.scope_of(hit.session or "")
                if scoped and (scope is None or not _under(scope, scope_prefix)):
                    continue
            found.append((_hit_record(hit, scope), hit.score))
        return found[:limit]

    def delete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        """Delete the records under `scope_prefix` that meet every criterion given;
        answers how many. With no criterion but the scope, the scope's sessions are
        wiped (their episodes and the facts drawn from them). Otherwise each session
        that loses some records is rewritten: wiped and its other records ingested
        again (same ids, content, metadata and time; new episodes, from which the
        facts are extracted again). `record_ids` may name records or episodes."""
        if not (categories or record_ids or older_than or metadata_filter):
            return sum(self._wipe(s) for s in self._scopes(scope_prefix))
        cutoff = None if older_than is None else _naive_utc(older_than)
        ids = set(record_ids or ())

        def doomed(m: Message) -> bool:
            r = _record(m, "")
            return (
                (not ids or r.id in ids or str(m.episode_id) in ids)
                and (not categories or bool(set(categories) & set(r.categories)))
                and (cutoff is None or r.created_at < cutoff)
                and all(r.metadata.get(k) == v for k, v in (metadata_filter or {}).items())
            )

        deleted = 0
        for session in self._scopes(scope_prefix):
            messages = self._messages(session)
            keep = [m for m in messages if not doomed(m)]
            if len(keep) == len(messages):
                continue
            deleted += len(messages) - len(keep)
            self._wipe(session)
            self._ingest(session, [_again(m) for m in keep])
        return deleted

    def update(self, record: MemoryRecord) -> None:
        """Replace the record of the same id."""
        self.delete(record_ids=[record.id])
        self.save([record])

    def get_record(self, record_id: str) -> MemoryRecord | None:
        """The record of this id, or of this episode id (reads every session of the
        namespace)."""
        found = (r for m, r in self._records() if record_id in (r.id, str(m.episode_id)))
        return next(found, None)

    def list_records(
        self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0
    ) -> list[MemoryRecord]:
        """The records under `scope_prefix`, newest first."""
        if limit <= 0 or offset < 0:
            return []
        records = sorted(
            (r for _, r in self._records(scope_prefix)), key=lambda r: r.created_at, reverse=True
        )
        return records[offset : offset + limit]

    def get_scope_info(self, scope: str) -> ScopeInfo:
        path = normalize_scope_path(scope)
        records = [r for _, r in self._records(path)]
        times = [r.created_at for r in records]
        return ScopeInfo(
            path=path,
            record_count=len(records),
            categories=sorted({c for r in records for c in r.categories}),
            oldest_record=min(times, default=None),
            newest_record=max(times, default=None),
            child_scopes=_children([r.scope for r in records], path),
        )

    def list_scopes(self, parent: str = "/") -> list[str]:
        return _children(list(self._scopes(parent).values()), parent)

    def list_categories(self, scope_prefix: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, r in self._records(scope_prefix):
            for c in r.categories:
                counts[c] = counts.get(c, 0) + 1
        return counts

    def count(self, scope_prefix: str | None = None) -> int:
        return len(self._records(scope_prefix))

    def reset(self, scope_prefix: str | None = None) -> None:
        """Wipe this storage's sessions under `scope_prefix` (None: all of them), never
        another session of the project."""
        for session in self._scopes(scope_prefix):
            self._wipe(session)

    async def asave(self, records: list[MemoryRecord]) -> None:
        await asyncio.to_thread(self.save, records)

    async def asearch(
        self,
        query_embedding: list[float],
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        limit: int = 10,
        min_score: float = 0.0,
    ) -> list[tuple[MemoryRecord, float]]:
        return self.search(query_embedding, scope_prefix, categories, metadata_filter, limit)

    async def adelete(
        self,
        scope_prefix: str | None = None,
        categories: list[str] | None = None,
        record_ids: list[str] | None = None,
        older_than: datetime | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> int:
        return await asyncio.to_thread(
            self.delete, scope_prefix, categories, record_ids, older_than, metadata_filter
        )


def _wire(record: MemoryRecord) -> dict[str, Any]:
    """A record as an ingest message: its content, at its creation time, its CrewAI
    fields in the metadata (JSON), the agent's role (else its source) as the speaker."""
    fields = record.model_dump(mode="json", include={"id", "scope", "categories", "importance"})
    fields["metadata"] = json.loads(json.dumps(record.metadata, default=str))
    fields["source"] = record.source
    metadata: dict[str, Any] = {RECORD_KEY: fields}
    speaker = record.metadata.get("agent_role") or record.source
    if isinstance(speaker, str) and speaker:
        metadata["speaker"] = speaker
    return {
        "role": "assistant" if record.metadata.get("agent_role") else "user",
        "content": record.content,
        "occurred_at": record.created_at.replace(tzinfo=record.created_at.tzinfo or UTC),
        "metadata": metadata,
    }


def _again(message: Message) -> dict[str, Any]:
    """A message as it is ingested again when its session is rewritten."""
    return {
        "role": message.role,
        "content": message.content,
        "metadata": message.metadata,
        "occurred_at": message.occurred_at,
    }


def _record(message: Message, scope: str) -> MemoryRecord:
    """The record an episode holds; an episode written by other means reads as a record
    of its session's scope with no categories, its episode's id as its id."""
    stored = message.metadata.get(RECORD_KEY)
    fields: dict[str, Any] = stored if isinstance(stored, dict) else {"scope": scope}
    created = _naive_utc(message.occurred_at)
    return MemoryRecord.model_validate(
        {
            "id": str(message.episode_id),
            **fields,
            "content": message.content,
            "created_at": created,
            "last_accessed": created,
        }
    )


def _hit_record(hit: SearchHit, scope: str | None) -> MemoryRecord:
    """A search hit as a record: its text as content; kind, ids, window and legs as
    metadata (None values left out, so CrewAI's `MemoryMatch.format` shows the rest)."""
    meta: dict[str, Any] = {"kind": hit.kind, f"{hit.kind}_id": str(hit.id), "ranks": hit.ranks}
    when = hit.valid_from or hit.occurred_at
    if hit.kind == "fact":
        meta.update(
            subject=hit.subject,
            predicate=hit.predicate,
            object=hit.object,
            valid_from=_iso(hit.valid_from),
            valid_until=_iso(hit.valid_until),
        )
        text = hit.text or f"{hit.subject} {hit.predicate} {hit.object}"
    elif hit.kind == "episode":
        meta.update(session=hit.session, role=hit.role, occurred_at=_iso(hit.occurred_at))
        text = hit.text or ""
    else:
        meta.update(entity_type=hit.entity_type)
        text = hit.text or hit.summary or ""
    return MemoryRecord(
        id=str(hit.id),
        content=text,
        scope=scope or "/",
        metadata={k: v for k, v in meta.items() if v is not None},
        **({"created_at": _naive_utc(when), "last_accessed": _naive_utc(when)} if when else {}),
    )


@contextmanager
def _saving(
    owner: Any, value: str, metadata: dict[str, Any] | None, role: str | None
) -> Iterator[None]:
    """CrewAI's memory save events around a save, as its own Memory emits them."""
    crewai_event_bus.emit(
        owner, MemorySaveStartedEvent(value=value, metadata=metadata, source_type=_SOURCE)
    )
    start = time.perf_counter()
    try:
        yield
    except Exception as err:
        crewai_event_bus.emit(
            owner,
            MemorySaveFailedEvent(
                value=value, metadata=metadata, error=str(err), source_type=_SOURCE
            ),
        )
        raise
    crewai_event_bus.emit(
        owner,
        MemorySaveCompletedEvent(
            value=value,
            metadata=metadata or {},
            agent_role=role,
            save_time_ms=(time.perf_counter() - start) * 1000,
            source_type=_SOURCE,
        ),
    )


class ChronomemMemory(Memory):
    """A CrewAI `Memory` kept in Chronomem (see the module doc): pass it as a Crew's, an
    Agent's or a Flow's `memory=`.

    `client`, `project` and `namespace` make its `ChronomemStorage`. `as_of` (world
    time) and `known_at` (record time) make every `recall` read the memory as it held
    then; such a memory is read-only, as CrewAI's `read_only` means: `remember` stores
    nothing. `root_scope` nests every scope, as for CrewAI's own Memory. The LLM, the
    embedder and the scoring weights of `Memory` are not used."""

    client: Client = Field(exclude=True, description="A chronomem_client.Client.")
    project: UUID | str | None = Field(None, description="The project's id; None: the key's own.")
    namespace: str = Field("crewai", description="Starts the id of every session it writes.")
    as_of: datetime | str | None = Field(None, description="recall reads the world as then.")
    known_at: datetime | str | None = Field(None, description="recall reads what was known then.")
    # Memory's own field (a backend or "lancedb"), made from client, project and namespace.
    storage: ChronomemStorage | None = Field(None, exclude=True)

    def model_post_init(self, __context: Any) -> None:
        if self.storage is None:
            self.storage = ChronomemStorage(self.client, self.project, namespace=self.namespace)
        if self.as_of is not None or self.known_at is not None:
            self.read_only = True
        super().model_post_init(__context)

    @property
    def chronomem(self) -> ChronomemStorage:
        """The storage this memory reads and writes."""
        assert self.storage is not None  # made by model_post_init
        return self.storage

    def _records(
        self,
        contents: Sequence[str],
        scope: str | None,
        categories: list[str] | None,
        metadata: dict[str, Any] | None,
        importance: float | None,
        source: str | None,
        private: bool,
        agent_role: str | None,
        root_scope: str | None,
    ) -> list[MemoryRecord]:
        if private:
            raise ValueError(
                "Chronomem has no private records: every key of the project reads them"
            )
        if not isinstance(contents, Sequence) or isinstance(contents, str):
            raise ValueError("contents must be a list of strings")
        root = root_scope if root_scope is not None else self.root_scope
        if scope is None and root is None and agent_role:
            scope = f"/agent/{sanitize_scope_name(agent_role)}"  # CrewAI's agent scope
        path = join_scope_paths(root, scope)
        meta = dict(metadata or {})
        if agent_role:
            meta.setdefault("agent_role", agent_role)
        records = []
        for content in contents:
            if not isinstance(content, str) or not content.strip():
                raise ValueError("a memory's content must be a non-empty string")
            records.append(
                MemoryRecord(
                    content=content,
                    scope=path,
                    categories=list(categories or []),
                    metadata=meta,
                    importance=self.default_importance if importance is None else importance,
                    source=source,
                )
            )
        return records

    def extract_memories(self, content: str) -> list[str]:
        """The content itself, whole: Chronomem's worker extracts the facts from it."""
        if not isinstance(content, str):
            raise ValueError("content must be a string")
        return [content] if content.strip() else []

    def remember(
        self,
        content: str,
        scope: str | None = None,
        categories: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        source: str | None = None,
        private: bool = False,
        agent_role: str | None = None,
        root_scope: str | None = None,
    ) -> MemoryRecord | None:
        """Store one item (an episode) and return its record; None if read-only."""
        if self.read_only:
            return None
        (record,) = self._records(
            [content],
            scope,
            categories,
            metadata,
            importance,
            source,
            private,
            agent_role,
            root_scope,
        )
        with _saving(self, content, metadata, agent_role):
            self.chronomem.save([record])
        return record

    def remember_many(
        self,
        contents: list[str],
        scope: str | None = None,
        categories: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        source: str | None = None,
        private: bool = False,
        agent_role: str | None = None,
        root_scope: str | None = None,
    ) -> list[MemoryRecord]:
        """Store items (episodes of one session) before returning, and return their
        records (CrewAI's own Memory stores them in the background and returns [])."""
        if not contents or self.read_only:
            return []
        records = self._records(
            contents,
            scope,
            categories,
            metadata,
            importance,
            source,
            private,
            agent_role,
            root_scope,
        )
        with _saving(self, f"{len(records)} memories", metadata, agent_role):
            self.chronomem.save(records)
        return records

    def recall(
        self,
        query: str,
        scope: str | None = None,
        categories: list[str] | None = None,
        limit: int = 10,
        depth: Literal["shallow", "deep"] = "deep",
        source: str | None = None,
        include_private: bool = False,
        *,
        as_of: When = None,
        known_at: When = None,
    ) -> list[MemoryMatch]:
        """Chronomem's search (`ChronomemStorage.search_text`) as CrewAI matches, best
        first, each with the legs that found it as its reasons. `depth` is accepted
        and changes nothing (Chronomem's search has one depth); `as_of` / `known_at`
        default to the memory's. Records carry no categories in a search answer:
        `categories` is refused."""
        if depth not in ("shallow", "deep"):
            raise ValueError("depth must be 'shallow' or 'deep'")
        if categories:
            raise ValueError("ChronomemMemory.recall filters by scope, not by categories")
        _check_query(query, limit)
        effective = join_scope_paths(self.root_scope, scope) if self.root_scope else scope
        crewai_event_bus.emit(
            self, MemoryQueryStartedEvent(query=query, limit=limit, source_type=_SOURCE)
        )
        start = time.perf_counter()
        try:
            found = self.chronomem.search_text(
                query,
                scope_prefix=effective,
                limit=limit,
                as_of=self.as_of if as_of is None else as_of,
                known_at=self.known_at if known_at is None else known_at,
            )
        except Exception as err:
            crewai_event_bus.emit(
                self,
                MemoryQueryFailedEvent(
                    query=query, limit=limit, error=str(err), source_type=_SOURCE
                ),
            )
            raise
        matches = [
            MemoryMatch(record=r, score=s, match_reasons=sorted(r.metadata.get("ranks", {})))
            for r, s in found
        ]
        crewai_event_bus.emit(
            self,
            MemoryQueryCompletedEvent(
                query=query,
                results=matches,
                limit=limit,
                query_time_ms=(time.perf_counter() - start) * 1000,
                source_type=_SOURCE,
            ),
        )
        return matches

    def update(
        self,
        record_id: str,
        content: str | None = None,
        scope: str | None = None,
        categories: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
    ) -> MemoryRecord:
        """Replace a record's fields; it keeps its id (its session is rewritten, see
        `ChronomemStorage.delete`)."""
        existing = self.chronomem.get_record(record_id)
        if existing is None:
            raise ValueError(f"Record not found: {record_id}")
        if self.read_only:
            return existing
        given = {
            "content": content,
            "scope": scope,
            "categories": categories,
            "metadata": metadata,
            "importance": importance,
        }
        changes = {k: v for k, v in given.items() if v is not None}
        updated = MemoryRecord.model_validate({**existing.model_dump(), **changes})
        self.chronomem.update(updated)
        return updated
