-- The write state machine: assert_facts and the two pieces every writer
-- (assert, retract, contradict, expire, wipe) shares: restitch, which lays
-- one identity's facts out in world-time order, and sync_edges, which keeps
-- edges equal to the union of the windows of the facts asserting them.

-- Lay out the current (not retracted) facts of one identity in world-time
-- order: each one's window is [valid_from, least(asserted_until, start of
-- the next one)).  Ties on valid_from go to the newer assertion.  Windows
-- that shrink are updated before windows that grow, so the exclusion
-- constraint holds after every statement.  Each change is an event whose
-- new_range lets facts_at answer for earlier known_at instants.
-- Callers hold the identity's advisory lock.
create or replace function memory_internal.restitch(
  p_org uuid, p_project uuid, p_subject uuid, p_predicate text, p_identity_object text,
  p_shrink_event text, p_actor text, p_reason text default null, p_new_fact uuid default null)
  returns table (fact_id uuid, object_entity_id uuid, old_range tstzrange, new_range tstzrange,
                 closed_by uuid, grew boolean)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  return query
  with ordered as (
    select v.fact_id, v.valid_range, v.valid_from, v.asserted_until,
           lead(v.valid_from) over w as next_from,
           lead(v.fact_id) over w as next_id
      from memory_internal.fact_versions(p_project) v
     where v.org_id = p_org and v.subject_id = p_subject and v.predicate = p_predicate
       and v.identity_object = p_identity_object and v.invalid_at is null
    window w as (order by v.valid_from, v.fact_seq)
  ), desired as (
    select o.*,
           tstzrange(o.valid_from,
                     case when o.next_from is null then o.asserted_until
                          when o.asserted_until is null then o.next_from
                          else least(o.asserted_until, o.next_from) end) as want
      from ordered o
  ), changed as (
    update memory.facts f
       set valid_range = d.want, range_changed_at = now()
      from desired d
     where f.org_id = p_org and f.fact_id = d.fact_id
       and f.valid_range <> d.want and f.valid_range @> d.want
    returning f.fact_id, f.object_entity_id, d.valid_range as old_range, d.want as new_range,
              case when not isempty(d.want) and upper(d.want) = d.next_from then d.next_id
                   when isempty(d.want) then d.next_id end as closed_by
  ), logged as (
    insert into memory.fact_events
      (org_id, project_id, fact_id, event_type, old_fact_id, new_fact_id, old_range, new_range, actor, reason)
    select p_org, p_project, c.fact_id, p_shrink_event, c.fact_id, c.closed_by, c.old_range,
           c.new_range, p_actor, p_reason
      from changed c
  )
  select c.fact_id, c.object_entity_id, c.old_range, c.new_range, c.closed_by, false from changed c;

  return query
  with ordered as (
    select v.fact_id, v.valid_range, v.valid_from, v.asserted_until,
           lead(v.valid_from) over w as next_from
      from memory_internal.fact_versions(p_project) v
     where v.org_id = p_org and v.subject_id = p_subject and v.predicate = p_predicate
       and v.identity_object = p_identity_object and v.invalid_at is null
    window w as (order by v.valid_from, v.fact_seq)
  ), desired as (
    select o.*,
           tstzrange(o.valid_from,
                     case when o.next_from is null then o.asserted_until
                          when o.asserted_until is null then o.next_from
                          else least(o.asserted_until, o.next_from) end) as want
      from ordered o
  ), changed as (
    update memory.facts f
       set valid_range = d.want, range_changed_at = now()
      from desired d
     where f.org_id = p_org and f.fact_id = d.fact_id and f.valid_range <> d.want
    returning f.fact_id, f.object_entity_id, d.valid_range as old_range, d.want as new_range
  ), logged as (
    insert into memory.fact_events
      (org_id, project_id, fact_id, event_type, old_fact_id, new_fact_id, old_range, new_range, actor, reason)
    select p_org, p_project, c.fact_id,
           case when c.fact_id = p_new_fact then 'asserted' else 'restored' end,
           case when c.fact_id = p_new_fact then null else c.fact_id end,
           case when c.fact_id = p_new_fact then c.fact_id end,
           case when c.fact_id = p_new_fact then null else c.old_range end,
           c.new_range, p_actor,
           case when c.fact_id = p_new_fact then null else p_reason end
      from changed c
  )
  select c.fact_id, c.object_entity_id, c.old_range, c.new_range, null::uuid, true from changed c;
end
$$;
comment on function memory_internal.restitch(uuid, uuid, uuid, text, text, text, text, text, uuid) is
  'Recompute the valid windows of one identity''s current facts in world-time order and log every change. Caller holds the identity lock.';

-- Make the current edges of the given (source, target, relation) keys equal
-- to the maximal windows over which some current fact asserts them.  Edge
-- rows never change but for expired_at, so a window that closes expires
-- the old row and inserts the closed one, in this transaction, at now().
create or replace function memory_internal.sync_edges(
  p_org uuid, p_project uuid, p_sources uuid[], p_targets uuid[], p_relations text[])
  returns table (edges_expired integer, edges_inserted integer)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_expired integer;
  v_inserted integer;
begin
  with keys as (
    select distinct s as src, t as tgt, r as rel
      from unnest(p_sources, p_targets, p_relations) u(s, t, r)
     where s is not null and t is not null and r is not null
  ), wanted as (
    select k.src, k.tgt, k.rel, d.r as valid_range
      from keys k
     cross join lateral (
       select unnest(range_agg(v.valid_range)) as r
         from memory_internal.fact_versions(p_project) v
        where v.org_id = p_org and v.subject_id = k.src and v.predicate = k.rel
          and v.object_entity_id = k.tgt and v.invalid_at is null and not isempty(v.valid_range)
     ) d
  ), gone as (
    update memory.edges e
       set expired_at = now()
      from keys k
     where e.org_id = p_org and e.project_id = p_project
       and e.source_id = k.src and e.target_id = k.tgt and e.relation = k.rel
       and e.expired_at is null
       and not exists (select from wanted w
                        where w.src = e.source_id and w.tgt = e.target_id
                          and w.rel = e.relation and w.valid_range = e.valid_range)
    returning 1
  )
  select count(*) into v_expired from gone;

  -- A second statement: it sees the rows the first one expired.
  with keys as (
    select distinct s as src, t as tgt, r as rel
      from unnest(p_sources, p_targets, p_relations) u(s, t, r)
     where s is not null and t is not null and r is not null
  ), wanted as (
    select k.src, k.tgt, k.rel, d.r as valid_range
      from keys k
     cross join lateral (
       select unnest(range_agg(v.valid_range)) as r
         from memory_internal.fact_versions(p_project) v
        where v.org_id = p_org and v.subject_id = k.src and v.predicate = k.rel
          and v.object_entity_id = k.tgt and v.invalid_at is null and not isempty(v.valid_range)
     ) d
  )
  insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range)
  select p_org, p_project, w.src, w.tgt, w.rel, w.valid_range
    from wanted w
   where not exists (select from memory.edges e
                      where e.org_id = p_org and e.project_id = p_project
                        and e.source_id = w.src and e.target_id = w.tgt
                        and e.relation = w.rel and e.expired_at is null
                        and e.valid_range = w.valid_range);
  get diagnostics v_inserted = row_count;
  return query select v_expired, v_inserted;
end
$$;
comment on function memory_internal.sync_edges(uuid, uuid, uuid[], uuid[], text[]) is
  'Make the current edges of the given keys equal to the union of the windows of the current facts asserting them (invariant 4).';

-- One error for one fact of a batch: reported, never raised.
create or replace function memory_internal.fact_error(p_idx integer, p_field text, p_message text)
  returns jsonb
  language sql immutable
  as $$
    select jsonb_build_object('index', p_idx, 'status', 'invalid',
                              'error', jsonb_build_object('field', p_field, 'message', p_message))
  $$;

-- Text of a JSON scalar (strings unquoted, numbers and booleans as text);
-- NULL for null, absent, objects and arrays.
create or replace function memory_internal.json_text(p_value jsonb) returns text
  language sql immutable
  as $$
    select case when jsonb_typeof(p_value) in ('string', 'number', 'boolean') then p_value #>> '{}' end
  $$;

create or replace function memory.assert_facts(
  p_project uuid,
  p_facts jsonb,
  p_source text default 'api',
  p_source_episode uuid default null,
  p_override_tombstones boolean default false,
  p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  c_max_batch constant integer := 1000;
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  v_n integer;
  v_fact jsonb;
  v_items memory_internal.fact_input[] := '{}';
  v_item memory_internal.fact_input;
  v_results jsonb[];
  v_i integer;
  v_field text;
  v_error text;
  v_subject text; v_predicate text; v_object text; v_object_type text;
  v_pred_norm text; v_obj_norm text; v_content text;
  v_conf real;
  v_from timestamptz; v_to timestamptz;
  v_episode uuid; v_episode_at timestamptz;
  v_subject_id uuid; v_object_id uuid;
  v_key bigint;
  v_existing uuid;
  v_tomb uuid;
  v_new uuid;
  v_closed uuid[];
  v_pairs jsonb := '[]';
  v_edge_src uuid[] := '{}'; v_edge_tgt uuid[] := '{}'; v_edge_rel text[] := '{}';
  v_inserted integer := 0; v_superseded integer := 0; v_skipped integer := 0;
  v_refused integer := 0; v_invalid integer := 0;
  r record;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'assert_facts needs READ COMMITTED isolation, not %',
      current_setting('transaction_isolation')
      using errcode = 'invalid_transaction_state',
            hint = 'Identity locks order the writers; a repeatable-read snapshot cannot see the facts they wrote.';
  end if;
  if p_facts is null or jsonb_typeof(p_facts) <> 'array' then
    raise exception 'facts must be a JSON array of fact objects'
      using errcode = 'invalid_parameter_value';
  end if;
  v_n := jsonb_array_length(p_facts);
  if v_n > c_max_batch then
    raise exception 'a batch holds at most % facts, got %', c_max_batch, v_n
      using errcode = 'program_limit_exceeded';
  end if;
  if p_source is null or p_source not in ('api', 'extraction', 'import') then
    raise exception 'source must be api, extraction or import, not %', coalesce(p_source, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  v_results := array_fill(null::jsonb, array[v_n]);
  perform pg_advisory_xact_lock_shared(memory_internal.project_lock_key(p_project));

  -- Pass 1: validate and resolve each fact.  A bad fact is reported at its
  -- index and costs nothing else.
  for v_i in 0 .. v_n - 1 loop
    v_fact := p_facts -> v_i;
    v_field := null;
    if jsonb_typeof(v_fact) <> 'object' then
      v_results[v_i + 1] := memory_internal.fact_error(v_i, 'fact', 'each fact must be a JSON object');
      v_invalid := v_invalid + 1;
      continue;
    end if;
    v_subject := memory_internal.json_text(v_fact -> 'subject');
    v_predicate := memory_internal.json_text(v_fact -> 'predicate');
    v_object := memory_internal.json_text(v_fact -> 'object');
    v_object_type := coalesce(memory_internal.json_text(v_fact -> 'object_type'), 'auto');
    v_content := memory_internal.json_text(v_fact -> 'content');
    v_pred_norm := memory.normalize_text(v_predicate);
    v_obj_norm := memory.normalize_text(v_object);
    v_from := null; v_to := null; v_conf := 1; v_episode := p_source_episode; v_episode_at := null;

    if coalesce(btrim(v_subject), '') = '' then
      v_field := 'subject'; v_error := 'subject is required and must be a non-empty string';
    elsif memory.normalize_text(v_subject) = '' then
      v_field := 'subject'; v_error := 'subject has no letters or digits';
    elsif length(v_subject) > 500 then
      v_field := 'subject'; v_error := 'subject is longer than 500 characters';
    elsif coalesce(v_pred_norm, '') = '' then
      v_field := 'predicate'; v_error := 'predicate is required and must contain letters or digits';
    elsif length(v_predicate) > 200 then
      v_field := 'predicate'; v_error := 'predicate is longer than 200 characters';
    elsif coalesce(v_obj_norm, '') = '' then
      v_field := 'object'; v_error := 'object is required and must contain letters or digits';
    elsif length(v_object) > 2000 then
      v_field := 'object'; v_error := 'object is longer than 2000 characters';
    elsif v_object_type not in ('auto', 'entity', 'literal') then
      v_field := 'object_type'; v_error := 'object_type must be entity or literal';
    elsif v_fact ? 'content' and jsonb_typeof(v_fact -> 'content') <> 'null'
          and (jsonb_typeof(v_fact -> 'content') <> 'string' or btrim(v_content) = '') then
      v_field := 'content'; v_error := 'content must be a non-empty string';
    elsif length(v_content) > 8192 then
      v_field := 'content'; v_error := 'content is longer than 8192 characters';
    elsif v_fact ? 'confidence' and jsonb_typeof(v_fact -> 'confidence') <> 'null'
          and (jsonb_typeof(v_fact -> 'confidence') <> 'number'
               or (v_fact ->> 'confidence')::numeric not between 0 and 1) then
      v_field := 'confidence'; v_error := 'confidence must be a number between 0 and 1';
    end if;

    if v_field is null and jsonb_typeof(v_fact -> 'source_episode_id') = 'string' then
      if not memory_internal.is_uuid(v_fact ->> 'source_episode_id') then
        v_field := 'source_episode_id'; v_error := 'source_episode_id is not a UUID';
      else
        v_episode := (v_fact ->> 'source_episode_id')::uuid;
      end if;
    elsif v_field is null and v_fact ? 'source_episode_id'
          and jsonb_typeof(v_fact -> 'source_episode_id') <> 'null' then
      v_field := 'source_episode_id'; v_error := 'source_episode_id must be a UUID string';
    end if;
    if v_field is null and v_episode is not null then
      select e.occurred_at into v_episode_at from memory.episodes e
       where e.org_id = v_org and e.project_id = p_project and e.episode_id = v_episode;
      if v_episode_at is null then
        v_field := 'source_episode_id';
        v_error := format('episode %s not found in this project', v_episode);
      end if;
    end if;

    if v_field is null and v_fact ? 'valid_from' and jsonb_typeof(v_fact -> 'valid_from') <> 'null' then
      v_from := case when jsonb_typeof(v_fact -> 'valid_from') = 'string'
                     then memory_internal.try_timestamptz(v_fact ->> 'valid_from') end;
      if v_from is null or not isfinite(v_from) then
        v_field := 'valid_from'; v_error := 'valid_from must be an ISO 8601 timestamp';
      end if;
    end if;
    if v_field is null and v_fact ? 'valid_to' and jsonb_typeof(v_fact -> 'valid_to') <> 'null' then
      v_to := case when jsonb_typeof(v_fact -> 'valid_to') = 'string'
                   then memory_internal.try_timestamptz(v_fact ->> 'valid_to') end;
      if v_to is null or v_to = '-infinity' then
        v_field := 'valid_to'; v_error := 'valid_to must be an ISO 8601 timestamp';
      elsif v_to = 'infinity' then
        v_to := null;
      end if;
    end if;
    if v_field is null then
      -- World time: the fact's own window, else its episode's, else now.
      v_from := coalesce(v_from, v_episode_at, now());
      if v_to is not null and v_to <= v_from then
        v_field := 'valid_to'; v_error := 'valid_to must be later than valid_from';
      end if;
    end if;

    if v_field is not null then
      v_results[v_i + 1] := memory_internal.fact_error(v_i, v_field, v_error);
      v_invalid := v_invalid + 1;
      continue;
    end if;

    v_subject_id := memory_internal.ensure_entity(
      v_org, p_project, v_subject, memory_internal.json_text(v_fact -> 'subject_type'));
    v_object_id := case v_object_type
      when 'entity' then memory_internal.ensure_entity(
        v_org, p_project, v_object, memory_internal.json_text(v_fact -> 'object_entity_type'))
      when 'literal' then null
      else memory_internal.find_entity(v_org, p_project, v_obj_norm) end;
    if v_object_id is not null then
      -- An entity object is keyed by its canonical name, so an alias or a
      -- plain string naming it share one identity.
      select e.normalized_name into v_obj_norm from memory.entities e
       where e.org_id = v_org and e.entity_id = v_object_id;
    end if;
    -- Cardinality is read under the predicate's shared lock.
    perform pg_advisory_xact_lock_shared(memory_internal.predicate_lock_key(p_project, v_pred_norm));
    v_content := coalesce(btrim(v_content), btrim(v_subject) || ' ' || btrim(v_predicate) || ' ' || btrim(v_object));

    v_item := row(
      v_i, v_subject_id, v_pred_norm, btrim(v_predicate), v_object_id,
      case when v_object_id is null then btrim(v_object) end,
      v_obj_norm,
      case memory_internal.cardinality(v_org, p_project, v_pred_norm) when 'one' then '' else v_obj_norm end,
      v_content, memory.normalize_text(v_content),
      coalesce((v_fact ->> 'confidence')::real, 1),
      v_from, v_to, v_episode, null)::memory_internal.fact_input;
    v_item.lock_key := memory_internal.identity_lock_key(
      p_project, v_item.subject_id, v_item.predicate, v_item.identity_object);
    v_items := v_items || v_item;
  end loop;

  -- Pass 2: lock every identity of the batch in one fixed order, so
  -- concurrent batches over the same identities queue instead of deadlock.
  for v_key in select distinct i.lock_key from unnest(v_items) i order by 1 loop
    perform pg_advisory_xact_lock(v_key);
  end loop;

  -- Pass 3: apply in batch order (a later fact of the batch is the newer
  -- assertion).
  foreach v_item in array v_items loop
    -- A retracted claim stays refused unless the caller overrides.
    select t.fact_id into v_tomb from memory.tombstones t
     where t.org_id = v_org and t.project_id = p_project and t.subject_id = v_item.subject_id
       and t.predicate = v_item.predicate and t.object_key = v_item.object_key
       and t.lifted_at is null;
    if v_tomb is not null and not p_override_tombstones then
      v_refused := v_refused + 1;
      v_results[v_item.idx + 1] := jsonb_build_object(
        'index', v_item.idx, 'status', 'refused', 'reason', 'retracted',
        'retracted_fact_id', v_tomb);
      continue;
    end if;

    -- The same claim already holds from this instant on: an idempotent
    -- retry, or a repetition.  Count the support and write nothing else.
    select v.fact_id into v_existing
      from memory_internal.fact_versions(p_project) v
     where v.org_id = v_org and v.subject_id = v_item.subject_id
       and v.predicate = v_item.predicate and v.identity_object = v_item.identity_object
       and v.invalid_at is null
       and v.object_key = v_item.object_key and v.content_key = v_item.content_key
       and v.valid_range @> v_item.valid_from
       and coalesce(v_item.valid_to, 'infinity') <= coalesce(v.asserted_until, 'infinity')
     limit 1;
    if v_existing is not null then
      update memory.facts f set support_count = f.support_count + 1, last_seen_at = now()
       where f.org_id = v_org and f.fact_id = v_existing;
      v_skipped := v_skipped + 1;
      v_results[v_item.idx + 1] := jsonb_build_object(
        'index', v_item.idx, 'status', 'skipped', 'fact_id', v_existing);
      continue;
    end if;

    -- New claim: stored with an empty window, then restitch gives it its
    -- place in world time and closes whatever it follows.
    insert into memory.facts (
      org_id, project_id, subject_id, predicate, predicate_label, object_entity_id,
      object_literal, object_key, identity_object, content, content_key, confidence,
      source, source_episode_id, actor, valid_from, asserted_until, valid_range)
    values (
      v_org, p_project, v_item.subject_id, v_item.predicate, v_item.predicate_label,
      v_item.object_entity_id, v_item.object_literal, v_item.object_key, v_item.identity_object,
      v_item.content, v_item.content_key, v_item.confidence, p_source, v_item.source_episode_id,
      v_actor, v_item.valid_from, v_item.valid_to, 'empty')
    returning fact_id into v_new;

    if v_tomb is not null then
      update memory.tombstones t set lifted_at = now(), lifted_by = v_new
       where t.org_id = v_org and t.fact_id = v_tomb;
    end if;

    v_closed := '{}';
    for r in select * from memory_internal.restitch(
               v_org, p_project, v_item.subject_id, v_item.predicate, v_item.identity_object,
               'superseded', v_actor, null, v_new) loop
      if not r.grew then
        v_closed := v_closed || r.fact_id;
        v_pairs := v_pairs || jsonb_build_object('old_fact_id', r.fact_id, 'new_fact_id', r.closed_by);
      end if;
      if r.object_entity_id is not null then
        v_edge_src := v_edge_src || v_item.subject_id;
        v_edge_tgt := v_edge_tgt || r.object_entity_id;
        v_edge_rel := v_edge_rel || v_item.predicate;
      end if;
    end loop;
    v_inserted := v_inserted + 1;
    v_superseded := v_superseded + cardinality(v_closed);
    v_results[v_item.idx + 1] := jsonb_build_object(
      'index', v_item.idx, 'status', 'inserted', 'fact_id', v_new,
      'superseded', to_jsonb(v_closed));
  end loop;

  if cardinality(v_edge_src) > 0 then
    perform memory_internal.sync_edges(v_org, p_project, v_edge_src, v_edge_tgt, v_edge_rel);
  end if;

  perform memory_internal.bump_counter(v_org, p_project, 'facts_inserted', v_inserted);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_superseded', v_superseded);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_skipped', v_skipped);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_refused', v_refused);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_invalid', v_invalid);

  return jsonb_build_object(
    'inserted', v_inserted, 'superseded', v_superseded, 'skipped', v_skipped,
    'refused', v_refused, 'invalid', v_invalid,
    'superseded_pairs', v_pairs,
    'results', to_jsonb(v_results));
end
$$;
comment on function memory.assert_facts(uuid, jsonb, text, uuid, boolean, text) is
  'The one write path for facts. p_facts: JSON array of {subject, predicate, object, object_type?, content?, confidence?, valid_from?, valid_to?, source_episode_id?}. Each fact is inserted (closing what it follows in world time), skipped (the same claim already holds), refused (retracted claim; p_override_tombstones lifts it) or invalid (reported with the field). Returns counts, superseded_pairs and a per-fact result.';
