"""The MCP server (official `mcp` SDK): Chronomem's memory as tools for agents.

Each tool is memory_http.authorize_call (the key, the function it calls, the project
given as an argument) plus the same SQL function the matching HTTP route calls, in one
transaction through thin_api.db.Database: the permission a call needs is SQL's to say
(memory_http.call_permissions()), for HTTP and MCP alike. No business rules here.

Two transports, both authenticated by an API key:
- streamable HTTP at /mcp on the API app (`mount`): the key is the request's
  `Authorization: Bearer` header, checked before the MCP layer sees the request
  (401 without detail, like the rest of the API), and authorized again per tool call;
- stdio (`chronomem mcp`, `run_stdio`): the key is CHRONOMEM_API_KEY, read at start.

A SQL error (not found, bad input, not permitted) is a tool error whose text is
"<code>: <message>" with the codes of the HTTP API; it never ends the session.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, LiteralString
from uuid import UUID

import anyio
import psycopg
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout
from pydantic import Field
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from thin_api.db import Access, Alongside, Database, OrgBusy, Params
from thin_api.embedding import QueryEmbedder, query_vector, vector_query_text
from thin_api.errors import ApiError, from_db_error, org_busy, unauthorized
from thin_api.models import (
    Cardinality,
    FactIn,
    Instant,
    MessageIn,
    Resolution,
    Standing,
    StrictBool,
)
from thin_api.routes.facts import FactBatch

log = logging.getLogger("chronomem.mcp")

MCP_PATH = "/mcp"
KEY_VARIABLE = "CHRONOMEM_API_KEY"

INSTRUCTIONS = """\
Chronomem: long-term memory as a temporal knowledge graph. Facts (subject, predicate,
object) carry validity windows; a newer fact of a `one` predicate supersedes the older
one without deleting it; every read can be asked `as_of` a world instant and `known_at`
an instant of the store's belief. Timestamps are ISO 8601 (zone-less = UTC). Every tool
takes the project's id; the API key decides which projects are visible."""

ProjectId = Annotated[UUID, Field(description="The project's id.")]
AsOf = Annotated[
    Instant | None, Field(description="World instant (ISO 8601, zone-less = UTC); default now.")
]
KnownAt = Annotated[
    Instant | None,
    Field(description="What the store believed at this instant (ISO 8601); default now."),
]


@dataclass
class Backend:
    """Where tools find the database, the query embedder and (stdio) the key."""

    get_db: Callable[[], Database]
    get_embedder: Callable[[], QueryEmbedder | None]
    token: str | None = None  # stdio: the key given at start; HTTP: the request's header


def bearer(headers: Any) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    value = headers.get("authorization") if headers is not None else None
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _tool_error(err: ApiError) -> ToolError:
    return ToolError(f"{err.code}: {err.message}")


def build_server(backend: Backend) -> MCPServer:
    # MCPServer configures root logging (logging.basicConfig) when it is made; the
    # process's logging is not its to set (the API's, the worker's, pytest's).
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    server = MCPServer("chronomem", title="Chronomem", instructions=INSTRUCTIONS, version="0.1.0")
    root.handlers[:], root.level = saved

    def call(
        ctx: Context,
        project: UUID,
        query: LiteralString,
        params: Params,
        *,
        row: bool = False,
        alongside: Alongside | None = None,
    ) -> Any:
        token = backend.token if ctx.headers is None else bearer(ctx.headers)
        try:
            if not token:
                raise unauthorized()
            access = Access(token, project)
            db = backend.get_db()
            if row:
                return db.call_row(access, query, params)
            return db.call(access, query, params, alongside=alongside)
        except ApiError as err:
            raise _tool_error(err) from None
        except psycopg.Error as err:
            raise _tool_error(from_db_error(err)) from None
        except PoolTimeout:
            raise ToolError("unavailable: no database connection available") from None
        except OrgBusy:
            raise _tool_error(org_busy()) from None

    def text_to_embed(
        project: UUID, query: str, at: datetime | None, known_at: datetime | None
    ) -> Alongside | None:
        return vector_query_text(backend.get_embedder(), project, query, at, known_at)

    def embed(text: str | None, query: str) -> str | None:
        return query_vector(backend.get_embedder(), text, query)

    @server.tool()
    def add_memory(
        project_id: ProjectId,
        session: Annotated[str, Field(description="Your id for the conversation (1-200 chars).")],
        messages: Annotated[list[MessageIn], Field(description="At most 100 per call.")],
        ctx: Context,
    ) -> dict[str, Any]:
        """Store conversation messages as episodes of a session now; extraction of facts
        and embeddings follow in the background."""
        rows = [m.model_dump(mode="json", exclude_none=True) for m in messages]
        return call(
            ctx,
            project_id,
            "select memory_http.ingest(%s::uuid, %s::text, %s::jsonb, %s::text, %s::jsonb)",
            (project_id, session, Jsonb(rows), None, None),
        )

    @server.tool()
    def memory_backlog(project_id: ProjectId, ctx: Context) -> dict[str, Any]:
        """Whether the background work has caught up with what was added: caught_up is
        true once no fact extraction or embedding of the project's messages and facts
        is still queued, running or waiting; per kind, the open jobs."""
        backlog: dict[str, Any] = call(
            ctx, project_id, "select memory.project_backlog(%s::uuid)", (project_id,)
        )
        return backlog

    @server.tool()
    def memory_extraction_schema(
        project_id: ProjectId,
        ctx: Context,
        version: Annotated[
            int | None, Field(ge=1, le=2**31 - 1, description="Default: the current one.")
        ] = None,
    ) -> dict[str, Any]:
        """The project's extraction schema: the entity types, predicates (description,
        cardinality, object type), classification labels and custom fields extraction
        asks the model for, with its version. An error says when none is set."""
        schema: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.extraction_schema(%s::uuid, %s::integer)",
            (project_id, version),
        )
        return schema

    @server.tool()
    def add_facts(
        project_id: ProjectId,
        facts: Annotated[list[FactIn], Field(description="At most 1000 per batch.")],
        ctx: Context,
        override_tombstones: Annotated[
            StrictBool,
            Field(description="Assert retracted claims again (lifts their tombstones)."),
        ] = False,
    ) -> dict[str, Any]:
        """Assert a batch of facts. Each is inserted (closing what it supersedes),
        skipped (already holds), refused (retracted claim) or invalid (with its field)."""
        batch = FactBatch(facts)
        answer: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.assert_facts(%s::uuid, %s::jsonb, %s::boolean)",
            (project_id, Jsonb(batch.sent), override_tombstones),
        )
        return batch.answer(answer)

    @server.tool()
    def search_memory(
        project_id: ProjectId,
        query: Annotated[str, Field(max_length=10_000)],
        ctx: Context,
        as_of: AsOf = None,
        known_at: KnownAt = None,
        k: Annotated[int, Field(ge=1, le=200, description="Results.")] = 10,
        fusion: Annotated[
            Literal["scores", "rrf"],
            Field(
                description="scores (default): normalised leg scores summed, with "
                "conversation context; rrf: plain reciprocal rank fusion, 1/(60 + rank)."
            ),
        ] = "scores",
    ) -> dict[str, Any]:
        """Hybrid search (vectors, full text, entities, graph) over facts and
        conversation excerpts as they held at `as_of`, as known at `known_at`."""
        return call(
            ctx,
            project_id,
            "select memory_http.search(%s::uuid, %s::text, %s::vector, %s::vector, "
            "%s::timestamptz, %s::timestamptz, %s::integer, %s::text[], %s::text)",
            lambda text: (
                project_id,
                query,
                None,
                embed(text, query),
                as_of,
                known_at,
                k,
                None,
                fusion,
            ),
            alongside=text_to_embed(project_id, query, as_of, known_at),
        )

    @server.tool()
    def get_context(
        project_id: ProjectId,
        query: Annotated[str, Field(max_length=10_000)],
        ctx: Context,
        as_of: AsOf = None,
        known_at: KnownAt = None,
        max_tokens: Annotated[int, Field(ge=50, le=100_000)] = 1500,
    ) -> dict[str, Any]:
        """A prompt-ready block (`text`): the facts that hold at `as_of` with their
        windows, then supporting conversation excerpts, then the communities (groups of
        related entities) of the entities named, within `max_tokens`."""
        return call(
            ctx,
            project_id,
            "select memory_http.context(%s::uuid, %s::text, %s::vector, %s::vector, "
            "%s::timestamptz, %s::timestamptz, %s::integer, %s::integer)",
            lambda text: (
                project_id,
                query,
                None,
                embed(text, query),
                as_of,
                known_at,
                max_tokens,
                20,
            ),
            alongside=text_to_embed(project_id, query, as_of, known_at),
        )

    @server.tool()
    def list_facts(
        project_id: ProjectId,
        ctx: Context,
        as_of: AsOf = None,
        known_at: KnownAt = None,
        subject: str | None = None,
        predicate: str | None = None,
        cursor: Annotated[UUID | None, Field(description="next_cursor of the last page.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """The facts that hold at `as_of` as the store believed at `known_at`,
        optionally of one subject and/or predicate."""
        return call(
            ctx,
            project_id,
            "select memory.list_facts(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
            "%s::text, %s::uuid, %s::integer)",
            (project_id, as_of, known_at, subject, predicate, cursor, limit),
        )

    @server.tool()
    def fact_history(project_id: ProjectId, fact_id: UUID, ctx: Context) -> dict[str, Any]:
        """Every event (asserted, superseded, retracted, ...) of every version of the
        fact's identity, oldest first."""
        return call(
            ctx,
            project_id,
            "select memory_http.fact_history(%s::uuid, %s::uuid)",
            (project_id, fact_id),
        )

    @server.tool()
    def recent_changes(
        project_id: ProjectId,
        # Required: "recent" has no default an agent could rely on, and from the
        # beginning the first page would be the oldest changes.
        since: Annotated[
            Instant,
            Field(
                description="Record time (exclusive): e.g. when the last session ended, or "
                "a week ago."
            ),
        ],
        ctx: Context,
        until: Annotated[
            Instant | None, Field(description="Record time (inclusive); default now.")
        ] = None,
        cursor: Annotated[str | None, Field(description="next_cursor of the last page.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """What the memory learned or unlearned since an instant: every fact event
        (asserted, superseded, contradicted, expired, retracted, restored), oldest first,
        with the fact's subject, predicate, object and content."""
        return call(
            ctx,
            project_id,
            "select memory.fact_changes(%s::uuid, %s::timestamptz, %s::timestamptz, %s::text, "
            "%s::integer)",
            (project_id, since, until, cursor, limit),
        )

    @server.tool()
    def subject_timeline(
        project_id: ProjectId,
        subject: Annotated[str, Field(min_length=1, description="Entity name or alias.")],
        ctx: Context,
        predicate: Annotated[
            str | None, Field(description="Only this predicate's facts (e.g. works_at).")
        ] = None,
    ) -> dict[str, Any]:
        """Every version of a subject's facts in world-time order, each with its validity
        window, when the store recorded it, its status and the events that shaped it:
        when did this change, and what did it replace?"""
        timeline: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.timeline(%s::uuid, %s::text, %s::text)",
            (project_id, subject, predicate),
        )
        return timeline

    @server.tool()
    def explore_graph(
        project_id: ProjectId,
        entity: Annotated[str, Field(min_length=1, description="Entity name or alias.")],
        ctx: Context,
        depth: Annotated[int, Field(ge=1, le=3, description="Edges away, 1-3.")] = 1,
        as_of: AsOf = None,
        known_at: KnownAt = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many nodes.")] = 200,
    ) -> dict[str, Any]:
        """The entities within `depth` edges of an entity and those edges (each with its
        relation and validity window), over the edges that hold at `as_of` as the store
        believed at `known_at`: who someone knew, worked with or was linked to then."""
        graph: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory.graph_neighbors(%s::uuid, %s::text, %s::integer, %s::timestamptz, "
            "%s::timestamptz, %s::integer)",
            (project_id, entity, depth, as_of, known_at, limit),
        )
        return graph

    @server.tool()
    def retract_fact(
        project_id: ProjectId,
        fact_id: UUID,
        ctx: Context,
        reason: Annotated[str | None, Field(max_length=2000)] = None,
    ) -> dict[str, Any]:
        """The claim never held: it is tombstoned, and what it had closed gets its
        window back."""
        return call(
            ctx,
            project_id,
            "select memory_http.retract_fact(%s::uuid, %s::uuid, %s::text)",
            (project_id, fact_id, reason),
        )

    @server.tool()
    def declare_predicate(
        project_id: ProjectId,
        predicate: str,
        cardinality: Annotated[
            Cardinality,
            Field(
                description="one: a new object supersedes the old; many: not; unknown: "
                "undeclared (two objects at once open a conflict)."
            ),
        ],
        ctx: Context,
    ) -> dict[str, Any]:
        """Declare a predicate's cardinality (needs configuration:write); unknown removes
        the declaration (a second object at once then opens a conflict)."""
        row = call(
            ctx,
            project_id,
            "select * from memory_http.declare_predicate(%s::uuid, %s::text, %s::text)",
            (project_id, predicate, cardinality),
            row=True,
        )
        return {**row, "declared_at": row["declared_at"].isoformat()}

    @server.tool()
    def list_conflicts(
        project_id: ProjectId,
        ctx: Context,
        status: Annotated[
            Literal["open", "resolved", "all"], Field(description="Default open.")
        ] = "open",
        predicate: Annotated[str | None, Field(description="Only this predicate's.")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
        before: Annotated[
            Instant | None, Field(description="next_before of the last page.")
        ] = None,
        before_id: Annotated[
            UUID | None, Field(description="next_before_id of the last page.")
        ] = None,
    ) -> dict[str, Any]:
        """What do I know that disagrees? The conflicts of the memory, newest first: a
        subject whose facts of one predicate disagree (two objects at once for an
        undeclared predicate, a contradiction, a claim against a confirmed fact), with
        its cause and how many members it has. get_conflict shows one."""
        conflicts: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.list_conflicts(%s::uuid, %s::text, %s::text, %s::integer, "
            "%s::timestamptz, %s::uuid)",
            (project_id, status, predicate, limit, before, before_id),
        )
        return conflicts

    @server.tool()
    def get_conflict(project_id: ProjectId, conflict_id: UUID, ctx: Context) -> dict[str, Any]:
        """One conflict: each member (a fact, or a claim held back) with its object,
        window, standing, confidence and source, and the conflict's events."""
        conflict: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.get_conflict(%s::uuid, %s::uuid)",
            (project_id, conflict_id),
        )
        return conflict

    @server.tool()
    def resolve_conflict(
        project_id: ProjectId,
        conflict_id: UUID,
        resolution: Annotated[
            Resolution,
            Field(
                description="keep_both: both hold (many for this subject); supersede: "
                "member_id wins from `at`; retract: member_id never held."
            ),
        ],
        ctx: Context,
        member_id: Annotated[
            UUID | None, Field(description="supersede: the winner; retract: the one to retract.")
        ] = None,
        at: Annotated[
            Instant | None,
            Field(description="supersede: the winner holds from here (default its valid_from)."),
        ] = None,
        reason: Annotated[str | None, Field(max_length=2000)] = None,
    ) -> dict[str, Any]:
        """Settle an open conflict (needs memory:review): the facts it closed, retracted
        or asserted."""
        resolved: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.resolve_conflict(%s::uuid, %s::uuid, %s::text, %s::uuid, "
            "%s::timestamptz, %s::text)",
            (project_id, conflict_id, resolution, member_id, at, reason),
        )
        return resolved

    @server.tool()
    def review_fact(
        project_id: ProjectId,
        fact_id: UUID,
        standing: Annotated[
            Standing,
            Field(description="confirmed, unreviewed, or rejected (which retracts the fact)."),
        ],
        ctx: Context,
        reason: Annotated[str | None, Field(max_length=2000)] = None,
    ) -> dict[str, Any]:
        """Set a fact's standing (needs memory:review): confirmed facts rank above
        unreviewed ones, rejected ones never appear."""
        reviewed: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.review_fact(%s::uuid, %s::uuid, %s::text, %s::text)",
            (project_id, fact_id, standing, reason),
        )
        return reviewed

    @server.tool()
    def name_entity(
        project_id: ProjectId,
        name: str,
        ctx: Context,
        aliases: Annotated[
            list[str] | None, Field(description="Other names for it (at most 100).")
        ] = None,
        entity_type: str | None = None,
        summary: str | None = None,
    ) -> dict[str, Any]:
        """Create or update an entity and its aliases ("ACME Corp" is Acme). Facts whose
        object was written as any of its names become facts about it, whenever they came."""
        entity: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.upsert_entity(%s::uuid, %s::text, %s::text, %s::text, %s::text[])",
            (project_id, name, entity_type, summary, aliases or []),
        )
        return entity

    @server.tool()
    def merge_entities(
        project_id: ProjectId,
        keep: Annotated[str, Field(description="The entity that stays (name or alias).")],
        absorb: Annotated[str, Field(description="The entity merged into it (name or alias).")],
        ctx: Context,
        dry_run: Annotated[
            bool, Field(description="Only say what the merge would do (it cannot be undone).")
        ] = False,
    ) -> dict[str, Any]:
        """Two entities are one thing ("Mel" is Melanie): the absorbed one's facts, edges,
        aliases and notes become the kept one's, and its name an alias of it."""
        merged: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.merge_entities(%s::uuid, %s::text, %s::text, %s::boolean)",
            (project_id, keep, absorb, dry_run),
        )
        return merged

    @server.tool()
    def split_entity(
        project_id: ProjectId,
        name: Annotated[str, Field(description="An alias of an entity.")],
        ctx: Context,
        dry_run: Annotated[bool, Field(description="Only say what the split would do.")] = False,
    ) -> dict[str, Any]:
        """Undo a wrong alias or merge: the alias becomes an entity of its own again, with
        every fact written with that name."""
        split: dict[str, Any] = call(
            ctx,
            project_id,
            "select memory_http.split_entity(%s::uuid, %s::text, %s::boolean)",
            (project_id, name, dry_run),
        )
        return split

    return server


class _BearerGate:
    """Refuses a request without a valid API key (401, no detail) before MCP sees it."""

    def __init__(self, app: StreamableHTTPASGIApp, get_db: Callable[[], Database]) -> None:
        self.app = app
        self.get_db = get_db

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = bearer(headers)
        try:
            ok = token is not None and await anyio.to_thread.run_sync(
                self.get_db().authenticate, token
            )
            error = None if ok else unauthorized()
        except psycopg.Error as err:
            error = from_db_error(err)
        except PoolTimeout:
            error = ApiError(503, "unavailable", "no database connection available")
        except OrgBusy:
            error = org_busy()
        if error is not None:
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def mount(app: FastAPI) -> MCPServer:
    """Serve MCP over streamable HTTP at /mcp on the API app (its database and query
    embedder, made in the app's lifespan), and run the MCP session manager in it."""
    backend = Backend(
        get_db=lambda: app.state.db,
        get_embedder=lambda: getattr(app.state, "embedder", None),
    )
    server = build_server(backend)
    # Stateless JSON: every POST is answered on its own, so any API process can serve
    # any request and nothing is left streaming at shutdown. DNS-rebinding checks are
    # off: the API binds where it is configured, and every request needs a key.
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    gate = _BearerGate(StreamableHTTPASGIApp(server.session_manager), backend.get_db)
    app.router.routes.append(
        Route(MCP_PATH, endpoint=gate, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    )
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        async with inner(a) as state, server.session_manager.run():
            yield state

    app.router.lifespan_context = lifespan
    return server


def run_stdio(dsn: str, token: str, embedder: QueryEmbedder | None = None) -> None:
    """Serve MCP over stdin/stdout with one API key (checked at start)."""
    db = Database(dsn, min_size=1, max_size=4)
    db.pool.open(wait=True, timeout=30)
    try:
        if not db.authenticate(token):
            raise PermissionError(f"{KEY_VARIABLE}: invalid API key")
        server = build_server(
            Backend(get_db=lambda: db, get_embedder=lambda: embedder, token=token)
        )
        server.run("stdio")
    finally:
        db.close()
