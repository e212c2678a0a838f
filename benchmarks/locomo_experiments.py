"""Experiments, not the product: variants of the episode legs measured beside it.

- BM25 full text: the same lexemes as the product's full-text leg (the episodes'
  content_tsv and the question's to_tsvector), ranked by Okapi BM25 (textbook
  k1 = 1.2, b = 0.75, Lucene's idf) instead of ts_rank_cd, which has no notion of how
  rare a word is: a question's speaker name, present in half the turns, weighs as much
  as the one rare word that finds the turn. Written as one SQL statement, so it is a
  candidate for the leg itself (see the README for what it would take in production).
- Context embedding: each turn is embedded together with the turn before it in its
  session, so a reply ("Yes, it was so powerful") carries what it answers.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from benchmarks.locomo_data import Conversation

BM25_K1 = 1.2
BM25_B = 0.75

Conn = psycopg.Connection[Any]

# Document length is the number of distinct lexemes (length(tsvector)); term
# frequency the number of positions of the lexeme in the episode.
BM25_SQL = """
with q as (
  select distinct l as lex
    from unnest(tsvector_to_array(to_tsvector('english'::regconfig, %(query)s))) l
), docs as materialized (
  select e.episode_id, e.content_tsv, length(e.content_tsv)::float8 as dl
    from memory.episodes e
   where e.project_id = %(project)s
), stats as (
  select count(*)::float8 as n, avg(d.dl) as avgdl from docs d
), idf as (
  select q.lex, ln(1 + (s.n - c.df + 0.5) / (c.df + 0.5)) as idf
    from q cross join stats s
   cross join lateral (
     select count(*)::float8 as df from docs d where d.content_tsv @@ quote_literal(q.lex)::tsquery
   ) c
), terms as (
  select d.episode_id,
         i.idf * t.tf * (%(k1)s + 1)
           / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * d.dl / s.avgdl)) as score
    from docs d
   cross join stats s
   cross join lateral unnest(d.content_tsv) u(lexeme, positions, weights)
    join idf i on i.lex = u.lexeme
   cross join lateral (select coalesce(cardinality(u.positions), 1)::float8 as tf) t
)
select episode_id from terms group by episode_id order by sum(score) desc, episode_id
 limit %(n)s
"""


def bm25(conn: Conn, project: uuid.UUID, query: str, n: int) -> list[uuid.UUID]:
    rows = conn.execute(
        BM25_SQL, {"query": query, "project": project, "k1": BM25_K1, "b": BM25_B, "n": n}
    ).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def context_texts(conv: Conversation, before: int = 1) -> list[str]:
    """Per turn (in turn order): the `before` previous turns of its session, then it."""
    out = []
    for session in conv.sessions:
        contents = [t.content for t in session.turns]
        for i, text in enumerate(contents):
            out.append("\n".join([*contents[max(0, i - before) : i], text]))
    return out
