"""Experiments, not the product: context embeddings.

Each turn is embedded together with the turn before it in its session, so a reply
("Yes, it was so powerful") carries what it answers. (The BM25 experiment of the
previous session is now the product's full-text leg; the fusion variants are in
benchmarks/locomo_fusion.py.)
"""

from __future__ import annotations

from benchmarks.locomo_data import Conversation


def context_texts(conv: Conversation, before: int = 1) -> list[str]:
    """Per turn (in turn order): the `before` previous turns of its session, then it."""
    out = []
    for session in conv.sessions:
        contents = [t.content for t in session.turns]
        for i, text in enumerate(contents):
            out.append("\n".join([*contents[max(0, i - before) : i], text]))
    return out
