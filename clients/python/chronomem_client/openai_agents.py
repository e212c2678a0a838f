"""Chronomem for the OpenAI Agents SDK (`pip install 'chronomem-client[openai-agents]'`).

- `ChronomemSession` implements the SDK's `Session` protocol (`agents.memory`): one
  Agents session is one Chronomem session of a project, each item one episode (its role
  and text, and the item itself in the episode's metadata, so `get_items` returns exactly
  what `add_items` stored). The worker extracts facts from those episodes as from any
  other conversation.
- `memory_tools` returns function tools (`agents.function_tool`) that search the
  project's memory, build a context for a question and read a subject's history, each
  at an optional `as_of` instant.

Importing `chronomem_client` never imports this module; importing this module imports
`agents`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.exceptions import UserError
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.tool import default_tool_error_function

from chronomem_client.client import AsyncClient, ChronomemError, Id
from chronomem_client.models import Message

__all__ = ["ITEM_KEY", "ChronomemSession", "memory_tools"]

ITEM_KEY = "openai_agents_item"
"""The episode metadata key holding the Agents SDK item as it was added."""

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_PAGE = 1000  # the most messages one page of GET .../messages answers
_BATCH = 100  # the most messages one ingest takes


def _fail(err: ChronomemError, what: str) -> UserError:
    return UserError(f"Chronomem {what} failed: {err.status} {err.code}: {err.message}")


def _text(item: Mapping[str, Any]) -> str:
    """The episode text of an item: what a search should find it by."""
    content = item.get("content")
    if isinstance(content, str) and content:
        return content
    if isinstance(content, list):
        parts = [
            str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, Mapping)
        ]
        if any(parts):
            return "\n".join(p for p in parts if p)
    if item.get("type") == "function_call":
        return f"{item.get('name')}({item.get('arguments')})"
    output = item.get("output")
    if isinstance(output, str) and output:
        return output
    return json.dumps(item, sort_keys=True, default=str)


def _role(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if isinstance(role, str) and role in _ROLES:
        return _ROLES[role]
    return "assistant" if item.get("type") == "function_call" else "tool"


def _item(message: Message) -> TResponseInputItem | None:
    stored = message.metadata.get(ITEM_KEY)
    if isinstance(stored, dict):
        return cast(TResponseInputItem, stored)
    if message.role == "tool":
        return None  # written by something else, with no item to replay
    # A message ingested into the session by other means reads as a plain message.
    return cast(TResponseInputItem, {"role": message.role, "content": message.content})


class ChronomemSession:
    """An Agents SDK session kept in Chronomem (the `agents.memory.Session` protocol).

    `client` is an `AsyncClient` with a key holding project:read and project:write;
    `project` the project's id, or None for the key's own project (the only one it
    sees). Bad arguments raise `agents.exceptions.UserError`, and so does an error
    answer of the server (the `ChronomemError` is its cause)."""

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncClient,
        project: Id | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not 1 <= len(session_id) <= 200:
            raise UserError("session_id must be a string of 1 to 200 characters")
        if not isinstance(client, AsyncClient):
            raise UserError("client must be a chronomem_client.AsyncClient")
        self.session_id = session_id
        self.session_settings = session_settings
        self.client = client
        self._project: str | None = None if project is None else str(project)

    async def project(self) -> str:
        """The project's id (for project=None, the key's own project, looked up once)."""
        if self._project is None:
            try:
                projects = (await self.client.list_projects()).projects
            except ChronomemError as err:
                raise _fail(err, "list_projects") from err
            if len(projects) != 1:
                raise UserError(
                    f"the key sees {len(projects)} projects: pass project= to ChronomemSession"
                )
            self._project = str(projects[0].project_id)
        return self._project

    async def _messages(self) -> list[Message]:
        project = await self.project()
        messages: list[Message] = []
        after: int | None = None
        while True:
            try:
                page = await self.client.session_messages(
                    project, self.session_id, after=after, limit=_PAGE
                )
            except ChronomemError as err:
                if err.status == 404 and not messages:
                    # No such session yet, unless the project itself is out of reach.
                    try:
                        await self.client.get_project(project)
                    except ChronomemError as denied:
                        raise _fail(denied, "get_project") from denied
                    return []
                raise _fail(err, "session_messages") from err
            messages.extend(page.messages)
            if page.next_cursor is None:
                return messages
            after = page.next_cursor

    async def _ingest(self, messages: Sequence[Mapping[str, Any]]) -> None:
        project = await self.project()
        for start in range(0, len(messages), _BATCH):
            try:
                await self.client.ingest(project, self.session_id, messages[start : start + _BATCH])
            except ChronomemError as err:
                raise _fail(err, "ingest") from err

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with `limit` (else the settings' limit),
        only the latest `limit` of them."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = [i for i in map(_item, await self._messages()) if i is not None]
        if limit is None or limit < 0:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items, each as one episode of the session."""
        if not items:
            return
        messages = []
        for raw in items:
            if not isinstance(raw, Mapping):
                raise UserError(f"a session item must be a dict, not {type(raw).__name__}")
            # The JSON form of the item: what reads back from the episode's metadata.
            item = json.loads(json.dumps(raw, default=str))
            messages.append(
                {"role": _role(item), "content": _text(item), "metadata": {ITEM_KEY: item}}
            )
        await self._ingest(messages)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (None when the session is empty).

        The HTTP API deletes no single episode, so this rewrites the session: it wipes it
        and ingests every message but the last again (same role, content, metadata and
        occurred_at). The facts extracted from the session go with the wipe and are
        extracted again from what is ingested."""
        messages = await self._messages()
        if not messages:
            return None
        last = messages[-1]
        await self._wipe()
        await self._ingest(
            [
                {
                    "role": m.role,
                    "content": m.content,
                    "metadata": m.metadata,
                    "occurred_at": m.occurred_at.isoformat(),
                }
                for m in messages[:-1]
            ]
        )
        return _item(last) or cast(TResponseInputItem, {"role": "tool", "content": last.content})

    async def clear_session(self) -> None:
        """Wipe the session: its episodes and the facts drawn from them."""
        await self._wipe()

    async def _wipe(self) -> None:
        project = await self.project()
        try:
            await self.client.wipe(project, session=self.session_id)
        except ChronomemError as err:
            raise _fail(err, "wipe") from err


def _tool_error(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads when a tool call fails: the server's stable code and message
    for an error answer (e.g. a bad argument), else the SDK's default text."""
    if isinstance(error, ChronomemError):
        where = f" (field {error.field})" if error.field else ""
        return f"Chronomem refused the call: {error.code}{where}: {error.message}"
    return default_tool_error_function(ctx, error)


def memory_tools(client: AsyncClient, project: Id) -> list[FunctionTool]:
    """Function tools over a project's memory: `search_memory`, `memory_context` and
    `memory_history`. A failing call answers the model with the error, as the SDK does
    for function tools (an error answer of the server: its code and message)."""
    project = str(project)
    tool = function_tool(failure_error_function=_tool_error)

    @tool
    async def search_memory(query: str, as_of: str | None, k: int | None) -> str:
        """Search long-term memory: facts and conversation excerpts that match the query.

        Args:
            query: What to look for, in words.
            as_of: An ISO 8601 instant to read memory as it held then; null for now.
            k: How many hits at most (1 to 200); null for 10.
        """
        found = await client.search(project, query, as_of=as_of, k=k or 10)
        return json.dumps(
            [
                {
                    "kind": h.kind,
                    "text": h.text,
                    "subject": h.subject,
                    "predicate": h.predicate,
                    "object": h.object,
                    "valid_from": h.valid_from.isoformat() if h.valid_from else None,
                }
                for h in found.results
            ]
        )

    @tool
    async def memory_context(query: str, as_of: str | None) -> str:
        """A compact text of what memory knows that bears on a question.

        Args:
            query: The question or topic.
            as_of: An ISO 8601 instant to read memory as it held then; null for now.
        """
        return (await client.context(project, query, as_of=as_of)).text

    @tool
    async def memory_history(subject: str, predicate: str | None) -> str:
        """Every value a subject has had over time, superseded and retracted ones included.

        Args:
            subject: The subject, e.g. a person's name.
            predicate: Only this predicate (e.g. "lives in"); null for all.
        """
        timeline = await client.timeline(project, subject, predicate)
        return json.dumps(
            [
                {
                    "predicate": f.predicate,
                    "object": f.object,
                    "valid_from": f.valid_from.isoformat(),
                    "valid_until": f.window_until.isoformat() if f.window_until else None,
                    "status": f.status,
                }
                for f in timeline.facts
            ]
        )

    return [search_memory, memory_context, memory_history]
