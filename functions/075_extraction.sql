-- Extraction: what the model is shown for an episode, and how its answer
-- is applied.  The worker only calls the model; every rule is here.

-- The facts the model is shown for an episode (and so may name as
-- contradicted): those holding at the episode's instant whose subject is
-- named (by name or alias, as a whole word) in the episode or its last
-- p_turns turns.  One definition for extraction_context and apply_extraction.
create or replace function memory_internal.extraction_fact_ids(p_episode uuid, p_turns integer)
  returns setof uuid
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  -- One plan per statement and session, each a read by the keys found
  -- before it; with sorts off, a read asks for the order only its key gives
  -- (a range of the project costs the same without statistics).
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
declare
  ep memory.episodes;
  v_said text;
  v_cand uuid[];
  v_named uuid[];
begin
  select e.* into ep from memory.episodes e where e.episode_id = p_episode;
  if ep.episode_id is null then
    return;
  end if;
  -- The episode and its recent turns, normalized, between spaces.
  v_said := ' ' || memory.normalize_text(ep.content || ' ' || coalesce((
              select string_agg(t.content, ' ' order by t.seq)
                from (select x.seq, x.content from memory.episodes x
                       where x.org_id = ep.org_id and x.session_id = ep.session_id and x.seq < ep.seq
                       order by x.seq desc limit greatest(p_turns, 0)) t), '')) || ' ';
  -- Entities whose name or an alias occurs there as whole words.  Every
  -- word of such a name is a word said, so the candidates are the entities
  -- with a name token said (entity_name_tokens: names and aliases); each is
  -- then tested whole.  (A plan made without statistics would test every
  -- entity of the project per fact:
  -- docs/decisions/007-plans-made-without-statistics.md.)
  v_cand := array(select distinct t.entity_id from memory_internal.entity_name_tokens t
                   where t.org_id = ep.org_id and t.project_id = ep.project_id
                     and t.token = any (memory_internal.name_tokens(btrim(v_said))));
  v_named := array(
    (select n.entity_id from memory.entities n
      where n.org_id = ep.org_id and n.entity_id = any (v_cand)
        and strpos(v_said, ' ' || n.normalized_name || ' ') > 0
      order by n.entity_id)
    union
    (select a.entity_id from memory.entity_aliases a
      where a.org_id = ep.org_id and a.entity_id = any (v_cand)
        and strpos(v_said, ' ' || a.normalized_alias || ' ') > 0
      order by a.entity_id));
  return query
    select x.fact_id
      from memory.facts_at(ep.project_id, ep.occurred_at) x
     where x.subject_id = any (v_named)
     order by x.subject_id;
end
$$;
comment on function memory_internal.extraction_fact_ids(uuid, integer) is
  'Ids of the facts extraction_context shows the model for an episode (with p_turns recent turns): the only ones apply_extraction accepts as contradicted.';

-- Everything the enrich job sends the model about one episode.
create or replace function memory_worker.extraction_context(p_episode uuid, p_turns integer default 6)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  ep memory.episodes;
  v_ids uuid[];
  v_turns jsonb;
  v_facts jsonb;
  v_predicates jsonb;
begin
  select e.* into ep from memory.episodes e where e.episode_id = p_episode;
  if ep.episode_id is null then
    raise exception 'episode % not found', p_episode using errcode = 'no_data_found';
  end if;
  select coalesce(jsonb_agg(jsonb_build_object('role', t.role, 'content', t.content,
                                               'occurred_at', t.occurred_at) order by t.seq), '[]')
    into v_turns
    from (select e.* from memory.episodes e
           where e.org_id = ep.org_id and e.session_id = ep.session_id and e.seq < ep.seq
           order by e.seq desc limit greatest(p_turns, 0)) t;

  -- Current facts about the entities the episode and its recent turns name
  -- (exact normalized-name or alias occurrence), as they hold at the
  -- episode's instant: the ids the model may list as contradicted.
  v_ids := array(select memory_internal.extraction_fact_ids(p_episode, p_turns));
  select coalesce(jsonb_agg(jsonb_build_object(
           'fact_id', f.fact_id, 'subject', f.subject, 'predicate', f.predicate,
           'object', f.object, 'content', f.content, 'valid_from', f.valid_from,
           'valid_until', f.valid_until) order by f.subject, f.predicate), '[]')
    into v_facts
    from memory.readable_facts_at(ep.project_id, ep.occurred_at) f
   where f.fact_id = any (v_ids);

  select coalesce(jsonb_agg(jsonb_build_object('predicate', d.predicate, 'cardinality', d.cardinality)
                            order by d.predicate), '[]')
    into v_predicates
    from memory.predicates_of(ep.project_id) d;

  return jsonb_build_object(
    'episode', jsonb_build_object('episode_id', ep.episode_id, 'role', ep.role,
                                  'content', ep.content, 'occurred_at', ep.occurred_at),
    'recent_turns', v_turns,
    'known_facts', v_facts,
    'predicates', v_predicates);
end
$$;
comment on function memory_worker.extraction_context(uuid, integer) is
  'What the extraction model sees for an episode: the episode, its last turns, the project''s facts about the entities they name (as of the episode''s instant, with ids it may contradict) and the declared predicates.';

-- Apply a model's answer for an episode.  Each section runs in its own
-- savepoint: a failing section is rolled back whole and reported, the
-- others stand.  Re-applying the same answer is a no-op (facts skip,
-- entities and notes upsert, contradictions already closed are unchanged).
-- p_turns is extraction_context's: only the facts it offered may be
-- contradicted.  (The signature without p_turns, which would make a
-- three-argument call ambiguous, is dropped by sql/0036.)
create or replace function memory_worker.apply_extraction(
  p_episode uuid, p_payload jsonb, p_min_confidence real default 0.5, p_turns integer default 6)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  ep memory.episodes;
  v_report jsonb := '{}';
  v_failed text[] := '{}';
  v_facts jsonb;
  v_kept jsonb;
  v_dropped_low integer;
  v_dropped_dead integer;
  v_malformed jsonb;
  v_ignored jsonb;
  v_skipped integer;
  v_result jsonb;
  v_closed integer := 0; v_unknown integer := 0;
  v_n integer;
  x jsonb;
  v_target memory.facts;
  v_section text;
  v_offered uuid[];
  v_policy text;
  v_opened integer := 0;
begin
  select e.* into ep from memory.episodes e where e.episode_id = p_episode;
  if ep.episode_id is null then
    raise exception 'episode % not found', p_episode using errcode = 'no_data_found';
  end if;
  if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
    raise exception 'extraction payload must be a JSON object' using errcode = 'invalid_parameter_value';
  end if;
  -- What the model was shown, before this answer adds entities or facts.
  v_offered := array(select memory_internal.extraction_fact_ids(p_episode, p_turns));
  foreach v_section in array array['entities', 'facts', 'contradictions', 'notes'] loop
    if coalesce(jsonb_typeof(p_payload -> v_section), 'array') <> 'array' then
      raise exception 'extraction payload: % must be an array', v_section
        using errcode = 'invalid_parameter_value';
    end if;
  end loop;

  -- Entities: names (with type and summary) and their aliases.  An entry
  -- whose name is not a string, or whose type, summary or aliases are of
  -- another JSON type, is skipped and counted (a number would otherwise be
  -- an entity named by its digits).
  begin
    v_n := 0;
    v_skipped := 0;
    for x in select * from jsonb_array_elements(coalesce(p_payload -> 'entities', '[]')) loop
      if jsonb_typeof(x) is distinct from 'object'
         or jsonb_typeof(x -> 'name') is distinct from 'string'
         or coalesce(jsonb_typeof(x -> 'type'), 'null') not in ('string', 'null')
         or coalesce(jsonb_typeof(x -> 'summary'), 'null') not in ('string', 'null')
         or coalesce(jsonb_typeof(x -> 'aliases'), 'null') not in ('array', 'null')
         or exists (select from jsonb_array_elements(case when jsonb_typeof(x -> 'aliases') = 'array'
                                                          then x -> 'aliases' else '[]' end) a
                     where jsonb_typeof(a) <> 'string') then
        v_skipped := v_skipped + 1;
        continue;
      end if;
      -- upsert_entity and add_alias apply the project's redaction policy;
      -- an entity it drops gets no aliases.
      continue when memory.upsert_entity(ep.project_id, x ->> 'name', x ->> 'type', x ->> 'summary') is null;
      perform memory.add_alias(ep.project_id, x ->> 'name', a)
         from jsonb_array_elements_text(coalesce(x -> 'aliases', '[]')) a
        where memory_internal.find_entity(
                ep.org_id, ep.project_id,
                memory.normalize_text((memory_internal.redact(ep.org_id, ep.project_id, a, 'alias', false)).text)) is null;
      v_n := v_n + 1;
    end loop;
    v_report := v_report || jsonb_build_object('entities',
      jsonb_build_object('upserted', v_n, 'skipped_malformed', v_skipped));
  exception when others then
    v_failed := v_failed || 'entities'::text;
    v_report := v_report || jsonb_build_object('entities', jsonb_build_object('error', sqlerrm));
  end;

  -- Facts: through assert_facts, so supersession, tombstones and world-time
  -- order apply; valid_from defaults to the episode's instant.  Facts below
  -- the confidence floor and windows that end before they start are
  -- dropped here.  The model's answer is not a client's request: keys
  -- outside a fact's documented set are left out (and listed in
  -- ignored_keys), and a fact with a field of the wrong JSON type (subject
  -- 123, confidence "high") is dropped and reported in malformed, so that
  -- neither fails the job; any other invalid fact still fails the section.
  begin
    select coalesce(jsonb_agg(case when jsonb_typeof(t.e) = 'object'
                                   then (select coalesce(jsonb_object_agg(j.k, j.v), '{}')
                                           from jsonb_each(t.e) j(k, v)
                                          where j.k = any (memory_internal.fact_keys()))
                                   else t.e end order by t.ord), '[]'),
           coalesce((select jsonb_agg(distinct k order by k)
                       from jsonb_array_elements(coalesce(p_payload -> 'facts', '[]')) a(e)
                      cross join lateral jsonb_object_keys(case when jsonb_typeof(a.e) = 'object'
                                                                then a.e else '{}' end) k
                      where k <> all (memory_internal.fact_keys())), '[]')
      into v_facts, v_ignored
      from jsonb_array_elements(coalesce(p_payload -> 'facts', '[]')) with ordinality t(e, ord);
    select coalesce(jsonb_agg(f.e order by f.ord) filter (where k.keep), '[]'),
           count(*) filter (where coalesce(f.low, false) and f.shape is null),
           count(*) filter (where coalesce(f.dead, false) and not coalesce(f.low, false) and f.shape is null),
           coalesce(jsonb_agg(jsonb_build_object('index', f.ord - 1, 'error',
                                                 jsonb_build_object('field', f.shape[1], 'message', f.shape[2]))
                              order by f.ord) filter (where f.shape is not null), '[]')
      into v_kept, v_dropped_low, v_dropped_dead, v_malformed
      from (select t.e, t.ord, memory_internal.fact_shape_problem(t.e) as shape,
                   jsonb_typeof(t.e -> 'confidence') = 'number'
                     and (t.e ->> 'confidence')::numeric < p_min_confidence as low,
                   jsonb_typeof(t.e -> 'valid_to') = 'string'
                     and memory_internal.try_timestamptz(t.e ->> 'valid_to')
                         <= coalesce(memory_internal.try_timestamptz(t.e ->> 'valid_from'), ep.occurred_at)
                     as dead
              from jsonb_array_elements(v_facts) with ordinality t(e, ord)) f
      cross join lateral (select f.shape is null and not coalesce(f.low, false)
                                 and not coalesce(f.dead, false) as keep) k
      group by ();
    v_result := memory.assert_facts(ep.project_id, v_kept, 'extraction', p_episode, false, 'extraction');
    -- Any other invalid fact fails the whole section (rolled back,
    -- reported), so the job is retried rather than a fact silently lost.
    if (v_result ->> 'invalid')::integer > 0 then
      raise exception 'facts: % invalid: %', v_result ->> 'invalid',
        (select jsonb_agg(r) from jsonb_array_elements(v_result -> 'results') r
          where r ->> 'status' = 'invalid')
        using errcode = 'invalid_parameter_value';
    end if;
    v_report := v_report || jsonb_build_object('facts',
      (v_result - 'results') || jsonb_build_object(
        'dropped_low_confidence', v_dropped_low, 'dropped_born_dead', v_dropped_dead,
        'dropped_malformed', jsonb_array_length(v_malformed), 'malformed', v_malformed,
        'ignored_keys', v_ignored,
        'errors', (select coalesce(jsonb_agg(r), '[]') from jsonb_array_elements(v_result -> 'results') r
                    where r ->> 'status' = 'invalid')));
  exception when others then
    v_failed := v_failed || 'facts'::text;
    v_report := v_report || jsonb_build_object('facts', jsonb_build_object('error', sqlerrm));
  end;

  -- Contradictions: the model names fact ids it was shown; each is closed
  -- at the episode's instant with a 'contradicted' event.  Any other id (a
  -- fact of the project the context did not offer included) is unknown: a
  -- model must not close facts it never saw.
  begin
    select p.contradictions into v_policy from memory.projects p
     where p.org_id = ep.org_id and p.project_id = ep.project_id;
    for x in select * from jsonb_array_elements(coalesce(p_payload -> 'contradictions', '[]')) loop
      if not memory_internal.is_uuid(x ->> 'fact_id') then
        v_unknown := v_unknown + 1;
        continue;
      end if;
      select v.* into v_target from memory_internal.fact_versions(ep.project_id) v
       where v.fact_id = (x ->> 'fact_id')::uuid and v.invalid_at is null
         and v.fact_id = any (v_offered);
      if v_target.fact_id is null then
        v_unknown := v_unknown + 1;
        continue;
      end if;
      -- The project's policy may leave the decision to a person: a conflict
      -- opens instead (functions/055_conflicts.sql).
      if v_policy = 'conflict' then
        if memory_internal.contradiction_conflict(ep.org_id, ep.project_id, v_target.fact_id, p_episode,
                                                  'extraction') is not null then
          v_opened := v_opened + 1;
        end if;
        continue;
      end if;
      if memory.close_fact(ep.project_id, v_target.fact_id, ep.occurred_at,
                           coalesce(x ->> 'reason', 'contradicted by episode ' || p_episode),
                           'contradicted', 'extraction') ->> 'status' = 'contradicted' then
        v_closed := v_closed + 1;
      end if;
    end loop;
    v_report := v_report || jsonb_build_object('contradictions',
      jsonb_build_object('closed', v_closed, 'unknown_ids', v_unknown)
      || case when v_policy = 'conflict' then jsonb_build_object('conflicts', v_opened) else '{}' end);
  exception when others then
    v_failed := v_failed || 'contradictions'::text;
    v_report := v_report || jsonb_build_object('contradictions', jsonb_build_object('error', sqlerrm));
  end;

  -- Notes: preferences and summaries that are not triples; content and
  -- subject through the project's redaction policy (a note a drop rule
  -- matches is not stored).
  begin
    insert into memory.notes (org_id, project_id, episode_id, kind, subject_id, content)
    select ep.org_id, ep.project_id, p_episode, n.e ->> 'kind',
           case when coalesce(rs.text, '') <> '' then
             memory_internal.find_entity(ep.org_id, ep.project_id, memory.normalize_text(rs.text)) end,
           rc.text
      from jsonb_array_elements(coalesce(p_payload -> 'notes', '[]')) n(e)
     cross join lateral memory_internal.redact(ep.org_id, ep.project_id, btrim(n.e ->> 'content'), 'note content') rc
     cross join lateral memory_internal.redact(ep.org_id, ep.project_id, n.e ->> 'subject', 'note subject') rs
     where not rc.dropped and not rs.dropped
    on conflict (org_id, project_id, episode_id, kind, content) do nothing;
    get diagnostics v_n = row_count;
    v_report := v_report || jsonb_build_object('notes', jsonb_build_object('inserted', v_n));
  exception when others then
    v_failed := v_failed || 'notes'::text;
    v_report := v_report || jsonb_build_object('notes', jsonb_build_object('error', sqlerrm));
  end;

  -- Subscribers hear of a fully applied episode (counts only, no content);
  -- a partial one is retried instead.
  perform memory_internal.enqueue_webhook_event(
            ep.org_id, ep.project_id, 'episode.enriched',
            jsonb_build_object('episode_id', p_episode, 'session_id', ep.session_id) || v_report)
    where cardinality(v_failed) = 0;
  return v_report || jsonb_build_object('episode_id', p_episode, 'failed_sections', to_jsonb(v_failed));
end
$$;
comment on function memory_worker.apply_extraction(uuid, jsonb, real, integer) is
  'Apply an extraction model''s answer {entities, facts, contradictions, notes} for an episode; each section in its own savepoint. Facts below p_min_confidence and windows born dead are dropped; facts go through assert_facts at the episode''s instant; contradicted facts are closed at the episode''s instant (or, when the project''s contradictions policy is conflict, put in a conflict for a person to settle), and only facts memory_worker.extraction_context(p_episode, p_turns) offered are accepted (others count as unknown_ids). Reports per section and lists failed_sections.';
