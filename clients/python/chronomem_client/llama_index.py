"""LlamaIndex adapter (extra `chronomem-client[llama-index]`, llama-index-core only).

    from chronomem_client import Client
    from chronomem_client.llama_index import ChronomemMemoryBlock, ChronomemRetriever
    from llama_index.core.memory import Memory

    memory = Client("http://127.0.0.1:8765", token)
    retriever = ChronomemRetriever(client=memory, project=project, k=5)
    chat_memory = Memory.from_defaults(
        session_id="chat 7",
        memory_blocks=[ChronomemMemoryBlock(client=memory, project=project)],
    )

- `ChronomemRetriever` (a `llama_index.core.retrievers.BaseRetriever`): `search` (or
  `context`) as `NodeWithScore`s of `TextNode`s whose metadata carries the hit's ids,
  triple, validity window, record window (`recorded_at`, `retracted_at`), score and
  per-leg ranks; `as_of` and `known_at` read the memory as it was. `retrieve` sends its
  requests with the sync `Client`, `aretrieve` with the `AsyncClient`.
- `ChronomemMemoryBlock` (a `llama_index.core.memory.BaseMemoryBlock` of the current
  `Memory`): `aget` answers Chronomem's context text for the latest messages; `aput`
  ingests the messages the Memory flushes from its short-term queue into a Chronomem
  session, from which the worker extracts facts.

Bad arguments raise `ValueError` (pydantic's `ValidationError` is one), as LlamaIndex
does; an error answer of the server raises `ValueError` (400, 404, 422),
`PermissionError` (401, 403) or else `ChronomemError`, with the `ChronomemError` as its
cause; a server that cannot be reached raises `ConnectionError`.

Importing `chronomem_client` never imports this module, nor LlamaIndex.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterable, Sequence
from datetime import datetime
from itertools import groupby
from typing import Any, Literal, TypeVar
from uuid import UUID

import httpx
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.callbacks import CallbackManager
from llama_index.core.memory import BaseMemoryBlock
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, ValidationError, model_validator

from chronomem_client.client import AsyncClient, Call, ChronomemError, Client, Id, When
from chronomem_client.models import (
    ContextRequest,
    ContextResult,
    Instant,
    SearchHit,
    SearchRequest,
    SearchResult,
    TimelineFact,
)

__all__ = ["ChronomemMemoryBlock", "ChronomemRetriever", "hit_to_node"]

R = TypeVar("R")
# One operation's work: yields the calls it needs, receives their answers, returns its
# result; driven by the sync or the async client alike.
Steps = Generator[Call[Any], Any, R]

_ROLES = {
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
_BATCH = 100  # the most messages one ingest takes
_MAX_QUERY = 10_000  # the longest query search and context take
# What an LLM reads of a node beside its text: when it held, who said it. Ids, scores
# and ranks are for the program (and nothing of the metadata is embedded).
_LLM_KEYS = frozenset({"valid_from", "valid_until", "occurred_at", "role"})


# --- requests ---------------------------------------------------------------------


def _translate(err: ChronomemError) -> Exception:
    """The error a LlamaIndex user expects instead of an HTTP answer."""
    if err.status in (401, 403):
        return PermissionError(str(err))
    if err.status in (400, 404, 422):
        return ValueError(str(err))
    return err


def _send(client: Client | None, call: Call[Any]) -> Any:
    if client is None:
        raise ValueError("a sync call needs `client` (a chronomem_client.Client)")
    try:
        return client.send(call)
    except ChronomemError as err:
        raise _translate(err) from err
    except httpx.HTTPError as err:
        raise ConnectionError(f"Chronomem unreachable: {err}") from err


async def _asend(client: Client | None, async_client: AsyncClient | None, call: Call[Any]) -> Any:
    if async_client is None:
        # The sync client in a thread: it works under any event loop (LlamaIndex's sync
        # wrappers run each call in a loop of their own) and blocks none.
        return await asyncio.to_thread(_send, client, call)
    try:
        return await async_client.send(call)
    except ChronomemError as err:
        raise _translate(err) from err
    except httpx.HTTPError as err:
        raise ConnectionError(f"Chronomem unreachable: {err}") from err


def _drive(client: Client | None, steps: Steps[R]) -> R:
    try:
        call = next(steps)
        while True:
            call = steps.send(_send(client, call))
    except StopIteration as done:
        result: R = done.value
        return result


async def _adrive(client: Client | None, async_client: AsyncClient | None, steps: Steps[R]) -> R:
    try:
        call = next(steps)
        while True:
            call = steps.send(await _asend(client, async_client, call))
    except StopIteration as done:
        result: R = done.value
        return result


def _need_a_client(client: Client | None, async_client: AsyncClient | None) -> None:
    if client is not None and not isinstance(client, Client):
        raise ValueError("client must be a chronomem_client.Client")
    if async_client is not None and not isinstance(async_client, AsyncClient):
        raise ValueError("async_client must be a chronomem_client.AsyncClient")
    if client is None and async_client is None:
        raise ValueError("pass client= (a Client), async_client= (an AsyncClient) or both")


# --- retriever --------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def hit_to_node(
    hit: SearchHit,
    record: TimelineFact | None = None,
    answer: SearchResult | ContextResult | None = None,
) -> NodeWithScore:
    """A search hit as a scored TextNode: its text (a fact: its sentence) as the node's
    text and its id as the node's id; as metadata its kind, ids (`fact_id`, `episode_id`
    or `entity_id`), score, position and per-leg ranks (`rank_<leg>`); a fact adds its
    triple, confidence, validity window (`valid_from`, `valid_until`: None while it
    holds) and, given its timeline `record`, its record window (`recorded_at`,
    `retracted_at`: None while believed); an episode its role, session, seq and
    occurred_at. `answer` adds the instants the read was made at (`as_of`, `known_at`).
    Metadata values are flat (str, int, float or None), as vector stores want them."""
    metadata: dict[str, Any] = {
        "kind": hit.kind,
        "id": str(hit.id),
        f"{hit.kind}_id": str(hit.id),
        "score": hit.score,
        "position": hit.position,
        **{f"rank_{leg}": rank for leg, rank in sorted(hit.ranks.items())},
    }
    if hit.kind == "fact":
        metadata.update(
            subject=hit.subject,
            predicate=hit.predicate,
            object=hit.object,
            confidence=hit.confidence,
            valid_from=_iso(hit.valid_from),
            valid_until=_iso(hit.valid_until),
        )
        if record is not None:
            metadata.update(
                recorded_at=_iso(record.recorded_at), retracted_at=_iso(record.retracted_at)
            )
    elif hit.kind == "episode":
        metadata.update(
            role=hit.role, session=hit.session, seq=hit.seq, occurred_at=_iso(hit.occurred_at)
        )
    else:
        metadata.update(entity_type=hit.entity_type, summary=hit.summary)
    if answer is not None:
        metadata.update(as_of=_iso(answer.at), known_at=_iso(answer.known_at))
    text = hit.text
    if text is None:
        fact = f"{hit.subject} {hit.predicate} {hit.object}"
        text = fact if hit.kind == "fact" else hit.summary or ""
    node = TextNode(
        id_=str(hit.id),
        text=text,
        metadata=metadata,
        excluded_llm_metadata_keys=[k for k in metadata if k not in _LLM_KEYS],
        excluded_embed_metadata_keys=list(metadata),
    )
    return NodeWithScore(node=node, score=hit.score)


class ChronomemRetriever(BaseRetriever):
    """A LlamaIndex retriever over Chronomem's fused search of `project`.

    mode "search" returns the `k` best hits (facts, episodes, entities; `legs` picks the
    retrieval legs); mode "context" returns the facts and episodes the context call
    packs into `max_tokens`. `as_of` reads the world as it was then (a superseded value
    comes back as of before its change), `known_at` as the memory knew it then.
    `record_times` adds each fact's record window from its subject's timeline (one more
    request per subject and predicate among the hits).

    `retrieve` needs `client`; `aretrieve` uses `async_client`, else `client` in a
    thread. The options are checked here as the server checks them: a `k` out of 1..200
    or an instant that is not ISO 8601 raises ValueError."""

    def __init__(
        self,
        *,
        project: Id,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        k: int = 10,
        as_of: When = None,
        known_at: When = None,
        legs: Sequence[str] | None = None,
        mode: Literal["search", "context"] = "search",
        max_tokens: int = 1500,
        record_times: bool = True,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        _need_a_client(client, async_client)
        options: SearchRequest | ContextRequest
        try:
            given = {"query": "", "k": k, "as_of": as_of, "known_at": known_at}
            if mode == "search":
                legs = None if legs is None else list(legs)
                options = SearchRequest.model_validate({**given, "legs": legs})
            elif mode == "context":
                if legs is not None:
                    raise ValueError("legs apply to mode 'search' only")
                options = ContextRequest.model_validate({**given, "max_tokens": max_tokens})
            else:
                raise ValueError(f"mode must be 'search' or 'context', not {mode!r}")
        except ValidationError as err:
            # The request model's own check, in the retriever's words.
            wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise ValueError(f"ChronomemRetriever: {wrong}") from None
        self.project = str(UUID(str(project)))
        self.client = client
        self.async_client = async_client
        self.options = options
        self.mode = mode
        self.record_times = bool(record_times)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def k(self) -> int:
        return self.options.k

    @property
    def as_of(self) -> datetime | None:
        return self.options.as_of

    @property
    def known_at(self) -> datetime | None:
        return self.options.known_at

    def _request(self, query: str) -> Call[Any]:
        """The search or context request of one retrieval, sync or async alike."""
        o = self.options
        if isinstance(o, SearchRequest):
            return Client.calls.search(
                self.project, query, k=o.k, as_of=o.as_of, known_at=o.known_at, legs=o.legs
            )
        return Client.calls.context(
            self.project,
            query,
            k=o.k,
            as_of=o.as_of,
            known_at=o.known_at,
            max_tokens=o.max_tokens,
        )

    def _steps(self, query: str) -> Steps[list[NodeWithScore]]:
        answer: SearchResult | ContextResult = yield self._request(query)
        if isinstance(answer, SearchResult):
            hits = answer.results
        else:
            hits = [*answer.facts, *answer.episodes]
        records: dict[UUID, TimelineFact] = {}
        if self.record_times:
            # The hits carry the validity window only; the timeline holds each version's
            # record window (also for a fact retracted after `known_at`).
            pairs = {(h.subject or "", h.predicate or "") for h in hits if h.kind == "fact"}
            for subject, predicate in sorted(p for p in pairs if all(p)):
                timeline = yield Client.calls.timeline(self.project, subject, predicate)
                records.update((f.fact_id, f) for f in timeline.facts)
        return [hit_to_node(h, records.get(h.id), answer) for h in hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.client is None:
            raise ValueError("ChronomemRetriever.retrieve needs `client`; or use aretrieve")
        return _drive(self.client, self._steps(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await _adrive(self.client, self.async_client, self._steps(query_bundle.query_str))


# --- memory block -----------------------------------------------------------------


def _to_wire(message: ChatMessage) -> dict[str, Any] | None:
    """A LlamaIndex chat message as an ingest message (None: it has no text): role
    mapped (developer as system, chatbot and model as assistant, function as tool), its
    text blocks as content, its own role in metadata."""
    text = message.content
    if not text or not text.strip():
        return None
    role = getattr(message.role, "value", str(message.role))
    return {
        "role": _ROLES.get(role, "user"),
        "content": text,
        "metadata": {"llama_index_role": role},
    }


class ChronomemMemoryBlock(BaseMemoryBlock[str]):
    """Chronomem's long-term memory as a block of LlamaIndex's `Memory`.

    `aget` (called by `Memory.get`) answers the context text Chronomem builds for the
    latest `retrieval_context_window` messages (the facts that hold, with their
    windows, then conversation excerpts), at `as_of` / `known_at` when given, within
    `max_tokens`; "" when nothing is known. `aput` (called with the messages the Memory
    flushes from its short-term queue) ingests them, each an episode, into the session
    `session`, or else the Memory's own session id; the worker extracts facts from them,
    project-wide. Give `client`, `async_client` or both: with only `client` the calls
    run in a thread."""

    name: str = Field(default="chronomem", description="The block's name in the memory.")
    description: str | None = Field(
        default="Long-term memory kept by Chronomem: facts with their validity windows "
        "and conversation excerpts.",
        description="A description of the memory block.",
    )
    client: Client | None = Field(default=None, exclude=True)
    async_client: AsyncClient | None = Field(default=None, exclude=True)
    project: UUID
    session: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The Chronomem session messages go to; None: the Memory's session_id.",
    )
    as_of: Instant | None = None
    known_at: Instant | None = None
    k: int = Field(default=20, strict=True, ge=1, le=200, description="Search results considered.")
    max_tokens: int = Field(default=1500, strict=True, ge=50, description="The text's budget.")
    retrieval_context_window: int = Field(
        default=1, strict=True, ge=1, description="How many latest messages make the query."
    )

    @model_validator(mode="after")
    def _has_a_client(self) -> ChronomemMemoryBlock:
        _need_a_client(self.client, self.async_client)
        return self

    def _query(self, messages: Iterable[ChatMessage]) -> str:
        texts = [m.content for m in messages if m.content and m.content.strip()]
        query = "\n".join(texts[-self.retrieval_context_window :])
        return query[-_MAX_QUERY:]

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        # block_kwargs (the Memory's session_id, token counts) change nothing: the
        # memory is the project's, across sessions.
        query = self._query(messages or [])
        if not query:
            return ""
        call = Client.calls.context(
            self.project,
            query,
            as_of=self.as_of,
            known_at=self.known_at,
            max_tokens=self.max_tokens,
            k=self.k,
        )
        answer: ContextResult = await _asend(self.client, self.async_client, call)
        return answer.text

    def _session(self, message: ChatMessage) -> str:
        session = self.session or message.additional_kwargs.get("session_id")
        if not isinstance(session, str) or not session:
            raise ValueError(
                "ChronomemMemoryBlock needs session=, or messages put through a Memory "
                "(which marks them with its session_id)"
            )
        return session

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for session, group in groupby(messages, key=self._session):
            wire = [w for w in map(_to_wire, group) if w is not None]
            for i in range(0, len(wire), _BATCH):
                call = Client.calls.ingest(self.project, session, wire[i : i + _BATCH])
                await _asend(self.client, self.async_client, call)
