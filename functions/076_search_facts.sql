-- The fact full-text leg of memory.search and the postings it reads
-- (memory_internal.fact_terms, sql/0010), the sibling of the episode
-- full-text leg in 076_search_episodes.sql.

-- One posting per distinct lexeme of an inserted fact version's
-- content_tsv, written by the inserting statement, deleted by the deleting
-- one (a wipe: found by their key from the deleted rows' content_tsv).
-- The product never rewrites a version's content or project; if the owner
-- ever does, the postings follow.
create or replace function memory_internal.tg_facts__terms() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if tg_op = 'INSERT' then
    -- Unsorted: every posting is a new key (its fact is new), and sorting
    -- them first (text under the database collation) cost more than the
    -- inserts gained from the order.
    insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id)
    select n.org_id, n.project_id, u.lexeme, n.fact_id
      from new_rows n
     cross join lateral unnest(tsvector_to_array(n.content_tsv)) u(lexeme);
  elsif tg_op = 'DELETE' then
    delete from memory_internal.fact_terms t
     using old_rows o cross join lateral unnest(tsvector_to_array(o.content_tsv)) u(lexeme)
     where t.org_id = o.org_id and t.project_id = o.project_id and t.lexeme = u.lexeme
       and t.fact_id = o.fact_id;
  else
    delete from memory_internal.fact_terms t
     where t.org_id = old.org_id and t.project_id = old.project_id and t.fact_id = old.fact_id
       and t.lexeme = any (tsvector_to_array(old.content_tsv));
    insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id)
    select new.org_id, new.project_id, u.lexeme, new.fact_id
      from unnest(tsvector_to_array(new.content_tsv)) u(lexeme);
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_facts__terms() is
  'Keeps the postings of fact versions (memory_internal.fact_terms: one per version and distinct lexeme of its content_tsv) as they are inserted or (by the owner) rewritten; deletion cascades.';

create or replace trigger "40_terms_insert" after insert on memory.facts
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_facts__terms();
create or replace trigger "40_terms_delete" after delete on memory.facts
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_facts__terms();
create or replace trigger "40_terms_update" after update of content, project_id on memory.facts
  for each row when (old.content is distinct from new.content or old.project_id is distinct from new.project_id)
  execute function memory_internal.tg_facts__terms();

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
-- exact count does not matter).  Many postings may belong to versions that
-- do not hold at p_at (superseded, retracted, not yet valid): when at
-- least p_n candidates were found but fewer than p_n of them hold, the
-- budget grows fourfold and the leg runs again, until every lexeme is
-- picked.  When the picked words have fewer than p_n candidates at all, the
-- list stays short: the facts left out share only words more common than
-- the budget with the question (a full scan would rank them below, or
-- among, these by cover density alone).
create or replace function memory_internal.search_fact_fulltext(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, score double precision)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_tsq tsquery := memory_internal.question_tsquery(p_query);
  v_lexemes text[];
  v_picked text[];
  v_present integer;
  v_budget bigint := 1000;
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
    select array_agg(r.lexeme) filter (where r.rn = 1 or r.cum <= v_budget), count(*)
      into v_picked, v_present
      from (select c.lexeme, sum(c.n) over by_n as cum, row_number() over by_n as rn
              -- A lateral aggregate, counted once per word (as a scalar
              -- subquery the planner copied it into the filter, the sort
              -- and the window, and counted three times).
              from (select l.lexeme, k.n
                      from unnest(v_lexemes) l(lexeme)
                     cross join lateral (
                       select count(*) as n from (select from memory_internal.fact_terms t
                                                   where t.org_id = v_org and t.project_id = p_project
                                                     and t.lexeme = l.lexeme
                                                   limit v_budget + 1) x) k) c
             where c.n > 0
            window by_n as (order by c.n, c.lexeme)) r;
    if v_picked is null then
      return;  -- no fact of the project holds any of the words
    end if;
    with c as materialized (
      select distinct t.fact_id from memory_internal.fact_terms t
       where t.org_id = v_org and t.project_id = p_project and t.lexeme = any (v_picked)
    )
    select (select count(*) from c),
           array_agg(x.fact_id order by x.r desc, x.fact_id), array_agg(x.r order by x.r desc, x.fact_id)
      into v_candidates, v_ids, v_scores
      from (select f.fact_id, ts_rank_cd(f.content_tsv, v_tsq, 1)::float8 as r
              from c
              join memory.facts_at(p_project, p_at, p_known_at) f
                on f.org_id = v_org and f.fact_id = c.fact_id
             order by 2 desc, 1
             limit p_n) x;
    -- Grow only when versions that do not hold ate a list the candidates
    -- would have filled; fewer candidates than p_n means the question's
    -- rarer words are that rare, and more would only share common words.
    exit when coalesce(cardinality(v_ids), 0) >= p_n or v_candidates < p_n
              or cardinality(v_picked) = v_present;
    v_budget := v_budget * 4;
  end loop;
  return query select u.id, u.score from unnest(v_ids, v_scores) with ordinality u(id, score, ord) order by u.ord;
end
$$;
comment on function memory_internal.search_fact_fulltext(uuid, text, timestamptz, timestamptz, integer) is
  'Fact full-text leg of memory.search: up to p_n facts holding at p_at (as believed at p_known_at) that share a word with the question, ranked by ts_rank_cd (normalisation 1) over all its words, then id. Candidates come from the postings (fact_terms) of the rarer words, within a budget that grows until p_n candidates hold or every word is used.';
