-- The job queue: enqueued by triggers in the writing transaction, claimed
-- with FOR UPDATE SKIP LOCKED, woken by NOTIFY, retried with exponential
-- backoff, dead after max_attempts, leases recovered when a worker dies.

-- Jobs are queued by the triggers below, in the writing transaction.  (An
-- earlier helper function for it was never called: dropped by sql/0036.)

create or replace function memory_internal.tg_episodes__enqueue() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  -- One model call per episode; one embed job per statement.
  insert into memory.jobs (org_id, project_id, kind, payload)
  select n.org_id, n.project_id, 'enrich', jsonb_build_object('episode_id', n.episode_id)
    from new_rows n order by n.seq;
  insert into memory.jobs (org_id, project_id, kind, payload)
  select n.org_id, n.project_id, 'embed',
         jsonb_build_object('kind', 'episode', 'ids', jsonb_agg(n.episode_id order by n.seq))
    from new_rows n group by n.org_id, n.project_id;
  return null;
end
$$;

-- One embed job per statement and project, listing the new rows' ids: one
-- function per table, so the ids are read as a column (a shared function
-- had to turn each whole row into JSON to find its id column).
create or replace function memory_internal.tg_facts__enqueue_embed() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  insert into memory.jobs (org_id, project_id, kind, payload)
  select n.org_id, n.project_id, 'embed',
         jsonb_build_object('kind', 'fact', 'ids', jsonb_agg(n.fact_id))
    from new_rows n group by n.org_id, n.project_id;
  return null;
end
$$;

create or replace function memory_internal.tg_entities__enqueue_embed() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  insert into memory.jobs (org_id, project_id, kind, payload)
  select n.org_id, n.project_id, 'embed',
         jsonb_build_object('kind', 'entity', 'ids', jsonb_agg(n.entity_id))
    from new_rows n group by n.org_id, n.project_id;
  return null;
end
$$;

-- A renamed entity or a new summary changes the embedded text: embed it
-- again, unless a queued job already will.  Per org of the changed rows (one,
-- but for an operator's own SQL, which runs without a scope), the org a value;
-- its queued jobs' entities are read first (few: queued jobs are soon
-- claimed), not probed per row: on Citus, where this runs on the org's shard,
-- a subquery correlated with the statement's rows is refused.
create or replace function memory_internal.tg_entities__reembed() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
  v_queued text[];
begin
  for v_org in select distinct n.org_id
                 from new_rows n
                 join old_rows o on o.org_id = n.org_id and o.entity_id = n.entity_id
                where (n.name, n.summary) is distinct from (o.name, o.summary) loop
    v_queued := array(
      select i.id
        from memory.jobs j cross join lateral jsonb_array_elements_text(j.payload -> 'ids') i(id)
       where j.org_id = v_org and j.kind = 'embed' and j.status = 'queued'
         and j.payload ->> 'kind' = 'entity');
    insert into memory.jobs (org_id, project_id, kind, payload)
    select n.org_id, n.project_id, 'embed',
           jsonb_build_object('kind', 'entity', 'ids', jsonb_agg(n.entity_id))
      from new_rows n
      join old_rows o on o.org_id = n.org_id and o.entity_id = n.entity_id
     where n.org_id = v_org and (n.name, n.summary) is distinct from (o.name, o.summary)
       and not n.entity_id::text = any (v_queued)
     group by n.org_id, n.project_id;
  end loop;
  return null;
end
$$;

create or replace function memory_internal.tg_jobs__notify() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  -- Delivered at commit, so a worker never wakes for a rolled-back job.
  -- NOTIFY serialises concurrent commits on one server-wide lock, so skip
  -- it when ready jobs of these kinds already wait: the workers are busy
  -- (or absent) and will reach the new ones by claiming or polling.  One
  -- probe of jobs_kind_status_idx per kind (sql/0018: a backlog of another
  -- kind is not read through).
  -- (Not EXISTS: the planner drops its ORDER BY and, expecting a match
  -- early, scans the table.)
  if not exists (select from (select distinct n.kind from new_rows n) k
                  cross join lateral (
                    select from memory.jobs j
                     where j.kind = k.kind and j.status = 'queued'
                       and j.run_at < clock_timestamp() - interval '1 second'
                     order by j.run_at
                     limit 1) ready) then
    perform pg_notify('chronomem_jobs', '');
  end if;
  return null;
end
$$;

create or replace function memory_internal.tg_orgs__schedule() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  insert into memory.job_schedules (org_id, kind, every)
  values (new.org_id, 'reconcile_edges', interval '1 hour'),
         (new.org_id, 'communities', interval '5 minutes'),
         (new.org_id, 'purge', interval '1 day');
  return null;
end
$$;

create or replace trigger "50_enqueue" after insert on memory.episodes
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_episodes__enqueue();
create or replace trigger "50_enqueue_embed" after insert on memory.facts
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_facts__enqueue_embed();
create or replace trigger "50_enqueue_embed" after insert on memory.entities
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_entities__enqueue_embed();
create or replace trigger "51_reembed" after update on memory.entities
  referencing old table as old_rows new table as new_rows
  for each statement execute function memory_internal.tg_entities__reembed();
create or replace trigger "90_notify" after insert on memory.jobs
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_jobs__notify();
create or replace trigger "50_schedule" after insert on memory.orgs
  for each row execute function memory_internal.tg_orgs__schedule();

-- The caps on webhook deliveries in flight (running, lease not expired):
-- per org and per endpoint, across every worker.  A worker passes its
-- settings as its session's chronomem.webhook_max_in_flight_per_org and
-- ..._per_endpoint (CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_*); unset, these
-- defaults hold (an operator may also set them for the whole database).
create or replace function memory_internal.webhook_in_flight_cap(p_scope text) returns integer
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_name text := 'chronomem.webhook_max_in_flight_per_' || p_scope;
  v text := nullif(btrim(current_setting(v_name, true)), '');
begin
  if p_scope not in ('org', 'endpoint') then
    raise exception 'unknown in-flight cap scope %', quote_literal(p_scope)
      using errcode = 'invalid_parameter_value';
  end if;
  if v is null then
    return case p_scope when 'org' then 4 else 2 end;
  end if;
  if v !~ '^[0-9]{1,4}$' or v::integer not between 1 and 1000 then
    raise exception '% must be an integer between 1 and 1000, not %', v_name, quote_literal(v)
      using errcode = 'invalid_parameter_value';
  end if;
  return v::integer;
end
$$;
comment on function memory_internal.webhook_in_flight_cap(text) is
  'The most webhook deliveries in flight at once per org (p_scope ''org'', default 4) or per endpoint (''endpoint'', default 2): the session''s chronomem.webhook_max_in_flight_per_<scope>, which the worker sets from CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_*.';

-- The advisory lock under which a claim counts an org's deliveries in
-- flight and takes one more.
create or replace function memory_internal.webhook_claim_lock_key(p_org uuid) returns bigint
  language sql immutable parallel safe
  as $$ select hashtextextended('chronomem deliver_webhook claim ' || p_org::text, 0) $$;

-- A job is ready to claim at p_at: queued and due, or running with an
-- expired lease (a worker that died) and attempts left.  The claims check it
-- again under the row's lock; memory_internal.ready_jobs reads the two cases
-- apart, each through its own partial index.  p_at is the caller's clock
-- (an immutable function: Citus refuses a volatile one in a modification).
create or replace function memory_internal.job_ready(
  p_status text, p_run_at timestamptz, p_locked_until timestamptz, p_attempts integer,
  p_max_attempts integer, p_at timestamptz) returns boolean
  language sql immutable parallel safe
  as $$
    select p_status = 'queued' and p_run_at <= p_at
        or p_status = 'running' and p_locked_until < p_at and p_attempts < p_max_attempts
  $$;
comment on function memory_internal.job_ready(text, timestamptz, timestamptz, integer, integer, timestamptz) is
  'Whether a job with this status, run_at, lease and attempts is ready to claim at p_at: queued and due, or running with an expired lease and attempts left.';

-- Lease one deliver_webhook job (a candidate the caller read without a lock)
-- unless its org or endpoint is at its cap, or it is no longer ready, or
-- another claim holds its row.  The count and the claim happen under the
-- org's advisory lock, held to the claim's commit, so two claimers cannot
-- both take the last place (each statement, READ COMMITTED, sees what
-- committed before the lock was granted).  p_held: the orgs whose lock this claim holds; it waits for
-- a lock only while it holds none (so no two claims can wait for each
-- other), otherwise an org whose lock is taken is skipped like a locked row.
create or replace function memory_internal.claim_delivery(
  p_worker text, p_lease interval, p_org uuid, p_job bigint, p_endpoint text,
  p_org_cap integer, p_endpoint_cap integer, inout p_held uuid[], out claimed memory.jobs)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org_n integer;
  v_endpoint_n integer;
begin
  if not p_org = any (p_held) then
    if cardinality(p_held) = 0 then
      perform pg_advisory_xact_lock(memory_internal.webhook_claim_lock_key(p_org));
    elsif not pg_try_advisory_xact_lock(memory_internal.webhook_claim_lock_key(p_org)) then
      return;
    end if;
    p_held := p_held || p_org;
  end if;
  select count(*), count(*) filter (where r.payload ->> 'endpoint_id' = p_endpoint)
    into v_org_n, v_endpoint_n
    from memory.jobs r
   where r.org_id = p_org and r.kind = 'deliver_webhook' and r.status = 'running'
     and r.locked_until >= clock_timestamp();
  if v_org_n >= p_org_cap or v_endpoint_n >= p_endpoint_cap then
    return;  -- it stays queued (or expired) for a later claim
  end if;
  update memory.jobs j
     set status = 'running', attempts = j.attempts + 1, locked_by = p_worker,
         locked_until = clock_timestamp() + p_lease
   where j.org_id = p_org
     and j.job_id in (
           select c.job_id from memory.jobs c
            where c.org_id = p_org and c.job_id = p_job and c.kind = 'deliver_webhook'
              and memory_internal.job_ready(c.status, c.run_at, c.locked_until, c.attempts,
                                            c.max_attempts, clock_timestamp())
              for update skip locked)
  returning j.* into claimed;
end
$$;
comment on function memory_internal.claim_delivery(text, interval, uuid, bigint, text, integer, integer, uuid[]) is
  'For memory_worker.claim_jobs: lease one deliver_webhook job, if it is still ready and no other claim holds it (SKIP LOCKED), unless its org or endpoint already has its cap of deliveries in flight, counted and claimed under the org''s advisory lock.';

-- The worker completes, fails and parks jobs unscoped or under the job's org
-- scope; a transaction scoped to another org (a tenant's request) must not
-- reach them: to it they are not found, like an unknown job.
create or replace function memory_internal.in_scope(p_org uuid) returns boolean
  language sql stable parallel safe
  as $$ select memory_internal.current_org() is null or p_org = memory_internal.current_org() $$;
comment on function memory_internal.in_scope(uuid) is
  'True when the transaction has no org scope or is scoped to p_org (for the worker''s cross-org job functions).';

-- (The job kinds: memory_internal.job_kinds(), in sql/0031_job_kinds.sql,
-- beside the check constraint of memory.jobs that calls it.)

-- Dead letters back in the queue, once what killed them is fixed (a model
-- that was down, a webhook receiver that refused): each gets its full
-- max_attempts again, at once; its last error stays until an attempt
-- replaces it.  In the org in scope, else (an operator's session) every
-- org's; optionally of one kind and/or project.  The workers are woken at
-- commit.
create or replace function memory.retry_dead_jobs(
  p_kind text default null, p_project uuid default null)
  returns integer
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  -- memory_internal.in_scope with the scope read first: the update names
  -- the org in scope as a value (routed on Citus, which also refuses a
  -- stable call on a column in an UPDATE spanning shards).
  v_org constant uuid := memory_internal.current_org();
  v_n integer;
begin
  if p_kind is not null and not p_kind = any (memory_internal.job_kinds()) then
    raise exception 'unknown job kind %; kinds are %', quote_literal(p_kind),
      array_to_string(memory_internal.job_kinds(), ', ') using errcode = 'invalid_parameter_value';
  end if;
  update memory.jobs j
     set status = 'queued', attempts = 0, run_at = clock_timestamp(), finished_at = null
   where j.status = 'dead' and (v_org is null or j.org_id = v_org)
     and (p_kind is null or j.kind = p_kind)
     and (p_project is null or j.project_id = p_project);
  get diagnostics v_n = row_count;
  if v_n > 0 then
    perform pg_notify('chronomem_jobs', '');
  end if;
  return v_n;
end
$$;
comment on function memory.retry_dead_jobs(text, uuid) is
  'Queue dead jobs again with their attempts reset (run now; the last error kept until an attempt replaces it): those of the org in scope, or of every org when no org is in scope; optionally of one kind and/or project. Returns how many. For operators, once what made them fail is fixed.';

-- A project's backlog: its jobs not done, per kind, and how long the oldest
-- queued one has waited.  caught_up: nothing its writes queued (enrich,
-- embed) is still to run, so extraction and embeddings reflect everything
-- written before the call.  What a client polls; webhooks push
-- episode.enriched instead.  Dead jobs do not hold it up (they wait for an
-- operator: memory.retry_dead_jobs); waiting ones do (no model configured).
create or replace function memory.project_backlog(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  -- The project's model budget is reached: its model jobs wait for the
  -- period to roll (functions/083_model_usage.sql).
  v_budget_paused boolean := exists (
    select from memory.model_budgets b
     where b.org_id = v_org and b.project_id = p_project
       and b.paused_period_start = memory_internal.model_period_start(b.period, clock_timestamp()));
begin
  return (
    with open as (
      -- jobs_project_idx: the project's jobs of these statuses only.
      select j.kind, j.status, count(*) as n,
             min(j.created_at) filter (where j.status = 'queued') as oldest
        from memory.jobs j
       where j.org_id = v_org and j.project_id = p_project
         and j.status in ('queued', 'running', 'waiting', 'dead')
       group by 1, 2
    ), kinds as (
      select k.kind, jsonb_build_object(
               'queued', coalesce(sum(o.n) filter (where o.status = 'queued'), 0),
               'running', coalesce(sum(o.n) filter (where o.status = 'running'), 0),
               'waiting', coalesce(sum(o.n) filter (where o.status = 'waiting'), 0),
               'dead', coalesce(sum(o.n) filter (where o.status = 'dead'), 0),
               'oldest_queued_at', min(o.oldest),
               'paused', case when k.kind = any (memory_internal.model_job_kinds()) and v_budget_paused
                              then 'budget' end) as v
        from unnest(array['communities', 'deliver_webhook', 'embed', 'enrich', 'summarize_communities']) k(kind)
        left join open o on o.kind = k.kind
       group by k.kind)
    select jsonb_build_object(
             'caught_up', not exists (select from open o
                                       where o.kind in ('enrich', 'embed')
                                         and o.status in ('queued', 'running', 'waiting')),
             'kinds', (select jsonb_object_agg(x.kind, x.v order by x.kind) from kinds x)));
end
$$;
comment on function memory.project_backlog(uuid) is
  'A project''s jobs not yet done, per kind (enrich, embed, deliver_webhook, communities, summarize_communities): queued, running, waiting and dead counts and the oldest queued job''s creation time, and paused: why the kind''s jobs are not handed out (enrich and summarize_communities: ''budget'' while the project''s model budget is reached; else null); caught_up is true when no enrich or embed job of the project is queued, running or waiting (extraction and embeddings reflect everything written before).';

create or replace function memory.queue_stats()
  returns table (kind text, queued bigint, running bigint, waiting bigint, dead bigint,
                 done bigint, oldest_queued_age interval)
  language sql stable
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select k.kind,
           count(*) filter (where j.status = 'queued'),
           count(*) filter (where j.status = 'running'),
           count(*) filter (where j.status = 'waiting'),
           count(*) filter (where j.status = 'dead'),
           count(*) filter (where j.status = 'done'),
           clock_timestamp() - min(j.created_at) filter (where j.status = 'queued')
      from unnest(memory_internal.job_kinds()) k(kind)
      left join memory.jobs j on j.kind = k.kind
     group by k.kind
     order by k.kind
  $$;
comment on function memory.queue_stats() is
  'Queue depth per kind and status, and the age of the oldest queued job, across all orgs (for operators and /metrics).';
