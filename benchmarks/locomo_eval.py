"""Evidence recall: call memory.search, map hits back to LoCoMo dialog ids, tally."""

from __future__ import annotations

import statistics
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from benchmarks.locomo_data import CATEGORIES

KS = (1, 5, 10)
RRF_K = 60  # memory_internal.rrf: 1 / (60 + rank)

Conn = psycopg.Connection[Any]
Ranked = list[frozenset[str]]  # dia ids behind each hit, best hit first

SEARCH_SQL = """
select memory.search(p_project => %s, p_query => %s, p_query_embedding => %s::vector,
                     p_k => %s, p_legs => %s::text[], p_fusion => %s)
"""


def search(
    conn: Conn,
    project: uuid.UUID,
    query: str,
    vector: str,
    k: int,
    legs: Sequence[str] | None,
    fusion: str = "scores",
) -> dict[str, Any]:
    row = conn.execute(SEARCH_SQL, (project, query, vector, k, legs, fusion)).fetchone()
    conn.commit()
    assert row is not None
    result: dict[str, Any] = row[0]
    return result


def hits(result: dict[str, Any], kinds: Iterable[str] = ("episode",)) -> list[uuid.UUID]:
    """Ids of the results of the given kinds, in result order."""
    wanted = set(kinds)
    return [uuid.UUID(r["id"]) for r in result["results"] if r["kind"] in wanted]


def leg_ranking(result: dict[str, Any], leg: str) -> list[uuid.UUID]:
    """One leg's own ranked list, read from the ranks memory.search reports."""
    ranked = [(r["ranks"][leg], uuid.UUID(r["id"])) for r in result["results"] if leg in r["ranks"]]
    return [i for _, i in sorted(ranked)]


def rrf(lists: Sequence[Sequence[uuid.UUID]]) -> list[uuid.UUID]:
    """Reciprocal rank fusion as memory_internal.rrf defines it, ties by id."""
    score: dict[uuid.UUID, float] = defaultdict(float)
    for ranked in lists:
        for rank, i in enumerate(ranked, start=1):
            score[i] += 1.0 / (RRF_K + rank)
    return sorted(score, key=lambda i: (-score[i], str(i)))


def to_dias(ids: Sequence[uuid.UUID], dia_of: dict[uuid.UUID, frozenset[str]]) -> Ranked:
    return [dia_of.get(i, frozenset()) for i in ids]


def recall(ranked: Ranked, evidence: frozenset[str], k: int) -> float:
    """Fraction of the evidence turns among the dia ids of the top-k hits."""
    found: set[str] = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(evidence & found) / len(evidence)


class Tally:
    """Per system and category, the recall@k of every question; means on report."""

    def __init__(self, ks: Sequence[int] = KS) -> None:
        self.ks = tuple(ks)
        self._scores: dict[str, dict[int, list[dict[int, float]]]] = defaultdict(
            lambda: defaultdict(list)
        )

    def add(self, system: str, category: int, ranked: Ranked, evidence: frozenset[str]) -> None:
        self._scores[system][category].append({k: recall(ranked, evidence, k) for k in self.ks})

    @property
    def systems(self) -> list[str]:
        return list(self._scores)

    def _mean(self, rows: list[dict[int, float]]) -> dict[str, float]:
        return {f"recall@{k}": round(statistics.fmean(r[k] for r in rows), 4) for k in self.ks}

    def overall(self) -> dict[str, dict[str, float]]:
        return {
            s: self._mean([r for rows in by_cat.values() for r in rows])
            for s, by_cat in self._scores.items()
        }

    def by_category(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for cat, name in CATEGORIES.items():
            row = {s: self._mean(by[cat]) for s, by in self._scores.items() if by.get(cat)}
            if row:
                out[f"{cat} {name}"] = row
        return out

    def questions(self) -> dict[str, int]:
        first = next(iter(self._scores.values()), {})
        return {f"{c} {CATEGORIES[c]}": len(rows) for c, rows in sorted(first.items())}
