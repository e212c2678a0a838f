-- Retrieval: one call runs every leg, fuses their scores (see the fusion
-- below for why not plain reciprocal ranks), and answers at the instant
-- asked.  Fact legs read through facts_at and the graph through edges_at,
-- so as_of/known_at hold for all.

-- Reciprocal rank fusion's term: the one definition.  The score fusion
-- gives a hit of a leg that ranks without a score.
create or replace function memory_internal.rrf(p_rank integer) returns double precision
  language sql immutable parallel safe
  as $$ select 1.0 / (60 + p_rank) $$;
comment on function memory_internal.rrf(integer) is 'Reciprocal rank fusion term 1/(60 + rank), rank from 1: the score of a hit from a leg that ranks without scores.';

-- How many hits each leg of memory.search ranks for an answer of p_k:
-- more than are returned, so fusion has something to agree on.
create or replace function memory_internal.search_leg_hits(p_k integer) returns integer
  language sql immutable parallel safe
  as $$ select greatest(p_k * 3, 30) $$;
comment on function memory_internal.search_leg_hits(integer) is
  'Hits each leg of memory.search ranks for an answer of p_k results: greatest(3 * p_k, 30).';

-- Who wrote an episode, as a name: the participant a message's metadata
-- names (`speaker`), normalized like every name; NULL when it names none.
-- The one definition the search's speaker preference reads.
create or replace function memory_internal.episode_speaker(p_metadata jsonb) returns text
  language sql immutable parallel safe
  as $$ select nullif(memory.normalize_text(p_metadata ->> 'speaker'), '') $$;
comment on function memory_internal.episode_speaker(jsonb) is 'The normalized name of the participant who wrote an episode (its metadata''s speaker), or NULL: whose turn it is, for the speaker preference of memory.search.';

-- The calendar period a question names, as a UTC range: a day ("13 October
-- 2023", "October 13, 2023", "2023-10-13"), else a month ("October 2023"),
-- else a year ("in 2023"); the first such mention counts.  Month names in
-- English, full or abbreviated to three letters.  NULL when it names none
-- (or an impossible day).
create or replace function memory_internal.question_period(p_query text) returns tstzrange
  language plpgsql stable parallel safe
as $$
-- PL/pgSQL, not SQL: each expression's plan is cached, where the SQL form
-- would be planned anew on every call from memory.search (~10 ms a call).
declare
  c_mon constant text := '(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?'
                         '|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?';
  c_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep',
                                    'oct', 'nov', 'dec'];
  r text[];
  y integer;
  mo integer;
  d integer;
begin
  r := regexp_match(p_query, '\m(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?' || c_mon || ',?\s+(\d{4})\M', 'i');
  if r is not null then  -- 13 October 2023, 13th of October 2023
    y := r[3]; mo := array_position(c_months, lower(left(r[2], 3))); d := r[1];
  else
    r := regexp_match(p_query, '\m' || c_mon || '\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\M', 'i');
    if r is not null then  -- October 13, 2023
      y := r[3]; mo := array_position(c_months, lower(left(r[1], 3))); d := r[2];
    else
      r := regexp_match(p_query, '\m(\d{4})-(\d{2})-(\d{2})\M');
      if r is not null then  -- 2023-10-13
        y := r[1]; mo := r[2]; d := r[3];
      else
        r := regexp_match(p_query, '\m' || c_mon || ',?\s+(\d{4})\M', 'i');
        if r is not null then  -- October 2023
          y := r[2]; mo := array_position(c_months, lower(left(r[1], 3)));
        else
          r := regexp_match(p_query, '\m((?:19|20)\d{2})\M');
          if r is null then
            return null;
          end if;
          y := r[1];  -- 2023
        end if;
      end if;
    end if;
  end if;
  if y not between 1 and 9999 or mo not between 1 and 12
     or d not between 1 and extract(day from make_date(y, mo, 1) + interval '1 month - 1 day') then
    return null;  -- an impossible day or month
  end if;
  return case
           when mo is null then tstzrange(make_timestamptz(y, 1, 1, 0, 0, 0, 'UTC'),
                                          make_timestamptz(y + 1, 1, 1, 0, 0, 0, 'UTC'))
           when d is null then tstzrange(make_timestamptz(y, mo, 1, 0, 0, 0, 'UTC'),
                                         make_timestamptz(case when mo = 12 then y + 1 else y end,
                                                          mo % 12 + 1, 1, 0, 0, 0, 'UTC'))
           else tstzrange(make_timestamptz(y, mo, d, 0, 0, 0, 'UTC'),
                          make_timestamptz(y, mo, d, 0, 0, 0, 'UTC') + interval '1 day')
         end;
end
$$;
comment on function memory_internal.question_period(text) is 'The calendar period (a day, else a month, else a year; UTC) the first date in a question names, or NULL: for the time preference of memory.search.';

-- The question as the vector legs should embed it: without the names of
-- the participants it names.  A conversation's turns are the speakers'
-- own words, so a name in the question pulls the embedding towards every
-- turn that mentions (or, as "<speaker>: <text>", opens with) that name
-- rather than towards what is asked; the speaker preference of
-- memory.search already takes the name into account.  (Without the names
-- the vector leg recalls more on LoCoMo:
-- docs/decisions/002-score-fusion-not-plain-rrf.md.)
-- Participants are found as the speaker preference finds them: speakers
-- (episode_speaker) whose name is a run of the question's words, among the
-- turns of the full-text leg's answer (a name the question holds is one of
-- its words), so the lookup reads no more than that leg does.  A name is
-- removed as whole words, with a possessive 's; a question that is nothing
-- but names is returned as it is.  The API embeds this text.
create or replace function memory.vector_query_text(
  p_project uuid,
  p_query text,
  p_at timestamptz default null,
  p_known_at timestamptz default null)
  returns text
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_out text := p_query;
  v_grams text[] := memory_internal.question_ngrams(memory.normalize_text(p_query));
  v_name text;
begin
  if memory_internal.question_tsquery(p_query) is null then
    return p_query;
  end if;
  select i.at, i.known_at into p_at, p_known_at
    from memory_internal.read_instants(p_at, p_known_at) i;
  for v_name in
    select distinct s.speaker
      from memory_internal.search_episode_fulltext(p_project, p_query, p_at, p_known_at, 30) x
      join memory.episodes e on e.org_id = v_org and e.episode_id = x.episode_id
     cross join lateral (select memory_internal.episode_speaker(e.metadata) as speaker) s
     where s.speaker = any (v_grams)
  loop
    -- The normalized name's words (no punctuation left in them), each a
    -- whole word of the question, any whitespace or punctuation between.
    v_out := regexp_replace(v_out, '\m' || array_to_string(string_to_array(v_name, ' '), '[[:punct:][:space:]]+')
                                   || '(?:[''’]s)?\M', ' ', 'gi');
  end loop;
  v_out := btrim(regexp_replace(v_out, '\s+', ' ', 'g'));
  return case when memory.normalize_text(v_out) = '' then p_query else v_out end;
end
$$;
comment on function memory.vector_query_text(uuid, text, timestamptz, timestamptz) is 'The text to embed for memory.search''s vector legs: the question without the names of the participants it names (episode speakers whose name is a run of its words, among the full-text leg''s hits), so the embedding looks for what is asked rather than for turns that name the speaker.';

-- How many rows a project holds, from its counters (a few rows read):
-- fact versions (inserted, less purged) and episodes (as the full-text
-- leg's collection statistics count them: episode_collection).
-- memory.search picks its vector legs' plans by these sizes.
create or replace function memory_internal.project_sizes(p_org uuid, p_project uuid)
  returns table (fact_versions bigint, episodes bigint)
  language sql stable
  as $$
    select (coalesce(sum(c.value) filter (where c.metric = 'facts_inserted'), 0)
              - coalesce(sum(c.value) filter (where c.metric = 'facts_purged'), 0))::bigint,
           (select e.docs from memory_internal.episode_collection(p_org, p_project) e)
      from memory_internal.counters c
     where c.org_id = p_org and c.project_id = p_project
       and c.metric in ('facts_inserted', 'facts_purged')
  $$;
comment on function memory_internal.project_sizes(uuid, uuid) is
  'A project''s fact versions (inserted less purged, from its counters) and episodes (episode_collection''s count): the sizes by which memory.search picks its vector legs'' plans.';

-- One level of the graph leg's walk (memory.search): the edges effective at
-- p_at at the frontier entities whose other end is not an inner (nearer)
-- one, and, at depth 2, only those with both ends at the frontier; returns
-- the current facts on those edges (newest first) and the edges' other ends
-- not yet reached.  The edges are read per frontier entity, by source
-- (edges_key_idx) and by target (edges_target_idx), and the facts per edge
-- by its key (facts_edge_cover_idx; a small table's plan may take its
-- target alone): index probes whatever the parameters, so one generic
-- plan serves every call.  (Inside memory.search the level's statement,
-- with arrays as filters, would be planned anew on every call, the
-- planning costing twice the execution; its generic form scans the org's
-- edges and the project's facts.)
create or replace function memory_internal.search_graph_level(
  p_project uuid, p_at timestamptz, p_known_at timestamptz,
  p_frontier uuid[], p_inner uuid[], p_reached uuid[], p_depth integer,
  out level uuid[], out next uuid[])
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  -- The plan is kept for the session: one made while the project is small
  -- must not scan whole tables once it has grown (as restitch).
  set enable_seqscan = off
  set enable_sort = off
  set enable_incremental_sort = off
as $$
begin
  -- offset 0 keeps each lateral read a probe per entity (or per edge).
  -- Each read of edges asks for an order only its index gives, so a plan
  -- made while memory.edges looked empty cannot read the org's edges by
  -- edges_pkey instead (sql/0027): by source, the rest of edges_key_idx's
  -- key; by target, edges_target_idx's relation.
  with lvl as materialized (
    select e.source_id, e.target_id, e.relation
      from unnest(p_frontier) s(id)
     cross join lateral (
       select x.source_id, x.target_id, x.relation
         from memory.edges_at(p_project, p_at, p_known_at) x
        where x.source_id = s.id
        order by x.target_id, x.relation, x.recorded_at
       offset 0) e
     where (p_depth < 2 or e.target_id = any (p_frontier))
       and not (e.source_id = any (p_inner) or e.target_id = any (p_inner))
    union all
    -- By target: an edge with both ends at the frontier was read above.
    select e.source_id, e.target_id, e.relation
      from unnest(p_frontier) t(id)
     cross join lateral (
       select x.source_id, x.target_id, x.relation
         from memory.edges_at(p_project, p_at, p_known_at) x
        where x.target_id = t.id
        order by x.relation
       offset 0) e
     where p_depth < 2 and not e.source_id = any (p_frontier)
       and not (e.source_id = any (p_inner) or e.target_id = any (p_inner))
  ), hits as (
    select distinct f.fact_id, f.valid_from
      from lvl
     cross join lateral (
       select y.fact_id, y.valid_from
         from memory.facts_at(p_project, p_at, p_known_at) y
        where y.subject_id = lvl.source_id and y.predicate = lvl.relation
          and y.object_entity_id = lvl.target_id
       offset 0) f
  )
  select (select coalesce(array_agg(h.fact_id order by h.valid_from desc, h.fact_id), '{}')
            from hits h),
         (select coalesce(array_agg(distinct o.other), '{}')
            from lvl cross join lateral (
              select case when lvl.source_id = any (p_frontier) then lvl.target_id
                          else lvl.source_id end) o(other)
           where not o.other = any (p_reached))
    into level, next;
end
$$;
comment on function memory_internal.search_graph_level(uuid, timestamptz, timestamptz, uuid[], uuid[], uuid[], integer) is
  'One level of memory.search''s graph walk: the facts (newest first) on the edges effective at p_at at the frontier entities (at depth 2 only edges with both ends at the frontier; none with an inner end), and the edges'' other ends not yet reached. One generic plan of index probes.';

-- The fact hits' details for memory.search's answer: the rows facts_at
-- gives for the ids asked, with the names readable_facts_at shows.  Each
-- read asks for the order of its key with sorts off (facts by id:
-- facts_text_cover_idx or the primary key; names by entity id), so its
-- one generic plan reads by key whatever the planner knows.  (Read
-- through readable_facts_at inside the fusion statement, planned per call
-- without statistics, the read can take facts_identity_idx by the project
-- alone and keep the ids asked: the project's every fact, once per
-- search, until the first ANALYZE;
-- docs/decisions/007-plans-made-without-statistics.md.)
create or replace function memory_internal.search_fact_details(
  p_project uuid, p_at timestamptz, p_known_at timestamptz, p_ids uuid[])
  returns table (fact_id uuid, detail jsonb)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
#variable_conflict use_column
begin
  return query
    select f.fact_id,
           jsonb_build_object('text', f.content, 'subject', s.name, 'predicate', f.predicate_label,
                              'object', coalesce(o.name, f.object_literal),
                              'valid_from', lower(f.valid_range), 'valid_until', upper(f.valid_range),
                              'confidence', f.confidence,
                              'standing', memory_internal.fact_standing(f.org_id, f.fact_id, p_known_at))
      from (select x.* from memory.facts_at(p_project, p_at, p_known_at) x
             where x.fact_id = any (p_ids)
             order by x.org_id, x.project_id, x.fact_id) f
     cross join lateral (
       select e.name from memory.entities e
        where e.org_id = memory_internal.current_org() and e.org_id = f.org_id
          and e.entity_id = f.subject_id
        order by e.org_id, e.entity_id
       offset 0) s
      left join lateral (
       select e.name from memory.entities e
        where e.org_id = memory_internal.current_org() and e.org_id = f.org_id
          and e.entity_id = f.object_entity_id
        order by e.org_id, e.entity_id
       offset 0) o on true;
end
$$;
comment on function memory_internal.search_fact_details(uuid, timestamptz, timestamptz, uuid[]) is
  'memory.search''s details of its fact hits: for each id that holds at p_at as believed at p_known_at, text, subject, predicate, object (names, as readable_facts_at), window, confidence and standing (at p_known_at) as JSON. Reads by key in one generic plan.';

-- memory.search and search_rows take p_fusion, with a default: their
-- 7-argument forms are dropped (sql/0036), or a 7-argument call would
-- match both.

create or replace function memory.search(
  p_project uuid,
  p_query text,
  p_query_embedding vector default null,
  p_at timestamptz default null,
  p_known_at timestamptz default null,
  p_k integer default 10,
  p_legs text[] default null,
  p_fusion text default 'scores',
  p_labels text[] default null,
  p_fields jsonb default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  -- Every leg is an indexed lookup of a few hundred rows at most, but the
  -- planner's row guesses behind RLS and facts_at can cross jit_above_cost:
  -- compiling then costs more than the whole search.
  set jit = off
as $$
declare
  c_all_legs constant text[] := array['episode_vector', 'fact_vector', 'episode_fulltext',
                                      'fact_fulltext', 'entity', 'graph'];
  v_org uuid := memory_internal.project_org(p_project);
  v_legs text[] := coalesce(p_legs, c_all_legs);
  v_n integer;
  v_tsq tsquery := memory_internal.question_tsquery(p_query);
  v_qnorm text := memory.normalize_text(p_query);
  v_period tstzrange := memory_internal.question_period(p_query);
  v_ngrams text[] := memory_internal.question_ngrams(v_qnorm);
  v_leg text;
  v_ids uuid[];
  v_scores double precision[];
  -- A leg's ranks when hits can tie (else 1, 2, 3, ...).
  v_ranks integer[];
  v_n_hits integer;
  v_kind text;
  -- Every leg's hits, one entry per hit in these parallel arrays (kind,
  -- id, leg, rank from 1, score or NULL): unnested by the fusion.
  v_hit_kinds text[] := '{}';
  v_hit_ids uuid[] := '{}';
  v_hit_legs text[] := '{}';
  v_hit_ranks integer[] := '{}';
  v_hit_scores double precision[] := '{}';
  v_ran text[] := '{}';
  v_failed jsonb := '[]';
  v_seeds uuid[] := '{}';
  v_reached uuid[];
  v_frontier uuid[];
  v_next uuid[];
  v_inner uuid[] := '{}';
  v_level uuid[];
  v_depth integer;
  v_results jsonb;
  v_prev_scan text;
  v_prev_ef text;
  -- Projects with more rows than this (fact versions, episodes) run their
  -- vector leg with one cached plan per session: see below.
  c_cached_min constant bigint := 20000;
  v_facts_cached boolean := false;
  v_episodes_cached boolean := false;
  -- Label and field filters (memory.episode_extractions): applied to the
  -- fused hits, episodes by their enrichment, facts by their source
  -- episode's (memory_internal.extraction_matches); entities unfiltered.
  v_filtered boolean := p_labels is not null or p_fields is not null;
begin
  if p_k is null or p_k < 1 or p_k > 200 then
    raise exception 'k must be between 1 and 200' using errcode = 'invalid_parameter_value';
  end if;
  if not v_legs <@ c_all_legs then
    raise exception 'unknown search leg in %; legs are %', v_legs, c_all_legs
      using errcode = 'invalid_parameter_value';
  end if;
  -- NULL instants mean now, as in every read (read_instants); resolved
  -- once, so every leg and the answer's at / known_at see the same two.
  select i.at, i.known_at into p_at, p_known_at
    from memory_internal.read_instants(p_at, p_known_at) i;
  perform memory_internal.check_instants(p_at, p_known_at);
  if p_fusion is null or p_fusion not in ('scores', 'rrf') then
    raise exception 'unknown fusion %; fusions are scores, rrf', coalesce(quote_literal(p_fusion), 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  v_n := memory_internal.search_leg_hits(p_k);
  if p_fields is not null and jsonb_typeof(p_fields) <> 'object' then
    raise exception 'fields must be a JSON object (matched with @>)' using errcode = 'invalid_parameter_value',
      detail = 'fields';
  end if;
  if array_position(p_labels, null) is not null then
    raise exception 'labels must not hold NULL' using errcode = 'invalid_parameter_value', detail = 'labels';
  end if;
  -- A filter drops hits after the legs: they rank four times as many.
  if v_filtered then
    v_n := v_n * 4;
  end if;
  if p_query_embedding is not null then
    -- Project-filtered vector queries keep walking the HNSW graph until
    -- they have their rows instead of returning fewer.  (Set here, not as
    -- a function SET clause: the setting exists only once pgvector's
    -- library is loaded, which using a vector does.)
    perform vector_dims(p_query_embedding);
    v_prev_scan := current_setting('hnsw.iterative_scan', true);
    perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
    -- And walk it wide enough to find the nearest rows (vector_ef_search);
    -- a session that asks for a wider walk keeps it.
    v_prev_ef := current_setting('hnsw.ef_search', true);
    perform set_config('hnsw.ef_search',
                       greatest(coalesce(v_prev_ef::integer, 0),
                                memory_internal.vector_ef_search(v_n))::text, true);
    -- Which plan each vector leg runs.  Planned per call (PL/pgSQL's
    -- custom plans), the planner sees the project and the LIMIT and picks
    -- an exact sort of a small project's rows or the HNSW scan of a large
    -- one's (every project of the 100k and 1M benchmark loads, 10,000 rows
    -- and more); that planning costs about 0.5 ms per leg and call.  A
    -- project past c_cached_min rows, far above where the planner switches,
    -- gets the HNSW scan as a generic plan kept for the session instead
    -- (search_fact_vector_cached, search_episode_vector_cached): the same
    -- plan, planned once.  Smaller ones are planned per call, forced
    -- (search_fact_vector_planned, search_episode_vector_planned: in
    -- PL/pgSQL's default mode the plan cache can switch to a generic plan),
    -- and so is a question that names a period
    -- (docs/decisions/009-vector-legs-width-and-plans.md).
    -- In a large install a project of that size is a small share of the
    -- shared index, where the filtered HNSW walk grows long: the bar is
    -- then vector_exact_budget's (the period leg's rule), if higher.
    select s.fact_versions > greatest(c_cached_min, memory_internal.vector_exact_budget(
                                        v_n, (select c.reltuples from pg_class c
                                               where c.oid = 'memory.facts'::regclass))),
           s.episodes > greatest(c_cached_min, memory_internal.vector_exact_budget(
                                   v_n, (select c.reltuples from pg_class c
                                          where c.oid = 'memory.episodes'::regclass)))
      into v_facts_cached, v_episodes_cached
      from memory_internal.project_sizes(v_org, p_project) s;
  end if;

  foreach v_leg in array c_all_legs loop
    continue when not v_leg = any (v_legs);
    -- Vector legs need a query embedding; without one they are skipped,
    -- not failed.  Text legs need a searchable word.
    continue when v_leg in ('episode_vector', 'fact_vector') and p_query_embedding is null;
    continue when v_leg in ('episode_fulltext', 'fact_fulltext') and v_tsq is null;
    continue when v_leg in ('entity', 'graph') and coalesce(v_qnorm, '') = '';
    v_ids := null;
    v_scores := null;
    v_ranks := null;
    begin
      case v_leg
      when 'episode_vector' then
        v_kind := 'episode';
        -- When the question names a period (a day, month or year:
        -- question_period), the leg also ranks that period's turns on
        -- their own (search_episode_vector_within, as many again), so a
        -- turn of the day asked about is scored even when the project's
        -- nearest v_n crowd it out.  Both lists hold cosine similarities:
        -- one scale, merged by score.  (It adds to LoCoMo recall:
        -- docs/decisions/002-score-fusion-not-plain-rrf.md.)
        if v_episodes_cached and v_period is null then
          select array_agg(x.episode_id order by x.score desc, x.episode_id),
                 array_agg(x.score order by x.score desc, x.episode_id)
            into v_ids, v_scores
            from memory_internal.search_episode_vector_cached(p_project, p_query_embedding, p_at, p_known_at,
                                                              v_n) x;
        else
          select array_agg(x.episode_id order by x.score desc, x.episode_id),
                 array_agg(x.score order by x.score desc, x.episode_id)
            into v_ids, v_scores
            from memory_internal.search_episode_vector_planned(p_project, p_query_embedding, v_period, p_at,
                                                               p_known_at, v_n) x;
        end if;
      when 'fact_vector' then
        v_kind := 'fact';
        -- Facts at the same distance share a rank (fact_trust then orders
        -- them: see the fusion).
        if v_facts_cached then
          select array_agg(y.fact_id order by y.o), array_agg(y.r order by y.o) into v_ids, v_ranks
            from (select x.fact_id, row_number() over (order by x.distance, x.fact_id) as o,
                         rank() over (order by x.distance)::integer as r
                    from memory_internal.search_fact_vector_cached(p_project, p_query_embedding, p_at,
                                                                   p_known_at, v_n) x) y;
        else
          select array_agg(y.fact_id order by y.o), array_agg(y.r order by y.o) into v_ids, v_ranks
            from (select x.fact_id, row_number() over (order by x.distance, x.fact_id) as o,
                         rank() over (order by x.distance)::integer as r
                    from memory_internal.search_fact_vector_planned(p_project, p_query_embedding, p_at,
                                                                    p_known_at, v_n) x) y;
        end if;
      when 'episode_fulltext' then
        v_kind := 'episode';
        select array_agg(x.episode_id order by x.ord), array_agg(x.score order by x.ord)
          into v_ids, v_scores
          from memory_internal.search_episode_fulltext(p_project, p_query, p_at, p_known_at, v_n)
               with ordinality x(episode_id, score, ord);
      when 'fact_fulltext' then
        v_kind := 'fact';
        -- Ranked without a score (fusion gives it 1/(60 + rank)): the
        -- candidates and their order are the leg's; facts of the same score
        -- share a rank.
        select array_agg(y.fact_id order by y.ord), array_agg(y.r order by y.ord) into v_ids, v_ranks
          from (select x.fact_id, x.ord, rank() over (order by x.score desc)::integer as r
                  from memory_internal.search_fact_fulltext(p_project, p_query, p_at, p_known_at, v_n)
                       with ordinality x(fact_id, score, ord)) y;
      when 'entity' then
        v_kind := 'entity';
        -- An entity whose name (or alias) occurs in the question, whole
        -- words first, then by trigram word similarity: through btrees
        -- (memory_internal.search_entities, which says what the token
        -- candidates leave out against a full scan of the names).
        select array_agg(x.entity_id order by x.ord) into v_ids
          from memory_internal.search_entities(p_project, v_qnorm, p_known_at, v_n)
               with ordinality x(entity_id, exact, score, ord);
        v_seeds := coalesce(v_ids[1:5], '{}');
      when 'graph' then
        v_kind := 'fact';
        -- Breadth-first over the edges effective at p_at (depth <= 2) from
        -- the entities the question names; the facts on the walked edges,
        -- nearest first.
        -- Seeds: the entity leg's first five (the entities the question
        -- names, then names sharing a word with it or similar to it), so
        -- the walk is the same whether or not that leg ran in this search;
        -- when it did not, its function is called here for them.
        if not 'entity' = any (v_ran) then
          select coalesce(array_agg(x.entity_id order by x.ord), '{}') into v_seeds
            from memory_internal.search_entities(p_project, v_qnorm, p_known_at, 5)
                 with ordinality x(entity_id, exact, score, ord);
        end if;
        -- One indexed lookup per hop (edges by source or by target) instead
        -- of walking every edge of the project.  An edge's depth is the
        -- smaller depth of its two ends, so the edges at a seed come first
        -- (depth 0), then those at the seeds' neighbours (1), then those
        -- between two entities two hops out (2); a deeper level is read
        -- only while the shallower ones hold fewer than v_n facts.
        v_ids := '{}';
        v_reached := v_seeds;
        v_frontier := v_seeds;
        for v_depth in 0 .. 2 loop
          exit when cardinality(v_frontier) = 0 or cardinality(v_ids) >= v_n;
          -- Edges at the frontier whose other end is reached (at depth 2,
          -- both ends at depth 2: every edge at a nearer entity was
          -- taken at that entity's depth), read per frontier entity by
          -- source and by target from their covering indexes (sql/0017;
          -- a hub at the frontier, a city or a company, has a thousand
          -- edges), in one generic plan: search_graph_level.
          select g.level, g.next into v_level, v_next
            from memory_internal.search_graph_level(p_project, p_at, p_known_at, v_frontier,
                                                    v_inner, v_reached, v_depth) g;
          v_ids := v_ids || array(select u.id from unnest(v_level) with ordinality u(id, o)
                                   where not u.id = any (v_ids) order by u.o);
          v_inner := v_inner || v_frontier;
          v_frontier := v_next;
          v_reached := v_reached || v_next;
        end loop;
        v_ids := v_ids[1:v_n];
      end case;
      v_ran := v_ran || v_leg;
      v_n_hits := coalesce(cardinality(v_ids), 0);
      v_hit_kinds := v_hit_kinds || array_fill(v_kind, array[v_n_hits]);
      v_hit_ids := v_hit_ids || coalesce(v_ids, '{}');
      v_hit_legs := v_hit_legs || array_fill(v_leg, array[v_n_hits]);
      v_hit_ranks := v_hit_ranks || coalesce(v_ranks, array(select generate_series(1, v_n_hits)));
      v_hit_scores := v_hit_scores || coalesce(v_scores, array_fill(null::double precision, array[v_n_hits]));
    exception when others then
      -- A failing leg is reported; the others still answer.
      v_failed := v_failed || jsonb_build_object('leg', v_leg, 'error', sqlerrm, 'sqlstate', sqlstate);
    end;
  end loop;

  if v_prev_scan is not null then
    perform set_config('hnsw.iterative_scan', v_prev_scan, true);
  end if;
  if v_prev_ef is not null then
    perform set_config('hnsw.ef_search', v_prev_ef, true);
  end if;
  if cardinality(v_ran) = 0 and jsonb_array_length(v_failed) > 0 then
    raise exception 'every search leg failed: %', v_failed using errcode = 'external_routine_exception';
  end if;

  -- Fusion.  Each leg's scores are put on one scale and summed (CombSUM,
  -- Fox & Shaw 1994) with equal weights, as nothing here is trained.  The
  -- scale is the z-score (Montague & Aslam 2001), shifted so that a leg's
  -- weakest hit scores 0, as does an id the leg did not return; a leg with
  -- a single hit (or all tied) gives 1.  Unlike reciprocal rank fusion this
  -- keeps how far apart a leg's scores are, so a weak leg's flat list does
  -- not dilute a strong leg's clear first.  Legs that rank without a score
  -- (fact, entity, graph) are scored memory_internal.rrf(rank).
  -- Then conversation context: the turns that answer a question sit next to
  -- each other, so every episode passes a share of its score to the turns
  -- of its session d turns away, halving with each turn (1/2, 1/4, 1/8;
  -- farther shares, 1/16 and less, are dropped for cost).
  -- Facts are weighed by their standing and confidence (fact_trust).
  -- Last, two preferences, each halving an episode's score (the discount
  -- of a turn one away in the context kernel; facts and entities are left
  -- alone).  Speaker: when the question names exactly one participant of
  -- the conversation (a speaker of the scored episodes whose name is a run
  -- of the question's words), a turn known to be another participant's.
  -- Period: when the question names a day, month or year
  -- (question_period), a turn that occurred outside it.  Both read from
  -- the rows the context step already joins, so they cost no extra lookup.
  -- p_fusion => 'rrf' is plain reciprocal rank fusion instead: each hit
  -- scores memory_internal.rrf(rank) in each leg, summed, with no context
  -- shares and no preferences (no hit_episodes).  The default recalls more
  -- on LoCoMo (recall@10 0.802 against 0.655:
  -- docs/decisions/002-score-fusion-not-plain-rrf.md).
  with hits as (
    select h.kind, h.id, h.leg, h.rank,
           case when p_fusion = 'rrf' then memory_internal.rrf(h.rank)
                else coalesce(h.score, memory_internal.rrf(h.rank)) end as raw
      from unnest(v_hit_kinds, v_hit_ids, v_hit_legs, v_hit_ranks, v_hit_scores) h(kind, id, leg, rank, score)
  ), normed as (
    select h.kind, h.id, h.leg, h.rank,
           case when p_fusion = 'rrf' then h.raw
                else coalesce((h.raw - min(h.raw) over w) / nullif(stddev_pop(h.raw) over w, 0), 1) end as score
      from hits h
    window w as (partition by h.leg)
  ), fused as (
    select n.kind, n.id, sum(n.score) as score, jsonb_object_agg(n.leg, n.rank) as ranks
      from normed n group by n.kind, n.id
  ), hit_episodes as materialized (
    -- The turn window's bounds as columns of a CTE: under forced RLS a qual
    -- computing e1.seq - 3 (int4mi is not leakproof) is no index
    -- condition, and every turn of the session would be read for each hit
    -- (docs/decisions/001-text-search-through-btree-postings.md).
    select f.id, f.score, e1.session_id, e1.seq, e1.seq - 3 as lo, e1.seq + 3 as hi,
           memory_internal.episode_speaker(e1.metadata) as speaker,
           e1.occurred_at
      from fused f
      join memory.episodes e1 on e1.org_id = v_org and e1.episode_id = f.id
     where f.kind = 'episode' and p_fusion = 'scores'
  ), shared as (
    -- Each hit's neighbours read by session and turn (offset 0: a probe per
    -- hit), the project and visibility tested on what it returns: with
    -- those in the read too, a plan made without statistics guesses one
    -- row for every index and reads the project's episodes by
    -- (org, project, occurred_at) instead, once per search.
    select e2.episode_id as id, sum(h.score * power(0.5, abs(e2.seq - h.seq))) as score,
           min(memory_internal.episode_speaker(e2.metadata)) as speaker, min(e2.occurred_at) as occurred_at
      from hit_episodes h
     cross join lateral (
       select e.episode_id, e.project_id, e.seq, e.metadata, e.occurred_at, e.created_at
         from memory.episodes e
        where e.org_id = v_org and e.session_id = h.session_id and e.seq between h.lo and h.hi
       offset 0) e2
     where e2.seq <> h.seq and e2.project_id = p_project
       and memory_internal.episode_visible(e2.occurred_at, e2.created_at, p_at, p_known_at)
     group by e2.episode_id
  ), scored as (
    -- The legs' ranks are joined afterwards (preferred), not aggregated
    -- here: a jsonb_agg per group makes this hash aggregate spill to disk
    -- (its planned size per group), 500 groups of an all-legs search.
    select u.kind, u.id, sum(u.score) as score, min(u.speaker) as speaker, min(u.occurred_at) as occurred_at
      from (select f.kind, f.id, f.score, h.speaker, h.occurred_at
              from fused f left join hit_episodes h on f.kind = 'episode' and h.id = f.id
            union all
            select 'episode', s.id, s.score, s.speaker, s.occurred_at from shared s) u
     group by u.kind, u.id
  ), named as (
    select case when count(distinct s.speaker) = 1 then min(s.speaker) end as speaker
      from scored s
     where s.speaker = any (v_ngrams)
  ), preferred as (
    select s.kind, s.id, coalesce(f.ranks, '{}') as ranks,
           s.score * case when s.speaker <> n.speaker then 0.5 else 1 end
                   * case when not v_period @> s.occurred_at then 0.5 else 1 end
                   * coalesce(t.trust, 1) as score
      from scored s cross join named n
      left join fused f on f.kind = s.kind and f.id = s.id
      -- A fact hit's standing (at p_known_at) and stored confidence
      -- (memory_internal.fact_trust): confirmed ranks above unreviewed at
      -- equal relevance, a less confident claim below a sure one.
      left join lateral (
        select memory_internal.fact_trust(memory_internal.fact_standing(v_org, x.fact_id, p_known_at),
                                          x.confidence) as trust
          from memory_internal.fact_versions(p_project) x
         where x.org_id = v_org and x.fact_id = s.id) t on s.kind = 'fact'
  ), numbered as (
    select x.kind, x.id, x.score, x.ranks, x.position
      from (select s.*, row_number() over (order by s.score desc, s.kind, s.id) as position
              from preferred s
             where not v_filtered or s.kind = 'entity'
                or memory_internal.extraction_matches(v_org, p_project, s.kind, s.id, p_labels, p_fields)) x
     where x.position <= p_k
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'position', n.position, 'kind', n.kind, 'id', n.id, 'score', round(n.score::numeric, 6),
           'ranks', n.ranks) || d.detail order by n.position), '[]')
    into v_results
    from numbered n
    -- The facts' details in one read for the array of the fact hits
    -- (search_fact_details, by key), not one per hit.
    left join memory_internal.search_fact_details(
                p_project, p_at, p_known_at, array(select n2.id from numbered n2 where n2.kind = 'fact')) fd
      on n.kind = 'fact' and fd.fact_id = n.id
    cross join lateral (
      select case n.kind
        when 'fact' then fd.detail
        when 'episode' then (
          select jsonb_build_object('text', e.content, 'role', e.role, 'occurred_at', e.occurred_at,
                                    'session', s.external_id, 'seq', e.seq)
                 -- A chunk of a file: which file, page and offset (a message: no key).
                 || jsonb_strip_nulls(jsonb_build_object(
                      'attachment', memory_internal.episode_attachment(e.org_id, e.episode_id)))
            from memory.episodes e join memory.sessions s on s.org_id = e.org_id and s.session_id = e.session_id
           where e.org_id = v_org and e.episode_id = n.id)
        else (
          select jsonb_build_object('text', en.name, 'entity_type', en.entity_type, 'summary', en.summary)
            from memory.entities en where en.org_id = v_org and en.entity_id = n.id)
      end as detail) d;

  return jsonb_build_object(
    'results', v_results,
    'degraded', jsonb_array_length(v_failed) > 0,
    'failed_legs', v_failed,
    'legs', to_jsonb(v_ran),
    'at', p_at, 'known_at', p_known_at);
end
$$;
comment on function memory.search(uuid, text, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb) is
  'Hybrid search in one call: episode and fact vector legs (HNSW with an iterative scan, hnsw.ef_search at least memory_internal.vector_ef_search of the hits asked), episode full-text leg (OR of the question''s words, Okapi BM25 with the project''s statistics), fact full-text leg (OR of the words, cover density), entity match (names and aliases, trigram word similarity) and a graph walk (depth <= 2 over edges effective at p_at), fused by summing each leg''s scores shifted z-scores (legs without scores: 1/(60+rank)), then each episode shares 1/2, 1/4, 1/8 of its score with the turns 1, 2, 3 away in its session; when the question names exactly one participant (an episode speaker, metadata speaker), turns known to be another participant''s count half; when it names a calendar period (a day, month or year), episodes that occurred outside it count half; the episode vector leg then also ranks that period''s episodes on their own (search_episode_vector_within). Facts, edges and episodes are read as of p_at / p_known_at (NULL or omitted: now, as in facts_at). A failing leg is listed in failed_legs and marks the answer degraded; only all legs failing raises. Vector legs are skipped when p_query_embedding is NULL. p_fusion => ''rrf'' fuses by plain reciprocal rank fusion instead (sum of 1/(60 + rank) over the legs; no context shares, no preferences). p_labels (all of them) and p_fields (jsonb @>) keep only episodes whose extraction (memory.episode_extractions) carries them and facts drawn from such episodes; entities are not filtered; the legs then rank four times as many hits.';

create or replace function memory.search_rows(
  p_project uuid,
  p_query text,
  p_query_embedding vector default null,
  p_at timestamptz default null,
  p_known_at timestamptz default null,
  p_k integer default 10,
  p_legs text[] default null,
  p_fusion text default 'scores',
  p_labels text[] default null,
  p_fields jsonb default null)
  returns table (pos integer, kind text, score numeric, text text, valid_from timestamptz,
                 valid_until timestamptz, occurred_at timestamptz, legs jsonb, id uuid)
  language sql stable
  as $$
    select (r ->> 'position')::integer, r ->> 'kind', (r ->> 'score')::numeric, r ->> 'text',
           (r ->> 'valid_from')::timestamptz, (r ->> 'valid_until')::timestamptz,
           (r ->> 'occurred_at')::timestamptz, r -> 'ranks', (r ->> 'id')::uuid
      from jsonb_array_elements(
             memory.search(p_project, p_query, p_query_embedding, p_at, p_known_at, p_k, p_legs, p_fusion,
                           p_labels, p_fields)
               -> 'results') r
  $$;
comment on function memory.search_rows(uuid, text, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb) is
  'memory.search as rows, for reading in psql.';

-- memory.context's budget: p_line joins p_lines, after p_header when that is
-- given (a section's first line), if the estimated tokens of both fit in
-- p_max beside p_used; added says whether it did.
create or replace function memory_internal.add_within_budget(
  inout p_lines text[], inout p_used integer, p_line text, p_header text, p_max integer,
  out added boolean)
  language plpgsql immutable
as $$
declare
  v_cost integer := memory_internal.estimate_tokens(p_line || E'\n')
                    + case when p_header is null then 0
                           else memory_internal.estimate_tokens(p_header || E'\n') end;
begin
  added := p_used + v_cost <= p_max;
  if added then
    p_lines := p_lines || array_remove(array[p_header, p_line], null);
    p_used := p_used + v_cost;
  end if;
end
$$;
comment on function memory_internal.add_within_budget(text[], integer, text, text, integer) is
  'memory.context''s token budget: append p_line (after p_header when given) to p_lines if their estimated tokens fit in p_max beside p_used; returns the lines, the tokens used and whether it was added.';

create or replace function memory.context(
  p_project uuid,
  p_query text,
  p_query_embedding vector default null,
  p_at timestamptz default null,
  p_known_at timestamptz default null,
  p_max_tokens integer default 1500,
  p_k integer default 20,
  p_labels text[] default null,
  p_fields jsonb default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_search jsonb;
  v_lines text[] := '{}';
  v_facts jsonb := '[]';
  v_episodes jsonb := '[]';
  v_groups jsonb := '[]';
  v_summaries integer := 0;
  v_used integer := 0;
  v_line text;
  v_added boolean;
  r jsonb;
begin
  if p_max_tokens is null or p_max_tokens < 50 then
    raise exception 'max_tokens must be at least 50' using errcode = 'invalid_parameter_value';
  end if;
  -- NULL instants mean now (read_instants): the header and the
  -- communities read the instants the search reads.
  select i.at, i.known_at into p_at, p_known_at
    from memory_internal.read_instants(p_at, p_known_at) i;
  v_search := memory.search(p_project, p_query, p_query_embedding, p_at, p_known_at, p_k,
                            p_labels => p_labels, p_fields => p_fields);
  -- Facts first (what holds, with windows), then the episodes behind them.
  for r in select x from jsonb_array_elements(v_search -> 'results') x
            where x ->> 'kind' = 'fact' order by (x ->> 'position')::integer loop
    v_line := format('- %s (valid %s – %s)', r ->> 'text',
                     to_char((r ->> 'valid_from')::timestamptz, 'YYYY-MM-DD'),
                     coalesce(to_char((r ->> 'valid_until')::timestamptz, 'YYYY-MM-DD'), 'now'));
    select * into v_lines, v_used, v_added
      from memory_internal.add_within_budget(
             v_lines, v_used, v_line,
             case when jsonb_array_length(v_facts) = 0
                  then format('Facts (as of %s):', to_char(p_at, 'YYYY-MM-DD HH24:MI "UTC"')) end,
             p_max_tokens);
    exit when not v_added;
    v_facts := v_facts || r;
  end loop;
  for r in select x from jsonb_array_elements(v_search -> 'results') x
            where x ->> 'kind' = 'episode' order by (x ->> 'occurred_at')::timestamptz, (x ->> 'position')::integer loop
    v_line := format('- [%s] %s: %s', to_char((r ->> 'occurred_at')::timestamptz, 'YYYY-MM-DD HH24:MI'),
                     r ->> 'role', r ->> 'text');
    select * into v_lines, v_used, v_added
      from memory_internal.add_within_budget(
             v_lines, v_used, v_line,
             case when jsonb_array_length(v_episodes) = 0 then 'Conversation excerpts:' end,
             p_max_tokens);
    continue when not v_added;
    v_episodes := v_episodes || r;
  end loop;
  -- Last, the groups of related entities (memory.communities) holding an
  -- entity the context names: its facts' subjects and objects, and the
  -- entities the question matched.  Only a computation made by p_at and
  -- p_known_at counts (context_communities): a later one describes a later
  -- graph.
  for r in select to_jsonb(c)
             from memory_internal.context_communities(
                    p_project, p_at, p_known_at,
                    array(select (x ->> 'id')::uuid from jsonb_array_elements(v_facts) x),
                    array(select (x ->> 'id')::uuid from jsonb_array_elements(v_search -> 'results') x
                           where x ->> 'kind' = 'entity')) c loop
    v_line := format('- %s (%s members): %s%s', r ->> 'label', r ->> 'size',
                     array_to_string(array(select jsonb_array_elements_text(r -> 'members')), ', '),
                     case when (r ->> 'more')::integer > 0 then format(' and %s more', r ->> 'more')
                          else '' end);
    -- The first three with the model's summary, written by p_at and
    -- p_known_at (functions/079_community_summaries.sql); without it when
    -- only the line fits.
    r := r || memory_internal.context_summary(p_project, (r ->> 'community_id')::uuid, p_at, p_known_at,
                                              v_summaries < 3);
    for v_try in 1 .. 2 loop
      -- (Every community of a project comes from one run: one instant.)
      select * into v_lines, v_used, v_added
        from memory_internal.add_within_budget(
               v_lines, v_used, v_line || coalesce(E'\n  Summary: ' || (r ->> 'summary'), ''),
               case when jsonb_array_length(v_groups) = 0
                    then format('Related groups (computed %s):',
                                to_char((r ->> 'computed_at')::timestamptz, 'YYYY-MM-DD HH24:MI "UTC"')) end,
               p_max_tokens);
      exit when v_added or r ->> 'summary' is null;
      r := r || jsonb_build_object('summary', null, 'summarized_at', null);
    end loop;
    continue when not v_added;
    v_summaries := v_summaries + (r ->> 'summary' is not null)::integer;
    v_groups := v_groups || r;
  end loop;
  return jsonb_build_object(
    'text', array_to_string(v_lines, E'\n'),
    'facts', v_facts, 'episodes', v_episodes, 'communities', v_groups, 'tokens', v_used,
    'degraded', v_search -> 'degraded', 'failed_legs', v_search -> 'failed_legs',
    'at', p_at, 'known_at', p_known_at);
end
$$;
comment on function memory.context(uuid, text, vector, timestamptz, timestamptz, integer, integer, text[], jsonb) is
  'A prompt-ready block for an agent: the facts that hold at p_at (with their windows), then supporting conversation excerpts with dates, then the communities (memory.compute_communities, when computed by p_at and p_known_at) holding the entities the facts and the question name, the first three with their summary (when written by then), within p_max_tokens (estimated); also as JSON (facts, episodes, communities).';
