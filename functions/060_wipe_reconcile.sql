-- Wipe (hard delete of content; no tombstones) and edge reconciliation.

-- Queued work for rows a wipe deleted goes with them, in the wipe's
-- transaction: an enrich job whose episode is gone, and the ids of deleted
-- rows in embed jobs (the job is done when none remain), so no job points
-- at wiped content.  Marked done with the reason rather than deleted, like
-- the deliveries the wipe drops (087).  Running jobs are left to their
-- worker, which finds the rows gone and skips them.  The wipe passes the
-- ids it deleted (NULL: the whole project went), so the cost is the
-- project's queued jobs against that list, never a probe of the tables per
-- job (a project without a model has one waiting enrich job per episode).
-- The list is an array, planned for each call (plan_cache_mode): a constant
-- array of 9 or more elements, which `= any` looks ids up in by hashing,
-- whatever its length.  No temp table: the caller's session could have
-- created it first, with a trigger that would run as the owner.
create or replace function memory_internal.cancel_wiped_jobs(
  p_org uuid, p_project uuid, p_deleted uuid[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_custom_plan
as $$
declare
  c_skipped constant jsonb := '{"skipped": "wiped before it ran"}';
  v_ids uuid[];
  v_enrich integer;
  v_embed integer;
begin
  if p_deleted is not null and cardinality(p_deleted) = 0 then
    return 0;
  end if;
  v_ids := array(select distinct d from unnest(p_deleted) d where d is not null);

  update memory.jobs j
     set status = 'done', result = c_skipped, finished_at = clock_timestamp(), last_error = null
   where j.org_id = p_org and j.project_id = p_project and j.kind = 'enrich'
     and j.status in ('queued', 'waiting')
     and (p_deleted is null
          or (j.payload ->> 'episode_id')::uuid = any (v_ids));
  get diagnostics v_enrich = row_count;

  with kept as (
    select x.job_id, count(*) as n,
           coalesce(jsonb_agg(to_jsonb(i.id) order by i.ord)
                      filter (where p_deleted is not null and not (i.id::uuid = any (v_ids))),
                    '[]') as ids
      from memory.jobs x
     cross join lateral jsonb_array_elements_text(x.payload -> 'ids') with ordinality i(id, ord)
     where x.org_id = p_org and x.project_id = p_project and x.kind = 'embed'
       and x.status in ('queued', 'waiting')
     group by x.job_id
  )
  update memory.jobs j
     set payload = jsonb_set(j.payload, '{ids}', k.ids),
         status = case when jsonb_array_length(k.ids) = 0 then 'done' else j.status end,
         result = case when jsonb_array_length(k.ids) = 0 then c_skipped else j.result end,
         finished_at = case when jsonb_array_length(k.ids) = 0 then clock_timestamp()
                            else j.finished_at end
    from kept k
   where j.org_id = p_org and j.job_id = k.job_id and jsonb_array_length(k.ids) < k.n;
  get diagnostics v_embed = row_count;
  return v_enrich + v_embed;
end
$$;
comment on function memory_internal.cancel_wiped_jobs(uuid, uuid, uuid[]) is
  'For memory.wipe: queued or waiting enrich jobs of deleted episodes are done (skipped), embed jobs lose the ids of deleted rows (done when none remain); p_deleted = the ids of the episodes, facts and entities deleted, NULL when the whole project was. Returns the jobs changed.';

-- The past of the versions that stay in an identity a wipe takes versions
-- from (memory.wipe: "as if never asserted", at every known_at).  A staying
-- version's window at an instant t is [valid_from, least(claimed end at t,
-- start of the next version of its identity believed at t)); the store
-- logged it with the wiped versions among those believed.  Where the window
-- logged for t ends where a wiped version believed at t begins (or is empty
-- and a wiped one of the same start won the tie), it is laid out again
-- without the wiped ones: ending at the claimed end then (each close logs
-- the end it replaced, old_asserted_until) or at the next staying start
-- believed then.  Otherwise it stands.  That is decided at every instant the
-- window could have changed: the version's own events, and the record and
-- retraction instants of the other staying versions of its identity (which
-- may cut or give back a window only a wiped version bounded).  The log then
-- says exactly that: the last event of each instant has that instant's
-- window, each range before it is the one logged before it, a superseded or
-- restored event of an instant at which nothing changed without the wiped
-- versions (a wiped version's retraction gave a window back) is deleted, and
-- an instant whose window changed with no event of the version gets one
-- (superseded, naming the staying version that cut it, or restored), at
-- that instant.  Events naming a wiped version are left to the caller, which
-- deletes them.  Runs inside memory.wipe (chronomem.wiping set), before the
-- wiped versions or their events are deleted, and reads only the identities
-- the wiped versions are in.  Returns every staying version of them with the
-- window and range_changed_at its row must have (row_changed: they differ
-- from the row's; the caller sets them once the wiped rows are gone, for the
-- exclusion constraint) and its edge key.
create or replace function memory_internal.replay_wiped_past(
  p_org uuid, p_project uuid, p_wiped uuid[])
  returns table (fact_id uuid, subject_id uuid, predicate text, object_entity_id uuid,
                 valid_range tstzrange, range_changed_at timestamptz, row_changed boolean)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
begin
  return query
  with w as materialized (
    select v.fact_id, v.subject_id, v.predicate, v.identity_object, v.valid_from, v.fact_seq,
           v.recorded_at, v.invalid_at
      from memory_internal.fact_versions(p_project) v
     where v.org_id = p_org and v.fact_id = any (p_wiped)
  ), ids as materialized (
    select distinct w.subject_id, w.predicate, w.identity_object from w
  ), s as materialized (
    -- Every staying version of those identities, retracted ones included.
    select v.fact_id, v.subject_id, v.predicate, v.identity_object, v.object_entity_id,
           v.valid_from, v.fact_seq, v.recorded_at, v.invalid_at, v.asserted_until,
           v.valid_range, v.range_changed_at
      from ids
     cross join lateral (
       select x.* from memory_internal.fact_versions(p_project) x
        where x.org_id = p_org and x.subject_id = ids.subject_id and x.predicate = ids.predicate
          and x.identity_object = ids.identity_object
        order by x.valid_from, x.fact_seq
       offset 0) v
     where not v.fact_id = any (p_wiped)
  ), ev as materialized (
    select e.event_id, e.fact_id, e.event_type, e.old_range, e.new_range, e.occurred_at,
           e.actor, e.old_asserted_until,
           coalesce(e.old_fact_id = any (p_wiped), false)
             or coalesce(e.new_fact_id = any (p_wiped), false) as names_wiped
      from s
      join memory.fact_events e on e.org_id = p_org and e.fact_id = s.fact_id
  ), inst as materialized (
    -- The instants at which a staying version's window may differ once
    -- the wiped versions are gone, while it was believed.
    select distinct s.fact_id, u.t
      from s
     cross join lateral (
       select e.occurred_at from ev e where e.fact_id = s.fact_id
       union all
       select o.recorded_at from s o
        where o.subject_id = s.subject_id and o.predicate = s.predicate
          and o.identity_object = s.identity_object and o.fact_id <> s.fact_id
       union all
       select o.invalid_at from s o
        where o.subject_id = s.subject_id and o.predicate = s.predicate
          and o.identity_object = s.identity_object and o.fact_id <> s.fact_id
          and o.invalid_at is not null) u(t)
     where u.t >= s.recorded_at and (s.invalid_at is null or u.t < s.invalid_at)
  ), f0 as materialized (
    -- At each: the window logged (na), the claimed end then (au), the
    -- next staying version believed then, and whether a wiped version
    -- bounded the logged window.
    select i.fact_id, i.t, s.recorded_at, s.valid_from, na.r as na,
           exists (select from w
                    where w.subject_id = s.subject_id and w.predicate = s.predicate
                      and w.identity_object = s.identity_object
                      and w.recorded_at <= i.t and (w.invalid_at is null or w.invalid_at > i.t)
                      and (w.valid_from, w.fact_seq) > (s.valid_from, s.fact_seq)
                      and w.valid_from = case when isempty(na.r) then s.valid_from
                                              else coalesce(upper(na.r), 'infinity') end) as bounded,
           tstzrange(s.valid_from, nullif(least(au.au, coalesce(nb.next_from, 'infinity')), 'infinity'))
             as wb,
           nb.next_from, nb.next_id
      from inst i
      join s on s.fact_id = i.fact_id
     cross join lateral (
       select e.new_range as r from ev e
        where e.fact_id = i.fact_id and e.new_range is not null and e.occurred_at <= i.t
        order by e.occurred_at desc, e.event_id desc
        limit 1) na
     cross join lateral (
       select coalesce((select e.old_asserted_until from ev e
                         where e.fact_id = i.fact_id and e.event_type in ('expired', 'contradicted')
                           and e.old_asserted_until is not null and e.occurred_at > i.t
                         order by e.occurred_at, e.event_id
                         limit 1),
                       s.asserted_until, 'infinity') as au) au
      left join lateral (
       select o.valid_from as next_from, o.fact_id as next_id from s o
        where o.subject_id = s.subject_id and o.predicate = s.predicate
          and o.identity_object = s.identity_object and o.fact_id <> s.fact_id
          and o.recorded_at <= i.t and (o.invalid_at is null or o.invalid_at > i.t)
          and (o.valid_from, o.fact_seq) > (s.valid_from, s.fact_seq)
        order by o.valid_from, o.fact_seq
        limit 1) nb on true
  ), f as materialized (
    -- fr: the window at each instant without the wiped versions.
    select g.*, lag(g.fr) over (partition by g.fact_id order by g.t) as prev
      from (select f0.*, case when f0.bounded then f0.wb else f0.na end as fr from f0) g
  ), kept as materialized (
    select e.*, g.t is not null as in_span, g.fr, g.wb,
           e.event_type in ('superseded', 'restored') and g.t is not null
             and g.prev is not null and g.prev = g.fr as spurious
      from ev e
      left join f g on g.fact_id = e.fact_id and g.t = e.occurred_at
     where not e.names_wiped
  ), patched as (
    select k.event_id, k.fact_id, k.occurred_at, k.event_type, k.old_range, null::uuid as new_fact_id,
           null::text as actor, null::text as reason,
           case when k.new_range is null or not k.in_span then k.new_range
                -- The last range of its instant: that instant's window.
                when not exists (select from kept k2
                                  where k2.fact_id = k.fact_id and k2.occurred_at = k.occurred_at
                                    and not k2.spurious and k2.new_range is not null
                                    and k2.event_id > k.event_id) then k.fr
                -- An earlier one, bounded by a wiped version believed then.
                when exists (select from w join s on s.fact_id = k.fact_id
                              where w.subject_id = s.subject_id and w.predicate = s.predicate
                                and w.identity_object = s.identity_object
                                and w.recorded_at <= k.occurred_at
                                and (w.invalid_at is null or w.invalid_at > k.occurred_at)
                                and (w.valid_from, w.fact_seq) > (s.valid_from, s.fact_seq)
                                and w.valid_from = case when isempty(k.new_range) then s.valid_from
                                                        else coalesce(upper(k.new_range), 'infinity') end)
                  then k.wb
                else k.new_range end as new_range
      from kept k
     where not k.spurious
  ), added as (
    -- A window that changed at an instant with no event of the version.
    select null::bigint as event_id, g.fact_id, g.t as occurred_at,
           case when (case when isempty(g.fr) then g.valid_from else coalesce(upper(g.fr), 'infinity') end)
                     < (case when isempty(g.prev) then g.valid_from else coalesce(upper(g.prev), 'infinity') end)
                then 'superseded' else 'restored' end as event_type,
           g.prev as old_range,
           case when isempty(g.fr) or upper(g.fr) = g.next_from then g.next_id end as new_fact_id,
           (select e.actor from ev e join s o on o.fact_id = e.fact_id join s on s.fact_id = g.fact_id
             where o.subject_id = s.subject_id and o.predicate = s.predicate
               and o.identity_object = s.identity_object and e.occurred_at = g.t
             order by e.event_id limit 1) as actor,
           (select format('retraction of %s', o.fact_id) from s o join s on s.fact_id = g.fact_id
             where o.subject_id = s.subject_id and o.predicate = s.predicate
               and o.identity_object = s.identity_object and o.invalid_at = g.t
             limit 1) as reason,
           g.fr as new_range
      from f g
     where g.prev is not null and g.prev <> g.fr
       and not exists (select from patched p
                        where p.fact_id = g.fact_id and p.occurred_at = g.t and p.new_range is not null)
  ), seq as materialized (
    select q.*,
           case when q.event_id is not null and q.old_range is null then null
                else lag(q.new_range) over (partition by q.fact_id order by q.occurred_at,
                                                 q.event_id nulls last) end as old_patched
      from (select * from patched union all select * from added) q
  ), gone as (
    delete from memory.fact_events e
     using kept k
     where e.org_id = p_org and e.event_id = k.event_id and k.spurious
  ), fixed as (
    update memory.fact_events e
       set old_range = q.old_patched, new_range = q.new_range
      from seq q
     where e.org_id = p_org and e.event_id = q.event_id
       and (e.old_range is distinct from q.old_patched or e.new_range is distinct from q.new_range)
  ), logged as (
    insert into memory.fact_events
      (org_id, project_id, fact_id, event_type, old_fact_id, new_fact_id, old_range, new_range,
       occurred_at, actor, reason)
    select p_org, p_project, q.fact_id, q.event_type, q.fact_id,
           case when q.event_type = 'superseded' then q.new_fact_id end,
           q.old_patched, q.new_range, q.occurred_at, q.actor,
           case when q.event_type = 'restored' then q.reason end
      from seq q
     where q.event_id is null
     order by q.occurred_at, q.fact_id
  ), last as (
    select g.fact_id,
           (array_agg(g.fr order by g.t desc))[1] as fr,
           greatest(max(g.t) filter (where g.prev is null or g.prev <> g.fr),
                    (select max(k.occurred_at) from kept k
                      where k.fact_id = g.fact_id and k.in_span
                        and k.event_type in ('expired', 'contradicted'))) as changed_at
      from f g
     group by g.fact_id
  )
  select s.fact_id, s.subject_id, s.predicate, s.object_entity_id,
         coalesce(l.fr, s.valid_range), coalesce(l.changed_at, s.range_changed_at),
         l.fact_id is not null
           and (l.fr is distinct from s.valid_range or l.changed_at is distinct from s.range_changed_at)
    from s
    left join last l on l.fact_id = s.fact_id;
end
$$;
comment on function memory_internal.replay_wiped_past(uuid, uuid, uuid[]) is
  'Inside memory.wipe, before the wiped versions go: the logged windows of the staying versions of their identities, at every instant, as if the wiped versions had never been asserted (events rewritten, deleted or added at their instants); returns each staying version with the window and range_changed_at its row must have, and its edge key.';

-- The edge rows of the given (source, target, relation) keys, rebuilt from
-- their facts' windows as believed at every instant one of those changed
-- (memory.wipe, for the keys of staying versions whose past it laid out
-- again): at each, the maximal windows of the union of the windows believed
-- then; each such window is one row, recorded where it first appears and
-- expired where it stops being one (as sync_edges keeps them, write by
-- write).  Returns the rows inserted.
create or replace function memory_internal.rebuild_edge_history(
  p_org uuid, p_project uuid, p_sources uuid[], p_targets uuid[], p_relations text[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
begin
  delete from memory.edges e
   using (select distinct k.s, k.t, k.r from unnest(p_sources, p_targets, p_relations) k(s, t, r)) k
   where e.org_id = p_org and e.project_id = p_project and e.source_id = k.s and e.target_id = k.t
     and e.relation = k.r;
  with k as (
    select distinct k.s, k.t, k.r from unnest(p_sources, p_targets, p_relations) k(s, t, r)
     where k.s is not null and k.t is not null and k.r is not null
  ), v as materialized (
    select k.s, k.t as tg, k.r, x.fact_id, x.recorded_at, x.invalid_at, x.range_changed_at, x.valid_range
      from k
     cross join lateral (
       select y.* from memory_internal.fact_versions(p_project) y
        where y.org_id = p_org and y.subject_id = k.s and y.predicate = k.r
          and y.object_entity_id = k.t
       offset 0) x
  ), i as materialized (
    select distinct v.s, v.tg, v.r, u.at
      from v
     cross join lateral (
       select v.recorded_at
       union all select v.invalid_at
       union all select e.occurred_at from memory.fact_events e
                  where e.org_id = p_org and e.fact_id = v.fact_id and e.new_range is not null) u(at)
     where u.at is not null
  ), m as materialized (
    select i.s, i.tg, i.r, i.at, dense_rank() over (partition by i.s, i.tg, i.r order by i.at) as n,
           (select range_agg(b.win)
              from (select case when v.range_changed_at <= i.at then v.valid_range
                                else memory_internal.range_believed(p_org, v.fact_id, i.at) end as win
                      from v
                     where v.s = i.s and v.tg = i.tg and v.r = i.r and v.recorded_at <= i.at
                       and (v.invalid_at is null or v.invalid_at > i.at)) b
             where b.win is not null and not isempty(b.win)) as mr
      from i
  ), c as (
    select m.s, m.tg, m.r, m.n, m.at, x.c,
           m.n - row_number() over (partition by m.s, m.tg, m.r, x.c order by m.n) as grp
      from m cross join lateral unnest(m.mr) x(c)
  ), runs as (
    select c.s, c.tg, c.r, c.c, min(c.at) as recorded_at, max(c.n) as last_n
      from c group by c.s, c.tg, c.r, c.c, c.grp
  ), ins as (
    insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range,
                              recorded_at, expired_at)
    select p_org, p_project, x.s, x.tg, x.r, x.c, x.recorded_at,
           (select m.at from m where m.s = x.s and m.tg = x.tg and m.r = x.r and m.n = x.last_n + 1)
      from runs x
     order by x.s, x.tg, x.r, x.recorded_at
    returning 1
  )
  select count(*) into v_n from ins;
  return v_n;
end
$$;
comment on function memory_internal.rebuild_edge_history(uuid, uuid, uuid[], uuid[], text[]) is
  'Inside memory.wipe: the edge rows of these keys rebuilt from their facts'' windows as believed at every instant one changed (one row per maximal window, recorded where it appears, expired where it stops being one). Returns the rows inserted.';

-- An entity's names, normalized: its own and its aliases.
create or replace function memory_internal.entity_names(p_org uuid, p_entity uuid)
  returns text[]
  language sql stable
  as $$
    select array(
      select e.normalized_name from memory.entities e
       where e.org_id = p_org and e.entity_id = p_entity
      union
      select a.normalized_alias from memory.entity_aliases a
       where a.org_id = p_org and a.entity_id = p_entity)
  $$;
comment on function memory_internal.entity_names(uuid, uuid) is
  'An entity''s normalized name and aliases.';

-- The facts that name a subject: every stored version with it as subject
-- or object, and those whose object is one of its names written as a plain
-- name not taken over yet.  What a subject wipe deletes and a subject
-- export shows (a union, so each side keeps its index).
create or replace function memory_internal.facts_naming(p_org uuid, p_project uuid, p_entity uuid)
  returns uuid[]
  language sql stable
  as $$
    select array(
      select v.fact_id from memory_internal.fact_versions(p_project) v
       where v.org_id = p_org and v.subject_id = p_entity
      union
      select v.fact_id from memory_internal.fact_versions(p_project) v
       where v.org_id = p_org and v.object_entity_id = p_entity
      union
      select a.fact_id
        from memory_internal.named_auto_objects(
               p_org, p_project, memory_internal.entity_names(p_org, p_entity)) a
       where a.entity_id = p_entity)
  $$;
comment on function memory_internal.facts_naming(uuid, uuid, uuid) is
  'Every stored fact version naming the entity: as subject, as object, or as a plain-name object not taken over yet. What memory.wipe''s subject scope deletes and memory.export_subject shows.';

-- The one wipe: memory.wipe (a project, a session, a subject) and
-- memory.purge_expired (the episodes stored before an instant) call it.
create or replace function memory_internal.wipe_content(
  p_project uuid, p_session text, p_subject text, p_stored_before timestamptz, p_actor text)
  returns jsonb
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  v_scope text;
  v_session uuid;
  v_episodes uuid[];
  v_entity uuid;
  v_facts uuid[];
  v_deleted uuid[];  -- NULL: the whole project
  v_key_subjects uuid[]; v_key_predicates text[]; v_key_objects text[]; v_key_entities uuid[];
  v_past_ids uuid[]; v_past_ranges tstzrange[]; v_past_changed_at timestamptz[];
  v_past_sources uuid[]; v_past_targets uuid[]; v_past_relations text[];
  v_counts jsonb;
  v_n_facts integer := 0; v_n_events integer := 0; v_n_edges integer := 0;
  v_n_entities integer := 0; v_n_episodes integer := 0; v_n_sessions integer := 0;
  v_n_tombstones integer := 0;
  v_before jsonb := memory_internal.store_changes(array['content']);
  v_conflicts uuid[];
  v_attachments uuid[];
  v_chunks_gone uuid[];
begin
  if num_nonnulls(p_session, p_subject, p_stored_before) > 1 then
    raise exception 'wipe takes a session or a subject, not both' using errcode = 'invalid_parameter_value';
  end if;
  -- No writer of this project runs while content disappears under it.
  -- Nothing else writes this project now: every row it has is committed.
  perform memory_internal.hold_project(p_project, true);
  perform memory_internal.begin_write((
    select max(greatest(v.recorded_at, v.range_changed_at, v.invalid_at))
      from memory_internal.fact_versions(p_project) v));
  perform memory_internal.set_local('chronomem.wiping', 'on');

  if num_nonnulls(p_session, p_subject, p_stored_before) = 0 then
    v_scope := 'project';
    delete from memory.fact_events where org_id = v_org and project_id = p_project;
    get diagnostics v_n_events = row_count;
    delete from memory.edges where org_id = v_org and project_id = p_project;
    get diagnostics v_n_edges = row_count;
    delete from memory.tombstones where org_id = v_org and project_id = p_project;
    get diagnostics v_n_tombstones = row_count;
    delete from memory.facts where org_id = v_org and project_id = p_project;
    get diagnostics v_n_facts = row_count;
    delete from memory.entity_aliases where org_id = v_org and project_id = p_project;
    delete from memory.entities where org_id = v_org and project_id = p_project;
    get diagnostics v_n_entities = row_count;
    delete from memory.attachments where org_id = v_org and project_id = p_project;
    delete from memory.episodes where org_id = v_org and project_id = p_project;
    get diagnostics v_n_episodes = row_count;
    delete from memory.sessions where org_id = v_org and project_id = p_project;
    get diagnostics v_n_sessions = row_count;
    delete from memory.communities where org_id = v_org and project_id = p_project;
    delete from memory.community_runs where org_id = v_org and project_id = p_project;
  else
    if p_session is not null or p_stored_before is not null then
      if p_session is not null then
        v_scope := 'session';
        select s.session_id into v_session from memory.sessions s
         where s.org_id = v_org and s.project_id = p_project and s.external_id = p_session;
        if v_session is null then
          raise exception 'session "%" not found in project %', p_session, p_project
            using errcode = 'no_data_found';
        end if;
        v_episodes := array(select e.episode_id from memory.episodes e
                             where e.org_id = v_org and e.session_id = v_session);
      else
        v_scope := 'expired';
        v_episodes := array(select e.episode_id from memory.episodes e
                             where e.org_id = v_org and e.project_id = p_project
                               and e.created_at < p_stored_before);
      end if;
      -- The files those episodes are chunks of (stored with them, so
      -- expired with them; a session's go with the session).
      v_attachments := array(select distinct c.attachment_id from memory.attachment_chunks c
                              where c.org_id = v_org and c.episode_id = any (v_episodes));
      -- What derives only from those episodes: the facts drawn from them.
      select coalesce(array_agg(v.fact_id), '{}') into v_facts
        from memory_internal.fact_versions(p_project) v
       where v.org_id = v_org and v.source_episode_id = any (v_episodes);
    else
      v_scope := 'subject';
      v_entity := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
      if v_entity is null then
        raise exception 'subject "%" not found in project %', p_subject, p_project
          using errcode = 'no_data_found';
      end if;
      -- Every fact naming it, by a plain name too (written while the entity
      -- was being created).
      v_facts := memory_internal.facts_naming(v_org, p_project, v_entity);
      -- The attachments whose chunks name it or are the sources of those
      -- facts hold it in their bytes: each goes whole, with every chunk
      -- (episode) of it and the facts drawn from them, as a session wipe
      -- takes a session's.  The messages stay (a subject wipe forgets a
      -- person, not a conversation).
      v_attachments := memory_internal.subject_attachments(v_org, p_project, v_entity, v_facts);
      if cardinality(v_attachments) > 0 then
        v_episodes := array(select c.episode_id from memory.attachment_chunks c
                             where c.org_id = v_org and c.attachment_id = any (v_attachments));
        v_facts := array(
          select distinct x.id
            from unnest(v_facts || array(
                   select v.fact_id from memory_internal.fact_versions(p_project) v
                    where v.org_id = v_org and v.source_episode_id = any (v_episodes))) x(id));
      end if;
    end if;

    -- The identities and edge keys the wiped facts shared with facts that
    -- stay: those are laid out again as if the wiped facts never existed.
    -- Kept as arrays in step (entry i of each is one key), not in a temp
    -- table, which the caller's session could have created with a trigger.
    select array_agg(k.subject_id), array_agg(k.predicate), array_agg(k.identity_object),
           array_agg(k.object_entity_id)
      into v_key_subjects, v_key_predicates, v_key_objects, v_key_entities
      from (select distinct v.subject_id, v.predicate, v.identity_object, v.object_entity_id
              from memory_internal.fact_versions(p_project) v
             where v.org_id = v_org and v.fact_id = any (v_facts)) k;

    -- The past of the versions that stay in the identities the wiped facts
    -- are in, as if those had never been asserted: their logged windows at
    -- every instant now; their rows and edges once the wiped rows are gone.
    select array_agg(r.fact_id) filter (where r.row_changed),
           array_agg(r.valid_range) filter (where r.row_changed),
           array_agg(r.range_changed_at) filter (where r.row_changed),
           array_agg(r.subject_id) filter (where r.object_entity_id is not null),
           array_agg(r.object_entity_id) filter (where r.object_entity_id is not null),
           array_agg(r.predicate) filter (where r.object_entity_id is not null)
      into v_past_ids, v_past_ranges, v_past_changed_at, v_past_sources, v_past_targets,
           v_past_relations
      from memory_internal.replay_wiped_past(v_org, p_project, v_facts) r;

    -- Conflicts a wiped fact or episode was in: their wiped members go
    -- with the facts (foreign keys); a conflict left with fewer than two
    -- members goes below, as if never opened.
    v_conflicts := array(
      select m.conflict_id from memory.conflict_members m
       where m.org_id = v_org and m.project_id = p_project
         and (m.fact_id = any (v_facts) or m.source_episode_id = any (coalesce(v_episodes, '{}')))
      union
      select c.conflict_id from memory.conflicts c
       where c.org_id = v_org and c.project_id = p_project
         and c.source_episode_id = any (coalesce(v_episodes, '{}')));

    -- Community summaries that may tell of what goes (written from a wiped
    -- fact, of a community holding an entity one names, or naming the
    -- wiped subject): cleared, and asked for again
    -- (functions/079_community_summaries.sql).
    perform memory_internal.clear_wiped_summaries(
      v_org, p_project, v_facts, v_key_subjects || v_key_entities || v_entity,
      case when v_entity is not null then memory_internal.entity_names(v_org, v_entity) end);

    -- Events of facts that stay but name a wiped one (the closing it
    -- caused) go too: the wiped facts are as if never asserted.
    delete from memory.fact_events where org_id = v_org
       and (fact_id = any (v_facts) or old_fact_id = any (v_facts) or new_fact_id = any (v_facts));
    get diagnostics v_n_events = row_count;
    delete from memory.tombstones where org_id = v_org and fact_id = any (v_facts);
    get diagnostics v_n_tombstones = row_count;
    delete from memory.edges e
     using unnest(v_key_subjects, v_key_predicates, v_key_entities) k(subject_id, predicate, object_entity_id)
     where e.org_id = v_org and e.project_id = p_project and e.source_id = k.subject_id
       and e.relation = k.predicate and e.target_id = k.object_entity_id;
    get diagnostics v_n_edges = row_count;
    delete from memory.facts where org_id = v_org and fact_id = any (v_facts);
    get diagnostics v_n_facts = row_count;
    -- The staying versions' rows as the replayed log ends (retracted ones
    -- too), windows that shrink before those that grow (the exclusion
    -- constraint holds after each statement); then their edges' history.
    if cardinality(v_past_ids) > 0 then
      update memory.facts f set valid_range = r.valid_range, range_changed_at = r.changed_at
        from unnest(v_past_ids, v_past_ranges, v_past_changed_at) r(fact_id, valid_range, changed_at)
       where f.org_id = v_org and f.fact_id = any (v_past_ids) and f.fact_id = r.fact_id
         and (f.invalid_at is not null or r.valid_range <@ f.valid_range);
      update memory.facts f set valid_range = r.valid_range, range_changed_at = r.changed_at
        from unnest(v_past_ids, v_past_ranges, v_past_changed_at) r(fact_id, valid_range, changed_at)
       where f.org_id = v_org and f.fact_id = any (v_past_ids) and f.fact_id = r.fact_id
         and f.invalid_at is null and not r.valid_range <@ f.valid_range;
    end if;
    if cardinality(v_past_sources) > 0 then
      perform memory_internal.rebuild_edge_history(
        v_org, p_project, v_past_sources, v_past_targets, v_past_relations);
    end if;

    perform memory_internal.lock_identities(
      p_project, array_agg(k.subject_id), array_agg(k.predicate), array_agg(k.identity_object))
      from unnest(v_key_subjects, v_key_predicates, v_key_objects) k(subject_id, predicate, identity_object);
    -- restitch reports the facts that stay whose windows it changed (the
    -- ones the wiped facts had closed): their edge keys are synced too.
    select v_key_subjects || array_agg(x.subject_id), v_key_predicates || array_agg(x.predicate),
           v_key_objects || array_agg(''::text), v_key_entities || array_agg(x.object_entity_id)
      into v_key_subjects, v_key_predicates, v_key_objects, v_key_entities
      from (select array_agg(k.subject_id) as s, array_agg(k.predicate) as p,
                   array_agg(k.identity_object) as o
              from unnest(v_key_subjects, v_key_predicates, v_key_objects) k(subject_id, predicate, identity_object)
             where v_entity is null or k.subject_id <> v_entity) a
     cross join lateral memory_internal.restitch(
       v_org, p_project, a.s, a.p, a.o, 'superseded', v_actor, 'wipe',
       p_forget_old_ranges => true) x
     where x.object_entity_id is not null;
    perform memory_internal.sync_edges(
      v_org, p_project, array_agg(k.subject_id), array_agg(k.object_entity_id), array_agg(k.predicate))
      from unnest(v_key_subjects, v_key_predicates, v_key_entities) k(subject_id, predicate, object_entity_id)
     where v_entity is null or (k.subject_id <> v_entity and k.object_entity_id <> v_entity);

    if v_scope in ('session', 'expired') then
      with gone as (
        delete from memory.episodes where org_id = v_org and episode_id = any (v_episodes)
        returning episode_id)
      select count(*), v_facts || coalesce(array_agg(g.episode_id), '{}')
        into v_n_episodes, v_deleted from gone g;
      -- A session goes with a session wipe (its attachments with it); one
      -- whose episodes expired stays (its conversation may go on), its id
      -- and metadata with it; files stored with the expired episodes go.
      delete from memory.sessions where org_id = v_org and session_id = v_session;
      get diagnostics v_n_sessions = row_count;
      if v_scope = 'expired' then
        delete from memory.attachments where org_id = v_org and attachment_id = any (v_attachments);
      end if;
    else
      delete from memory.tombstones where org_id = v_org and project_id = p_project
         and subject_id = v_entity;
      delete from memory.edges where org_id = v_org and project_id = p_project
         and (source_id = v_entity or target_id = v_entity);
      -- Rejected extraction items naming it (by name or alias, as a whole
      -- word: a fact about it the model gave and extraction dropped) go
      -- with its facts.
      delete from memory.extraction_rejections r
       where r.org_id = v_org and r.project_id = p_project
         and exists (
               select from (select n.normalized_name as norm from memory.entities n
                             where n.org_id = v_org and n.entity_id = v_entity
                            union all
                            select a.normalized_alias from memory.entity_aliases a
                             where a.org_id = v_org and a.entity_id = v_entity) w
                where strpos(' ' || memory.normalize_text(coalesce(r.item::text, '') || ' ' || coalesce(r.message, '')) || ' ',
                             ' ' || w.norm || ' ') > 0);
      delete from memory.entity_aliases where org_id = v_org and entity_id = v_entity;
      -- The community it was in: its label may be the subject's name and its
      -- size counts it (deleting the entity would only drop its membership).
      -- The communities job computes the others' again.
      delete from memory.communities c
       using memory.community_members m
       where m.org_id = v_org and m.project_id = p_project and m.entity_id = v_entity
         and c.org_id = v_org and c.community_id = m.community_id;
      delete from memory.entities where org_id = v_org and entity_id = v_entity;
      get diagnostics v_n_entities = row_count;
      if cardinality(v_attachments) > 0 then
        delete from memory.attachments where org_id = v_org and attachment_id = any (v_attachments);
        with gone as (
          delete from memory.episodes where org_id = v_org and episode_id = any (v_episodes)
          returning episode_id)
        select count(*), coalesce(array_agg(g.episode_id), '{}') into v_n_episodes, v_chunks_gone
          from gone g;
      end if;
      v_deleted := v_facts || v_entity || coalesce(v_chunks_gone, '{}');
    end if;
  end if;

  if cardinality(v_conflicts) > 0 then
    update memory.conflicts c set source_episode_id = null
     where c.org_id = v_org and c.conflict_id = any (v_conflicts)
       and c.source_episode_id = any (coalesce(v_episodes, '{}'));
    delete from memory.conflicts c
     where c.org_id = v_org and c.conflict_id = any (v_conflicts)
       and (select count(*) from memory.conflict_members m
             where m.org_id = v_org and m.conflict_id = c.conflict_id) < 2;
  end if;
  perform memory_internal.cancel_wiped_jobs(v_org, p_project, v_deleted);
  perform memory_internal.drop_wiped_webhook_bodies(v_org, p_project, memory_internal.txn_instant());
  -- The receipt: rows deleted and changed in every content store, whatever
  -- deleted them (cascades and triggers included).
  v_counts := jsonb_build_object(
    'facts', v_n_facts, 'fact_events', v_n_events, 'edges', v_n_edges,
    'entities', v_n_entities, 'episodes', v_n_episodes, 'sessions', v_n_sessions,
    'tombstones', v_n_tombstones, 'stores', memory_internal.erasure_receipt(v_before));
  -- The audit row names the scope and counts, never the wiped content.
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'wipe', v_scope, v_actor, v_counts);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_purged', v_n_facts);
  return jsonb_build_object('scope', v_scope) || v_counts;
end
$$;
comment on function memory_internal.wipe_content(uuid, text, text, timestamptz, text) is
  'The body of memory.wipe and memory.purge_expired: hard-delete the project''s content, or a session''s episodes and the facts drawn from them, or a subject and every fact naming it, or the episodes stored before p_stored_before and the facts drawn from them; returns the totals and the receipt (stores), written to the audit row.';

create or replace function memory.wipe(
  p_project uuid, p_session text default null, p_subject text default null,
  p_actor text default null)
  returns jsonb
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$ select memory_internal.wipe_content(p_project, p_session, p_subject, null, p_actor) $$;
comment on function memory.wipe(uuid, text, text, text) is
  'Hard-delete a project''s content (or one session''s episodes and the facts drawn from them, or one subject and every fact naming it, by a plain name too, and the community it was in). Writes an audit row with counts only and no tombstones: nothing wiped is readable at any instant afterwards. Queued enrich and embed jobs of the deleted rows are cancelled in the same transaction. Returns the totals and the receipt: stores, the rows deleted, updated and inserted in every content store of memory_internal.data_stores().';

-- Delete a project: its content as a project wipe deletes it (so nothing
-- of it is readable afterwards, the derived rows kept without a foreign key
-- included), then its jobs (no foreign key: a job may have no project),
-- then the project row, which takes every row keyed to it with it (API
-- keys, webhook endpoints and their deliveries, predicates, sessions,
-- idempotency state, community runs).  Kept: the audit log (the wipe's row
-- and one for the deletion, counts only) and the project's counters, whose
-- sums /metrics exposes as counters that must never go down.
create or replace function memory.delete_project(p_project uuid, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_wiped jsonb;
  v_jobs integer;
  v_keys integer;
  v_endpoints integer;
  v_counts jsonb;
  v_actor text := coalesce(p_actor, session_user);
  v_before jsonb := memory_internal.store_changes(array['content', 'settings']);
begin
  -- Writers hold it shared: none is between its checks and its writes.
  perform memory_internal.hold_project(p_project, true);
  v_wiped := memory.wipe(p_project, p_actor => v_actor);
  delete from memory.jobs j where j.org_id = v_org and j.project_id = p_project;
  get diagnostics v_jobs = row_count;
  select count(*) into v_keys from memory_internal.api_keys k
   where k.org_id = v_org and k.project_id = p_project;
  select count(*) into v_endpoints from memory.webhook_endpoints w
   where w.org_id = v_org and w.project_id = p_project;
  delete from memory.projects p where p.org_id = v_org and p.project_id = p_project;
  v_counts := jsonb_build_object('jobs', v_jobs, 'api_keys', v_keys, 'webhook_endpoints', v_endpoints,
                                 'stores', memory_internal.erasure_receipt(v_before));
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'project.delete', 'project:' || p_project, v_actor, v_counts);
  return jsonb_build_object('project_id', p_project, 'deleted', true, 'wiped', v_wiped) || v_counts;
end
$$;
comment on function memory.delete_project(uuid, text) is
  'Delete a project: its content as memory.wipe deletes it, its jobs, and the project row with everything keyed to it (API keys, webhook endpoints, predicates, sessions). Keeps the audit log (counts only) and the project''s counters (their sums are /metrics counters). Returns the wipe''s counts and what else went.';

create or replace function memory.reconcile_edges(
  p_batch integer default 1000, p_project uuid default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.current_org();
  v_project uuid;
  v_healed jsonb := '[]';
  v_expired integer := 0; v_inserted integer := 0; v_keys integer := 0;
  v_adopted integer := 0;
  r record;
  s record;
begin
  if p_batch is null or p_batch < 1 then
    raise exception 'batch must be a positive number of edge keys' using errcode = 'invalid_parameter_value';
  end if;
  if v_org is null then
    raise exception 'no org scope' using errcode = 'no_data_found', hint = 'Call memory.use_org(org) first.';
  end if;
  for v_project in
    select p.project_id from memory.projects p
     where p.org_id = v_org and (p_project is null or p.project_id = p_project)
     order by p.project_id
  loop
    exit when v_keys >= p_batch;
    -- Objects written as a name that an entity bears now but not when the
    -- writer looked (it was created by a transaction that had not yet
    -- committed): the entity's from now on, with their edges.
    v_adopted := v_adopted + memory_internal.adopt_named_objects(v_org, v_project, null);
    -- Keys whose current edges differ from the union of their facts' windows.
    for r in
      with wanted as (
        select v.subject_id as src, v.object_entity_id as tgt, v.predicate as rel,
               array_agg(m order by m) as ranges
          from (select v.subject_id, v.object_entity_id, v.predicate,
                       range_agg(v.valid_range) as mr
                  from memory_internal.fact_versions(v_project) v
                 where v.org_id = v_org and v.invalid_at is null
                   and v.object_entity_id is not null and not isempty(v.valid_range)
                 group by 1, 2, 3) v
          cross join lateral unnest(v.mr) m
         group by 1, 2, 3
      ), have as (
        select e.source_id as src, e.target_id as tgt, e.relation as rel,
               array_agg(e.valid_range order by e.valid_range) as ranges
          from memory.edges e
         where e.org_id = v_org and e.project_id = v_project and e.expired_at is null
         group by 1, 2, 3
      )
      select coalesce(w.src, h.src) as src, coalesce(w.tgt, h.tgt) as tgt,
             coalesce(w.rel, h.rel) as rel
        from wanted w
        full join have h on h.src = w.src and h.tgt = w.tgt and h.rel = w.rel
       where w.ranges is distinct from h.ranges
       order by 1, 2, 3
       limit p_batch - v_keys
    loop
      -- Writers of this key hold one of these identity locks.
      perform pg_advisory_xact_lock(k) from (
        select memory_internal.identity_lock_key(v_project, r.src, r.rel, '') as k
        union
        select memory_internal.identity_lock_key(v_project, r.src, r.rel, e.normalized_name)
          from memory.entities e where e.org_id = v_org and e.entity_id = r.tgt
        order by 1) keys;
      perform memory_internal.begin_write(memory_internal.identities_floor(
        v_org, v_project, array[r.src, r.src], array[r.rel, r.rel],
        array['', (select e.normalized_name from memory.entities e
                    where e.org_id = v_org and e.entity_id = r.tgt)]));
      select * into s from memory_internal.sync_edges(
        v_org, v_project, array[r.src], array[r.tgt], array[r.rel]);
      v_keys := v_keys + 1;
      if s.edges_expired + s.edges_inserted > 0 then
        v_expired := v_expired + s.edges_expired;
        v_inserted := v_inserted + s.edges_inserted;
        v_healed := v_healed || jsonb_build_object(
          'project_id', v_project, 'source_id', r.src, 'target_id', r.tgt, 'relation', r.rel,
          'expired', s.edges_expired, 'inserted', s.edges_inserted);
      end if;
    end loop;
  end loop;
  return jsonb_build_object('keys_checked', v_keys, 'keys_healed', jsonb_array_length(v_healed),
                            'edges_expired', v_expired, 'edges_inserted', v_inserted,
                            'objects_adopted', v_adopted, 'healed', v_healed);
end
$$;
comment on function memory.reconcile_edges(integer, uuid) is
  'Heal drift between edges and facts in the current org (or one project), at most p_batch edge keys per call; reports each key it healed. First gives objects written as a plain name to the entity that now bears it, when a concurrent writer created the entity too late for the fact''s writer to see (objects_adopted).';
