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
  -- The org named as a value (the scope RLS applies): Citus routes the read.
  select e.* into ep from memory.episodes e
   where e.org_id = memory_internal.current_org() and e.episode_id = p_episode;
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
  v_schema jsonb;
begin
  -- The org named as a value (the scope RLS applies): Citus routes the read.
  select e.* into ep from memory.episodes e
   where e.org_id = memory_internal.current_org() and e.episode_id = p_episode;
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

  -- The declared predicates, and the schema's with their descriptions and
  -- object types (its cardinalities are declared: the same list).
  v_schema := memory_internal.current_extraction_schema(ep.org_id, ep.project_id);
  select coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                    'predicate', coalesce(s.e ->> 'name', d.predicate),
                    'cardinality', coalesce(d.cardinality, s.e ->> 'cardinality'),
                    'description', s.e ->> 'description', 'object_type', s.e ->> 'object_type'))
                  order by coalesce(s.e ->> 'name', d.predicate)), '[]')
    into v_predicates
    from memory.predicates_of(ep.project_id) d
    full join (select e from jsonb_array_elements(coalesce(v_schema -> 'predicates', '[]')) e) s
      on memory.normalize_text(s.e ->> 'name') = d.predicate;

  return jsonb_build_object(
    'episode', jsonb_build_object('episode_id', ep.episode_id, 'role', ep.role,
                                  'content', ep.content, 'occurred_at', ep.occurred_at),
    'recent_turns', v_turns,
    'known_facts', v_facts,
    'predicates', v_predicates,
    'schema', v_schema);
end
$$;
comment on function memory_worker.extraction_context(uuid, integer) is
  'What the extraction model sees for an episode: the episode, its last turns, the project''s facts about the entities they name (as of the episode''s instant, with ids it may contradict), the declared predicates and the extraction schema''s (with description and object_type), and schema: the project''s current extraction schema with its version (NULL when none is set).';


-- Why an extracted fact is dropped before assert_facts, or NULL to keep it
-- (then p_fact comes back with its object_type as assert_facts takes it):
-- a field of the wrong JSON type, below the confidence floor, a window
-- that is unparseable or ends before it starts, and against the schema
-- (p_schema, NULL: none) a predicate it does not declare while it allows no
-- others, an object that is not of the predicate's object_type (a date
-- must parse as one, a number as one), an entity type it does not declare.
create or replace function memory_internal.extracted_fact_problem(
  inout p_fact jsonb, p_schema jsonb, p_min_confidence real, p_instant timestamptz,
  out reason text, out message text)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_shape text[] := memory_internal.fact_shape_problem(p_fact);
  v_decl jsonb;
  v_kind text;
  v_from timestamptz;
  v_to timestamptz;
  t text;
begin
  if jsonb_typeof(p_fact) is distinct from 'object' then
    return;  -- assert_facts reports it (the section fails)
  end if;
  if v_shape is not null then
    reason := 'schema_violation'; message := v_shape[2];
    return;
  end if;
  if jsonb_typeof(p_fact -> 'confidence') = 'number' and (p_fact ->> 'confidence')::numeric < p_min_confidence then
    reason := 'low_confidence';
    message := format('confidence %s is below %s', p_fact ->> 'confidence', p_min_confidence);
    return;
  end if;
  v_from := memory_internal.try_timestamptz(p_fact ->> 'valid_from');
  v_to := memory_internal.try_timestamptz(p_fact ->> 'valid_to');
  if (p_fact ->> 'valid_from' is not null and v_from is null) or (p_fact ->> 'valid_to' is not null and v_to is null) then
    reason := 'invalid_window'; message := 'valid_from and valid_to must be ISO 8601 instants';
    return;
  end if;
  if v_to is not null and v_to <= coalesce(v_from, p_instant) then
    reason := 'invalid_window'; message := 'the window ends before it starts';
    return;
  end if;
  if p_schema is not null then
    select e into v_decl from jsonb_array_elements(p_schema -> 'predicates') e
     where memory.normalize_text(e ->> 'name') = memory.normalize_text(p_fact ->> 'predicate');
    if v_decl is null and not (p_schema ->> 'allow_other_predicates')::boolean then
      reason := 'unknown_predicate';
      message := format('predicate "%s" is not in the extraction schema', p_fact ->> 'predicate');
      return;
    end if;
    if not (p_schema ->> 'allow_other_entity_types')::boolean then
      foreach t in array array['subject_type', 'object_entity_type'] loop
        if p_fact ->> t is not null and not exists (
             select from jsonb_array_elements(p_schema -> 'entity_types') e
              where e ->> 'name' = lower(btrim(p_fact ->> t))) then
          reason := 'unknown_entity_type';
          message := format('%s "%s" is not in the extraction schema', t, p_fact ->> t);
          return;
        end if;
      end loop;
    end if;
  end if;
  v_kind := nullif(p_fact ->> 'object_type', 'auto');
  if v_decl ? 'object_type' then
    if v_kind is not null and v_kind <> v_decl ->> 'object_type' then
      reason := 'schema_violation';
      message := format('object_type %s, but predicate "%s" takes %s', v_kind, v_decl ->> 'name',
                        v_decl ->> 'object_type');
      return;
    end if;
    v_kind := v_decl ->> 'object_type';
  end if;
  if v_kind = 'date' and memory_internal.try_timestamptz(btrim(p_fact ->> 'object')) is null then
    reason := 'schema_violation';
    message := format('object "%s" must be a date (ISO 8601)', p_fact ->> 'object');
    return;
  end if;
  if v_kind = 'number' and coalesce(p_fact ->> 'object', '') !~ '^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$' then
    reason := 'schema_violation';
    message := format('object "%s" must be a number', p_fact ->> 'object');
    return;
  end if;
  -- Dates and numbers are literals to the store.
  if v_kind is not null then
    p_fact := p_fact || jsonb_build_object('object_type', case when v_kind in ('date', 'number') then 'literal'
                                                               else v_kind end);
  end if;
end
$$;
comment on function memory_internal.extracted_fact_problem(jsonb, jsonb, real, timestamptz) is
  'apply_extraction''s checks of one extracted fact before assert_facts: the reason (schema_violation, low_confidence, invalid_window, unknown_predicate, unknown_entity_type) and message it is dropped for, or NULL with the fact''s object_type as stored (date and number objects are literals; a schema predicate''s object_type applies).';

-- Apply a model's answer for an episode.  Each section runs in its own
-- savepoint: a failing section is rolled back whole and reported, the
-- others stand.  Re-applying the same answer is a no-op (facts skip,
-- entities and notes upsert, contradictions already closed are unchanged,
-- rejections are recorded once).  p_turns is extraction_context's: only the
-- facts it offered may be contradicted.  p_meta says what produced the
-- answer (schema_version: the schema it was validated against, absent: the
-- current one; prompt_hash, model, structured, calls), stored with the
-- episode's enrichment.
create or replace function memory_worker.apply_extraction(
  p_episode uuid, p_payload jsonb, p_min_confidence real default 0.5, p_turns integer default 6,
  p_meta jsonb default '{}')
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
  v_meta jsonb := coalesce(p_meta, '{}');
  v_schema jsonb;
  v_version integer;
  v_rej jsonb := '[]';
  v_labels text[] := '{}';
  v_fields jsonb;
  v_prop jsonb;
  v_problem text;
  v_ord integer;
  v_reason text;
  v_message text;
  v_key text;
begin
  -- The org named as a value (the scope RLS applies): Citus routes the read.
  select e.* into ep from memory.episodes e
   where e.org_id = memory_internal.current_org() and e.episode_id = p_episode;
  if ep.episode_id is null then
    raise exception 'episode % not found', p_episode using errcode = 'no_data_found';
  end if;
  if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
    raise exception 'extraction payload must be a JSON object' using errcode = 'invalid_parameter_value';
  end if;
  if jsonb_typeof(v_meta) <> 'object' then
    raise exception 'extraction meta must be a JSON object' using errcode = 'invalid_parameter_value',
      detail = 'meta';
  end if;
  if coalesce(jsonb_typeof(v_meta -> 'schema_version'), 'null') not in ('number', 'null')
     or coalesce(jsonb_typeof(v_meta -> 'calls'), 'null') not in ('number', 'null')
     or coalesce(jsonb_typeof(v_meta -> 'prompt_hash'), 'null') not in ('string', 'null')
     or coalesce(jsonb_typeof(v_meta -> 'model'), 'null') not in ('string', 'null')
     or coalesce(v_meta ->> 'structured', 'text') not in ('json_schema', 'json_object', 'text') then
    raise exception 'extraction meta: schema_version and calls are numbers, prompt_hash and model strings, structured json_schema, json_object or text'
      using errcode = 'invalid_parameter_value', detail = 'meta';
  end if;
  -- The schema the answer is held to: the version the worker asked with,
  -- else the current one.
  if v_meta ? 'schema_version' then
    v_version := (v_meta ->> 'schema_version')::integer;
    if v_version is not null then
      select s.document || jsonb_build_object('version', s.version) into v_schema
        from memory.extraction_schemas s
       where s.org_id = ep.org_id and s.project_id = ep.project_id and s.version = v_version;
      if v_schema is null then
        raise exception 'extraction meta: schema_version % does not exist', v_version
          using errcode = 'invalid_parameter_value', detail = 'meta.schema_version';
      end if;
    end if;
  else
    v_schema := memory_internal.current_extraction_schema(ep.org_id, ep.project_id);
    v_version := (v_schema ->> 'version')::integer;
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
  -- an entity named by its digits); so is one of a type the schema does
  -- not declare while it allows no others.
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
        v_rej := v_rej || jsonb_build_object('section', 'entities', 'item', x, 'reason', 'schema_violation',
                                             'message', 'name must be a string; type and summary strings; aliases an array of strings');
        continue;
      end if;
      if v_schema is not null and not (v_schema ->> 'allow_other_entity_types')::boolean
         and x ->> 'type' is not null
         and not exists (select from jsonb_array_elements(v_schema -> 'entity_types') t
                          where t ->> 'name' = lower(btrim(x ->> 'type'))) then
        v_rej := v_rej || jsonb_build_object('section', 'entities', 'item', x, 'reason', 'unknown_entity_type',
                                             'message', format('entity type "%s" is not in the extraction schema', x ->> 'type'));
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
  -- order apply; valid_from defaults to the episode's instant.  The model's
  -- answer is not a client's request: keys outside a fact's documented set
  -- are left out (and listed in ignored_keys); a fact with a field of the
  -- wrong JSON type (subject 123, confidence "high"), below the confidence
  -- floor, with a window unparseable or born dead, or against the schema
  -- (extracted_fact_problem) is dropped and recorded with its reason, so
  -- that none fails the job; any other invalid fact still fails the section.
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
    v_kept := '[]';
    v_dropped_low := 0;
    v_dropped_dead := 0;
    v_malformed := '[]';
    for x, v_ord in select t.e, t.ord from jsonb_array_elements(v_facts) with ordinality t(e, ord) loop
      select f.p_fact, f.reason, f.message into x, v_reason, v_message
        from memory_internal.extracted_fact_problem(x, v_schema, p_min_confidence, ep.occurred_at) f;
      if v_reason is null then
        v_kept := v_kept || jsonb_build_array(x);
        continue;
      end if;
      v_rej := v_rej || jsonb_build_object('section', 'facts', 'item', p_payload -> 'facts' -> (v_ord - 1),
                                           'reason', v_reason, 'message', v_message);
      if v_reason = 'low_confidence' then
        v_dropped_low := v_dropped_low + 1;
      elsif v_reason = 'invalid_window' then
        v_dropped_dead := v_dropped_dead + 1;
      elsif v_reason = 'schema_violation' and memory_internal.fact_shape_problem(x) is not null then
        v_malformed := v_malformed || jsonb_build_object('index', v_ord - 1, 'error', jsonb_build_object(
                         'field', (memory_internal.fact_shape_problem(x))[1], 'message', v_message));
      end if;
    end loop;
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
  -- fact of the project the context did not offer included) is unknown
  -- (recorded as unknown_fact_id): a model must not close facts it never saw.
  begin
    select p.contradictions into v_policy from memory.projects p
     where p.org_id = ep.org_id and p.project_id = ep.project_id;
    for x in select * from jsonb_array_elements(coalesce(p_payload -> 'contradictions', '[]')) loop
      v_target := null;
      if memory_internal.is_uuid(x ->> 'fact_id') then
        select v.* into v_target from memory_internal.fact_versions(ep.project_id) v
         where v.fact_id = (x ->> 'fact_id')::uuid and v.invalid_at is null
           and v.fact_id = any (v_offered);
      end if;
      if v_target.fact_id is null then
        v_unknown := v_unknown + 1;
        v_rej := v_rej || jsonb_build_object('section', 'contradictions', 'item', x, 'reason', 'unknown_fact_id',
                                             'message', 'not a current fact the context offered');
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

  -- Classification: label names (strings; with a schema, the labels it
  -- declares).
  if jsonb_typeof(p_payload -> 'classification') = 'array' then
    for x in select e from jsonb_array_elements(p_payload -> 'classification') e loop
      if jsonb_typeof(x) <> 'string' or btrim(x #>> '{}') = '' then
        v_rej := v_rej || jsonb_build_object('section', 'classification', 'item', x, 'reason', 'schema_violation',
                                             'message', 'a label must be a non-empty string');
      elsif v_schema is not null and not exists (
              select from jsonb_array_elements(v_schema -> 'labels') l
               where l ->> 'name' = lower(btrim(x #>> '{}'))) then
        v_rej := v_rej || jsonb_build_object('section', 'classification', 'item', x, 'reason', 'schema_violation',
                                             'message', format('label "%s" is not in the extraction schema', x #>> '{}'));
      elsif not (case when v_schema is null then btrim(x #>> '{}') else lower(btrim(x #>> '{}')) end) = any (v_labels) then
        v_labels := v_labels || case when v_schema is null then btrim(x #>> '{}') else lower(btrim(x #>> '{}')) end;
      end if;
    end loop;
  elsif coalesce(jsonb_typeof(p_payload -> 'classification'), 'null') <> 'null' then
    v_rej := v_rej || jsonb_build_object('section', 'classification', 'item', p_payload -> 'classification',
                                         'reason', 'schema_violation', 'message', 'classification must be an array of label names');
  end if;

  -- Custom fields: an object; with a schema, each property checked against
  -- the schema's fields (type, enum; additionalProperties false: no other
  -- keys; required ones present).  A failing property is dropped, the rest
  -- stored.
  if jsonb_typeof(p_payload -> 'fields') = 'object' then
    v_fields := '{}';
    for v_key, x in select j.key, j.value from jsonb_each(p_payload -> 'fields') j loop
      v_problem := null;
      if v_schema is not null then
        v_prop := v_schema #> array['fields', 'properties', v_key];
        if v_schema -> 'fields' is null or v_schema -> 'fields' = 'null' then
          v_problem := 'the extraction schema declares no fields';
        elsif v_prop is null and v_schema #> '{fields,additionalProperties}' = 'false' then
          v_problem := format('fields.%s is not a property of the schema''s fields', v_key);
        elsif v_prop is not null then
          v_problem := (select format('fields.%s %s', v_key, p)
                          from memory_internal.field_problem(v_prop, x) p where p is not null);
        end if;
      end if;
      if v_problem is null then
        v_fields := v_fields || jsonb_build_object(v_key, x);
      else
        v_rej := v_rej || jsonb_build_object('section', 'fields', 'item', jsonb_build_object(v_key, x),
                                             'reason', 'schema_violation', 'message', v_problem);
      end if;
    end loop;
  elsif coalesce(jsonb_typeof(p_payload -> 'fields'), 'null') <> 'null' then
    v_rej := v_rej || jsonb_build_object('section', 'fields', 'item', p_payload -> 'fields',
                                         'reason', 'schema_violation', 'message', 'fields must be an object');
  end if;
  if v_schema is not null and jsonb_typeof(v_schema #> '{fields,required}') = 'array' then
    for v_key in select jsonb_array_elements_text(v_schema #> '{fields,required}') loop
      if not coalesce(v_fields, '{}') ? v_key then
        v_rej := v_rej || jsonb_build_object('section', 'fields', 'item', null, 'reason', 'schema_violation',
                                             'message', format('fields.%s is required', v_key));
      end if;
    end loop;
  end if;

  -- Every item dropped, with its reason (an identical one already recorded
  -- by a retried job is not recorded again).
  perform memory_internal.record_rejections(ep.org_id, ep.project_id, p_episode, v_rej, v_version);
  v_report := v_report || jsonb_build_object(
    'classification', jsonb_build_object('labels', cardinality(v_labels)),
    'fields', jsonb_build_object('stored', coalesce((select count(*) from jsonb_object_keys(v_fields)), 0)),
    'rejected', (select coalesce(jsonb_object_agg(g.reason, g.n), '{}')
                   from (select r ->> 'reason' as reason, count(*) as n from jsonb_array_elements(v_rej) r
                          group by 1 order by 1) g));

  -- The episode's enrichment: what produced it, its labels and fields.
  insert into memory.episode_extractions as x
    (org_id, project_id, episode_id, schema_version, prompt_hash, model, structured, calls, labels, fields, counts)
  values (ep.org_id, ep.project_id, p_episode, v_version, v_meta ->> 'prompt_hash', v_meta ->> 'model',
          v_meta ->> 'structured', coalesce((v_meta ->> 'calls')::integer, 1), v_labels, v_fields,
          v_report - 'failed_sections')
  on conflict (org_id, episode_id) do update
    set schema_version = excluded.schema_version, prompt_hash = excluded.prompt_hash, model = excluded.model,
        structured = excluded.structured, calls = excluded.calls, labels = excluded.labels,
        fields = excluded.fields, counts = excluded.counts, extracted_at = excluded.extracted_at;

  -- Subscribers hear of a fully applied episode (counts only, no content);
  -- a partial one is retried instead.
  perform memory_internal.enqueue_webhook_event(
            ep.org_id, ep.project_id, 'episode.enriched',
            jsonb_build_object('episode_id', p_episode, 'session_id', ep.session_id) || v_report)
    where cardinality(v_failed) = 0;
  return v_report || jsonb_build_object('episode_id', p_episode, 'failed_sections', to_jsonb(v_failed));
end
$$;
comment on function memory_worker.apply_extraction(uuid, jsonb, real, integer, jsonb) is
  'Apply an extraction model''s answer {entities, facts, contradictions, notes, classification, fields} for an episode; each section in its own savepoint. Facts below p_min_confidence, with windows unparseable or born dead, of wrong JSON types or against the project''s extraction schema (unknown predicate or entity type when it allows no others, an object not of the predicate''s object_type) are dropped; facts go through assert_facts at the episode''s instant; contradicted facts are closed at the episode''s instant (or, when the project''s contradictions policy is conflict, put in a conflict for a person to settle), and only facts memory_worker.extraction_context(p_episode, p_turns) offered are accepted (others count as unknown_ids). Labels and fields are checked against the schema and stored in memory.episode_extractions with p_meta (schema_version: absent means the current schema; prompt_hash, model, structured, calls). Every dropped item is recorded in memory.extraction_rejections with its reason. Reports per section, rejected counts per reason, and lists failed_sections.';
