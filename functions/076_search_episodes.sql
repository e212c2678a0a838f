-- The episode legs of memory.search: each returns the ranked episode ids
-- with a score (higher is better), which the fusion in 077 normalises.

-- The question as a full-text OR query: a document need not hold every
-- word of a long question, only the rare ones it shares (ranking sorts the
-- rest).  NULL when the question has no searchable word.
create or replace function memory_internal.question_tsquery(p_query text)
  returns tsquery
  language sql immutable parallel safe
  as $$
    select string_agg(quote_literal(l), ' | ')::tsquery
      from unnest(tsvector_to_array(to_tsvector('english'::regconfig, coalesce(p_query, '')))) l
  $$;

-- Per-project totals for BM25's collection statistics: how many episodes
-- a project holds and how long they are (estimated tokens).  Kept in the
-- sharded counters by the writing statement, as monotonic pairs
-- (ingested, deleted), so a search reads a few rows instead of scanning
-- the project, and never another project's or org's numbers.
create or replace function memory_internal.tg_episodes__text_stats() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_suffix text := case tg_op when 'INSERT' then '_ingested' else '_deleted' end;
  r record;
begin
  if tg_op = 'INSERT' then
    for r in select n.org_id, n.project_id, count(*) as docs, sum(n.token_count) as tokens
               from new_rows n group by 1, 2 order by 1, 2 loop
      perform memory_internal.bump_counter(r.org_id, r.project_id, 'episodes' || v_suffix, r.docs);
      perform memory_internal.bump_counter(r.org_id, r.project_id, 'episode_tokens' || v_suffix, r.tokens);
    end loop;
  else
    for r in select o.org_id, o.project_id, count(*) as docs, sum(o.token_count) as tokens
               from old_rows o group by 1, 2 order by 1, 2 loop
      perform memory_internal.bump_counter(r.org_id, r.project_id, 'episodes' || v_suffix, r.docs);
      perform memory_internal.bump_counter(r.org_id, r.project_id, 'episode_tokens' || v_suffix, r.tokens);
    end loop;
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_episodes__text_stats() is
  'Adds the inserted (deleted) episodes and their token counts to the project''s counters episodes_ingested / episode_tokens_ingested (_deleted): the collection statistics of BM25.';

create or replace trigger "40_text_stats_insert" after insert on memory.episodes
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_episodes__text_stats();
create or replace trigger "40_text_stats_delete" after delete on memory.episodes
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_episodes__text_stats();

-- Episode vector leg.  The index picks the candidates (iterative scans may
-- return them slightly out of order); ranks are by similarity, then id.  A
-- plain SQL function, so the planner inlines it and the HNSW index serves
-- the ORDER BY ... LIMIT (the caller sets hnsw.iterative_scan).
create or replace function memory_internal.search_episode_vector(
  p_project uuid, p_query_embedding vector, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (episode_id uuid, score double precision)
  language sql stable
  as $$
    select x.episode_id, x.score
      from (select e.episode_id, 1 - (e.embedding <=> p_query_embedding) as score
              from memory.episodes e
             where e.project_id = p_project and e.embedding is not null
               and e.occurred_at <= p_at and e.created_at <= p_known_at
             order by e.embedding <=> p_query_embedding
             limit p_n) x
     -- Sorted again by the similarity, an expression the planner cannot
     -- take for the index order: a relaxed scan's order is not exact.
     order by x.score desc, x.episode_id
  $$;
comment on function memory_internal.search_episode_vector(uuid, vector, timestamptz, timestamptz, integer) is
  'Episode vector leg of memory.search: the p_n episodes of the project nearest to the query embedding (HNSW, cosine), best first, score = cosine similarity.';

-- Episode full-text leg: Okapi BM25 over the question's lexemes (an OR
-- query, so a long question finds the episode holding its rare words).
-- ts_rank_cd has no notion of how rare a word is, so a speaker's name in
-- half the turns weighed as much as the one rare word that finds the turn.
-- Constants are the textbook ones, not fitted to any data: k1 = 1.2,
-- b = 0.75 (Robertson & Zaragoza, "The Probabilistic Relevance Framework:
-- BM25 and Beyond", 2009) and the idf ln(1 + (N - df + 0.5) / (df + 0.5))
-- (Lucene's, never negative).
-- Statistics are the project's own: document frequencies are counted
-- among the episodes that match the OR query (every episode holding a
-- query word matches it, so the count is exact and costs no extra scan),
-- N and the mean length come from the project's counters (see
-- tg_episodes__text_stats).  Length is the episode's estimated token
-- count.  The candidate set is the same as the previous ts_rank_cd leg's:
-- the matches of the OR query.
create or replace function memory_internal.search_episode_fulltext(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (episode_id uuid, score double precision)
  language sql stable
  as $$
    with q as (
      select memory_internal.question_tsquery(p_query) as tsq,
             array(select distinct l from unnest(tsvector_to_array(
                     to_tsvector('english'::regconfig, coalesce(p_query, '')))) l) as lexemes
    ), stats as (
      select coalesce(sum(c.value) filter (where c.metric = 'episodes_ingested'), 0)
               - coalesce(sum(c.value) filter (where c.metric = 'episodes_deleted'), 0) as docs,
             coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_ingested'), 0)
               - coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_deleted'), 0) as tokens
        from memory_internal.counters c
       where c.org_id = memory_internal.project_org(p_project) and c.project_id = p_project
         and c.metric in ('episodes_ingested', 'episodes_deleted',
                          'episode_tokens_ingested', 'episode_tokens_deleted')
    ), matched as materialized (
      select e.episode_id, e.content_tsv, greatest(e.token_count, 1)::float8 as dl
        from memory.episodes e, q
       where e.project_id = p_project and e.content_tsv @@ q.tsq
         and e.occurred_at <= p_at and e.created_at <= p_known_at
    ), tf as (
      select m.episode_id, m.dl, u.lexeme, coalesce(cardinality(u.positions), 1)::float8 as tf
        from matched m
       cross join q
       cross join lateral unnest(m.content_tsv) u
       where u.lexeme = any (q.lexemes)
    ), df as (
      select t.lexeme, count(*)::float8 as df from tf t group by t.lexeme
    ), coll as (
      -- Rows written with triggers off have no counters: never fewer
      -- documents than a word occurs in, nor a zero mean length.
      select greatest(s.docs::float8, (select coalesce(max(d.df), 1) from df d)) as n,
             coalesce(case when s.docs > 0 and s.tokens > 0 then s.tokens::float8 / s.docs end,
                      (select avg(m.dl) from matched m), 1) as avgdl
        from stats s
    )
    select t.episode_id,
           sum(ln(1 + (c.n - d.df + 0.5) / (d.df + 0.5))
               * t.tf * (1.2 + 1) / (t.tf + 1.2 * (1 - 0.75 + 0.75 * t.dl / c.avgdl))) as score
      from tf t join df d on d.lexeme = t.lexeme cross join coll c
     group by t.episode_id
     order by 2 desc, 1
     limit p_n
  $$;
comment on function memory_internal.search_episode_fulltext(uuid, text, timestamptz, timestamptz, integer) is
  'Episode full-text leg of memory.search: episodes holding any of the question''s lexemes, ranked by Okapi BM25 (k1 1.2, b 0.75, Lucene idf) with the project''s own document frequencies, count and mean length; best first.';
