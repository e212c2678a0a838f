-- The entity leg of memory.search and the tokens it reads
-- (memory_internal.entity_name_tokens, sql/0011): the words of entity
-- names and aliases in a btree, because under forced row-level security
-- pg_trgm's operators are never index conditions
-- (docs/decisions/001-text-search-through-btree-postings.md).

-- The distinct words of a normalized name (normalize_text leaves single
-- spaces between words).
create or replace function memory_internal.name_tokens(p_name text) returns text[]
  language sql immutable strict parallel safe
  as $$ select array(select distinct u.w from unnest(string_to_array(p_name, ' ')) u(w)) $$;
comment on function memory_internal.name_tokens(text) is
  'The distinct words of a normalized entity name or alias: the keys of memory_internal.entity_name_tokens.';

-- The words that carry content: those the english text search
-- configuration does not drop as stop words ("the", "who", "is").
create or replace function memory_internal.content_words(p_words text[]) returns text[]
  language sql immutable strict parallel safe
  as $$ select array(select w from unnest(p_words) w where to_tsvector('english'::regconfig, w) <> ''::tsvector) $$;
comment on function memory_internal.content_words(text[]) is
  'The given words without the english stop words: what a partial name match of the entity leg may share with the question.';

-- The runs of 1 to 4 consecutive words of a normalized question: the
-- names an exact whole-word match can have, each one btree probe.
-- A loop over the words, no query: as a query (SQL, or PL/pgSQL's custom
-- plans) it would be planned on every call, twice per search, the
-- planning costing four times the execution.
create or replace function memory_internal.question_ngrams(p_qnorm text) returns text[]
  language plpgsql immutable strict parallel safe
as $$
declare
  v_words text[] := string_to_array(p_qnorm, ' ');
  v_n integer := coalesce(cardinality(v_words), 0);
  v_gram text;
  v_grams text[] := '{}';
begin
  for i in 1 .. v_n loop
    for l in 1 .. least(4, v_n - i + 1) loop
      v_gram := array_to_string(v_words[i:i + l - 1], ' ');
      if not v_gram = any (v_grams) then
        v_grams := v_grams || v_gram;
      end if;
    end loop;
  end loop;
  return v_grams;
end
$$;
comment on function memory_internal.question_ngrams(text) is
  'The runs of 1 to 4 consecutive words of a normalized question (the names a whole-word match of up to 4 words can have).';

-- Adds the tokens of the given (org, project, entity, normalized name)
-- rows; a word the entity already has stays one row.
create or replace function memory_internal.add_name_tokens(
  p_org uuid[], p_project uuid[], p_entity uuid[], p_name text[]) returns void
  language sql
  set search_path = memory_internal, memory, public, pg_temp
as $$
  insert into memory_internal.entity_name_tokens (org_id, project_id, token, entity_id)
  select distinct o.org_id, o.project_id, w.token, o.entity_id
    from unnest(p_org, p_project, p_entity, p_name) o(org_id, project_id, entity_id, name)
   -- the outer distinct, not name_tokens() per row: a function call and a
   -- sort per name costs the writer more than one distinct over the batch
   cross join lateral unnest(string_to_array(o.name, ' ')) w(token)
      on conflict do nothing
$$;
comment on function memory_internal.add_name_tokens(uuid[], uuid[], uuid[], text[]) is
  'For the name-token triggers: inserts the entity_name_tokens of the given (org, project, entity, normalized name) rows.';

-- Removes the tokens of names (or aliases) that were deleted or changed,
-- except the words the entity still has in its current name or another
-- alias.  Also right when the entity itself is gone, whichever of the
-- entity's and its aliases' (cascaded) deletes runs first.
create or replace function memory_internal.drop_name_tokens(
  p_org uuid[], p_project uuid[], p_entity uuid[], p_name text[]) returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
begin
  -- Per org of the rows (one, but for an operator's own SQL, which runs
  -- without a scope), the org a value in each table's condition: on Citus,
  -- where the triggers that call this run on the org's shard, it stays there.
  for v_org in select distinct x from unnest(p_org) x loop
    delete from memory_internal.entity_name_tokens t
     using (select distinct o.org_id, o.project_id, o.entity_id, w.token
              from unnest(p_org, p_project, p_entity, p_name) o(org_id, project_id, entity_id, name)
             cross join lateral unnest(string_to_array(o.name, ' ')) w(token)
             where o.org_id = v_org) d
     where t.org_id = v_org and t.project_id = d.project_id and t.token = d.token
       and t.entity_id = d.entity_id
       and not exists (select from memory.entities n
                        where n.org_id = v_org and n.entity_id = d.entity_id
                          and n.project_id = d.project_id
                          and d.token = any (string_to_array(n.normalized_name, ' ')))
       and not exists (select from memory.entity_aliases a
                        where a.org_id = v_org and a.entity_id = d.entity_id
                          and a.project_id = d.project_id
                          and d.token = any (string_to_array(a.normalized_alias, ' ')));
  end loop;
end
$$;
comment on function memory_internal.drop_name_tokens(uuid[], uuid[], uuid[], text[]) is
  'For the name-token triggers: deletes the entity_name_tokens of the given (org, project, entity, normalized name) rows, except words the entity still has in its current name or an alias.';

-- Tokens of inserted names and aliases are added (a word the entity
-- already has stays one row); those of deleted or renamed ones are
-- removed unless the entity's current name or another of its aliases
-- still has the word.  Set-based on the statement's rows: assert_facts
-- creates entities in its batches (one statement per batch): measured at
-- about +1.6 ms on a statement inserting 50 three-word names (2 ms without
-- the trigger).  A project wipe deletes entities and
-- aliases (directly or by cascade), and their triggers remove the tokens.
create or replace function memory_internal.tg_entities__name_tokens() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if tg_op = 'INSERT' then
    perform memory_internal.add_name_tokens(array_agg(n.org_id), array_agg(n.project_id),
                                            array_agg(n.entity_id), array_agg(n.normalized_name))
       from new_rows n;
  elsif tg_op = 'DELETE' then
    perform memory_internal.drop_name_tokens(array_agg(o.org_id), array_agg(o.project_id),
                                             array_agg(o.entity_id), array_agg(o.normalized_name))
       from old_rows o;
  else
    perform memory_internal.drop_name_tokens(array[old.org_id], array[old.project_id],
                                             array[old.entity_id], array[old.normalized_name]);
    perform memory_internal.add_name_tokens(array[new.org_id], array[new.project_id],
                                            array[new.entity_id], array[new.normalized_name]);
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_entities__name_tokens() is
  'Keeps memory_internal.entity_name_tokens as entity names are inserted, deleted or (by the owner) changed.';

create or replace function memory_internal.tg_entity_aliases__name_tokens() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if tg_op = 'INSERT' then
    perform memory_internal.add_name_tokens(array_agg(n.org_id), array_agg(n.project_id),
                                            array_agg(n.entity_id), array_agg(n.normalized_alias))
       from new_rows n;
  elsif tg_op = 'DELETE' then
    perform memory_internal.drop_name_tokens(array_agg(o.org_id), array_agg(o.project_id),
                                             array_agg(o.entity_id), array_agg(o.normalized_alias))
       from old_rows o;
  else
    perform memory_internal.drop_name_tokens(array[old.org_id], array[old.project_id],
                                             array[old.entity_id], array[old.normalized_alias]);
    perform memory_internal.add_name_tokens(array[new.org_id], array[new.project_id],
                                            array[new.entity_id], array[new.normalized_alias]);
  end if;
  return null;
end
$$;
comment on function memory_internal.tg_entity_aliases__name_tokens() is
  'Keeps memory_internal.entity_name_tokens as aliases are inserted, deleted or (by the owner) changed.';

create or replace trigger "40_name_tokens_insert" after insert on memory.entities
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_entities__name_tokens();
create or replace trigger "40_name_tokens_delete" after delete on memory.entities
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_entities__name_tokens();
create or replace trigger "40_name_tokens_update" after update of normalized_name, project_id on memory.entities
  for each row when (old.normalized_name is distinct from new.normalized_name
                     or old.project_id is distinct from new.project_id)
  execute function memory_internal.tg_entities__name_tokens();
create or replace trigger "40_name_tokens_insert" after insert on memory.entity_aliases
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_entity_aliases__name_tokens();
create or replace trigger "40_name_tokens_delete" after delete on memory.entity_aliases
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_entity_aliases__name_tokens();
create or replace trigger "40_name_tokens_update" after update of normalized_alias, entity_id, project_id
  on memory.entity_aliases
  for each row when (old.normalized_alias is distinct from new.normalized_alias
                     or old.entity_id is distinct from new.entity_id
                     or old.project_id is distinct from new.project_id)
  execute function memory_internal.tg_entity_aliases__name_tokens();

-- Entity leg: the entities (created by p_known_at) with a name or alias
-- that occurs in the question as whole words first, then by trigram word
-- similarity of their best name, then id.  A name counts when it is
-- similar enough (name <% question: pg_trgm.word_similarity_threshold) or
-- when it shares a whole word with the question that is not a stop word
-- (memory_internal.content_words): "Okonkwo" finds "Marguerite Okonkwo",
-- which trigram similarity alone (about 0.45) does not; "the" finds nothing.
-- Such a partial match ranks after every similar name (its similarity is
-- below the threshold).
-- Candidates are read through btrees with leakproof equality: the exact
-- tier probes the unique (org_id, project_id, normalized_name) of entities
-- and the key of entity_aliases with the question's runs of 1-4 words; the
-- fuzzy tier takes the entities sharing a whole content word with the
-- question from entity_name_tokens and scores their names and aliases with
-- word_similarity, as a full scan of the names would.
-- What it leaves out against a full scan: a name sharing no whole word
-- with the question (a misspelt single-word name, "alise" for "alice", or
-- an inflected one, "alices") is not a candidate, nor one sharing only
-- stop words with it ("the offices" for "at the office"; counted, "a", a
-- middle initial, would make every "X A. Y" a candidate of every question
-- naming one: a thousand word_similarity calls per search).
-- Every name sharing a content word ranks exactly as in a full scan.
-- PL/pgSQL, so that the question's runs and words are parameters of every
-- read (restrictions, index conditions), not columns of a CTE joined to the
-- tables: a plan made before the first ANALYZE of a grown table (a new
-- install) would read every entity and every name token of the project and
-- filter them by the join, a cost growing with the project
-- (docs/decisions/007-plans-made-without-statistics.md).  Without statistics
-- a range of the project also costs the same as a read by the keys asked
-- for, so each read asks for the order of the key it must use, with sorts
-- off (only the top-k sort at the end remains, which every plan has): the
-- names through find_entities_by_name, aliases by name or by entity,
-- entities by id.  The plans are generic (made once per session, not per
-- call).
create or replace function memory_internal.search_entities(
  p_project uuid, p_qnorm text, p_known_at timestamptz, p_n integer)
  returns table (entity_id uuid, exact boolean, score double precision)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_grams text[] := memory_internal.question_ngrams(p_qnorm);
  v_words text[] := memory_internal.content_words(memory_internal.name_tokens(p_qnorm));
  v_exact uuid[];
  v_cand uuid[];
  -- Candidates the fuzzy tier scores at most, besides the rarest word's
  -- (see below): ten per hit asked, at least 300 (about 5 ms of
  -- word_similarity).
  v_budget integer := greatest(10 * p_n, 300);
  v_counts integer[];
  v_picked text[];
begin
  -- Names and aliases that are a run of the question's words.
  v_exact := array(select f.entity_id
                     from memory_internal.find_entities_by_name(v_org, p_project, v_grams) f
                   union
                   (select a.entity_id from memory.entity_aliases a
                     where a.org_id = v_org and a.project_id = p_project
                       and a.normalized_alias = any (v_grams)
                     order by a.normalized_alias));
  -- And those sharing a whole content word with it: the question's words
  -- from the rarest (in the project's names), while the names they bring
  -- stay within the budget, and always the rarest.  A word most names
  -- share ("person" in 3,000 "person <n>") would make every one of them a
  -- candidate, each a word_similarity (most of a search's time); such names
  -- are still found by a rarer word, as a run of the question, or when
  -- that word is the question's rarest.  Counted up to one past the
  -- budget (a word past it is never picked beside another).
  v_counts := array(select k.n
                      from unnest(v_words) with ordinality w(token, o)
                     cross join lateral (
                       select count(*)::integer as n
                         from (select from memory_internal.entity_name_tokens t
                                where t.org_id = v_org and t.project_id = p_project and t.token = w.token
                                limit v_budget + 1) x) k
                     order by w.o);
  v_picked := memory_internal.rarest_words(v_words, v_counts::float8[], v_budget);
  v_cand := array(select t.entity_id from memory_internal.entity_name_tokens t
                   where t.org_id = v_org and t.project_id = p_project and t.token = any (v_picked)
                  union
                  select unnest(v_exact));
  return query
    with names as materialized (
      -- Materialized: the planner would otherwise push <% down into a scan
      -- of the entities and compute it for every name.
      (select n.entity_id, n.normalized_name as name, n.created_at
         from memory.entities n
        where n.org_id = v_org and n.entity_id = any (v_cand) and n.project_id = p_project
        order by n.entity_id)
      union all
      (select a.entity_id, a.normalized_alias, n.created_at
         from memory.entity_aliases a
         join memory.entities n on n.org_id = a.org_id and n.entity_id = a.entity_id
        where a.org_id = v_org and a.entity_id = any (v_cand) and a.project_id = p_project
        order by a.entity_id)
    )
    select m.entity_id,
           bool_or(m.entity_id = any (v_exact)
                   or strpos(' ' || p_qnorm || ' ', ' ' || m.name || ' ') > 0),
           max(word_similarity(m.name, p_qnorm))::double precision
      from names m
     where m.created_at <= p_known_at
       -- The shared word first: it costs no trigrams, and most candidates
       -- pass by it (the words of a name: name_tokens without its distinct,
       -- a function call per name that costs more than the test).
       and (string_to_array(m.name, ' ') && v_words or m.name <% p_qnorm)
     group by m.entity_id
     order by 2 desc, 3 desc, 1
     limit p_n;
end
$$;
comment on function memory_internal.search_entities(uuid, text, timestamptz, integer) is
  'Entity leg of memory.search: up to p_n entities created by p_known_at whose name or alias occurs in the normalized question p_qnorm, or is similar to a run of it, or shares a non-stop word with it; whole-word matches first, then by word_similarity, then id. Candidates share a whole word with the question (entity_name_tokens; from its rarest word while their count stays within greatest(10 * p_n, 300), and always the rarest) or match one of its runs of 1-4 words exactly (btree on names and aliases).';
