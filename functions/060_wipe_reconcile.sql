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
drop function if exists memory_internal.cancel_wiped_jobs(uuid, uuid);
create or replace function memory_internal.cancel_wiped_jobs(
  p_org uuid, p_project uuid, p_deleted uuid[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  c_skipped constant jsonb := '{"skipped": "wiped before it ran"}';
  v_enrich integer;
  v_embed integer;
begin
  if p_deleted is not null and cardinality(p_deleted) = 0 then
    return 0;
  end if;
  create temp table if not exists pg_temp.chronomem_wiped_ids (id uuid primary key) on commit drop;
  truncate pg_temp.chronomem_wiped_ids;
  insert into pg_temp.chronomem_wiped_ids select distinct d from unnest(p_deleted) d;
  analyze pg_temp.chronomem_wiped_ids;

  update memory.jobs j
     set status = 'done', result = c_skipped, finished_at = clock_timestamp(), last_error = null
   where j.org_id = p_org and j.project_id = p_project and j.kind = 'enrich'
     and j.status in ('queued', 'waiting')
     and (p_deleted is null
          or (j.payload ->> 'episode_id')::uuid in (select w.id from pg_temp.chronomem_wiped_ids w));
  get diagnostics v_enrich = row_count;

  with kept as (
    select x.job_id, count(*) as n,
           coalesce(jsonb_agg(to_jsonb(i.id) order by i.ord)
                      filter (where p_deleted is not null and w.id is null), '[]') as ids
      from memory.jobs x
     cross join lateral jsonb_array_elements_text(x.payload -> 'ids') with ordinality i(id, ord)
      left join pg_temp.chronomem_wiped_ids w on w.id = i.id::uuid
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

-- The logged windows of staying versions that a wiped version cut without
-- being named (memory.wipe: "as if never asserted").  A version asserted
-- after a later-starting one of its identity is laid out ending where that
-- one begins, and its 'asserted' event names only itself; so do the ranges
-- of its later events, as long as that one was believed.  Each such range
-- (old or new) of an event of a staying version p_wiped shares an identity
-- with, ending exactly where a wiped version of that identity began while
-- that version was believed (recorded, not yet retracted, at the event),
-- ends instead where the version's window would have ended then without
-- the wiped ones: at the next start among the staying versions believed
-- at the event, or at the version's claimed end (asserted_until; it only
-- ever comes down, so an end a later close gave it shows earlier than it
-- was known, which reveals nothing wiped).  A range that merely ends at
-- the same instant for another reason gets that same end back.  Ties (an
-- empty window lost to a wiped version of the same start) are left as
-- they are.  Runs inside memory.wipe (chronomem.wiping set), before the
-- wiped versions are deleted; returns the events changed.
create or replace function memory_internal.unbound_wiped_ranges(
  p_org uuid, p_project uuid, p_wiped uuid[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
begin
  with w as materialized (
    select v.subject_id, v.predicate, v.identity_object, v.valid_from, v.recorded_at, v.invalid_at
      from memory_internal.fact_versions(p_project) v
     where v.org_id = p_org and v.fact_id = any (p_wiped)
  ), ev as materialized (
    -- Events of staying versions of the wiped identities, each with the
    -- starts of the wiped versions believed at it (the ends they could
    -- have cut) and the end its window would have had then without them.
    select e.event_id, e.old_range, e.new_range, ws.starts,
           least(coalesce(s.asserted_until, 'infinity'),
                 coalesce((select min(o.valid_from)
                             from memory_internal.fact_versions(p_project) o
                            where o.org_id = p_org and o.subject_id = s.subject_id
                              and o.predicate = s.predicate and o.identity_object = s.identity_object
                              and o.fact_id <> s.fact_id and not o.fact_id = any (p_wiped)
                              and o.valid_from > s.valid_from and o.recorded_at <= e.occurred_at
                              and (o.invalid_at is null or o.invalid_at > e.occurred_at)),
                          'infinity')) as bound
      from memory_internal.fact_versions(p_project) s
      join memory.fact_events e on e.org_id = p_org and e.fact_id = s.fact_id
     cross join lateral (
       select array_agg(w.valid_from) as starts
         from w
        where w.subject_id = s.subject_id and w.predicate = s.predicate
          and w.identity_object = s.identity_object
          and w.recorded_at <= e.occurred_at
          and (w.invalid_at is null or w.invalid_at > e.occurred_at)) ws
     where s.org_id = p_org and not s.fact_id = any (p_wiped) and ws.starts is not null
  )
  update memory.fact_events e
     set old_range = case when upper(c.old_range) = any (c.starts)
                          then tstzrange(lower(e.old_range), nullif(c.bound, 'infinity'))
                          else e.old_range end,
         new_range = case when upper(c.new_range) = any (c.starts)
                          then tstzrange(lower(e.new_range), nullif(c.bound, 'infinity'))
                          else e.new_range end
    from ev c
   where e.org_id = p_org and e.event_id = c.event_id
     and (upper(c.old_range) = any (c.starts) or upper(c.new_range) = any (c.starts));
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_internal.unbound_wiped_ranges(uuid, uuid, uuid[]) is
  'Inside memory.wipe: logged windows of staying versions that end where a wiped version of their identity began (while it was believed) end instead where they would have without the wiped versions; returns the events changed.';

create or replace function memory.wipe(
  p_project uuid, p_session text default null, p_subject text default null,
  p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  v_scope text;
  v_session uuid;
  v_entity uuid;
  v_facts uuid[];
  v_deleted uuid[];  -- NULL: the whole project
  v_counts jsonb;
  v_n_facts integer := 0; v_n_events integer := 0; v_n_edges integer := 0;
  v_n_entities integer := 0; v_n_episodes integer := 0; v_n_sessions integer := 0;
  v_n_tombstones integer := 0;
begin
  if p_session is not null and p_subject is not null then
    raise exception 'wipe takes a session or a subject, not both' using errcode = 'invalid_parameter_value';
  end if;
  -- No writer of this project runs while content disappears under it.
  -- Nothing else writes this project now: every row it has is committed.
  perform memory_internal.hold_project(p_project, true);
  perform memory_internal.begin_write((
    select max(greatest(v.recorded_at, v.range_changed_at, v.invalid_at))
      from memory_internal.fact_versions(p_project) v));
  perform set_config('chronomem.wiping', 'on', true);

  if p_session is null and p_subject is null then
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
    delete from memory.episodes where org_id = v_org and project_id = p_project;
    get diagnostics v_n_episodes = row_count;
    delete from memory.sessions where org_id = v_org and project_id = p_project;
    get diagnostics v_n_sessions = row_count;
    delete from memory.communities where org_id = v_org and project_id = p_project;
    delete from memory.community_runs where org_id = v_org and project_id = p_project;
  else
    if p_session is not null then
      v_scope := 'session';
      select s.session_id into v_session from memory.sessions s
       where s.org_id = v_org and s.project_id = p_project and s.external_id = p_session;
      if v_session is null then
        raise exception 'session "%" not found in project %', p_session, p_project
          using errcode = 'no_data_found';
      end if;
      select coalesce(array_agg(v.fact_id), '{}') into v_facts
        from memory_internal.fact_versions(p_project) v
        join memory.episodes e on e.org_id = v.org_id and e.episode_id = v.source_episode_id
       where v.org_id = v_org and e.session_id = v_session;
    else
      v_scope := 'subject';
      v_entity := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
      if v_entity is null then
        raise exception 'subject "%" not found in project %', p_subject, p_project
          using errcode = 'no_data_found';
      end if;
      -- Every fact naming it: as subject, as object, and as a plain name
      -- not taken over yet (written while the entity was being created).
      select coalesce(array_agg(v.fact_id), '{}') into v_facts
        from memory_internal.fact_versions(p_project) v
       where v.org_id = v_org and (v.subject_id = v_entity or v.object_entity_id = v_entity);
      select v_facts || coalesce(array_agg(a.fact_id), '{}') into v_facts
        from memory_internal.named_auto_objects(v_org, p_project, array(
               select e.normalized_name from memory.entities e
                where e.org_id = v_org and e.entity_id = v_entity
               union all
               select a.normalized_alias from memory.entity_aliases a
                where a.org_id = v_org and a.entity_id = v_entity)) a
       where a.entity_id = v_entity;
    end if;

    -- The identities and edge keys the wiped facts shared with facts that
    -- stay: those are laid out again as if the wiped facts never existed.
    create temp table if not exists pg_temp.chronomem_wiped_keys (
      subject_id uuid, predicate text, identity_object text, object_entity_id uuid) on commit drop;
    truncate pg_temp.chronomem_wiped_keys;
    insert into pg_temp.chronomem_wiped_keys
    select distinct v.subject_id, v.predicate, v.identity_object, v.object_entity_id
      from memory_internal.fact_versions(p_project) v
     where v.org_id = v_org and v.fact_id = any (v_facts);

    -- Events of facts that stay but name a wiped one (the closing it
    -- caused) go too: the wiped facts are as if never asserted.
    delete from memory.fact_events where org_id = v_org
       and (fact_id = any (v_facts) or old_fact_id = any (v_facts) or new_fact_id = any (v_facts));
    get diagnostics v_n_events = row_count;
    -- A window a wiped fact cut without being named: a version asserted
    -- after a later-starting one of its identity was laid out ending where
    -- that one began, and its event names only itself.  Every logged range
    -- of a staying version that ends where a wiped version of its identity
    -- began, while that one was believed, ends instead where it would have
    -- then: at the next start among the staying versions believed then, or
    -- at the version's own claimed end (asserted_until, which only ever
    -- comes down: an end a later close gave it shows earlier than it was
    -- known, which reveals nothing wiped).
    perform memory_internal.unbound_wiped_ranges(v_org, p_project, v_facts);
    delete from memory.tombstones where org_id = v_org and fact_id = any (v_facts);
    get diagnostics v_n_tombstones = row_count;
    delete from memory.edges e using pg_temp.chronomem_wiped_keys k
     where e.org_id = v_org and e.project_id = p_project and e.source_id = k.subject_id
       and e.relation = k.predicate and e.target_id = k.object_entity_id;
    get diagnostics v_n_edges = row_count;
    delete from memory.facts where org_id = v_org and fact_id = any (v_facts);
    get diagnostics v_n_facts = row_count;

    perform memory_internal.lock_identities(
      p_project, array_agg(k.subject_id), array_agg(k.predicate), array_agg(k.identity_object))
      from pg_temp.chronomem_wiped_keys k;
    -- restitch reports the facts that stay whose windows it changed (the
    -- ones the wiped facts had closed): their edge keys are synced too.
    insert into pg_temp.chronomem_wiped_keys (subject_id, predicate, identity_object, object_entity_id)
    select x.subject_id, x.predicate, '', x.object_entity_id
      from (select array_agg(k.subject_id) as s, array_agg(k.predicate) as p,
                   array_agg(k.identity_object) as o
              from pg_temp.chronomem_wiped_keys k
             where v_entity is null or k.subject_id <> v_entity) a
     cross join lateral memory_internal.restitch(
       v_org, p_project, a.s, a.p, a.o, 'superseded', v_actor, 'wipe',
       p_forget_old_ranges => true) x
     where x.object_entity_id is not null;
    perform memory_internal.sync_edges(
      v_org, p_project, array_agg(k.subject_id), array_agg(k.object_entity_id), array_agg(k.predicate))
      from pg_temp.chronomem_wiped_keys k
     where v_entity is null or (k.subject_id <> v_entity and k.object_entity_id <> v_entity);

    if v_scope = 'session' then
      with gone as (
        delete from memory.episodes where org_id = v_org and session_id = v_session
        returning episode_id)
      select count(*), v_facts || coalesce(array_agg(g.episode_id), '{}')
        into v_n_episodes, v_deleted from gone g;
      delete from memory.sessions where org_id = v_org and session_id = v_session;
      get diagnostics v_n_sessions = row_count;
    else
      delete from memory.tombstones where org_id = v_org and project_id = p_project
         and subject_id = v_entity;
      delete from memory.edges where org_id = v_org and project_id = p_project
         and (source_id = v_entity or target_id = v_entity);
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
      v_deleted := v_facts || v_entity;
    end if;
  end if;

  v_counts := jsonb_build_object(
    'facts', v_n_facts, 'fact_events', v_n_events, 'edges', v_n_edges,
    'entities', v_n_entities, 'episodes', v_n_episodes, 'sessions', v_n_sessions,
    'tombstones', v_n_tombstones);
  perform memory_internal.cancel_wiped_jobs(v_org, p_project, v_deleted);
  -- The audit row names the scope and counts, never the wiped content.
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'wipe', v_scope, v_actor, v_counts);
  perform memory_internal.bump_counter(v_org, p_project, 'facts_purged', v_n_facts);
  return jsonb_build_object('scope', v_scope) || v_counts;
end
$$;
comment on function memory.wipe(uuid, text, text, text) is
  'Hard-delete a project''s content (or one session''s episodes and the facts drawn from them, or one subject and every fact naming it, by a plain name too, and the community it was in). Writes an audit row with counts only and no tombstones: nothing wiped is readable at any instant afterwards. Queued enrich and embed jobs of the deleted rows are cancelled in the same transaction.';

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
  v_counts := jsonb_build_object('jobs', v_jobs, 'api_keys', v_keys, 'webhook_endpoints', v_endpoints);
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
