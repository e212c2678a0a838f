-- Contradictions a person can settle: cardinality 'unknown', the conflict
-- inbox, reviews and standing, and cardinality learned from the store's own
-- statistics (sql/0040_conflicts.sql; docs/conflicts.md).
--
-- A predicate nobody declared is 'unknown': its objects are identities of
-- their own (as for 'many'), so a second current object of a subject stands
-- beside the first, and memory_internal.detect_conflicts records the
-- disagreement in the writer's transaction.  Writers of an unknown
-- predicate hold the (subject, predicate) lock that a cardinality-one
-- identity uses, so two writers of different objects queue and the second
-- sees the first's fact: one conflict per set, whoever writes.

--------------------------------------------------------------------------
-- Standing
--------------------------------------------------------------------------
create or replace function memory_internal.fact_standing(
  p_org uuid, p_fact uuid, p_known_at timestamptz default null)
  returns text
  language sql stable
  as $$
    select coalesce(
      (select r.standing from memory.fact_reviews r
        where r.org_id = p_org and r.fact_id = p_fact
          and r.reviewed_at <= coalesce(p_known_at, 'infinity')
        order by r.reviewed_at desc, r.review_id desc
        limit 1),
      'unreviewed')
  $$;
comment on function memory_internal.fact_standing(uuid, uuid, timestamptz) is
  'A fact''s standing as believed at p_known_at (NULL: now): the latest review recorded by then, else unreviewed.';

-- A fact's reviews, oldest first, as the timeline and the subject export
-- show them.
create or replace function memory_internal.fact_reviews_json(p_org uuid, p_fact uuid)
  returns jsonb
  language sql stable
  as $$
    select coalesce(jsonb_agg(jsonb_build_object(
             'standing', r.standing, 'reviewer', r.reviewer, 'reason', r.reason,
             'reviewed_at', r.reviewed_at) order by r.reviewed_at, r.review_id), '[]')
      from memory.fact_reviews r
     where r.org_id = p_org and r.fact_id = p_fact
  $$;
comment on function memory_internal.fact_reviews_json(uuid, uuid) is
  'A fact''s reviews, oldest first: standing, reviewer, reason, reviewed_at (JSON array).';

-- The rank rule of standing and confidence: a fact hit's fused score is
-- multiplied by this.  Confirmed ranks above unreviewed at equal relevance;
-- a claim stored with less confidence weighs less (half at confidence 0).
-- Rejected facts are retracted, so no read returns them.
create or replace function memory_internal.fact_trust(p_standing text, p_confidence real)
  returns double precision
  language sql immutable parallel safe
  as $$
    select (case p_standing when 'confirmed' then 1.25 else 1.0 end)
           * (0.5 + 0.5 * coalesce(p_confidence, 1))
  $$;
comment on function memory_internal.fact_trust(text, real) is
  'The weight memory.search gives a fact hit: 1.25 when confirmed (else 1), times 0.5 + 0.5 * confidence.';

--------------------------------------------------------------------------
-- Detection
--------------------------------------------------------------------------
-- Is (subject, predicate) one whose disagreements are conflicts: the
-- predicate undeclared and the subject not made 'many' by a keep_both?
create or replace function memory_internal.conflicts_apply(
  p_org uuid, p_project uuid, p_subject uuid, p_predicate text)
  returns boolean
  language sql stable
  as $$
    select memory_internal.cardinality(p_org, p_project, p_predicate) = 'unknown'
       and not exists (select from memory.subject_cardinalities c
                        where c.org_id = p_org and c.project_id = p_project
                          and c.subject_id = p_subject and c.predicate = p_predicate)
  $$;
comment on function memory_internal.conflicts_apply(uuid, uuid, uuid, text) is
  'True when the predicate is of unknown cardinality and the subject has no keep_both exception: two current objects at once are then a conflict.';

-- Open (or join) the conflict of each subject and predicate given: its
-- members are the subject's current facts of the predicate whose windows
-- overlap a fact with another object.  Caller holds the (subject,
-- predicate) locks (identity_lock_key with the identity object '').
-- Returns the conflicts opened or joined.
create or replace function memory_internal.detect_conflicts(
  p_org uuid, p_project uuid, p_subjects uuid[], p_predicates text[],
  p_actor text, p_cause text default 'unknown_cardinality', p_episode uuid default null,
  p_force_facts uuid[] default '{}')
  returns uuid[]
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  -- Per pair, index probes of the identity btree's (subject, predicate)
  -- prefix and of the open-conflict index, whatever the statistics say
  -- (docs/decisions/007-plans-made-without-statistics.md): the versions in
  -- the identity btree's order, sorts and sequential scans off.
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
  set enable_seqscan = off
as $$
declare
  v_ms uuid[]; v_mp text[]; v_mf uuid[]; v_me uuid[];
  v_new uuid[];
  v_cs uuid[]; v_cp text[]; v_cc uuid[];
  v_add_c uuid[]; v_add_f uuid[];
  v_out uuid[];
begin
  -- Set-based, a batch's pairs at once.  The members: the pairs' current
  -- versions that overlap a version of another object (where conflicts
  -- apply), and the facts the caller names.
  with pairs as materialized (
    select x.s, x.p,
           memory_internal.conflicts_apply(p_org, p_project, x.s, x.p) as applies
      from (select distinct u.s, u.p from unnest(p_subjects, p_predicates) u(s, p)) x),
  v as materialized (
    select x.s, x.p, x.applies, y.fact_id, y.object_key, y.valid_range, y.source_episode_id
      from pairs x
     cross join lateral (
       select z.fact_id, z.object_key, z.valid_range, z.source_episode_id, z.invalid_at
         from memory_internal.fact_versions(p_project) z
        where z.org_id = p_org and z.subject_id = x.s and z.predicate = x.p
        order by z.identity_object, z.valid_from, z.fact_seq
       offset 0) y
     where (x.applies or cardinality(p_force_facts) > 0)
       and y.invalid_at is null and not isempty(y.valid_range)),
  -- Only a pair with two objects can disagree; its versions are paired by
  -- a hash join, not compared with every version of the batch.
  multi as materialized (
    select a.s, a.p from v a where a.applies
     group by a.s, a.p having count(distinct a.object_key) > 1),
  overlapping as materialized (
    select distinct a.fact_id
      from v a
      join multi m on m.s = a.s and m.p = a.p
      join v b on b.s = a.s and b.p = a.p
     where b.object_key <> a.object_key and b.valid_range && a.valid_range)
  select array_agg(a.s order by a.s, a.p, a.fact_id), array_agg(a.p order by a.s, a.p, a.fact_id),
         array_agg(a.fact_id order by a.s, a.p, a.fact_id),
         array_agg(a.source_episode_id order by a.s, a.p, a.fact_id)
    into v_ms, v_mp, v_mf, v_me
    from v a
   where a.fact_id = any (p_force_facts)
      or a.fact_id in (select o.fact_id from overlapping o);
  if v_mf is null then
    return '{}';
  end if;

  -- Open the pairs' conflicts that are not open yet (the partial unique
  -- index keeps one open per pair; callers hold the pairs' locks).
  with ins as (
    insert into memory.conflicts as c (org_id, project_id, subject_id, predicate, cause, source_episode_id)
    select p_org, p_project, w.s, w.p, p_cause, p_episode
      from (select distinct m.s, m.p from unnest(v_ms, v_mp) m(s, p)) w
     order by w.s, w.p
    on conflict (org_id, project_id, subject_id, predicate) where status = 'open' do nothing
    returning c.conflict_id)
  select coalesce(array_agg(i.conflict_id), '{}') into v_new from ins i;
  select array_agg(c.subject_id), array_agg(c.predicate), array_agg(c.conflict_id)
    into v_cs, v_cp, v_cc
    from (select distinct m.s, m.p from unnest(v_ms, v_mp) m(s, p)) w
    cross join lateral (
      select x.subject_id, x.predicate, x.conflict_id from memory.conflicts x
       where x.org_id = p_org and x.project_id = p_project and x.subject_id = w.s
         and x.predicate = w.p and x.status = 'open'
      offset 0) c;
  with added as (
    insert into memory.conflict_members as m (org_id, project_id, conflict_id, fact_id, source_episode_id)
    select p_org, p_project, c.id, n.f, n.e
      from unnest(v_ms, v_mp, v_mf, v_me) n(s, p, f, e)
      join unnest(v_cs, v_cp, v_cc) c(s, p, id) on c.s = n.s and c.p = n.p
    on conflict (org_id, conflict_id, fact_id) do nothing
    returning m.conflict_id, m.fact_id)
  select coalesce(array_agg(x.conflict_id), '{}'), coalesce(array_agg(x.fact_id), '{}')
    into v_add_c, v_add_f from added x;

  -- One event per conflict opened (with its facts) or grown.
  insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, detail)
  select p_org, p_project, c.id,
         case when c.id = any (v_new) then 'opened' else 'member_added' end, p_actor,
         case when c.id = any (v_new) then jsonb_build_object('cause', p_cause) else '{}' end
         || jsonb_build_object('fact_ids', coalesce(f.ids, '[]'), 'source_episode_id', p_episode)
    from unnest(v_cc) c(id)
    left join (select x.c, jsonb_agg(x.f order by x.f) as ids
                 from unnest(v_add_c, v_add_f) x(c, f) group by x.c) f on f.c = c.id
   where c.id = any (v_new) or f.c is not null
   order by c.id;
  v_out := array(select distinct u from unnest(v_new || v_add_c) u order by 1);
  if cardinality(v_out) > 0 then
    perform memory_internal.bump_counter(p_org, p_project, 'conflicts_touched', cardinality(v_out));
  end if;
  return v_out;
end
$$;
comment on function memory_internal.detect_conflicts(uuid, uuid, uuid[], text[], text, text, uuid, uuid[]) is
  'Open or join the open conflict of each (subject, predicate): members are the current facts overlapping a fact of another object (where conflicts apply), plus p_force_facts. Logs opened / member_added; caller holds the (subject, predicate) locks.';

-- A claim held back instead of superseding a confirmed fact (assert_facts
-- under protect_confirmed): the conflict of its subject and predicate gets
-- the confirmed fact and the claim.
create or replace function memory_internal.hold_claim(
  p_org uuid, p_project uuid, p_subject uuid, p_predicate text, p_confirmed uuid,
  p_claim jsonb, p_episode uuid, p_actor text)
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_conflict uuid;
begin
  v_conflict := (memory_internal.detect_conflicts(
    p_org, p_project, array[p_subject], array[p_predicate], p_actor, 'confirmed_fact', p_episode,
    array[p_confirmed]))[1];
  if v_conflict is null then
    select c.conflict_id into v_conflict from memory.conflicts c
     where c.org_id = p_org and c.project_id = p_project and c.subject_id = p_subject
       and c.predicate = p_predicate and c.status = 'open';
  end if;
  -- A retry of the same claim (a job run again) is held once.
  if exists (select from memory.conflict_members m
              where m.org_id = p_org and m.conflict_id = v_conflict and m.claim = p_claim
                and m.outcome is null) then
    return v_conflict;
  end if;
  insert into memory.conflict_members (org_id, project_id, conflict_id, claim, source_episode_id)
  values (p_org, p_project, v_conflict, p_claim, p_episode);
  insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, detail)
  values (p_org, p_project, v_conflict, 'member_added', p_actor,
          jsonb_build_object('held_claim', true, 'held_by', p_confirmed, 'source_episode_id', p_episode));
  return v_conflict;
end
$$;
comment on function memory_internal.hold_claim(uuid, uuid, uuid, text, uuid, jsonb, uuid, text) is
  'Record a claim held back by a confirmed fact (protect_confirmed) as a member of the open conflict of its subject and predicate; returns the conflict.';

-- The extraction model said a fact no longer holds, and the project's
-- policy is that a person decides (contradictions = conflict): the
-- subject's conflict for the predicate gets the fact and the episode's own
-- current facts of that predicate with another object.
create or replace function memory_internal.contradiction_conflict(
  p_org uuid, p_project uuid, p_fact uuid, p_episode uuid, p_actor text)
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  f memory.facts;
  v_ids uuid[];
begin
  select x.* into f from memory_internal.fact_versions(p_project) x
   where x.org_id = p_org and x.fact_id = p_fact;
  perform memory_internal.lock_identities(
    p_project, array[f.subject_id, f.subject_id], array[f.predicate, f.predicate],
    array['', f.identity_object]);
  v_ids := array(select v.fact_id from memory_internal.fact_versions(p_project) v
                  where v.org_id = p_org and v.subject_id = f.subject_id and v.predicate = f.predicate
                    and v.source_episode_id = p_episode and v.object_key <> f.object_key
                    and v.invalid_at is null);
  return (memory_internal.detect_conflicts(
    p_org, p_project, array[f.subject_id], array[f.predicate], p_actor, 'contradiction', p_episode,
    p_fact || v_ids))[1];
end
$$;
comment on function memory_internal.contradiction_conflict(uuid, uuid, uuid, uuid, text) is
  'A contradiction the extraction model reported, under the project''s contradictions = conflict: opens or joins the conflict of the fact''s subject and predicate with the fact and the episode''s current facts of another object for it.';

--------------------------------------------------------------------------
-- The inbox
--------------------------------------------------------------------------
create or replace function memory_internal.conflict_member_json(
  p_org uuid, m memory.conflict_members)
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select case when m.fact_id is null then
             jsonb_build_object(
               'member_id', m.member_id, 'fact_id', null, 'claim', m.claim,
               'object', m.claim ->> 'object', 'content', m.claim ->> 'content',
               'valid_from', m.claim ->> 'valid_from', 'valid_to', m.claim ->> 'valid_to',
               'current', false, 'standing', null,
               'confidence', m.claim -> 'confidence', 'source_episode_id', m.source_episode_id,
               'outcome', m.outcome)
           else (
             select jsonb_build_object(
                      'member_id', m.member_id, 'fact_id', f.fact_id, 'claim', null,
                      'object', coalesce(o.name, f.object_literal), 'content', f.content,
                      'valid_from', f.valid_from,
                      'valid_to', case when isempty(f.valid_range) then f.valid_from
                                       else upper(f.valid_range) end,
                      'current', f.invalid_at is null and not isempty(f.valid_range),
                      'standing', memory_internal.fact_standing(p_org, f.fact_id),
                      'confidence', f.confidence, 'source_episode_id', f.source_episode_id,
                      'outcome', m.outcome)
               from memory_internal.fact_versions(m.project_id) f
               left join memory.entities o on o.org_id = f.org_id and o.entity_id = f.object_entity_id
              where f.org_id = p_org and f.fact_id = m.fact_id)
           end
  $$;
comment on function memory_internal.conflict_member_json(uuid, memory.conflict_members) is
  'A conflict member as memory.get_conflict shows it: the fact (object, content, window, current, standing, confidence) or the held claim, with its outcome.';

create or replace function memory.list_conflicts(
  p_project uuid, p_status text default 'open', p_predicate text default null,
  p_limit integer default 50, p_before timestamptz default null, p_before_id uuid default null)
  returns table (conflict_id uuid, subject text, predicate text, status text, resolution text,
                 cause text, members integer, opened_at timestamptz, resolved_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_predicate text := memory.normalize_text(p_predicate);
begin
  if p_status is null or p_status not in ('open', 'resolved', 'all') then
    raise exception 'status must be open, resolved or all, not %', coalesce(quote_literal(p_status), 'NULL')
      using errcode = 'invalid_parameter_value', detail = 'status';
  end if;
  if p_limit is null or p_limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500' using errcode = 'invalid_parameter_value',
      detail = 'limit';
  end if;
  return query
    select c.conflict_id, s.name, c.predicate, c.status, c.resolution, c.cause,
           (select count(*)::integer from memory.conflict_members m
             where m.org_id = c.org_id and m.conflict_id = c.conflict_id),
           c.opened_at, c.resolved_at
      from memory.conflicts c
      join memory.entities s on s.org_id = c.org_id and s.entity_id = c.subject_id
     where c.org_id = v_org and c.project_id = p_project
       and (p_status = 'all' or c.status = p_status)
       and (v_predicate is null or c.predicate = v_predicate)
       -- The cursor is the last row's (opened_at, conflict_id): conflicts a
       -- transaction opened together share their opened_at.
       and (p_before is null
            or (p_before_id is null and c.opened_at < p_before)
            or (c.opened_at, c.conflict_id) < (p_before, p_before_id))
     order by c.opened_at desc, c.conflict_id desc
     limit p_limit;
end
$$;
comment on function memory.list_conflicts(uuid, text, text, integer, timestamptz, uuid) is
  'The conflict inbox: conflicts of a project (open by default; resolved or all), newest first (opened_at, then conflict_id, descending), with subject, predicate, cause, resolution and member count; page with p_before and p_before_id (the last row''s opened_at and conflict_id; p_before alone: older than it). What do I know that disagrees?';

create or replace function memory.get_conflict(p_project uuid, p_conflict uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  c memory.conflicts;
begin
  select x.* into c from memory.conflicts x
   where x.org_id = v_org and x.project_id = p_project and x.conflict_id = p_conflict;
  if c.conflict_id is null then
    raise exception 'conflict % not found in project %', p_conflict, p_project using errcode = 'no_data_found';
  end if;
  return jsonb_build_object(
    'conflict_id', c.conflict_id,
    'subject', (select e.name from memory.entities e where e.org_id = v_org and e.entity_id = c.subject_id),
    'predicate', c.predicate, 'status', c.status, 'resolution', c.resolution, 'cause', c.cause,
    'opened_at', c.opened_at, 'resolved_at', c.resolved_at, 'resolved_by', c.resolved_by,
    'reason', c.reason, 'source_episode_id', c.source_episode_id,
    'members', coalesce((select jsonb_agg(memory_internal.conflict_member_json(v_org, m)
                                          order by m.added_at, m.member_id)
                           from memory.conflict_members m
                          where m.org_id = v_org and m.conflict_id = c.conflict_id), '[]'),
    'events', coalesce((select jsonb_agg(jsonb_build_object(
                                  'event_type', e.event_type, 'at', e.recorded_at, 'actor', e.actor,
                                  'reason', e.reason, 'detail', e.detail) order by e.event_id)
                          from memory.conflict_events e
                         where e.org_id = v_org and e.conflict_id = c.conflict_id), '[]'));
end
$$;
comment on function memory.get_conflict(uuid, uuid) is
  'One conflict with its members (facts with object, window, current, standing, confidence; held claims) and its events; no_data_found for another project''s or org''s id.';

--------------------------------------------------------------------------
-- Resolution
--------------------------------------------------------------------------
create or replace function memory.resolve_conflict(
  p_project uuid, p_conflict uuid, p_resolution text, p_member uuid default null,
  p_at timestamptz default null, p_reason text default null, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  c memory.conflicts;
  w memory.conflict_members;
  m record;
  f memory.facts;
  v_at timestamptz;
  v_closed uuid[] := '{}';
  v_retracted uuid[] := '{}';
  v_asserted uuid[] := '{}';
  v_result jsonb;
  v_claim jsonb;
  v_left integer;
  v_resolution text;
begin
  if p_resolution is null or p_resolution not in ('keep_both', 'supersede', 'retract') then
    raise exception 'resolution must be keep_both, supersede or retract, not %',
      coalesce(quote_literal(p_resolution), 'NULL')
      using errcode = 'invalid_parameter_value', detail = 'resolution';
  end if;
  perform memory_internal.check_instants(p_at, null);
  -- A project that learns cardinality may declare a predicate at the end of
  -- this call, which takes the project lock exclusively: taken so from the
  -- start, so two resolvers queue instead of each waiting for the other's
  -- upgrade (docs/decisions/004-lock-order.md).
  perform memory_internal.hold_project(p_project, coalesce(
    (select p.learn_cardinality from memory.projects p where p.org_id = v_org and p.project_id = p_project),
    false));
  select x.* into c from memory.conflicts x
   where x.org_id = v_org and x.project_id = p_project and x.conflict_id = p_conflict;
  if c.conflict_id is null then
    raise exception 'conflict % not found in project %', p_conflict, p_project using errcode = 'no_data_found';
  end if;
  -- The conflict's (subject, predicate) lock and its facts' identities, in
  -- the one lock order; then the row, so two resolvers queue.
  perform memory_internal.lock_identities(
    p_project, array_agg(k.s) || c.subject_id, array_agg(k.p) || c.predicate,
    array_agg(k.o) || ''::text)
    from (select f2.subject_id as s, f2.predicate as p, f2.identity_object as o
            from memory.conflict_members m2
            join memory_internal.fact_versions(p_project) f2 on f2.org_id = m2.org_id and f2.fact_id = m2.fact_id
           where m2.org_id = v_org and m2.conflict_id = c.conflict_id) k;
  select x.* into c from memory.conflicts x
   where x.org_id = v_org and x.conflict_id = p_conflict for update;
  if c.status <> 'open' then
    raise exception 'conflict % is already resolved (%)', p_conflict, c.resolution
      using errcode = 'object_not_in_prerequisite_state', detail = 'conflict_id';
  end if;
  if p_resolution <> 'keep_both' then
    if p_member is null then
      raise exception '% needs the member it is about (member_id)', p_resolution
        using errcode = 'invalid_parameter_value', detail = 'member_id';
    end if;
    select x.* into w from memory.conflict_members x
     where x.org_id = v_org and x.conflict_id = c.conflict_id and x.member_id = p_member;
    if w.member_id is null then
      raise exception 'member % is not a member of conflict %', p_member, p_conflict
        using errcode = 'invalid_parameter_value', detail = 'member_id';
    end if;
  end if;

  case p_resolution
  when 'keep_both' then
    -- Both hold: the predicate is many for this subject.  (Not for a
    -- cardinality-one predicate, whose identity cannot hold two objects.)
    if memory_internal.cardinality(v_org, p_project, c.predicate) = 'one'
       or exists (select from memory.conflict_members x
                   where x.org_id = v_org and x.conflict_id = c.conflict_id and x.fact_id is null) then
      raise exception 'keep_both is not possible: "%" is cardinality one for this conflict''s claims', c.predicate
        using errcode = 'invalid_parameter_value', detail = 'resolution',
              hint = 'Supersede or retract instead, or declare the predicate many.';
    end if;
    insert into memory.subject_cardinalities (org_id, project_id, subject_id, predicate, cardinality, conflict_id)
    values (v_org, p_project, c.subject_id, c.predicate, 'many', c.conflict_id)
    on conflict do nothing;
    update memory.conflict_members set outcome = 'kept'
     where org_id = v_org and conflict_id = c.conflict_id;
    v_resolution := 'kept';
  when 'supersede' then
    if w.fact_id is not null then
      select x.* into f from memory_internal.fact_versions(p_project) x
       where x.org_id = v_org and x.fact_id = w.fact_id;
      if f.invalid_at is not null then
        raise exception 'the winner % is retracted', w.fact_id
          using errcode = 'invalid_parameter_value', detail = 'member_id';
      end if;
      v_at := coalesce(p_at, f.valid_from);
    else
      -- The winner is a held claim: stored now (from p_at when given), it
      -- supersedes by world-time order as cardinality one does.
      v_claim := w.claim || case when p_at is null then '{}'::jsonb
                                 else jsonb_build_object('valid_from', p_at) end;
      perform memory_internal.set_local('chronomem.resolving', 'on');
      v_result := memory.assert_facts(p_project, jsonb_build_array(v_claim - 'source'),
                                      coalesce(w.claim ->> 'source', 'api'), w.source_episode_id,
                                      true, v_actor);
      perform memory_internal.set_local('chronomem.resolving', '');
      if v_result #>> '{results,0,status}' not in ('inserted', 'skipped') then
        raise exception 'the held claim could not be stored: %', v_result -> 'results'
          using errcode = 'invalid_parameter_value', detail = 'member_id';
      end if;
      v_asserted := v_asserted || (v_result #>> '{results,0,fact_id}')::uuid;
      v_at := coalesce(p_at, memory_internal.try_timestamptz(w.claim ->> 'valid_from'));
    end if;
    -- Every other current fact of the conflict stops holding at v_at (at
    -- its own start, if that is later: it then held at no instant).
    for m in select x.fact_id from memory.conflict_members x
              join memory_internal.fact_versions(p_project) y on y.org_id = x.org_id and y.fact_id = x.fact_id
             where x.org_id = v_org and x.conflict_id = c.conflict_id and x.member_id <> w.member_id
               and y.invalid_at is null and not isempty(y.valid_range)
             order by x.fact_id loop
      if memory.close_fact(p_project, m.fact_id, coalesce(v_at, now()),
                           coalesce(p_reason, format('conflict %s resolved: superseded', c.conflict_id)),
                           'contradicted', v_actor) ->> 'status' = 'contradicted' then
        v_closed := v_closed || m.fact_id;
      end if;
    end loop;
    update memory.conflict_members set outcome = case when member_id = w.member_id then 'won' else 'lost' end
     where org_id = v_org and conflict_id = c.conflict_id;
    v_resolution := 'superseded';
  when 'retract' then
    if w.fact_id is not null then
      perform memory.retract_fact(p_project, w.fact_id,
                                  coalesce(p_reason, format('conflict %s resolved: retracted', c.conflict_id)),
                                  v_actor);
      v_retracted := v_retracted || w.fact_id;
    end if;
    update memory.conflict_members set outcome = 'retracted'
     where org_id = v_org and member_id = w.member_id;
    -- Settled once no two current members disagree and no claim is held.
    select count(distinct y.object_key) + count(*) filter (where x.fact_id is null and x.outcome is null)
      into v_left
      from memory.conflict_members x
      left join memory_internal.fact_versions(p_project) y on y.org_id = x.org_id and y.fact_id = x.fact_id
                              and y.invalid_at is null and not isempty(y.valid_range)
     where x.org_id = v_org and x.conflict_id = c.conflict_id
       and (y.fact_id is not null or x.fact_id is null);
    if v_left >= 2 then
      insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, reason, detail)
      values (v_org, p_project, c.conflict_id, 'member_retracted', v_actor, p_reason,
              jsonb_build_object('member_id', w.member_id, 'retracted', to_jsonb(v_retracted)));
      insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
      values (v_org, p_project, 'resolve_conflict', 'conflict:' || c.conflict_id, v_actor,
              jsonb_build_object('retracted', cardinality(v_retracted)));
      return jsonb_build_object('conflict_id', c.conflict_id, 'status', 'open', 'resolution', null,
                                'closed', '[]'::jsonb, 'retracted', to_jsonb(v_retracted),
                                'asserted', '[]'::jsonb);
    end if;
    v_resolution := 'retracted';
  end case;

  update memory.conflicts set status = 'resolved', resolution = v_resolution,
                              resolved_at = memory_internal.txn_instant(), resolved_by = v_actor,
                              reason = p_reason
   where org_id = v_org and conflict_id = c.conflict_id;
  insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, reason, detail)
  values (v_org, p_project, c.conflict_id, 'resolved', v_actor, p_reason,
          jsonb_build_object('resolution', v_resolution, 'member_id', p_member, 'at', v_at,
                             'closed', to_jsonb(v_closed), 'retracted', to_jsonb(v_retracted),
                             'asserted', to_jsonb(v_asserted)));
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'resolve_conflict', 'conflict:' || c.conflict_id, v_actor,
          jsonb_build_object('closed', cardinality(v_closed), 'retracted', cardinality(v_retracted),
                             'asserted', cardinality(v_asserted)));
  perform memory_internal.learn_cardinality(v_org, p_project, c.predicate, v_actor);
  return jsonb_build_object('conflict_id', c.conflict_id, 'status', 'resolved', 'resolution', v_resolution,
                            'closed', to_jsonb(v_closed), 'retracted', to_jsonb(v_retracted),
                            'asserted', to_jsonb(v_asserted));
end
$$;
comment on function memory.resolve_conflict(uuid, uuid, text, uuid, timestamptz, text, text) is
  'Settle an open conflict. keep_both: every member holds (the predicate is many for this subject from now on); supersede: p_member wins from p_at (default its valid_from; a held claim is stored), the other current facts are closed there (contradicted); retract: p_member never held (retracted; a held claim is dropped), and the conflict is resolved once no two current members disagree. Logged as a conflict event (webhook conflict.resolved) and audited; under learn_cardinality the predicate''s suggestion is then applied when it passes the project''s bar.';

-- Conflicts of a predicate closed by a declaration (declared_one / declared_many).
create or replace function memory_internal.close_declared_conflicts(
  p_org uuid, p_project uuid, p_predicate text, p_cardinality text, p_actor text)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_ids uuid[];
begin
  with closed as (
    update memory.conflicts c
       set status = 'resolved', resolution = 'declared_' || p_cardinality,
           resolved_at = memory_internal.txn_instant(), resolved_by = p_actor,
           reason = format('%s declared %s', p_predicate, p_cardinality)
     where c.org_id = p_org and c.project_id = p_project and c.predicate = p_predicate
       and c.status = 'open'
       -- A claim held against a confirmed fact stays for a person to decide.
       and not exists (select from memory.conflict_members m
                        where m.org_id = c.org_id and m.conflict_id = c.conflict_id
                          and m.fact_id is null and m.outcome is null)
    returning c.conflict_id)
  select coalesce(array_agg(x.conflict_id), '{}') into v_ids from closed x;
  insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, reason, detail)
  select p_org, p_project, u.id, 'resolved', p_actor, format('%s declared %s', p_predicate, p_cardinality),
         jsonb_build_object('resolution', 'declared_' || p_cardinality)
    from unnest(v_ids) u(id);
  return cardinality(v_ids);
end
$$;
comment on function memory_internal.close_declared_conflicts(uuid, uuid, text, text, text) is
  'Resolve the open conflicts of a predicate just declared one or many (resolution declared_one / declared_many), except those holding a claim against a confirmed fact.';

--------------------------------------------------------------------------
-- Declaration (and its log)
--------------------------------------------------------------------------
create or replace function memory_internal.declare_cardinality(
  p_project uuid, p_predicate text, p_cardinality text, p_cause text, p_evidence jsonb,
  p_undoes bigint, p_actor text)
  returns text
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_pred text := memory.normalize_text(p_predicate);
  v_card text := lower(btrim(p_cardinality));
  v_old text;
  v_example text;
  v_rekeyed integer;
  v_subjects uuid[]; v_preds text[]; v_objects text[]; v_layout text[];
  v_src uuid[] := '{}'; v_tgt uuid[] := '{}';
  v_closed integer := 0;
begin
  if v_pred is null or v_pred = '' then
    raise exception 'predicate "%" is empty after normalization', p_predicate
      using errcode = 'invalid_parameter_value';
  end if;
  if v_card is null or v_card not in ('one', 'many', 'unknown') then
    raise exception 'cardinality must be ''one'', ''many'' or ''unknown'', not %', coalesce(quote_literal(p_cardinality), 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  -- A redeclaration changes the identities of every fact of the predicate:
  -- no other writer of the project runs meanwhile (they hold this lock
  -- shared, as for wipe).
  perform memory_internal.hold_project(p_project, true);
  perform pg_advisory_xact_lock(memory_internal.predicate_lock_key(p_project, v_pred));
  v_old := memory_internal.cardinality(v_org, p_project, v_pred);
  if v_old = v_card then
    return v_card;
  end if;
  perform memory_internal.begin_write((
    select max(greatest(v.recorded_at, v.range_changed_at, v.invalid_at))
      from memory_internal.fact_versions(p_project) v
     where v.org_id = v_org and v.predicate = v_pred));

  -- From 'unknown' to 'one': the open disagreements are settled by world
  -- time, the newer object superseding the older, as if the predicate had
  -- been 'one' when the facts arrived: the predicate's identities are laid
  -- out as one per subject before they are re-keyed.  (From 'many', where a
  -- person said the objects hold together, two objects at once still
  -- refuse the switch below.)
  if v_card = 'one' and v_old = 'unknown' then
    select array_agg(k.subject_id), array_agg(v_pred), array_agg(k.identity_object), array_agg(''::text)
      into v_subjects, v_preds, v_objects, v_layout
      from (select distinct v.subject_id, v.identity_object
              from memory_internal.fact_versions(p_project) v
             where v.org_id = v_org and v.predicate = v_pred and v.invalid_at is null) k;
    if v_subjects is not null then
      perform memory_internal.lock_identities(p_project, v_subjects, v_preds, v_objects);
      select coalesce(array_agg(r.subject_id), '{}'), coalesce(array_agg(r.object_entity_id), '{}')
        into v_src, v_tgt
        from memory_internal.restitch(
               v_org, p_project, v_subjects, v_preds, v_objects, 'superseded', p_actor,
               format('%s declared one', v_pred), p_layout_objects => v_layout) r
       where r.object_entity_id is not null;
    end if;
  end if;

  if v_card = 'unknown' then
    delete from memory.predicates where org_id = v_org and project_id = p_project and predicate = v_pred;
  else
    insert into memory.predicates as d (org_id, project_id, predicate, cardinality)
    values (v_org, p_project, v_pred, v_card)
    on conflict (org_id, project_id, predicate)
    do update set cardinality = excluded.cardinality, declared_at = excluded.declared_at
    where d.cardinality <> excluded.cardinality;
    -- A declaration is for every subject: keep_both exceptions end.
    delete from memory.subject_cardinalities
     where org_id = v_org and project_id = p_project and predicate = v_pred;
  end if;

  -- Re-key stored facts so identities follow the declaration.  Switching to
  -- 'one' is refused while a subject has overlapping current facts with
  -- different objects that no conflict settled: which one holds is the
  -- caller's decision.
  begin
    update memory.facts f
       set identity_object = case when v_card = 'one' then '' else f.object_key end
     where f.fact_id in (
             select v.fact_id from memory_internal.fact_versions(p_project) v
              where v.predicate = v_pred
                and v.identity_object <> case when v_card = 'one' then '' else v.object_key end)
       and f.org_id = v_org;
    get diagnostics v_rekeyed = row_count;
  exception when exclusion_violation then
    select e.name into v_example
      from memory.facts_at(p_project) a
      join memory.facts_at(p_project) b
        on b.subject_id = a.subject_id and b.predicate = a.predicate and b.object_key <> a.object_key
      join memory.entities e on e.org_id = a.org_id and e.entity_id = a.subject_id
     where a.predicate = v_pred
     limit 1;
    raise exception 'cannot declare "%" cardinality one: subjects such as "%" hold several objects over overlapping windows', v_pred, coalesce(v_example, '?')
      using errcode = 'exclusion_violation',
            hint = 'Retract or expire the extra facts first, then declare again.';
  end;

  -- From 'one' to 'many' or 'unknown': each object is an identity of its own
  -- now, so a window that another object's later fact ended runs to its own
  -- claimed end again, as if the predicate had been so when the facts
  -- arrived (the state does not depend on when the declaration came).
  -- Logged as 'restored'; reads at an earlier known_at still see the old
  -- windows.
  if v_old = 'one' and v_rekeyed > 0 then
    select array_agg(k.subject_id), array_agg(v_pred), array_agg(k.identity_object)
      into v_subjects, v_preds, v_objects
      from (select distinct v.subject_id, v.identity_object
              from memory_internal.fact_versions(p_project) v
             where v.org_id = v_org and v.predicate = v_pred and v.invalid_at is null) k;
    if v_subjects is not null then
      perform memory_internal.lock_identities(p_project, v_subjects, v_preds, v_objects);
      select v_src || coalesce(array_agg(r.subject_id), '{}'), v_tgt || coalesce(array_agg(r.object_entity_id), '{}')
        into v_src, v_tgt
        from memory_internal.restitch(
               v_org, p_project, v_subjects, v_preds, v_objects, 'superseded', p_actor,
               format('%s declared %s', v_pred, v_card)) r
       where r.object_entity_id is not null;
    end if;
  end if;
  if cardinality(v_src) > 0 then
    perform memory_internal.sync_edges(
      v_org, p_project, v_src, v_tgt, array_fill(v_pred, array[cardinality(v_src)]));
  end if;

  if v_card in ('one', 'many') then
    v_closed := memory_internal.close_declared_conflicts(v_org, p_project, v_pred, v_card, p_actor);
  else
    -- Undeclared again: the disagreements that now stand are conflicts.
    select array_agg(k.subject_id), array_agg(v_pred) into v_subjects, v_preds
      from (select distinct v.subject_id from memory_internal.fact_versions(p_project) v
             where v.org_id = v_org and v.predicate = v_pred and v.invalid_at is null) k;
    if v_subjects is not null then
      perform memory_internal.lock_identities(p_project, v_subjects, v_preds,
                                              array_fill(''::text, array[cardinality(v_subjects)]));
      perform memory_internal.detect_conflicts(v_org, p_project, v_subjects, v_preds, p_actor);
    end if;
  end if;

  insert into memory.predicate_changes
    (org_id, project_id, predicate, old_cardinality, new_cardinality, cause, evidence, undoes, actor)
  values (v_org, p_project, v_pred, v_old, v_card, p_cause, p_evidence, p_undoes, p_actor);
  perform memory_internal.enqueue_webhook_event(
    v_org, p_project, 'predicate.declared',
    jsonb_build_object('predicate', v_pred, 'old_cardinality', v_old, 'new_cardinality', v_card,
                       'cause', p_cause, 'conflicts_resolved', v_closed));
  return v_card;
end
$$;
comment on function memory_internal.declare_cardinality(uuid, text, text, text, jsonb, bigint, text) is
  'The body of every change of a predicate''s cardinality (declare_predicate, learned, undone): re-keys and lays out the stored facts, settles or opens conflicts, logs memory.predicate_changes and fires predicate.declared.';

create or replace function memory.declare_predicate(
  p_project uuid, p_predicate text, p_cardinality text)
  returns text
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  -- (PL/pgSQL: api_actor is defined with the HTTP layer, after this file.)
  return memory_internal.declare_cardinality(p_project, p_predicate, p_cardinality, 'declared',
                                             null, null, memory_internal.api_actor());
end
$$;
comment on function memory.declare_predicate(uuid, text, text) is
  'Declare a predicate ''one'' (a new object supersedes the old: works_at, lives_in), ''many'' (likes, knows) or ''unknown'' (no declaration, the default: two objects at once open a conflict). Stored facts follow: from unknown to one, the newer object supersedes by world-time order and the open conflicts resolve as declared_one; to many they resolve as declared_many; from many to one is refused while a subject holds two objects at once; from one to many or unknown gives back the windows other objects had ended (logged as restored). Logged in memory.predicate_changes.';

create or replace function memory.predicate_changes(p_project uuid, p_limit integer default 50)
  returns table (change_id bigint, predicate text, old_cardinality text, new_cardinality text,
                 cause text, evidence jsonb, undoes bigint, actor text, changed_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_limit is null or p_limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500' using errcode = 'invalid_parameter_value',
      detail = 'limit';
  end if;
  return query
    select c.change_id, c.predicate, c.old_cardinality, c.new_cardinality, c.cause, c.evidence,
           c.undoes, c.actor, c.changed_at
      from memory.predicate_changes c
     where c.org_id = v_org and c.project_id = p_project
     order by c.change_id desc
     limit p_limit;
end
$$;
comment on function memory.predicate_changes(uuid, integer) is
  'Every change of the project''s predicates'' cardinality, newest first: declared, learned (with the evidence) or undone.';

create or replace function memory.undo_predicate_change(
  p_project uuid, p_change bigint, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  c memory.predicate_changes;
begin
  select x.* into c from memory.predicate_changes x
   where x.org_id = v_org and x.project_id = p_project and x.change_id = p_change;
  if c.change_id is null then
    raise exception 'predicate change % not found in project %', p_change, p_project
      using errcode = 'no_data_found';
  end if;
  -- The lock order: the project (exclusive, as the declaration takes it), then the predicate.
  perform memory_internal.hold_project(p_project, true);
  perform pg_advisory_xact_lock(memory_internal.predicate_lock_key(p_project, c.predicate));
  if exists (select from memory.predicate_changes x
              where x.org_id = v_org and x.project_id = p_project and x.predicate = c.predicate
                and x.change_id > c.change_id) then
    raise exception 'predicate change % is not the latest of "%"', p_change, c.predicate
      using errcode = 'invalid_parameter_value', detail = 'change_id',
            hint = 'Only the latest change of a predicate can be undone.';
  end if;
  perform memory_internal.declare_cardinality(p_project, c.predicate, c.old_cardinality, 'undone',
                                              null, c.change_id, coalesce(p_actor, session_user));
  return jsonb_build_object('predicate', c.predicate, 'cardinality', c.old_cardinality,
                            'undoes', c.change_id);
end
$$;
comment on function memory.undo_predicate_change(uuid, bigint, text) is
  'Undo the latest change of a predicate''s cardinality (a learned one, say): the predicate goes back to what it was, logged as undone.';

--------------------------------------------------------------------------
-- Learned cardinality
--------------------------------------------------------------------------
-- Per predicate, what the store's facts and past resolutions say.  One
-- evidence: a subject whose objects of the predicate followed one another
-- (at least two, never overlapping), a conflict settled by superseding or
-- retracting.  Many evidence: a conflict kept, a subject holding two
-- objects at once that nobody disputes (declared many).  The suggestion is
-- the side holding at least the project's learn_threshold of the evidence,
-- once there are learn_min_evidence cases.
create or replace function memory.suggest_cardinality(p_project uuid)
  returns table (predicate text, declared text, suggestion text, confidence real, subjects integer,
                 sequential_subjects integer, concurrent_subjects integer, kept integer,
                 superseded integer, retracted integer, open integer, evidence jsonb)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
  p memory.projects;
begin
  select x.* into p from memory.projects x where x.org_id = v_org and x.project_id = p_project;
  return query
    with v as materialized (
      select x.subject_id, x.predicate, x.object_key, x.valid_range
        from memory_internal.fact_versions(p_project) x
       where x.org_id = v_org and x.invalid_at is null and not isempty(x.valid_range)),
    per_subject as (
      select a.predicate, a.subject_id,
             count(distinct a.object_key) as objects,
             bool_or(exists (select from v b
                              where b.subject_id = a.subject_id and b.predicate = a.predicate
                                and b.object_key <> a.object_key and b.valid_range && a.valid_range))
               as concurrent
        from v a group by a.predicate, a.subject_id),
    disputed as (
      select c.predicate, c.subject_id, c.status, c.resolution from memory.conflicts c
       where c.org_id = v_org and c.project_id = p_project),
    stats as (
      select ps.predicate,
             count(*)::integer as subjects,
             count(*) filter (where ps.objects >= 2 and not ps.concurrent)::integer as sequential,
             count(*) filter (where ps.concurrent and not exists (
                                select from disputed d where d.predicate = ps.predicate
                                   and d.subject_id = ps.subject_id
                                   and (d.status = 'open' or d.resolution = 'kept')))::integer as undisputed,
             count(*) filter (where ps.concurrent)::integer as concurrent
        from per_subject ps group by ps.predicate),
    res as (
      select d.predicate,
             count(*) filter (where d.resolution = 'kept')::integer as kept,
             count(*) filter (where d.resolution = 'superseded')::integer as superseded,
             count(*) filter (where d.resolution = 'retracted')::integer as retracted,
             count(*) filter (where d.status = 'open')::integer as open
        from disputed d group by d.predicate),
    votes as (
      select s.predicate, s.subjects, s.sequential, s.concurrent,
             coalesce(r.kept, 0) as kept, coalesce(r.superseded, 0) as superseded,
             coalesce(r.retracted, 0) as retracted, coalesce(r.open, 0) as open,
             s.sequential + coalesce(r.superseded, 0) + coalesce(r.retracted, 0) as one_votes,
             coalesce(r.kept, 0) + s.undisputed as many_votes
        from stats s left join res r on r.predicate = s.predicate)
    select x.predicate, memory_internal.cardinality(v_org, p_project, x.predicate),
           case when x.one_votes + x.many_votes < p.learn_min_evidence then null
                when x.one_votes >= p.learn_threshold * (x.one_votes + x.many_votes) then 'one'
                when x.many_votes >= p.learn_threshold * (x.one_votes + x.many_votes) then 'many'
           end,
           (greatest(x.one_votes, x.many_votes)::real / nullif(x.one_votes + x.many_votes, 0))::real,
           x.subjects, x.sequential, x.concurrent, x.kept, x.superseded, x.retracted, x.open,
           jsonb_build_object('one_votes', x.one_votes, 'many_votes', x.many_votes,
                              'threshold', p.learn_threshold, 'min_evidence', p.learn_min_evidence)
      from votes x
     order by x.predicate;
end
$$;
comment on function memory.suggest_cardinality(uuid) is
  'Per predicate of the project''s current facts: a suggested cardinality with its evidence. For one: subjects whose objects followed one another (sequential_subjects) and conflicts settled by superseding or retracting; for many: conflicts kept and subjects holding objects at once that nobody disputes. suggestion is the side with at least the project''s learn_threshold share of learn_min_evidence or more cases, else NULL; confidence is that share.';

-- Apply the predicate's suggestion when the project learns cardinality,
-- the predicate is undeclared and the suggestion passes the bar.
create or replace function memory_internal.learn_cardinality(
  p_org uuid, p_project uuid, p_predicate text, p_actor text)
  returns text
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  s record;
begin
  if not exists (select from memory.projects p
                  where p.org_id = p_org and p.project_id = p_project and p.learn_cardinality) then
    return null;
  end if;
  select x.* into s from memory.suggest_cardinality(p_project) x where x.predicate = p_predicate;
  if s.suggestion is null or s.declared <> 'unknown' then
    return null;
  end if;
  perform memory_internal.declare_cardinality(
    p_project, p_predicate, s.suggestion, 'learned',
    jsonb_build_object('confidence', s.confidence, 'subjects', s.subjects,
                       'sequential_subjects', s.sequential_subjects,
                       'concurrent_subjects', s.concurrent_subjects, 'kept', s.kept,
                       'superseded', s.superseded, 'retracted', s.retracted) || s.evidence,
    null, p_actor);
  return s.suggestion;
end
$$;
comment on function memory_internal.learn_cardinality(uuid, uuid, text, text) is
  'Under the project''s learn_cardinality: declare an undeclared predicate as memory.suggest_cardinality suggests (cause learned, with the evidence); NULL when nothing is learned.';

--------------------------------------------------------------------------
-- Policy
--------------------------------------------------------------------------
create or replace function memory.conflict_policy(p_project uuid)
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select jsonb_build_object('contradictions', p.contradictions, 'protect_confirmed', p.protect_confirmed,
                              'learn_cardinality', p.learn_cardinality,
                              'learn_threshold', p.learn_threshold,
                              'learn_min_evidence', p.learn_min_evidence)
      from memory.projects p
     -- "Not found" for a project the caller cannot see; the org named, which
     -- on Citus routes the read to the org's shard (as in facts_at).
     where memory_internal.project_org(p_project) is not null
       and p.org_id = memory_internal.current_org() and p.project_id = p_project
  $$;
comment on function memory.conflict_policy(uuid) is
  'The project''s conflict policy: contradictions (close | conflict), protect_confirmed, learn_cardinality, learn_threshold, learn_min_evidence.';

create or replace function memory.set_conflict_policy(
  p_project uuid, p_contradictions text default null, p_protect_confirmed boolean default null,
  p_learn_cardinality boolean default null, p_learn_threshold real default null,
  p_learn_min_evidence integer default null, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_contradictions is not null and p_contradictions not in ('close', 'conflict') then
    raise exception 'contradictions must be close or conflict, not %', quote_literal(p_contradictions)
      using errcode = 'invalid_parameter_value', detail = 'contradictions';
  end if;
  if p_learn_threshold is not null and p_learn_threshold not between 0.5 and 1 then
    raise exception 'learn_threshold must be between 0.5 and 1, not %', p_learn_threshold
      using errcode = 'invalid_parameter_value', detail = 'learn_threshold';
  end if;
  if p_learn_min_evidence is not null and p_learn_min_evidence < 2 then
    raise exception 'learn_min_evidence must be at least 2, not %', p_learn_min_evidence
      using errcode = 'invalid_parameter_value', detail = 'learn_min_evidence';
  end if;
  update memory.projects p
     set contradictions = coalesce(p_contradictions, p.contradictions),
         protect_confirmed = coalesce(p_protect_confirmed, p.protect_confirmed),
         learn_cardinality = coalesce(p_learn_cardinality, p.learn_cardinality),
         learn_threshold = coalesce(p_learn_threshold, p.learn_threshold),
         learn_min_evidence = coalesce(p_learn_min_evidence, p.learn_min_evidence)
   where p.org_id = v_org and p.project_id = p_project;
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'project.conflict_policy', 'project:' || p_project,
          coalesce(p_actor, session_user), memory.conflict_policy(p_project));
  return memory.conflict_policy(p_project);
end
$$;
comment on function memory.set_conflict_policy(uuid, text, boolean, boolean, real, integer, text) is
  'Set the project''s conflict policy (NULL keeps a setting): contradictions close | conflict, protect_confirmed, learn_cardinality with learn_threshold (0.5..1) and learn_min_evidence (>= 2). Audited; returns the policy.';

--------------------------------------------------------------------------
-- Review
--------------------------------------------------------------------------
create or replace function memory.review_fact(
  p_project uuid, p_fact uuid, p_standing text, p_reason text default null, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  f memory.facts;
  v_previous text;
begin
  if p_standing is null or p_standing not in ('confirmed', 'unreviewed', 'rejected') then
    raise exception 'standing must be confirmed, unreviewed or rejected, not %',
      coalesce(quote_literal(p_standing), 'NULL')
      using errcode = 'invalid_parameter_value', detail = 'standing';
  end if;
  f := memory_internal.lock_fact(v_org, p_project, p_fact);
  if f.invalid_at is not null then
    raise exception 'fact % is retracted', p_fact
      using errcode = 'invalid_parameter_value', detail = 'fact_id',
            hint = 'A rejected or retracted fact keeps its standing; assert the claim again to review it anew.';
  end if;
  v_previous := memory_internal.fact_standing(v_org, p_fact);
  insert into memory.fact_reviews (org_id, project_id, fact_id, standing, reviewer, reason)
  values (v_org, p_project, p_fact, p_standing, v_actor, p_reason);
  -- Rejected: the claim never held, as a retraction says.
  if p_standing = 'rejected' then
    perform memory.retract_fact(p_project, p_fact, coalesce(p_reason, 'rejected in review'), v_actor);
  end if;
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'review_fact', 'fact:' || p_fact, v_actor,
          jsonb_build_object('standing', p_standing));
  perform memory_internal.enqueue_webhook_event(
    v_org, p_project, 'fact.reviewed',
    jsonb_build_object('fact_id', p_fact, 'standing', p_standing, 'previous', v_previous),
    array[p_fact]);
  return jsonb_build_object('fact_id', p_fact, 'standing', p_standing, 'previous', v_previous,
                            'reviewed_at', memory_internal.txn_instant());
end
$$;
comment on function memory.review_fact(uuid, uuid, text, text, text) is
  'Set a fact''s standing: confirmed (ranks above unreviewed; under protect_confirmed extraction cannot supersede it), unreviewed, or rejected (the fact is retracted: it never held and no read returns it). Bitemporal: reads at an earlier known_at see the standing of then. Audited; fires fact.reviewed.';

-- Conflict events fire their webhooks.
create or replace function memory_internal.tg_conflict_events__webhooks() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  -- The conflicts by their primary key's order, sorts off: on a table the
  -- statistics do not know, any index of the org looks as cheap.
  set enable_sort = off
as $$
declare
  v_org uuid;
  r record;
begin
  -- Each event's conflict by its key (offset 0: a probe per event, whatever
  -- the planner guesses of the transition table), per org of the rows (one,
  -- but for an operator's own SQL, which runs without a scope), the org a
  -- value: on Citus, where this runs on the org's shard, the read stays there.
  for v_org in select distinct x.org_id from new_rows x order by 1 loop
    for r in select n.org_id, n.project_id, n.conflict_id, n.event_type, n.detail, c.subject_id,
                    c.predicate, c.cause, c.resolution
               from new_rows n
               cross join lateral (
                 select x.subject_id, x.predicate, x.cause, x.resolution from memory.conflicts x
                  where x.org_id = v_org and x.conflict_id = n.conflict_id
                  order by x.org_id, x.conflict_id
                 offset 0) c
              where n.org_id = v_org and n.event_type in ('opened', 'resolved')
              order by n.event_id loop
      perform memory_internal.enqueue_webhook_event(
        r.org_id, r.project_id,
        case r.event_type when 'opened' then 'conflict.detected' else 'conflict.resolved' end,
        jsonb_build_object('conflict_id', r.conflict_id, 'subject_id', r.subject_id,
                           'predicate', r.predicate, 'cause', r.cause, 'resolution', r.resolution)
        || r.detail,
        array(select jsonb_array_elements_text(coalesce(r.detail -> 'fact_ids', '[]')
                                               || coalesce(r.detail -> 'closed', '[]')
                                               || coalesce(r.detail -> 'retracted', '[]')
                                               || coalesce(r.detail -> 'asserted', '[]'))::uuid));
    end loop;
  end loop;
  return null;
end
$$;
comment on function memory_internal.tg_conflict_events__webhooks() is
  'conflict.detected and conflict.resolved webhooks from the conflict event log, in the writer''s transaction.';
create or replace trigger "60_webhooks" after insert on memory.conflict_events
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_conflict_events__webhooks();
