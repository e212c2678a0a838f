-- The fact full-text leg of memory.search and the postings it reads
-- (memory_internal.fact_terms, sql/0010), the sibling of the episode
-- full-text leg in 076_search_episodes.sql
-- (docs/decisions/001-text-search-through-btree-postings.md).

-- A version's postings: each distinct lexeme of its content_tsv with its
-- positions (tf; 1 if it has none) and the vector's length as ts_rank_cd
-- counts it (the sum of tf), what the fact full-text leg ranks from.
-- Every version's postings hold these figures, those sql/0015 wrote for
-- versions older than the column included.
create or replace function memory_internal.fact_term_postings(p_tsv tsvector)
  returns table (lexeme text, tf integer, doc_len integer)
  language sql immutable parallel safe
  as $$
    select u.lexeme, coalesce(cardinality(u.positions), 1),
           (sum(coalesce(cardinality(u.positions), 1)) over ())::integer
      from unnest(p_tsv) u
  $$;
comment on function memory_internal.fact_term_postings(tsvector) is
  'The postings of a fact version''s content_tsv: each distinct lexeme with its positions (tf, 1 if none) and the vector''s length as ts_rank_cd counts it (doc_len, the sum of tf).';

-- One posting per distinct lexeme of an inserted fact version's
-- content_tsv, written by the inserting statement, deleted by the deleting
-- one (a wipe: found by their key from the deleted rows' content_tsv).
-- The product never rewrites a version's content or project; if the owner
-- ever does, the postings follow.
create or replace function memory_internal.tg_facts__terms() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
begin
  if tg_op = 'INSERT' then
    -- Unsorted: every posting is a new key (its fact is new), and sorting
    -- them first (text under the database collation) costs more than the
    -- inserts gain from the order.
    insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id, tf, doc_len)
    select n.org_id, n.project_id, u.lexeme, n.fact_id, u.tf, u.doc_len
      from new_rows n
     cross join lateral memory_internal.fact_term_postings(n.content_tsv) u;
  elsif tg_op = 'DELETE' then
    -- Per org of the rows (one, but for an operator's own SQL, which runs
    -- without a scope), the org a value: on Citus the delete stays on its shard.
    for v_org in select distinct x.org_id from old_rows x loop
      delete from memory_internal.fact_terms t
       using old_rows o cross join lateral unnest(tsvector_to_array(o.content_tsv)) u(lexeme)
       where t.org_id = v_org and o.org_id = v_org and t.project_id = o.project_id
         and t.lexeme = u.lexeme and t.fact_id = o.fact_id;
    end loop;
  else
    delete from memory_internal.fact_terms t
     where t.org_id = old.org_id and t.project_id = old.project_id and t.fact_id = old.fact_id
       and t.lexeme = any (tsvector_to_array(old.content_tsv));
    insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id, tf, doc_len)
    select new.org_id, new.project_id, u.lexeme, new.fact_id, u.tf, u.doc_len
      from memory_internal.fact_term_postings(new.content_tsv) u;
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_facts__terms() is
  'Keeps the postings of fact versions (memory_internal.fact_terms: one per version and distinct lexeme of its content_tsv) as they are inserted, deleted (by their key: fact_terms has no foreign key) or (by the owner) rewritten.';

create or replace trigger "40_terms_insert" after insert on memory.facts
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_facts__terms();
create or replace trigger "40_terms_delete" after delete on memory.facts
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_facts__terms();
create or replace trigger "40_terms_update" after update of content, project_id on memory.facts
  for each row when (old.content is distinct from new.content or old.project_id is distinct from new.project_id)
  execute function memory_internal.tg_facts__terms();

-- Fact vector leg: the p_n facts holding at p_at (as believed at
-- p_known_at) nearest to the query embedding, nearest first (the HNSW
-- scan's order: a relaxed iterative scan may return them slightly out of
-- order, which the caller's sort by distance fixes).  A plain SQL
-- function, so the planner inlines it: the HNSW index of
-- memory.fact_embeddings serves the ORDER BY ... LIMIT, and each candidate
-- of the project is probed in facts_at by its key, the scan going on
-- while candidates fail (the caller sets hnsw.iterative_scan).
create or replace function memory_internal.search_fact_vector(
  p_project uuid, p_query_embedding vector, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, distance double precision)
  language sql stable
  as $$
    select e.fact_id, e.embedding <=> p_query_embedding
      from memory.fact_embeddings e
      join memory.facts_at(p_project, p_at, p_known_at) f
        on f.org_id = e.org_id and f.fact_id = e.fact_id
     where e.project_id = p_project
     order by e.embedding <=> p_query_embedding
     limit p_n
  $$;
comment on function memory_internal.search_fact_vector(uuid, vector, timestamptz, timestamptz, integer) is
  'Fact vector leg of memory.search: the p_n facts holding at p_at as believed at p_known_at nearest to the query embedding (HNSW, cosine), with their cosine distances.';

-- search_fact_vector with one plan per session, for memory.search on a
-- large project: as search_episode_vector_cached (see there), a forced
-- generic plan with sorts disabled, so that it is the HNSW scan.
create or replace function memory_internal.search_fact_vector_cached(
  p_project uuid, p_query_embedding vector, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, distance double precision)
  language plpgsql stable
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
begin
  return query
    select v.fact_id, v.distance
      from memory_internal.search_fact_vector(p_project, p_query_embedding, p_at, p_known_at, p_n) v;
end
$$;
comment on function memory_internal.search_fact_vector_cached(uuid, vector, timestamptz, timestamptz, integer) is
  'search_fact_vector planned once per session (a generic plan on the HNSW scan), for memory.search on a large project.';

-- search_fact_vector planned on every call, for memory.search on a small
-- project (whose best plan may be an exact sort of its rows): the custom
-- plan is forced, as in search_episode_vector_planned (see there), or the
-- plan cache may switch to a generic plan that sees no project.
create or replace function memory_internal.search_fact_vector_planned(
  p_project uuid, p_query_embedding vector, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, distance double precision)
  language plpgsql stable
  set plan_cache_mode = force_custom_plan
as $$
begin
  return query
    select v.fact_id, v.distance
      from memory_internal.search_fact_vector(p_project, p_query_embedding, p_at, p_known_at, p_n) v;
end
$$;
comment on function memory_internal.search_fact_vector_planned(uuid, vector, timestamptz, timestamptz, integer) is
  'search_fact_vector planned per call (a custom plan: an exact sort for a small project, the HNSW scan for a large one), for memory.search on a small project.';

-- Fact full-text leg: the facts holding at p_at (as believed at
-- p_known_at) that share a word with the question (an OR query), ranked by
-- cover density (ts_rank_cd, normalisation 1) over all its words, then id.
-- Everything reads btrees with leakproof equality (postings by project and
-- lexeme, facts by primary key through facts_at): under forced row-level
-- security @@ is never an index condition, and the leg would read every
-- current fact of the project.
-- Candidates: the postings of the rarest lexemes, in increasing count
-- while their summed count stays within the budget (always the rarest
-- one), each ranked over ALL the question's lexemes.  Counts are of
-- postings, so of versions, counted up to budget + 1 (an index-only range
-- each; a word past the budget is never picked beside another, so its
-- exact count does not matter), and when every word is past the budget,
-- again up to 16 times the budget, to find the rarest (past that, the
-- first by spelling).  Many postings may belong to versions that
-- do not hold at p_at (superseded, retracted, not yet valid): when at
-- least p_n candidates were found but fewer than p_n of them hold, the
-- budget grows fourfold and the leg runs again, until every lexeme is
-- picked.  When the picked words have fewer than p_n candidates at all, the
-- list stays short: the facts left out share only words more common than
-- the budget with the question (a full scan would rank them below, or
-- among, these by cover density alone).
-- The rank without the heap: with an OR of lexemes, ts_rank_cd finds
-- every occurrence of a question word as a cover of its own, worth its
-- weight class (D, 0.1, for everything to_tsvector writes), and
-- normalisation 1 divides the sum by ln(1 + the vector's length).  So a
-- fact's rank depends only on n, its positions of the question's words
-- (the sum of their postings' tf), and len (doc_len): two facts with equal
-- (n, len) rank equal, and the rank of each class present is ts_rank_cd of
-- one of its facts (tested against ts_rank_cd over every fact,
-- tests/sql/test_13_search_fact_terms.sql).
create or replace function memory_internal.search_fact_fulltext(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, score double precision)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  -- Its statements' plans are index lookups whatever the arguments; the
  -- default custom plans cost a planning per call (a fifth of a call on a
  -- large project, half of one on a small project).
  set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_tsq tsquery := memory_internal.question_tsquery(p_query);
  v_lexemes text[];
  v_picked text[];
  v_present integer;
  v_budget bigint := 1000;
  v_cap bigint := 1000;
  v_least bigint;
  v_counts bigint[];
  v_lexeme text;
  v_count bigint;
  v_candidates bigint;
  v_ids uuid[];
  v_scores double precision[];
begin
  if v_tsq is null then
    return;
  end if;
  v_lexemes := array(select distinct l from unnest(tsvector_to_array(
                       to_tsvector('english'::regconfig, p_query))) l);
  loop
    if v_cap = v_budget then
      -- A lateral aggregate, counted once per word (as a scalar subquery
      -- the planner copies it into the filter, the sort and the window,
      -- and counts three times).
      v_counts := array(select k.n
                          from unnest(v_lexemes) with ordinality l(lexeme, o)
                         cross join lateral (
                           select count(*) as n from (select from memory_internal.fact_terms t
                                                       where t.org_id = v_org and t.project_id = p_project
                                                         and t.lexeme = l.lexeme
                                                       limit v_cap + 1) x) k
                         order by l.o);
    else
      -- The recount (below), where only the rarest word is picked: each
      -- word is counted only up to one past the fewest counted so far, so
      -- a commoner word stops there (still more than the rarest: the
      -- same pick, the same ties by spelling) instead of reading up to
      -- 16 times the budget (0.5-1 ms on the 100k benchmark load).
      v_counts := '{}';
      v_least := v_cap;
      foreach v_lexeme in array v_lexemes loop
        select count(*) into v_count
          from (select from memory_internal.fact_terms t
                 where t.org_id = v_org and t.project_id = p_project and t.lexeme = v_lexeme
                 limit v_least + 1) x;
        v_counts := v_counts || v_count;
        if v_count > 0 then
          v_least := least(v_least, v_count);
        end if;
      end loop;
    end if;
    v_picked := memory_internal.rarest_words(v_lexemes, v_counts::float8[], v_budget);
    select count(*), min(c.n) into v_present, v_least from unnest(v_counts) c(n) where c.n > 0;
    if v_picked is null then
      return;  -- no fact of the project holds any of the words
    end if;
    if v_least > v_cap and v_cap = v_budget then
      -- Every word is past the budget: counts capped alike do not tell
      -- which is rarest (the first by spelling would be picked, "job" in
      -- 7,430 facts before "tomas" in 1,023).  Count again, 16 times
      -- further.
      v_cap := v_budget * 16;
      continue;
    end if;
    -- Ranked from the postings, not from each candidate's content_tsv: a
    -- fact's rank is a function of (n, len) alone (see the comment above),
    -- so it is computed with ts_rank_cd itself on one holding candidate of
    -- each (n, len) class (a few wide heap rows, not one per candidate:
    -- about a thousand, hundreds of them outside shared buffers).  Which
    -- candidates hold at p_at is asked last, best first, until p_n hold
    -- (index-only probes of facts_text_cover_idx, about p_n of them at the
    -- present instead of one per candidate): whether a version holds does
    -- not change its rank, so the answer is the same.
    with c as materialized (
      select distinct t.fact_id from memory_internal.fact_terms t
       where t.org_id = v_org and t.project_id = p_project and t.lexeme = any (v_picked)
    ), nl as materialized (
      -- Each candidate's n (its positions of the question's words) and
      -- len: one primary-key scan with the words and the candidates as
      -- array keys (the postings' heap is narrow).
      -- A picked word's postings are all candidates: read as a range (the
      -- same rows), not probed by the candidate array.
      select t.fact_id, sum(t.tf) as n, min(t.doc_len) as len
        from (select t.fact_id, t.tf, t.doc_len
                from memory_internal.fact_terms t
               where t.org_id = v_org and t.project_id = p_project and t.lexeme = any (v_picked)
              union all
              select t.fact_id, t.tf, t.doc_len
                from memory_internal.fact_terms t
               where t.org_id = v_org and t.project_id = p_project
                 and t.lexeme = any (array(select l from unnest(v_lexemes) l where not l = any (v_picked)))
                 and t.fact_id = any (array(select c.fact_id from c))) t
       group by t.fact_id
    ), ranks as materialized (
      -- A class's rank from its first holding candidate by id; a class
      -- none of whose candidates holds has no rank (and nothing to rank).
      select k.n, k.len, r.r
        from (select x.n, x.len, array_agg(x.fact_id order by x.fact_id) as ids
                from nl x group by x.n, x.len) k
       cross join lateral (
         select ts_rank_cd(f.content_tsv, v_tsq, 1)::float8 as r
           from unnest(k.ids) with ordinality u(fact_id, o)
           cross join lateral (
             select f.content_tsv from memory.facts_at(p_project, p_at, p_known_at) f
              where f.org_id = v_org and f.fact_id = u.fact_id) f
          order by u.o
          limit 1) r
    )
    select (select count(*) from c),
           array_agg(x.fact_id order by x.r desc, x.fact_id), array_agg(x.r order by x.r desc, x.fact_id)
      into v_candidates, v_ids, v_scores
      from (select s.fact_id, s.r
              -- Sorted first, so the probes below stop at the p_n-th
              -- holding candidate.
              from (select x.fact_id, r.r
                      from nl x join ranks r on r.n = x.n and r.len = x.len
                     order by r.r desc, x.fact_id) s
             where exists (select from memory.facts_at(p_project, p_at, p_known_at) f
                            where f.org_id = v_org and f.fact_id = s.fact_id)
             order by s.r desc, s.fact_id
             limit p_n) x;
    -- Grow only when versions that do not hold ate a list the candidates
    -- would have filled; fewer candidates than p_n means the question's
    -- rarer words are that rare, and more would only share common words.
    exit when coalesce(cardinality(v_ids), 0) >= p_n or v_candidates < p_n
              or cardinality(v_picked) = v_present;
    v_budget := v_budget * 4;
    v_cap := v_budget;
  end loop;
  return query select u.id, u.score from unnest(v_ids, v_scores) with ordinality u(id, score, ord) order by u.ord;
end
$$;
comment on function memory_internal.search_fact_fulltext(uuid, text, timestamptz, timestamptz, integer) is
  'Fact full-text leg of memory.search: up to p_n facts holding at p_at (as believed at p_known_at) that share a word with the question, ranked by ts_rank_cd (normalisation 1) over all its words, then id. Candidates come from the postings (fact_terms) of the rarer words, within a budget that grows until p_n candidates hold or every word is used.';
