"""LangChain adapter (extra `chronomem-client[langchain]`, langchain-core only).

    from chronomem_client import Client
    from chronomem_client.langchain import (
        ChronomemChatMessageHistory, ChronomemRetriever, chronomem_tools)

    memory = Client("http://127.0.0.1:8765", token)
    history = ChronomemChatMessageHistory(memory, project, session="chat 7")
    retriever = ChronomemRetriever(client=memory, project=project, k=5)
    tools = chronomem_tools(memory, project)

- `ChronomemChatMessageHistory` (a `BaseChatMessageHistory`): one session of the
  project; `add_messages` ingests them as episodes (the worker extracts facts from
  them), `messages` reads the session back, `clear` wipes the session (its episodes and
  the facts drawn from them, for good).
- `ChronomemRetriever` (a `BaseRetriever`): `search` (or `context`) as `Document`s whose
  metadata carries the hit's ids, validity window, score and per-leg ranks; `as_of` and
  `known_at` read the memory as it was.
- `chronomem_tools`: search memory, add facts, fact history, retract fact, as
  `StructuredTool`s with typed argument schemas. Bad arguments raise pydantic's
  `ValidationError` (LangChain's own check); an error answer of the server raises
  `ToolException`, which the tool's `handle_tool_error` can turn into an observation.

Importing `chronomem_client` never imports this module, nor LangChain.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

import httpx
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import StructuredTool, ToolException
from pydantic import BaseModel, ConfigDict, Field

from chronomem_client.client import AsyncClient, Call, Calls, ChronomemError, Client, Id
from chronomem_client.models import ContextResult, Message, SearchHit, SearchResult

__all__ = [
    "AddFactsInput",
    "ChronomemChatMessageHistory",
    "ChronomemRetriever",
    "FactHistoryInput",
    "FactInput",
    "RetractFactInput",
    "SearchMemoryInput",
    "chronomem_tools",
    "hit_to_document",
]

T = TypeVar("T")
Role = Literal["user", "assistant", "system", "tool"]
_ROLES: dict[str, Role] = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
}
# An ingest takes at most 100 messages; a session page at most 1000.
_BATCH = 100
_PAGE = 1000


# --- chat history -----------------------------------------------------------------


def _role(message: BaseMessage) -> Role:
    if isinstance(message, ChatMessage) and message.role in ("user", "assistant", "system", "tool"):
        return message.role
    return _ROLES.get(message.type, "user")


def _to_wire(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as an ingest message: role mapped from its type, its text as
    content, what it takes to rebuild it in metadata."""
    metadata: dict[str, Any] = {"langchain_type": message.type}
    if message.name:
        metadata["speaker"] = message.name
    if message.id:
        metadata["langchain_id"] = message.id
    if isinstance(message, ToolMessage):
        metadata["tool_call_id"] = message.tool_call_id
    if isinstance(message, ChatMessage):
        metadata["chat_role"] = message.role
    content = message.content if isinstance(message.content, str) else message.text
    return {"role": _role(message), "content": content, "metadata": metadata}


def _from_wire(message: Message) -> BaseMessage:
    meta = message.metadata
    kind = meta.get("langchain_type")
    name = meta.get("speaker") if isinstance(meta.get("speaker"), str) else None
    extra: dict[str, Any] = {
        "id": meta.get("langchain_id") or str(message.episode_id),
        "response_metadata": {
            "episode_id": str(message.episode_id),
            "seq": message.seq,
            "occurred_at": message.occurred_at.isoformat(),
        },
    }
    if name:
        extra["name"] = name
    if kind == "chat" and isinstance(meta.get("chat_role"), str):
        return ChatMessage(content=message.content, role=str(meta["chat_role"]), **extra)
    if message.role == "user":
        return HumanMessage(content=message.content, **extra)
    if message.role == "assistant":
        return AIMessage(content=message.content, **extra)
    if message.role == "system":
        return SystemMessage(content=message.content, **extra)
    return ToolMessage(
        content=message.content, tool_call_id=str(meta.get("tool_call_id") or ""), **extra
    )


class ChronomemChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept as one Chronomem session of `project`.

    `add_messages` appends to the session (episodes; facts are extracted from them by
    the worker), `messages` reads the session's messages in order, `clear` wipes the
    session: its episodes and the facts drawn from them are deleted for good (the API
    has no way to empty a session and keep what was learnt from it). A session not yet
    written reads as no messages. The async variants use `async_client` when given."""

    def __init__(
        self,
        client: Client,
        project: Id,
        session: str,
        *,
        async_client: AsyncClient | None = None,
        session_metadata: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.async_client = async_client
        self.project = str(project)
        self.session = session
        self.session_metadata = session_metadata

    @property
    def messages(self) -> list[BaseMessage]:
        out: list[BaseMessage] = []
        after: int | None = None
        while True:
            try:
                page = self.client.session_messages(
                    self.project, self.session, after=after, limit=_PAGE
                )
            except ChronomemError as err:
                if err.status != 404:
                    raise
                self.client.backlog(self.project)  # the project itself: raises if not readable
                return []
            out.extend(_from_wire(m) for m in page.messages)
            if page.next_cursor is None:
                return out
            after = page.next_cursor

    async def aget_messages(self) -> list[BaseMessage]:
        if self.async_client is None:
            return await super().aget_messages()
        out: list[BaseMessage] = []
        after: int | None = None
        while True:
            try:
                page = await self.async_client.session_messages(
                    self.project, self.session, after=after, limit=_PAGE
                )
            except ChronomemError as err:
                if err.status != 404:
                    raise
                await self.async_client.backlog(self.project)
                return []
            out.extend(_from_wire(m) for m in page.messages)
            if page.next_cursor is None:
                return out
            after = page.next_cursor

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        wire = [_to_wire(m) for m in messages]
        for i in range(0, len(wire), _BATCH):
            self.client.ingest(
                self.project,
                self.session,
                wire[i : i + _BATCH],
                session_metadata=self.session_metadata,
            )

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.async_client is None:
            await super().aadd_messages(messages)
            return
        wire = [_to_wire(m) for m in messages]
        for i in range(0, len(wire), _BATCH):
            await self.async_client.ingest(
                self.project,
                self.session,
                wire[i : i + _BATCH],
                session_metadata=self.session_metadata,
            )

    def clear(self) -> None:
        self.client.wipe(self.project, session=self.session)

    async def aclear(self) -> None:
        if self.async_client is None:
            await super().aclear()
            return
        await self.async_client.wipe(self.project, session=self.session)


# --- retriever --------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def hit_to_document(hit: SearchHit) -> Document:
    """A search hit as a Document: its text as page content; its kind, ids (fact_id,
    episode_id or entity_id), validity window, score and per-leg ranks as metadata."""
    metadata: dict[str, Any] = {
        "kind": hit.kind,
        "id": str(hit.id),
        f"{hit.kind}_id": str(hit.id),
        "position": hit.position,
        "score": hit.score,
        "ranks": dict(hit.ranks),
    }
    if hit.kind == "fact":
        metadata.update(
            subject=hit.subject,
            predicate=hit.predicate,
            object=hit.object,
            valid_from=_iso(hit.valid_from),
            valid_until=_iso(hit.valid_until),
            confidence=hit.confidence,
        )
    elif hit.kind == "episode":
        metadata.update(
            role=hit.role, session=hit.session, seq=hit.seq, occurred_at=_iso(hit.occurred_at)
        )
    else:
        metadata.update(entity_type=hit.entity_type, summary=hit.summary)
    text = hit.text
    if text is None:
        if hit.kind == "fact":
            text = f"{hit.subject} {hit.predicate} {hit.object}"
        else:
            text = hit.summary or ""
    return Document(page_content=text, metadata=metadata, id=str(hit.id))


class ChronomemRetriever(BaseRetriever):
    """A LangChain retriever over Chronomem's fused search of `project`.

    mode "search" returns the `k` best hits (facts, episodes, entities; `legs` picks the
    retrieval legs); mode "context" returns the facts and episodes the context call
    packs into `max_tokens`. `as_of` reads the world as it was then (a superseded value
    comes back as of before its change), `known_at` as the memory knew it then."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Client | None = None
    async_client: AsyncClient | None = None
    project: Id
    k: int = Field(10, ge=1, le=200)
    as_of: datetime | str | None = None
    known_at: datetime | str | None = None
    legs: list[str] | None = None
    mode: Literal["search", "context"] = "search"
    max_tokens: int | None = None

    def _documents(self, answer: SearchResult | ContextResult) -> list[Document]:
        if isinstance(answer, SearchResult):
            hits = answer.results
        else:
            hits = [*answer.facts, *answer.episodes]
        return [hit_to_document(h) for h in hits]

    def _request(self, query: str) -> Call[Any]:
        """The one request a retrieval makes, for the sync and the async client alike
        (answered by a SearchResult or a ContextResult, as `mode` says)."""
        if self.mode == "search":
            return Calls().search(
                self.project,
                query,
                k=self.k,
                as_of=self.as_of,
                known_at=self.known_at,
                legs=self.legs,
            )
        return Calls().context(
            self.project,
            query,
            k=self.k,
            as_of=self.as_of,
            known_at=self.known_at,
            max_tokens=self.max_tokens,
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.client is None:
            raise ValueError("ChronomemRetriever needs `client` for sync calls")
        answer: SearchResult | ContextResult = self.client.send(self._request(query))
        return self._documents(answer)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        answer: SearchResult | ContextResult = await self.async_client.send(self._request(query))
        return self._documents(answer)


# --- tools ------------------------------------------------------------------------


class SearchMemoryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="What to look for in memory.")
    k: int = Field(10, ge=1, le=200, description="How many results.")
    as_of: datetime | None = Field(None, description="Read the world as it was then (ISO 8601).")
    known_at: datetime | None = Field(None, description="Read what memory knew then (ISO 8601).")


class FactInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, description="The entity the fact is about.")
    predicate: str = Field(min_length=1, description="The relation, e.g. 'lives in'.")
    object: str = Field(min_length=1, description="The value or other entity.")
    valid_from: datetime | None = Field(None, description="Since when it holds; default now.")
    valid_to: datetime | None = Field(None, description="Until when it holds; default open.")
    confidence: float | None = Field(None, ge=0, le=1)


class AddFactsInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    facts: list[FactInput] = Field(min_length=1, max_length=1000)


class FactHistoryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact_id: UUID = Field(description="The fact's id (from search_memory).")


class RetractFactInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact_id: UUID = Field(description="The fact's id (from search_memory).")
    reason: str | None = Field(None, max_length=2000, description="Why it is wrong.")


def _json(value: BaseModel | list[dict[str, Any]]) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value)


def _guard(call: Callable[[], T]) -> T:
    try:
        return call()
    except ChronomemError as err:
        raise ToolException(str(err)) from err
    except httpx.HTTPError as err:
        raise ToolException(f"Chronomem unreachable: {err}") from err


async def _aguard(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except ChronomemError as err:
        raise ToolException(str(err)) from err
    except httpx.HTTPError as err:
        raise ToolException(f"Chronomem unreachable: {err}") from err


def _hits(answer: SearchResult) -> str:
    docs = [hit_to_document(h) for h in answer.results]
    return json.dumps([{**d.metadata, "text": d.page_content} for d in docs])


def _facts(facts: Sequence[FactInput | dict[str, Any]]) -> list[dict[str, Any]]:
    return [FactInput.model_validate(f).model_dump(exclude_none=True) for f in facts]


def chronomem_tools(
    client: Client, project: Id, *, async_client: AsyncClient | None = None
) -> list[StructuredTool]:
    """search_memory, add_facts, fact_history and retract_fact over `project`, as
    LangChain tools. Each answers JSON text; a server error raises ToolException."""
    p = str(project)
    a = async_client

    def search_memory(
        query: str, k: int = 10, as_of: datetime | None = None, known_at: datetime | None = None
    ) -> str:
        return _hits(_guard(lambda: client.search(p, query, k=k, as_of=as_of, known_at=known_at)))

    async def asearch_memory(
        query: str, k: int = 10, as_of: datetime | None = None, known_at: datetime | None = None
    ) -> str:
        if a is None:
            return search_memory(query, k, as_of, known_at)
        return _hits(await _aguard(lambda: a.search(p, query, k=k, as_of=as_of, known_at=known_at)))

    def add_facts(facts: list[FactInput]) -> str:
        return _json(_guard(lambda: client.assert_facts(p, _facts(facts))))

    async def aadd_facts(facts: list[FactInput]) -> str:
        if a is None:
            return add_facts(facts)
        return _json(await _aguard(lambda: a.assert_facts(p, _facts(facts))))

    def fact_history(fact_id: UUID) -> str:
        return _json(_guard(lambda: client.fact_history(p, fact_id)))

    async def afact_history(fact_id: UUID) -> str:
        if a is None:
            return fact_history(fact_id)
        return _json(await _aguard(lambda: a.fact_history(p, fact_id)))

    def retract_fact(fact_id: UUID, reason: str | None = None) -> str:
        return _json(_guard(lambda: client.retract_fact(p, fact_id, reason)))

    async def aretract_fact(fact_id: UUID, reason: str | None = None) -> str:
        if a is None:
            return retract_fact(fact_id, reason)
        return _json(await _aguard(lambda: a.retract_fact(p, fact_id, reason)))

    return [
        StructuredTool.from_function(
            func=search_memory,
            coroutine=asearch_memory,
            name="search_memory",
            description="Search long-term memory (facts, past messages, entities). "
            "as_of reads the world as it was at that time. Answers JSON hits with "
            "fact ids and validity windows.",
            args_schema=SearchMemoryInput,
        ),
        StructuredTool.from_function(
            func=add_facts,
            coroutine=aadd_facts,
            name="add_facts",
            description="Remember facts (subject, predicate, object, optional validity). "
            "A new value of a single-valued predicate supersedes the old one.",
            args_schema=AddFactsInput,
        ),
        StructuredTool.from_function(
            func=fact_history,
            coroutine=afact_history,
            name="fact_history",
            description="The history of one fact: when it was asserted, superseded, retracted.",
            args_schema=FactHistoryInput,
        ),
        StructuredTool.from_function(
            func=retract_fact,
            coroutine=aretract_fact,
            name="retract_fact",
            description="Retract a fact that is wrong: it stops being read, and the "
            "claim is not accepted again.",
            args_schema=RetractFactInput,
        ),
    ]
