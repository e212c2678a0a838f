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

-- Whether an episode is part of the memory at p_at as known at
-- p_known_at: it had occurred by p_at and been stored by p_known_at.  The
-- one statement of that rule for every episode read of memory.search; a
-- plain SQL function of plain comparisons, so the planner inlines it and
-- its comparisons stay index conditions.
create or replace function memory_internal.episode_visible(
  p_occurred_at timestamptz, p_created_at timestamptz, p_at timestamptz, p_known_at timestamptz)
  returns boolean
  language sql immutable parallel safe
  as $$ select p_occurred_at <= p_at and p_created_at <= p_known_at $$;
comment on function memory_internal.episode_visible(timestamptz, timestamptz, timestamptz, timestamptz) is
  'Whether an episode (occurred_at, created_at) is in the memory at p_at as known at p_known_at: occurred by p_at and stored by p_known_at.';

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
               and memory_internal.episode_visible(e.occurred_at, e.created_at, p_at, p_known_at)
             order by e.embedding <=> p_query_embedding
             limit p_n) x
     -- Sorted again by the similarity, an expression the planner cannot
     -- take for the index order: a relaxed scan's order is not exact.
     order by x.score desc, x.episode_id
  $$;
comment on function memory_internal.search_episode_vector(uuid, vector, timestamptz, timestamptz, integer) is
  'Episode vector leg of memory.search: the p_n episodes of the project nearest to the query embedding (HNSW, cosine), best first, score = cosine similarity.';

-- How many rows an exact ranking may read instead of a filtered HNSW
-- walk.  A filter that keeps a share s of the index's rows makes the
-- iterative scan visit about p_n / s of them (at most
-- hnsw.max_scan_tuples), and what it returns are the first rows it meets
-- that pass the filter, not always the nearest; an exact ranking reads
-- each of the filter's rows once.  For a filter of r rows out of N, exact
-- is cheaper while r * r < w * p_n * N, w the cost of a visited HNSW
-- tuple over that of an exactly ranked row.  At 1M facts w measures near
-- 20 (a month of the big project through HNSW against ranked exactly:
-- docs/decisions/009-vector-legs-width-and-plans.md).  w is taken as 5,
-- so an exact ranking reads at most ~12,000 rows at 1M.  Never below
-- 2000: a period that small is ranked exactly in any install.
create or replace function memory_internal.vector_exact_budget(p_n integer, p_index_rows real)
  returns integer
  language sql immutable parallel safe
  as $$
    select greatest(2000, ceil(sqrt(5.0 * p_n * greatest(p_index_rows, 0)))::integer)
  $$;
comment on function memory_internal.vector_exact_budget(integer, real) is
  'The most rows a vector leg ranks exactly (reading them by btree) rather than through the HNSW index with a filter, for p_n hits from an index of p_index_rows rows: sqrt(5 * p_n * p_index_rows), at least 2000.';

-- The HNSW search width (hnsw.ef_search) memory.search gives its vector
-- legs for p_n hits: 8 per hit, at least 100 and at most 500 (Weaviate's
-- documented defaults for its dynamic ef: dynamicEfFactor 8, dynamicEfMin
-- 100, dynamicEfMax 500; a fact about another product, not its code).
-- pgvector's default of 40 is a search width only a little above the 30
-- hits a k = 10 search asks for, and a walk that width may end in the wrong
-- part of the graph and return none of a question's 10 nearest rows (a
-- few percent of questions on the 100k benchmark load; recall@10 about 0.5
-- on the uniform random vectors of tests/py/test_search_plan.py).  The
-- width for k = 10, 240, finds them for well under a millisecond more per
-- leg (docs/decisions/009-vector-legs-width-and-plans.md).
create or replace function memory_internal.vector_ef_search(p_n integer)
  returns integer
  language sql immutable parallel safe
  as $$ select least(500, greatest(100, 8 * p_n)) $$;
comment on function memory_internal.vector_ef_search(integer) is
  'The hnsw.ef_search memory.search sets for its vector legs when asking p_n hits: 8 * p_n, at least 100, at most 500 (never lowering a higher setting of the session).';

-- The same leg within a period the question names (memory.search adds
-- these hits to the leg's: see there).  A question scoped to a day or a
-- month is a filter plus a ranking within it, as a metadata filter in
-- hybrid search: the turns of that period compete only with each other,
-- so one that the whole project's nearest p_n crowd out is still scored.
-- A period of at most vector_exact_budget episodes (2000 in a small
-- install, 12,000 with a million episodes) is ranked exactly: its rows
-- come from the btree on (org, project, occurred_at), a range on plain
-- columns (leakproof, so an index condition under forced row-level
-- security), sorted by the similarity, an expression the HNSW index cannot
-- serve.  A wider period (a year of a large project) goes through the
-- HNSW index with the period as a filter (the caller's iterative scan),
-- which then keeps enough of the index that the walk stays short.  The
-- index's size is the table's row estimate (pg_class.reltuples, kept by
-- autovacuum), not a count.  The count stops at budget + 1 entries of
-- that btree.
create or replace function memory_internal.search_episode_vector_within(
  p_project uuid, p_query_embedding vector, p_period tstzrange, p_at timestamptz, p_known_at timestamptz,
  p_n integer)
  returns table (episode_id uuid, score double precision)
  language sql stable
  as $$
    -- q.org_id: the project's org, or "not found"; the tables' conditions
    -- name the scope's org (the same org) as a value, which routes each
    -- statement to the org's shard on Citus (docs/scale-out.md).
    with q as materialized (
      select memory_internal.project_org(p_project) as org_id, lower(p_period) as lo,
             least(upper(p_period), p_at + interval '1 microsecond') as hi,
             memory_internal.vector_exact_budget(
               p_n, (select c.reltuples from pg_class c where c.oid = 'memory.episodes'::regclass)) as c_budget
    ), wide as materialized (
      select count(*) > q.c_budget as wide
        from q cross join lateral (
          select from memory.episodes e
           where e.org_id = memory_internal.current_org() and e.project_id = p_project
             and e.occurred_at >= q.lo and e.occurred_at < q.hi
           limit q.c_budget + 1) c
       group by q.c_budget
    )
    select x.episode_id, x.score
      from (select e.episode_id, 1 - (e.embedding <=> p_query_embedding) as score
              from q cross join wide w
              join memory.episodes e on e.org_id = memory_internal.current_org()
                                    and e.project_id = p_project
                                    and e.occurred_at >= q.lo and e.occurred_at < q.hi
             where not w.wide and e.embedding is not null
               and memory_internal.episode_visible(e.occurred_at, e.created_at, p_at, p_known_at)
            union all
            select h.episode_id, h.score
              from (select e.episode_id, 1 - (e.embedding <=> p_query_embedding) as score
                      from memory.episodes e
                     where e.org_id = memory_internal.current_org() and e.project_id = p_project
                       and e.embedding is not null
                       and e.occurred_at >= lower(p_period) and e.occurred_at < upper(p_period)
                       and memory_internal.episode_visible(e.occurred_at, e.created_at, p_at, p_known_at)
                       and (select w.wide from wide w)
                     order by e.embedding <=> p_query_embedding
                     limit p_n) h) x
     order by x.score desc, x.episode_id
     limit p_n
  $$;
comment on function memory_internal.search_episode_vector_within(uuid, vector, tstzrange, timestamptz, timestamptz, integer) is
  'The episode vector leg within a period: the p_n episodes of the project that occurred in p_period (lower bound included, upper excluded) nearest to the query embedding, best first, score = cosine similarity; exact over the period''s rows when it holds at most vector_exact_budget episodes (2000 or more, growing with the index), else through the HNSW index with the period as a filter.';

-- search_episode_vector with one plan per session, for memory.search on a
-- large project (see there for when).  Left to the plan cache, the leg's
-- statement would be planned on every call from memory.search: the cache
-- keeps a generic plan only when its estimated cost is no higher than a
-- custom plan's, and a generic plan sees neither the project nor the
-- LIMIT (it guesses a tenth of the rows), so its estimate always loses.
-- Here the generic plan is forced, and sorts are disabled so that it is
-- the plan the custom one is for a large project: the HNSW scan gives the
-- distance order, and only a sort of every matching row could replace it
-- (with sorts allowed, the generic plan is the project's btree and a
-- sort).  The final sort by score, which nothing else can give, still
-- runs.  tests/py/test_search_plan.py checks the plan it runs
-- (docs/decisions/009-vector-legs-width-and-plans.md).
create or replace function memory_internal.search_episode_vector_cached(
  p_project uuid, p_query_embedding vector, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (episode_id uuid, score double precision)
  language plpgsql stable
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
begin
  return query
    select v.episode_id, v.score
      from memory_internal.search_episode_vector(p_project, p_query_embedding, p_at, p_known_at, p_n) v;
end
$$;
comment on function memory_internal.search_episode_vector_cached(uuid, vector, timestamptz, timestamptz, integer) is
  'search_episode_vector planned once per session (a generic plan on the HNSW scan), for memory.search on a large project.';

-- The episode vector leg planned on every call: search_episode_vector,
-- and when the question names a period (p_period) also
-- search_episode_vector_within, as many again; both hold cosine
-- similarities (one scale), merged by score, best first.  memory.search
-- runs it for a small project, whose best plan may be an exact sort of its
-- rows, and for a question that names a period.  The custom plan is forced:
-- the plan cache otherwise switches to a generic plan after five calls
-- when the generic plan's estimate is the lower, which it can be in a
-- session of month-scoped questions on a large project: a plan without the
-- HNSW scan, several times slower per search, and other episodes
-- (docs/decisions/009-vector-legs-width-and-plans.md).
create or replace function memory_internal.search_episode_vector_planned(
  p_project uuid, p_query_embedding vector, p_period tstzrange, p_at timestamptz, p_known_at timestamptz,
  p_n integer)
  returns table (episode_id uuid, score double precision)
  language plpgsql stable
  set plan_cache_mode = force_custom_plan
as $$
begin
  return query
    select u.episode_id, max(u.score)
      from (select v.episode_id, v.score
              from memory_internal.search_episode_vector(p_project, p_query_embedding, p_at, p_known_at, p_n) v
            union all
            select w.episode_id, w.score
              from memory_internal.search_episode_vector_within(p_project, p_query_embedding, p_period, p_at,
                                                                p_known_at, p_n) w
             where p_period is not null) u
     group by u.episode_id;
end
$$;
comment on function memory_internal.search_episode_vector_planned(uuid, vector, tstzrange, timestamptz, timestamptz, integer) is
  'The episode vector leg of memory.search planned per call: search_episode_vector, plus search_episode_vector_within when p_period is given, merged by cosine similarity (max per episode); unordered.';

-- Postings (memory_internal.episode_terms, sql/0009;
-- docs/decisions/001-text-search-through-btree-postings.md): one row per
-- distinct lexeme of an inserted episode's content_tsv, written by the
-- inserting statement, deleted by the deleting one (by their key: no
-- foreign key, docs/decisions/007-plans-made-without-statistics.md).
-- Document frequencies (episode_term_df, plus episode_term_df_pending for
-- the last few inserting statements) follow both.  Content is not rewritten
-- by the product, but if the owner ever does, postings and df follow it
-- (and the length each posting holds follows token_count).

-- Add p_delta[i] to the df of (p_org[i], p_project[i], p_lexeme[i]), one
-- entry per key.  Additions go to the writer's shard.  Where a df drops,
-- the word's rows are locked first (in key order, the order every writer
-- takes them) so their sum is stable while it is checked; a word no
-- episode holds any more leaves no row.  A concurrent ingest can only
-- add a new shard row, which keeps its own count.
create or replace function memory_internal.adjust_episode_term_df(
  p_org uuid[], p_project uuid[], p_lexeme text[], p_delta bigint[])
  returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
begin
  -- The locks and deletes per org of the rows (one, but for an operator's own
  -- SQL, which runs without a scope), the org a value: on Citus, where the
  -- episode triggers that call this run on the org's shard, they stay there.
  if exists (select from unnest(p_delta) d where d < 0) then
    for v_org in select distinct x from unnest(p_org) x order by 1 loop
      perform from memory_internal.episode_term_df d
        join unnest(p_org, p_project, p_lexeme, p_delta) x(org_id, project_id, lexeme, delta)
          on d.org_id = x.org_id and d.project_id = x.project_id and d.lexeme = x.lexeme
       where x.delta < 0 and d.org_id = v_org
       order by d.org_id, d.project_id, d.lexeme, d.shard
         for update of d;
    end loop;
  end if;
  insert into memory_internal.episode_term_df as d (org_id, project_id, lexeme, shard, df)
  select x.org_id, x.project_id, x.lexeme, (pg_backend_pid() % 8)::smallint, x.delta
    from unnest(p_org, p_project, p_lexeme, p_delta) x(org_id, project_id, lexeme, delta)
   where x.delta <> 0
   order by 1, 2, 3
  on conflict (org_id, project_id, lexeme, shard) do update set df = d.df + excluded.df;
  if exists (select from unnest(p_delta) d where d < 0) then
    for v_org in select distinct x from unnest(p_org) x order by 1 loop
      delete from memory_internal.episode_term_df d
       using (select d2.org_id, d2.project_id, d2.lexeme
                from memory_internal.episode_term_df d2
                join unnest(p_org, p_project, p_lexeme, p_delta) x(org_id, project_id, lexeme, delta)
                  on d2.org_id = x.org_id and d2.project_id = x.project_id and d2.lexeme = x.lexeme
               where x.delta < 0 and d2.org_id = v_org
               group by 1, 2, 3
              having sum(d2.df) <= 0) z
       where d.org_id = v_org and d.project_id = z.project_id and d.lexeme = z.lexeme;
    end loop;
  end if;
end
$$;
comment on function memory_internal.adjust_episode_term_df(uuid[], uuid[], text[], bigint[]) is
  'Adds deltas to episode document frequencies (episode_term_df), sharded by writer; deletes the rows of words whose df falls to zero.';

-- BM25's term weight without idf (k1 1.2, b 0.75): a posting's impact,
-- the order in which the leg reads a common word's postings.
create or replace function memory_internal.episode_term_impact(p_tf integer, p_dl integer, p_avgdl float8)
  returns real
  language sql immutable parallel safe
  as $$ select (p_tf * (1.2 + 1) / (p_tf + 1.2 * (1 - 0.75 + 0.75 * p_dl / p_avgdl)))::real $$;
comment on function memory_internal.episode_term_impact(integer, integer, float8) is
  'BM25 term weight without idf (k1 1.2, b 0.75) of a word occurring p_tf times in an episode of length p_dl, for mean length p_avgdl: the impact stored with each posting.';

-- A project's episodes and their tokens in all, from its counters: BM25's
-- collection statistics (N and, divided, the mean length).
create or replace function memory_internal.episode_collection(p_org uuid, p_project uuid)
  returns table (docs bigint, tokens bigint)
  language sql stable
  as $$
    select (coalesce(sum(c.value) filter (where c.metric = 'episodes_ingested'), 0)
              - coalesce(sum(c.value) filter (where c.metric = 'episodes_deleted'), 0))::bigint,
           (coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_ingested'), 0)
              - coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_deleted'), 0))::bigint
      from memory_internal.counters c
     where c.org_id = p_org and c.project_id = p_project
       and c.metric in ('episodes_ingested', 'episodes_deleted',
                        'episode_tokens_ingested', 'episode_tokens_deleted')
  $$;
comment on function memory_internal.episode_collection(uuid, uuid) is
  'The project''s episode count and token total from its counters (BM25 collection statistics).';

-- The project's mean episode length from its counters, counting p_docs
-- more episodes of p_tokens tokens in all (those being written); 1 when
-- the counters hold nothing (rows written with triggers off).
create or replace function memory_internal.episode_mean_length(
  p_org uuid, p_project uuid, p_tokens bigint, p_docs bigint)
  returns float8
  language sql stable
  as $$
    select case when s.docs + p_docs > 0 and s.tokens + p_tokens > 0
                then (s.tokens + p_tokens)::float8 / (s.docs + p_docs) else 1 end
      from memory_internal.episode_collection(p_org, p_project) s
  $$;
comment on function memory_internal.episode_mean_length(uuid, uuid, bigint, bigint) is
  'Mean episode length (tokens) of the project from its counters, with p_docs episodes of p_tokens tokens added: avgdl for the impact of new postings.';

-- The advisory lock a transaction holds while it folds a project's
-- pending df deltas (see tg_episodes__terms).
create or replace function memory_internal.episode_df_fold_lock_key(p_project uuid)
  returns bigint
  language sql immutable parallel safe
  as $$ select hashtextextended('chronomem.episode_df_fold:' || p_project::text, 0) $$;
comment on function memory_internal.episode_df_fold_lock_key(uuid) is
  'Advisory lock key held by the one transaction at a time that folds the project''s pending episode document-frequency deltas.';

-- Move the project's pending df deltas into episode_term_df: one
-- aggregated upsert for many statements.  Rows another transaction is
-- folding are skipped (it moves them); the delete and the upsert commit
-- together, so a snapshot sees each delta exactly once.
create or replace function memory_internal.fold_episode_term_df(p_org uuid, p_project uuid)
  returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_lexemes text[];
  v_deltas bigint[];
begin
  with moved as (
    delete from memory_internal.episode_term_df_pending p
     where p.org_id = p_org and p.project_id = p_project  -- on Citus, routed to the org's shard
       and (p.org_id, p.project_id, p.id) in (
             select p2.org_id, p2.project_id, p2.id from memory_internal.episode_term_df_pending p2
              where p2.org_id = p_org and p2.project_id = p_project
                for update skip locked)
    returning p.lexemes, p.deltas
  )
  select array_agg(x.lexeme order by x.lexeme), array_agg(x.delta order by x.lexeme)
    into v_lexemes, v_deltas
    from (select u.lexeme, sum(u.delta)::bigint as delta
            from moved m cross join lateral unnest(m.lexemes, m.deltas) u(lexeme, delta)
           group by 1) x;
  if v_lexemes is not null then
    perform memory_internal.adjust_episode_term_df(
              array_fill(p_org, array[cardinality(v_lexemes)]),
              array_fill(p_project, array[cardinality(v_lexemes)]), v_lexemes, v_deltas);
  end if;
end
$$;
comment on function memory_internal.fold_episode_term_df(uuid, uuid) is
  'Adds the project''s pending document-frequency deltas (episode_term_df_pending) to episode_term_df in one aggregated upsert and deletes them.';

-- A project's document frequencies of p_lexemes as a search sees them:
-- the folded counts plus the pending deltas (at most ~16 rows).
create or replace function memory_internal.episode_term_dfs(p_org uuid, p_project uuid, p_lexemes text[])
  returns table (lexeme text, df bigint)
  language sql stable
  as $$
    select l.lexeme,
           (select coalesce(sum(d.df), 0) from memory_internal.episode_term_df d
             where d.org_id = p_org and d.project_id = p_project and d.lexeme = l.lexeme)
           + coalesce(pd.delta, 0) as df
      from unnest(p_lexemes) l(lexeme)
      left join (select u.lexeme, sum(u.delta)::bigint as delta
                   from memory_internal.episode_term_df_pending p
                  cross join lateral unnest(p.lexemes, p.deltas) u(lexeme, delta)
                  where p.org_id = p_org and p.project_id = p_project and u.lexeme = any (p_lexemes)
                  group by 1) pd on pd.lexeme = l.lexeme
  $$;
comment on function memory_internal.episode_term_dfs(uuid, uuid, text[]) is
  'Document frequencies of the given lexemes in the project: episode_term_df plus the pending deltas of recent statements; exact at the caller''s snapshot.';

create or replace function memory_internal.tg_episodes__terms() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  r record;
  v_org uuid;
begin
  if tg_op = 'INSERT' then
    -- Impact uses the project's mean length with these episodes counted
    -- (this trigger runs before 40_text_stats_insert adds them), read once
    -- per project (materialized: a plan that re-ran it per posting would
    -- cost more than the postings).
    with a as materialized (
      select g.org_id, g.project_id,
             memory_internal.episode_mean_length(g.org_id, g.project_id, g.tokens, g.docs) as avgdl
        from (select n2.org_id, n2.project_id, sum(greatest(n2.token_count, 1)) as tokens,
                     count(*) as docs
                from new_rows n2 group by 1, 2) g)
    insert into memory_internal.episode_terms (org_id, project_id, lexeme, episode_id, tf, dl, impact)
    select n.org_id, n.project_id, u.lexeme, n.episode_id, x.tf, x.dl,
           memory_internal.episode_term_impact(x.tf, x.dl, a.avgdl)
      from new_rows n
      join a on a.org_id = n.org_id and a.project_id = n.project_id
     cross join lateral unnest(n.content_tsv) u
     cross join lateral (select coalesce(cardinality(u.positions), 1) as tf,
                                greatest(n.token_count, 1) as dl) x
     order by 1, 2, 3, 4;
    -- df: one pending row per project, not one upsert per word.
    insert into memory_internal.episode_term_df_pending (org_id, project_id, lexemes, deltas)
    select x.org_id, x.project_id, array_agg(x.lexeme order by x.lexeme), array_agg(x.n order by x.lexeme)
      from (select n.org_id, n.project_id, u.lexeme, count(*) as n
              from new_rows n cross join lateral unnest(tsvector_to_array(n.content_tsv)) u(lexeme)
             group by 1, 2, 3) x
     group by 1, 2;
    -- One folder per project at a time, until it commits: a fold upserts
    -- many words' rows, and two transactions folding in turn (each holding
    -- the rows of its earlier fold) could wait on each other.  A statement
    -- that finds the lock taken leaves its delta pending for a later one.
    for r in select distinct n.org_id, n.project_id from new_rows n order by 1, 2 loop
      if (select count(*) from (select from memory_internal.episode_term_df_pending p
                                 where p.org_id = r.org_id and p.project_id = r.project_id
                                 limit 16) z) >= 16
         and pg_try_advisory_xact_lock(memory_internal.episode_df_fold_lock_key(r.project_id)) then
        perform memory_internal.fold_episode_term_df(r.org_id, r.project_id);
      end if;
    end loop;
  elsif tg_op = 'DELETE' then
    -- The postings, by their key from the deleted rows' content_tsv (no
    -- foreign key cascades to them:
    -- docs/decisions/007-plans-made-without-statistics.md).
    -- Per org of the rows (one, but for an operator's own SQL, which runs
    -- without a scope), the org a value: on Citus the delete stays on its shard.
    for v_org in select distinct x.org_id from old_rows x loop
      delete from memory_internal.episode_terms t
       using old_rows o cross join lateral unnest(tsvector_to_array(o.content_tsv)) u(lexeme)
       where t.org_id = v_org and o.org_id = v_org and t.project_id = o.project_id
         and t.lexeme = u.lexeme and t.episode_id = o.episode_id;
    end loop;
    -- Pending deltas are folded first, so no row keeps a wiped word.  Wipe
    -- holds the project lock exclusive, so no ingest of the project holds
    -- the fold lock now.
    for r in select distinct o.org_id, o.project_id from old_rows o order by 1, 2 loop
      perform pg_advisory_xact_lock(memory_internal.episode_df_fold_lock_key(r.project_id));
      perform memory_internal.fold_episode_term_df(r.org_id, r.project_id);
    end loop;
    perform memory_internal.adjust_episode_term_df(
              array_agg(x.org_id), array_agg(x.project_id), array_agg(x.lexeme), array_agg(-x.n))
       from (select o.org_id, o.project_id, u.lexeme, count(*) as n
               from old_rows o cross join lateral unnest(tsvector_to_array(o.content_tsv)) u(lexeme)
              group by 1, 2, 3) x;
  else
    perform pg_advisory_xact_lock(memory_internal.episode_df_fold_lock_key(old.project_id));
    perform memory_internal.fold_episode_term_df(old.org_id, old.project_id);
    delete from memory_internal.episode_terms t
     where t.org_id = old.org_id and t.project_id = old.project_id and t.episode_id = old.episode_id
       and t.lexeme = any (tsvector_to_array(old.content_tsv));
    insert into memory_internal.episode_terms (org_id, project_id, lexeme, episode_id, tf, dl, impact)
    select new.org_id, new.project_id, u.lexeme, new.episode_id, x.tf, x.dl,
           memory_internal.episode_term_impact(
             x.tf, x.dl, memory_internal.episode_mean_length(new.org_id, new.project_id, x.dl, 1))
      from unnest(new.content_tsv) u
     cross join lateral (select coalesce(cardinality(u.positions), 1) as tf,
                                greatest(new.token_count, 1) as dl) x;
    perform memory_internal.adjust_episode_term_df(
              array_agg(x.org_id), array_agg(x.project_id), array_agg(x.lexeme), array_agg(x.n))
       from (select c.org_id, c.project_id, c.lexeme, sum(c.n)::bigint as n
               from (select old.org_id, old.project_id, l as lexeme, -1 as n
                       from unnest(tsvector_to_array(old.content_tsv)) l
                     union all
                     select new.org_id, new.project_id, l, 1
                       from unnest(tsvector_to_array(new.content_tsv)) l) c
              group by 1, 2, 3) x;
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_episodes__terms() is
  'Keeps the postings (memory_internal.episode_terms: one per episode and distinct lexeme, with its number of positions, length and impact) and document frequencies (episode_term_df, via one episode_term_df_pending row per inserting statement) of episodes as they are inserted, deleted or (by the owner) rewritten.';

create or replace trigger "40_terms_insert" after insert on memory.episodes
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_episodes__terms();
create or replace trigger "40_terms_delete" after delete on memory.episodes
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_episodes__terms();
-- token_count too: each posting holds the episode's length, which the
-- full-text leg scores with.
create or replace trigger "40_terms_update" after update of content, project_id, token_count on memory.episodes
  for each row when (old.content is distinct from new.content or old.project_id is distinct from new.project_id
                     or old.token_count is distinct from new.token_count)
  execute function memory_internal.tg_episodes__terms();

-- Which of a question's words a leg reads candidates for: from the rarest
-- (fewest postings, or names), while their summed counts stay within
-- p_budget, and always the rarest (ties by spelling); a word with no count
-- is never picked.  NULL when no word has one.  The one rule of the
-- episode and fact full-text legs and of the entity leg's shared words.
create or replace function memory_internal.rarest_words(
  p_words text[], p_counts double precision[], p_budget double precision)
  returns text[]
  language sql immutable parallel safe
  as $$
    select array_agg(r.word order by r.rn)
      from (select c.word, sum(c.n) over by_n as cum, row_number() over by_n as rn
              from unnest(p_words, p_counts) c(word, n)
             where c.n > 0
            window by_n as (order by c.n, c.word)) r
     where r.rn = 1 or r.cum <= p_budget
  $$;
comment on function memory_internal.rarest_words(text[], double precision[], double precision) is
  'The words a full-text or entity leg reads candidates for: from the rarest (by p_counts), while their summed counts stay within p_budget, and always the rarest; NULL when no word has a count.';

-- Episode full-text leg: Okapi BM25 over the question's lexemes (an OR
-- query, so a long question finds the episode holding its rare words).
-- BM25, not ts_rank_cd: ts_rank_cd has no notion of how rare a word is, so
-- a speaker's name in half the turns would weigh as much as the one rare
-- word that finds the turn
-- (docs/decisions/002-score-fusion-not-plain-rrf.md).
-- Constants are the textbook ones, not fitted to any data: k1 = 1.2,
-- b = 0.75 (Robertson & Zaragoza, "The Probabilistic Relevance Framework:
-- BM25 and Beyond", 2009) and the idf ln(1 + (N - df + 0.5) / (df + 0.5))
-- (Lucene's, never negative).
-- Statistics are the project's own: df = the project's episodes holding
-- the lexeme (episode_term_dfs: folded plus pending), N and the mean length
-- from the project's counters (see tg_episodes__text_stats), so df and N
-- count the same episodes.  Length is the episode's estimated token count,
-- tf the lexeme's positions in content_tsv (as its posting holds them).
-- Everything reads btrees with leakproof equality (postings by project
-- and lexeme, episodes by primary key): under forced row-level security
-- @@ is never an index condition, and the leg would read the project.
-- Candidates: the postings of the rarest lexemes, in increasing df while
-- their summed df stays within c_budget (always the rarest one), each
-- scored over ALL the query's lexemes.  An episode holding none of them
-- holds only words found in so many episodes that their idf is low; the
-- common word a question shares with half the project (a speaker's name)
-- would otherwise make every episode with it a candidate.  When the
-- question's words hold fewer postings than the budget in all, the
-- candidates are exactly the episodes holding any of its words.
-- When even the rarest word is in more than c_budget episodes, only its
-- c_budget best postings are candidates, read in impact order (the
-- word's BM25 weight without idf, stored with the posting, sql/0012);
-- scores stay exact BM25.  Why that keeps the top: every word of such a
-- question is in over c_budget episodes, so all idfs are of the same low
-- order and an episode's score is mostly the sum of its words' weights;
-- the rarest word carries the largest idf, and its top c_budget postings
-- are exactly the episodes it scores highest.
-- What it may lose: an episode weak in the rarest word (tf 1 in a long
-- turn) that scores high on the question's other common words; and the
-- impact order uses the project's mean length when the posting was
-- written, which drifts as the project grows (the order of two postings
-- only changes near ties).  At/known_at filter inside the bounded read,
-- so an earlier instant still gets c_budget visible candidates.
-- On a synthetic 60k-episode project (100 questions of 2-5 words from
-- random turns) the top 10 equals exhaustive BM25's for about 4 questions
-- in 5 (mean top-10 overlap about 0.9), for a p95 a third of the
-- exhaustive one: a real loss, on questions of common words only, where
-- an episode holding several of them outranks one that is short and
-- holds the rarest.  At 10k episodes the cut never binds there.
create or replace function memory_internal.search_episode_fulltext(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (episode_id uuid, score double precision)
  language sql stable
  -- Its plan is index lookups whatever the arguments; the default custom
  -- plan costs a planning per call (a tenth of a call on a large project,
  -- a third on a small one).
  set plan_cache_mode = force_generic_plan
  as $$
    -- q.org_id: the project's org, or "not found"; the tables' conditions
    -- name the scope's org (the same org) as a value, which routes the whole
    -- statement to the org's shard on Citus (docs/scale-out.md).
    with q as materialized (
      select memory_internal.project_org(p_project) as org_id,
             array(select distinct l from unnest(tsvector_to_array(
                     to_tsvector('english'::regconfig, coalesce(p_query, '')))) l) as lexemes,
             2000 as c_budget
    ), stats as materialized (
      select s.docs, s.tokens
        from q cross join lateral memory_internal.episode_collection(q.org_id, p_project) s
    ), df as materialized (
      select d.lexeme, d.df::float8 as df
        from q cross join lateral memory_internal.episode_term_dfs(q.org_id, p_project, q.lexemes) d
    ), picked as (
      select unnest(memory_internal.rarest_words(array_agg(d.lexeme), array_agg(d.df), q.c_budget))
               as lexeme
        from df d cross join q
       group by q.c_budget
    ), bound as materialized (
      -- Whether a picked word holds more than c_budget postings (at any
      -- instant: postings are not filtered here).  Only then does the
      -- budget cut, and only then must the candidates be filtered by
      -- p_at / p_known_at before the cut.  Counted up to c_budget + 1
      -- entries of the impact index (index-only).
      select coalesce(bool_or(k.n > q.c_budget), false) as bound
        from picked p cross join q
       cross join lateral (
         select count(*) as n
           from (select from memory_internal.episode_terms t
                  where t.org_id = memory_internal.current_org()
                     and t.project_id = p_project and t.lexeme = p.lexeme
                  limit q.c_budget + 1) z) k
    ), matched as materialized (
      -- The candidates.  Uncut (no picked word past the budget): every
      -- posting of the picked words, unfiltered; which of them are visible
      -- at p_at / p_known_at is checked last, in score order, for as many
      -- as the answer needs (about p_n probes instead of one per
      -- candidate; the same answer, as the filter does not change any
      -- candidate's score).  Cut: each picked word's postings visible at
      -- p_at / p_known_at, best first (impact index), at most c_budget of
      -- them (only the rarest word can hold more, and then its top
      -- c_budget are read); the filter comes from episodes_text_cover_idx
      -- (index-only: no heap row, sql/0014).
      select distinct c.episode_id
        from picked p cross join q cross join bound b
       cross join lateral (
         select t.episode_id
           from memory_internal.episode_terms t
          where not b.bound
            and t.org_id = memory_internal.current_org()
            and t.project_id = p_project and t.lexeme = p.lexeme
         union all
         (select e.episode_id
            from memory_internal.episode_terms t
            join memory.episodes e on e.org_id = memory_internal.current_org()
               and e.episode_id = t.episode_id
           where b.bound
             and t.org_id = memory_internal.current_org()
             and t.project_id = p_project and t.lexeme = p.lexeme
             and memory_internal.episode_visible(e.occurred_at, e.created_at, p_at, p_known_at)
           order by t.impact desc, t.episode_id
           limit q.c_budget)) c
    ), coll as materialized (
      -- Rows written with triggers off have no counters: never fewer
      -- documents than a word occurs in, nor a zero mean length (then the
      -- visible candidates' mean).
      select greatest(s.docs::float8, (select coalesce(max(d.df), 1) from df d)) as n,
             coalesce(case when s.docs > 0 and s.tokens > 0 then s.tokens::float8 / s.docs end,
                      (select avg(greatest(e.token_count, 1))::float8
                         from matched m cross join q
                         join memory.episodes e on e.org_id = memory_internal.current_org()
                            and e.episode_id = m.episode_id
                        where memory_internal.episode_visible(e.occurred_at, e.created_at,
                                                              p_at, p_known_at)), 1) as avgdl
        from stats s
    ), w as materialized (
      -- whole: the word's postings are all candidates (a picked word,
      -- uncut), so its scoring read needs no candidate array.
      select d.lexeme, d.df, c.n, c.avgdl,
             not b.bound and d.lexeme in (select p.lexeme from picked p) as whole
        from df d cross join coll c cross join bound b where d.df > 0
    ), tfs as (
      -- Each candidate's postings of the question's words, with tf and
      -- length (the lexeme's positions in content_tsv and the episode's
      -- length, written with it and rewritten with either): per word, one
      -- scan of the primary key with the candidates as an array key, so a
      -- common word's postings are read only around them.  content_tsv
      -- itself is in no covering index (a btree entry must fit in 2704
      -- bytes), and reading it would mean a wide heap row per candidate.  A
      -- whole word's postings are read as a range (the same rows: every
      -- one is a candidate), sparing the probe by an array of ~1,600
      -- candidates.  Both reads are index-only (episode_terms_impact_idx
      -- includes tf and dl, sql/0016).
      select t.episode_id, t.lexeme, t.tf::float8 as tf, t.dl::float8 as dl, w.df, w.n, w.avgdl
        from w cross join q
       cross join lateral (
         select t.episode_id, t.lexeme, t.tf, t.dl
           from memory_internal.episode_terms t
          where w.whole
            and t.org_id = memory_internal.current_org()
            and t.project_id = p_project and t.lexeme = w.lexeme
         union all
         select t.episode_id, t.lexeme, t.tf, t.dl
           from memory_internal.episode_terms t
          where not w.whole
            and t.org_id = memory_internal.current_org()
            and t.project_id = p_project and t.lexeme = w.lexeme
            and t.episode_id = any (array(select m.episode_id from matched m))) t
    ), scored as (
      -- Summed in the words' byte order (content_tsv's order), one fixed
      -- order, so that equal scores stay equal: a floating-point sum
      -- depends on its order.
      select x.episode_id,
             sum(ln(1 + (x.n - x.df + 0.5) / (x.df + 0.5))
                 * x.tf * (1.2 + 1) / (x.tf + 1.2 * (1 - 0.75 + 0.75 * x.dl / x.avgdl))
                 order by x.lexeme collate "C") as score
        from tfs x
       group by x.episode_id
       order by 2 desc, 1
    )
    -- Visible at p_at / p_known_at, checked best first (the sorted
    -- subquery feeds a nested loop, so the limit stops the probes).
    select s.episode_id, s.score
      from scored s cross join q
     where exists (select from memory.episodes e
                    where e.org_id = memory_internal.current_org() and e.episode_id = s.episode_id
                      and memory_internal.episode_visible(e.occurred_at, e.created_at, p_at, p_known_at))
     order by s.score desc, s.episode_id
     limit p_n
  $$;
comment on function memory_internal.search_episode_fulltext(uuid, text, timestamptz, timestamptz, integer) is
  'Episode full-text leg of memory.search: episodes holding the question''s rarer lexemes (all of them when they hold at most 2000 postings in all; the 2000 best, by BM25 weight, of the rarest when it alone holds more), ranked by Okapi BM25 over all its lexemes (k1 1.2, b 0.75, Lucene idf) with the project''s own document frequencies, count and mean length; best first.';
