-- After a fact is written: retraction (the claim never held), closing a
-- window (contradiction, expiry), and the history readers.

-- Lock a stored fact's identity, take the record-time instant, and return
-- the fact as it is once locked.
create or replace function memory_internal.lock_fact(p_org uuid, p_project uuid, p_fact uuid)
  returns memory.facts
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  f memory.facts;
begin
  perform memory_internal.hold_project(p_project);
  select v.* into f from memory_internal.fact_versions(p_project) v
   where v.org_id = p_org and v.fact_id = p_fact;
  if f.fact_id is null then
    raise exception 'fact % not found in project %', p_fact, p_project using errcode = 'no_data_found';
  end if;
  perform pg_advisory_xact_lock(memory_internal.identity_lock_key(
    p_project, f.subject_id, f.predicate, f.identity_object));
  perform memory_internal.begin_write(memory_internal.identities_floor(
    p_org, p_project, array[f.subject_id], array[f.predicate], array[f.identity_object]));
  -- Re-read: the lock holder before us may have changed it.
  select v.* into f from memory_internal.fact_versions(p_project) v
   where v.org_id = p_org and v.fact_id = p_fact;
  return f;
end
$$;

create or replace function memory.retract_fact(
  p_project uuid, p_fact uuid, p_reason text default null, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  f memory.facts := memory_internal.lock_fact(v_org, p_project, p_fact);
  v_restored uuid[] := '{}';
  v_src uuid[] := '{}'; v_tgt uuid[] := '{}';
  r record;
begin
  if f.invalid_at is not null then
    return jsonb_build_object('fact_id', p_fact, 'status', 'already_retracted',
                              'retracted_at', f.invalid_at);
  end if;

  update memory.facts set invalid_at = memory_internal.txn_instant()
   where org_id = v_org and fact_id = p_fact;
  insert into memory.fact_events
    (org_id, project_id, fact_id, event_type, old_fact_id, old_range, actor, reason)
  values (v_org, p_project, p_fact, 'retracted', p_fact, f.valid_range, v_actor, p_reason);
  insert into memory.tombstones (org_id, project_id, subject_id, predicate, object_key, fact_id, reason)
  values (v_org, p_project, f.subject_id, f.predicate, f.object_key, p_fact, p_reason)
  on conflict do nothing;

  -- A retracted claim never held: what it closed gets its window back.
  for r in select * from memory_internal.restitch(
             v_org, p_project, array[f.subject_id], array[f.predicate], array[f.identity_object],
             'superseded', v_actor, format('retraction of %s', p_fact)) loop
    if r.grew then
      v_restored := v_restored || r.fact_id;
    end if;
    v_src := v_src || f.subject_id;
    v_tgt := v_tgt || r.object_entity_id;
  end loop;
  v_src := v_src || f.subject_id;
  v_tgt := v_tgt || f.object_entity_id;
  perform memory_internal.sync_edges(
    v_org, p_project, v_src, v_tgt, array_fill(f.predicate, array[cardinality(v_src)]));

  perform memory_internal.bump_counter(v_org, p_project, 'facts_retracted', 1);
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'retract_fact', 'fact:' || p_fact, v_actor,
          jsonb_build_object('restored', cardinality(v_restored)));
  return jsonb_build_object('fact_id', p_fact, 'status', 'retracted', 'restored', to_jsonb(v_restored));
end
$$;
comment on function memory.retract_fact(uuid, uuid, text, text) is
  'Retract a fact: its record time ends, the claim (subject, predicate, object) is tombstoned, not its identity (assert_facts refuses that claim again unless overridden; another object of a cardinality-one identity is not refused), its edge expires unless another fact asserts it, and any window it had closed is given back.';

create or replace function memory.close_fact(
  p_project uuid, p_fact uuid, p_at timestamptz default now(),
  p_reason text default null, p_kind text default 'expired', p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  f memory.facts;
  v_until timestamptz;
  v_new tstzrange;
  v_next uuid;
begin
  if p_kind is null or p_kind not in ('expired', 'contradicted') then
    raise exception 'kind must be expired or contradicted, not %', coalesce(p_kind, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  if p_at is null or not isfinite(p_at) then
    raise exception 'the closing instant must be a finite timestamp' using errcode = 'invalid_parameter_value';
  end if;
  if not memory_internal.instant_in_range(p_at) then
    raise exception 'the closing instant must be in years 1 to 9999 (UTC), not %', p_at
      using errcode = 'invalid_parameter_value', detail = 'at';
  end if;
  f := memory_internal.lock_fact(v_org, p_project, p_fact);
  if f.invalid_at is not null then
    raise exception 'fact % is retracted', p_fact using errcode = 'invalid_parameter_value';
  end if;
  -- Closed at or before its start: the claim held at no instant.
  v_until := greatest(p_at, f.valid_from);
  if f.asserted_until is not null and f.asserted_until <= v_until then
    return jsonb_build_object('fact_id', p_fact, 'status', 'unchanged', 'valid_range', f.valid_range);
  end if;

  -- The claimed end bounds the window (a retraction of a successor gives it
  -- back only up to here), so moving it is a change of record like the
  -- window's own: it is stamped on range_changed_at even when the window
  -- stays, or the record-time floor of the next writer of this identity
  -- would not see it, and that writer, if it began before this transaction
  -- committed, would be stamped earlier than this change it builds on.
  -- (Read at an earlier known_at, such a version takes its window from the
  -- event log, which holds it unchanged.)  Only this version's window can
  -- change: it ends at the new claimed end or where it ended already (the
  -- next version's start), whichever comes first; emptied (closed at its
  -- start), it names the next version of its identity, as restitch does.
  -- The event keeps the claimed end it replaced (old_asserted_until): a
  -- subject wipe that takes the next version away lays the window out
  -- again at every earlier instant, and needs the end claimed then.
  v_new := case when isempty(f.valid_range) then f.valid_range
                else tstzrange(f.valid_from, least(v_until, coalesce(upper(f.valid_range), 'infinity')))
           end;
  if isempty(v_new) and not isempty(f.valid_range) then
    select x.fact_id into v_next
      from (select y.fact_id, y.valid_from, y.fact_seq, y.invalid_at
              from memory_internal.fact_versions(p_project) y
             where y.org_id = v_org and y.subject_id = f.subject_id and y.predicate = f.predicate
               and y.identity_object = f.identity_object
               and (y.valid_from, y.fact_seq) > (f.valid_from, f.fact_seq)
             order by y.valid_from, y.fact_seq
            offset 0) x
     where x.invalid_at is null
     order by x.valid_from, x.fact_seq
     limit 1;
  end if;
  update memory.facts set asserted_until = v_until, valid_range = v_new,
                          range_changed_at = memory_internal.txn_instant()
   where org_id = v_org and fact_id = p_fact;
  insert into memory.fact_events
    (org_id, project_id, fact_id, event_type, old_fact_id, new_fact_id, old_range, new_range,
     actor, reason, old_asserted_until)
  values (v_org, p_project, p_fact, p_kind, p_fact, v_next, f.valid_range, v_new, v_actor, p_reason,
          coalesce(f.asserted_until, 'infinity'));
  perform memory_internal.sync_edges(
    v_org, p_project, array[f.subject_id], array[f.object_entity_id], array[f.predicate]);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_' || p_kind, 1);

  return jsonb_build_object('fact_id', p_fact, 'status', p_kind, 'valid_range', v_new);
end
$$;
comment on function memory.close_fact(uuid, uuid, timestamptz, text, text, text) is
  'End a fact''s world-time window at p_at (it stops holding; nothing replaces it). p_kind: expired (default) or contradicted. Logged as an event; the edge closes with it.';

-- PL/pgSQL: the identity is read once, then its versions by the identity
-- key.  As one SQL statement, a plan made without statistics (a new
-- install before its first ANALYZE) would look the fact up again for every
-- version of the project, seconds per call at a few thousand versions
-- (docs/decisions/007-plans-made-without-statistics.md).
create or replace function memory.fact_history(p_project uuid, p_fact uuid)
  returns table (
    event_id bigint, occurred_at timestamptz, event_type text, fact_id uuid,
    old_fact_id uuid, new_fact_id uuid, old_range tstzrange, new_range tstzrange,
    actor text, reason text, subject text, predicate text, object text, content text)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  -- The versions in the identity key's order, which no other index gives.
  set enable_sort = off
as $$
#variable_conflict use_column
declare
  t record;
begin
  -- Row-level security scopes both reads (another org's project: nothing).
  select v.org_id, v.subject_id, v.predicate, v.identity_object into t
    from memory_internal.fact_versions(p_project) v
   where v.fact_id = p_fact;
  if not found then
    return;
  end if;
  return query
    select e.event_id, e.occurred_at, e.event_type, e.fact_id, e.old_fact_id, e.new_fact_id,
           e.old_range, e.new_range, e.actor, e.reason,
           s.name, v.predicate_label, coalesce(o.name, v.object_literal), v.content
      from (select x.* from memory_internal.fact_versions(p_project) x
             where x.org_id = t.org_id and x.subject_id = t.subject_id and x.predicate = t.predicate
               and x.identity_object = t.identity_object
             order by x.valid_from, x.fact_seq) v
      join memory.fact_events e on e.org_id = v.org_id and e.fact_id = v.fact_id
      join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id
      left join memory.entities o on o.org_id = v.org_id and o.entity_id = v.object_entity_id
     order by e.occurred_at, e.event_id;
end
$$;
comment on function memory.fact_history(uuid, uuid) is
  'Every event of every version of the fact''s identity (same subject, predicate and, unless cardinality one, object), oldest first: when did this change, and to what?';

-- PL/pgSQL: the subject is resolved once, then its versions are read by
-- the identity key, in that key's order (the only index that gives it;
-- sorts off).  As one SQL statement, planned without statistics (a new
-- install before its first ANALYZE), the subject's lookup would be a
-- filter run on every version of the project
-- (docs/decisions/007-plans-made-without-statistics.md).
-- A fact version's standing now, as the timeline and the subject export
-- show it.  Plain SQL without settings, so it is inlined where it is used.
create or replace function memory_internal.version_status(
  p_valid_range tstzrange, p_invalid_at timestamptz)
  returns text
  language sql stable parallel safe
  as $$
    select case when p_invalid_at is not null then 'retracted'
                when isempty(p_valid_range) then 'superseded'
                when p_valid_range @> now() then 'current'
                when lower(p_valid_range) > now() then 'future'
                else 'ended' end
  $$;
comment on function memory_internal.version_status(tstzrange, timestamptz) is
  'A fact version''s status now: retracted, superseded (empty window), current, future or ended.';

create or replace function memory.subject_timeline(
  p_project uuid, p_subject text, p_predicate text default null)
  returns table (
    fact_id uuid, predicate text, object text, content text, valid_from timestamptz,
    valid_range tstzrange, recorded_at timestamptz, invalid_at timestamptz,
    status text, events jsonb)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_subject uuid := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
  v_predicate text := memory.normalize_text(p_predicate);
begin
  if v_subject is null then
    return;  -- no such subject (or a project of another org)
  end if;
  return query
    with v as materialized (
      select x.* from memory_internal.fact_versions(p_project) x
       where x.org_id = v_org and x.subject_id = v_subject
         and (v_predicate is null or x.predicate = v_predicate)
       order by x.org_id, x.project_id, x.subject_id, x.predicate, x.identity_object, x.valid_from,
                x.fact_seq)
    select v.fact_id, v.predicate_label, coalesce(o.name, v.object_literal), v.content,
           v.valid_from, v.valid_range, v.recorded_at, v.invalid_at,
           memory_internal.version_status(v.valid_range, v.invalid_at),
           (select jsonb_agg(jsonb_build_object(
                     'event', e.event_type, 'at', e.occurred_at, 'window', e.new_range::text,
                     'new_fact_id', e.new_fact_id, 'actor', e.actor, 'reason', e.reason)
                   order by e.occurred_at, e.event_id)
              from memory.fact_events e where e.org_id = v_org and e.fact_id = v.fact_id)
      from v
      -- (The org as a value, not v's column: on Citus that routes the query.)
      left join memory.entities o on o.org_id = v_org and o.entity_id = v.object_entity_id
     order by v.predicate, v.valid_from, v.fact_seq;
end
$$;
comment on function memory.subject_timeline(uuid, text, text) is
  'Every version of a subject''s facts (optionally one predicate) in world-time order, with its window, record time, status and the events that shaped it.';
