"""Retrieval: hybrid search, prompt context, the graph, entities, communities."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query
from psycopg.types.json import Jsonb

from thin_api.db import Access, Alongside
from thin_api.deps import DB, Embedder, Metrics, Token
from thin_api.embedding import QueryEmbedder, query_vector, vector_query_text, vector_text
from thin_api.models import (
    CommunityList,
    CommunityRefresh,
    ContextRequest,
    ContextResult,
    Entity,
    EntityMerge,
    EntityMerged,
    EntityPage,
    EntitySplit,
    EntitySplitOff,
    EntityUpsert,
    Instant,
    Neighbors,
    SearchRequest,
    SearchResult,
)
from thin_api.routes import ERRORS

router = APIRouter(prefix="/v1", tags=["retrieval"], responses=ERRORS)


def _vector_query_text(
    embedder: QueryEmbedder, project: UUID, body: SearchRequest | ContextRequest
) -> Alongside | None:
    """The text the vector legs embed, asked in the authorizing statement; none when the
    client sent its own vector."""
    if body.query_embedding:
        return None
    return vector_query_text(embedder, project, body.query, body.as_of, body.known_at)


@router.post("/projects/{project_id}/search", response_model=SearchResult)
def search(
    project_id: UUID,
    body: SearchRequest,
    token: Token,
    db: DB,
    embedder: Embedder,
    metrics: Metrics,
) -> Any:
    """Hybrid search (vector, full-text, entity, graph legs; their normalised scores
    summed, episodes sharing score with neighbouring turns) at `as_of` / `known_at`.
    A failing leg marks the answer degraded instead of failing it."""

    def params(text: str | None) -> tuple[Any, ...]:
        computed = None if body.query_embedding else query_vector(embedder, text, body.query)
        return (
            project_id,
            body.query,
            vector_text(body.query_embedding),
            computed,
            body.as_of,
            body.known_at,
            body.k,
            body.legs,
            body.fusion,
            body.labels,
            None if body.fields is None else Jsonb(body.fields),
        )

    with metrics.search_latency.labels("search").time():
        return db.call(
            Access(token, project_id),
            "select memory_http.search(%s::uuid, %s::text, %s::vector, %s::vector, "
            "%s::timestamptz, %s::timestamptz, %s::integer, %s::text[], %s::text, %s::text[], "
            "%s::jsonb)",
            params,
            alongside=_vector_query_text(embedder, project_id, body),
        )


@router.post("/projects/{project_id}/context", response_model=ContextResult)
def context(
    project_id: UUID,
    body: ContextRequest,
    token: Token,
    db: DB,
    embedder: Embedder,
    metrics: Metrics,
) -> Any:
    """A prompt-ready block: the facts that hold at `as_of` with their windows, then
    supporting conversation excerpts, within `max_tokens`."""

    def params(text: str | None) -> tuple[Any, ...]:
        computed = None if body.query_embedding else query_vector(embedder, text, body.query)
        return (
            project_id,
            body.query,
            vector_text(body.query_embedding),
            computed,
            body.as_of,
            body.known_at,
            body.max_tokens,
            body.k,
            body.labels,
            None if body.fields is None else Jsonb(body.fields),
        )

    with metrics.search_latency.labels("context").time():
        return db.call(
            Access(token, project_id),
            "select memory_http.context(%s::uuid, %s::text, %s::vector, %s::vector, "
            "%s::timestamptz, %s::timestamptz, %s::integer, %s::integer, %s::text[], %s::jsonb)",
            params,
            alongside=_vector_query_text(embedder, project_id, body),
        )


@router.get("/projects/{project_id}/graph/neighbors", response_model=Neighbors, tags=["graph"])
def neighbors(
    project_id: UUID,
    token: Token,
    db: DB,
    entity: Annotated[str, Query(min_length=1, description="Entity name or alias.")],
    depth: Annotated[int, Query(ge=1, le=3, description="1-3.")] = 1,
    as_of: Annotated[Instant | None, Query(description="Default now.")] = None,
    known_at: Annotated[Instant | None, Query(description="Default now.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many nodes.")] = 200,
) -> Any:
    """The entities within `depth` edges of an entity, over the edges effective at
    `as_of`, and those edges."""
    return db.call(
        Access(token, project_id),
        "select memory.graph_neighbors(%s::uuid, %s::text, %s::integer, %s::timestamptz, "
        "%s::timestamptz, %s::integer)",
        (project_id, entity, depth, as_of, known_at, limit),
    )


@router.get("/projects/{project_id}/entities", response_model=EntityPage, tags=["graph"])
def entities(
    project_id: UUID,
    token: Token,
    db: DB,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="1-1000.")] = 100,
) -> Any:
    return db.call(
        Access(token, project_id),
        "select memory.list_entities(%s::uuid, %s::text, %s::integer)",
        (project_id, cursor, limit),
    )


@router.post("/projects/{project_id}/entities", response_model=Entity, tags=["graph"])
def upsert_entity(project_id: UUID, body: EntityUpsert, token: Token, db: DB) -> Any:
    """Create or update an entity and add aliases, in one transaction. Facts stored with
    any of its names as a plain-name object become the entity's, as if it had come
    first."""
    return db.call(
        Access(token, project_id),
        "select memory_http.upsert_entity(%s::uuid, %s::text, %s::text, %s::text, %s::text[])",
        (project_id, body.name, body.entity_type, body.summary, body.aliases),
    )


@router.post("/projects/{project_id}/entities/merge", response_model=EntityMerged, tags=["graph"])
def merge_entities(project_id: UUID, body: EntityMerge, token: Token, db: DB) -> Any:
    """Merge two entities that are one thing ("Mel" and "Melanie"): the absorbed one's
    facts, edges, aliases and notes become the kept one's, as if its name had been an
    alias from the start; claims the merge makes one are laid out in world-time order.
    With `dry_run` the answer is what it would do, and nothing changes."""
    return db.call(
        Access(token, project_id),
        "select memory_http.merge_entities(%s::uuid, %s::text, %s::text, %s::boolean)",
        (project_id, body.keep, body.absorb, body.dry_run),
    )


@router.post("/projects/{project_id}/entities/split", response_model=EntitySplitOff, tags=["graph"])
def split_entity(project_id: UUID, body: EntitySplit, token: Token, db: DB) -> Any:
    """Undo an alias or a merge: the alias `name` becomes an entity of its own, with every
    fact written with that name, and both sides are laid out again in world-time order.
    With `dry_run` the answer is what it would do, and nothing changes."""
    return db.call(
        Access(token, project_id),
        "select memory_http.split_entity(%s::uuid, %s::text, %s::boolean)",
        (project_id, body.name, body.dry_run),
    )


@router.get("/projects/{project_id}/communities", response_model=CommunityList, tags=["graph"])
def communities(
    project_id: UUID,
    token: Token,
    db: DB,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Communities per page.")] = 100,
    members: Annotated[
        int, Query(ge=0, le=10000, description="Members listed per community (by name).")
    ] = 100,
) -> Any:
    """Communities from the last computation (label propagation over current edges; the
    periodic job computes them again whenever the graph changed), largest first."""
    return db.call(
        Access(token, project_id),
        "select memory.list_communities(%s::uuid, %s::text, %s::integer, %s::integer)",
        (project_id, cursor, limit, members),
    )


@router.post(
    "/projects/{project_id}/communities/refresh", response_model=CommunityRefresh, tags=["graph"]
)
def refresh_communities(project_id: UUID, token: Token, db: DB) -> Any:
    """Compute the communities now if the project's current edges changed since the last
    computation (needs project:write); the periodic job does the same every 5 minutes."""
    return db.call(
        Access(token, project_id),
        "select memory_http.refresh_communities(%s::uuid)",
        (project_id,),
    )
