"""The local model on ONNX Runtime (workers/onnx_embedding.py) gives LocalMiniLM's
vectors (torch, the same weights) within TOLERANCE per component, alone and in a padded
batch, for short, long (truncated), non-Latin and empty texts; the configured local
embedder is that runtime."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the local embedder needs the `embed` extra")
pytest.importorskip("onnxruntime", reason="the ONNX runtime is part of the `embed` extra")

from chronomem.settings import EmbeddingSettings
from workers.embedding import LocalMiniLM, make_embedder
from workers.onnx_embedding import TOLERANCE, OnnxMiniLM

TEXTS = [
    "When did Melanie paint a sunrise?",
    "What did Caroline research?",
    "x",
    "The customer upgraded to the enterprise plan, then moved to Lisbon. " * 40,  # > 256 tokens
    "Über naïve café — 東京で会いましょう 🎉",
    "",
]


def _max_difference(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for u, v in zip(a, b, strict=True) for x, y in zip(u, v, strict=True))


def test_onnx_vectors_are_torch_vectors_within_tolerance() -> None:
    torch_model, onnx_model = LocalMiniLM(), OnnxMiniLM(threads=1)
    expected = torch_model.embed(TEXTS)
    assert _max_difference(onnx_model.embed(TEXTS), expected) <= TOLERANCE  # one padded batch
    for text, vector in zip(TEXTS, expected, strict=True):
        assert _max_difference(onnx_model.embed([text]), [vector]) <= TOLERANCE
    # Control: the bound is tight enough to tell texts apart (a one-word change).
    other = torch_model.embed(["When did Melanie paint a sunset?"])
    assert _max_difference(other, expected[:1]) > 100 * TOLERANCE
    assert onnx_model.dim == len(expected[0]) == 384 and onnx_model.name == torch_model.name


def test_the_local_embedder_is_onnx_unless_torch_is_asked_for() -> None:
    assert isinstance(make_embedder(EmbeddingSettings()), OnnxMiniLM)
    assert isinstance(make_embedder(EmbeddingSettings(runtime="torch")), LocalMiniLM)
