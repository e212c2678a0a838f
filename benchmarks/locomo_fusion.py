"""Experiments on the product's episode legs: other fusions, context sharing, preferences.

Each question's two episode legs are read with their scores, straight from the
functions memory.search calls (memory_internal.search_episode_vector, with
search_episode_vector_within when the question names a period, and
search_episode_fulltext, 90 each), and fused here in Python in several ways, one of
them the product's own (a check that this re-implementation matches memory.search).
The previous product full-text leg (ts_rank_cd over the OR of the question's lexemes)
is measured beside them. Nothing here is fitted to the data: every variant uses the
textbook form of its method.
"""

from __future__ import annotations

import statistics
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from benchmarks.locomo_eval import rrf

Conn = psycopg.Connection[Any]
Scored = list[tuple[uuid.UUID, float]]  # a leg: (episode, score), best first
Position = tuple[int, int]  # (session number, turn index)

# The vector leg as memory.search runs it: the project's nearest n plus, when the
# question names a period, that period's nearest n (one scale: cosine similarity).
LEGS_SQL = """
select 'vector' as leg, u.episode_id, max(u.score) as score
  from (select episode_id, score
          from memory_internal.search_episode_vector(%(p)s, %(v)s::vector, now(), now(), %(n)s)
        union all
        select episode_id, score
          from memory_internal.search_episode_vector_within(%(p)s, %(v)s::vector,
                 memory_internal.question_period(%(q)s), now(), now(), %(n)s)) u
 group by u.episode_id
union all
select 'fulltext', episode_id, score
  from memory_internal.search_episode_fulltext(%(p)s, %(q)s, now(), now(), %(n)s)
 order by 1 desc, 3 desc, 2
"""
# The full-text leg before BM25: cover density over the same OR query.
TS_RANK_CD_SQL = """
select e.episode_id from memory.episodes e
 where e.project_id = %(p)s and e.content_tsv @@ memory_internal.question_tsquery(%(q)s)
 order by ts_rank_cd(e.content_tsv, memory_internal.question_tsquery(%(q)s), 1) desc, 1
 limit %(n)s
"""

# What memory.search's preferences read, from the SQL functions that define them
# (one definition): each episode's speaker and time; the question's words (runs of
# 1-4) and the period it names.
EPISODES_SQL = """
select e.episode_id, memory_internal.episode_speaker(e.metadata), e.occurred_at
  from memory.episodes e where e.project_id = %(p)s
"""
QUESTION_SQL = """
select memory_internal.question_ngrams(memory.normalize_text(%(q)s)),
       lower(memory_internal.question_period(%(q)s)), upper(memory_internal.question_period(%(q)s))
"""

HALVING = (0.5, 0.25, 0.125)  # the product's shares at 1, 2, 3 turns
DISCOUNT = 0.5  # the product's preferences: a turn not preferred counts half
ONE_NEIGHBOUR = (0.5,)
SESSION_BOOST = 0.5  # share of the best score of a session given to each of its turns


def legs(conn: Conn, project: uuid.UUID, query: str, vector: str, n: int) -> dict[str, Scored]:
    out: dict[str, Scored] = {"vector": [], "fulltext": []}
    for leg, episode, score in conn.execute(
        LEGS_SQL, {"p": project, "v": vector, "q": query, "n": n}
    ).fetchall():
        out[leg].append((episode, float(score)))
    conn.commit()
    return out


@dataclass(frozen=True)
class EpisodeFacts:
    speaker: str | None
    occurred_at: datetime


@dataclass(frozen=True)
class QuestionFacts:
    ngrams: frozenset[str]
    period: tuple[datetime, datetime] | None


def episode_facts(conn: Conn, project: uuid.UUID) -> dict[uuid.UUID, EpisodeFacts]:
    rows = conn.execute(EPISODES_SQL, {"p": project}).fetchall()
    conn.commit()
    return {r[0]: EpisodeFacts(r[1], r[2]) for r in rows}


def question_facts(conn: Conn, query: str) -> QuestionFacts:
    row = conn.execute(QUESTION_SQL, {"q": query}).fetchone()
    conn.commit()
    assert row is not None
    period = (row[1], row[2]) if row[1] is not None else None
    return QuestionFacts(frozenset(row[0] or ()), period)


def ts_rank_cd(conn: Conn, project: uuid.UUID, query: str, n: int) -> list[uuid.UUID]:
    rows = conn.execute(TS_RANK_CD_SQL, {"p": project, "q": query, "n": n}).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def shifted_z(leg: Scored) -> dict[uuid.UUID, float]:
    """memory.search's scale: z-score shifted so the leg's weakest hit is 0; 1 if flat."""
    if not leg:
        return {}
    values = [s for _, s in leg]
    low, sd = min(values), statistics.pstdev(values)
    return {i: (s - low) / sd if sd > 0 else 1.0 for i, s in leg}


def min_max(leg: Scored) -> dict[uuid.UUID, float]:
    if not leg:
        return {}
    values = [s for _, s in leg]
    low, high = min(values), max(values)
    return {i: (s - low) / (high - low) if high > low else 1.0 for i, s in leg}


def combsum(
    lists: Sequence[Scored], norm: Callable[[Scored], dict[uuid.UUID, float]]
) -> dict[uuid.UUID, float]:
    total: dict[uuid.UUID, float] = defaultdict(float)
    for leg in lists:
        for i, s in norm(leg).items():
            total[i] += s
    return dict(total)


def share_context(
    scores: Mapping[uuid.UUID, float],
    position: Mapping[uuid.UUID, Position],
    at: Mapping[Position, uuid.UUID],
    shares: Sequence[float],
) -> dict[uuid.UUID, float]:
    """Each episode passes shares[d-1] of its score to the turns d away in its session."""
    out: dict[uuid.UUID, float] = defaultdict(float, scores)
    for i, s in scores.items():
        session, turn = position[i]
        for d, share in enumerate(shares, start=1):
            for t in (turn - d, turn + d):
                if (j := at.get((session, t))) is not None:
                    out[j] += share * s
    return dict(out)


def session_boost(
    scores: Mapping[uuid.UUID, float], position: Mapping[uuid.UUID, Position]
) -> dict[uuid.UUID, float]:
    """Every turn also gets SESSION_BOOST x the best score in its session."""
    best: dict[int, float] = defaultdict(float)
    for i, s in scores.items():
        best[position[i][0]] = max(best[position[i][0]], s)
    return {i: s + SESSION_BOOST * best[position[i][0]] for i, s in scores.items()}


def prefer(
    scores: Mapping[uuid.UUID, float],
    facts: Mapping[uuid.UUID, EpisodeFacts],
    question: QuestionFacts,
    rules: Sequence[str] = ("speaker", "period"),
) -> dict[uuid.UUID, float]:
    """memory.search's preferences: a turn of another participant than the one the
    question names (if exactly one), or outside the period it names, counts DISCOUNT
    (each rule multiplies)."""
    named = {f.speaker for i in scores if (f := facts[i]).speaker in question.ngrams}
    speaker = next(iter(named)) if len(named) == 1 else None
    out = {}
    for i, s in scores.items():
        f = facts[i]
        if "speaker" in rules and speaker is not None and f.speaker not in (None, speaker):
            s *= DISCOUNT
        if "period" in rules and question.period is not None:
            low, high = question.period
            s *= 1 if low <= f.occurred_at < high else DISCOUNT
        out[i] = s
    return out


def session_cap(
    order: Sequence[uuid.UUID], position: Mapping[uuid.UUID, Position], cap: int
) -> list[uuid.UUID]:
    """Diversification: at most `cap` turns of one session before any turn beyond it."""
    seen: dict[int, int] = defaultdict(int)
    first: list[uuid.UUID] = []
    rest: list[uuid.UUID] = []
    for i in order:
        seen[position[i][0]] += 1
        (first if seen[position[i][0]] <= cap else rest).append(i)
    return first + rest


def ranked(scores: Mapping[uuid.UUID, float]) -> list[uuid.UUID]:
    return sorted(scores, key=lambda i: (-scores[i], str(i)))


def variants(
    got: dict[str, Scored],
    position: Mapping[uuid.UUID, Position],
    at: Mapping[Position, uuid.UUID],
    facts: Mapping[uuid.UUID, EpisodeFacts],
    question: QuestionFacts,
) -> dict[str, list[uuid.UUID]]:
    """Every fusion variant's ranking, the product's ('product_fusion_in_python') first."""
    lists = [got["vector"], got["fulltext"]]
    z = combsum(lists, shifted_z)
    shared = share_context(z, position, at, HALVING)
    product = prefer(shared, facts, question)
    return {
        "product_fusion_in_python": ranked(product),
        "no_preferences": ranked(shared),
        "without_speaker_preference": ranked(prefer(shared, facts, question, ("period",))),
        "without_period_preference": ranked(prefer(shared, facts, question, ("speaker",))),
        "preferences_before_context": ranked(
            share_context(prefer(z, facts, question), position, at, HALVING)
        ),
        "session_cap_3": session_cap(ranked(product), position, 3),
        "rrf_plain": rrf([[i for i, _ in leg] for leg in lists]),
        "combsum_z_no_context": ranked(z),
        "combsum_minmax_with_context": ranked(
            share_context(combsum(lists, min_max), position, at, HALVING)
        ),
        "context_one_neighbour": ranked(share_context(z, position, at, ONE_NEIGHBOUR)),
        "context_plus_session_boost": ranked(session_boost(product, position)),
        "fulltext_with_context": ranked(
            share_context(shifted_z(got["fulltext"]), position, at, HALVING)
        ),
    }


DESCRIPTIONS = {
    "fulltext_ts_rank_cd": "the previous product full-text leg: ts_rank_cd (cover density, "
    "normalisation 1) over the OR of the question's lexemes",
    "product_fusion_in_python": "the product's fusion re-implemented here (shifted z-score "
    "CombSUM + halving context shares over 3 turns + speaker and period preferences, "
    "each a factor 1/2): should equal `fused`",
    "no_preferences": "the product's fusion without the preferences",
    "without_speaker_preference": "the product without the speaker preference",
    "without_period_preference": "the product without the preference for the period named",
    "preferences_before_context": "the preferences applied before the context shares",
    "session_cap_3": "diversification: at most 3 turns of one session before any further one",
    "rrf_plain": "plain RRF 1/(60+rank) of the product's two episode legs (the fusion before)",
    "combsum_z_no_context": "the product's CombSUM without the context shares",
    "combsum_minmax_with_context": "min-max normalisation instead of the shifted z-score",
    "context_one_neighbour": "context shares to the adjacent turns only (1/2)",
    "context_plus_session_boost": f"the product's ranking plus {SESSION_BOOST} x the best "
    "score of the turn's session (rank sessions, boost their turns)",
    "fulltext_with_context": "the BM25 leg alone with the context shares (no vector leg)",
}
