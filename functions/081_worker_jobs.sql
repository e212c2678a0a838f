-- The worker protocol (schema memory_worker): claim, complete, fail, park,
-- lease, and the periodic jobs' queueing and purge.  CREATE OR REPLACE only: re-applied on every migrate.

-- Claim up to p_limit ready jobs of the given kinds, across orgs, and
-- lease them to p_worker.  Expired leases (a worker that died) are ready
-- again.  Webhook deliveries are claimed apart, within the caps of
-- memory_internal.webhook_in_flight_cap: a delivery waits on a tenant's
-- server, and one org's slow endpoints must not take every lane of every
-- worker; what is over a cap stays queued, in order, for a later claim.
create or replace function memory_worker.claim_jobs(
  p_worker text, p_kinds text[], p_limit integer default 1,
  p_lease interval default interval '5 minutes')
  returns setof memory.jobs
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  -- A generic plan for "limit $n" hash-joins the whole queue.
  set plan_cache_mode = force_custom_plan
as $$
declare
  v_claimed integer := 0;
  v_n integer;
  v_kinds text[] := array(select k from unnest(p_kinds) k where k is distinct from 'deliver_webhook');
  v_org_cap integer;
  v_endpoint_cap integer;
  v_full_orgs uuid[];
  v_full_endpoints text[];
  v_held uuid[] := '{}';
  v_cand record;
  v_try record;
  v_job memory.jobs;
  v_paused uuid[] := '{}';
  v_model_kinds constant text[] := memory_internal.model_job_kinds();
begin
  if p_worker is null or p_worker = '' then
    raise exception 'worker name must not be empty' using errcode = 'invalid_parameter_value';
  end if;
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    raise exception 'limit must be between 1 and 1000' using errcode = 'invalid_parameter_value';
  end if;
  -- A job whose worker died on its last attempt is dead, not running forever.
  update memory.jobs j
     set status = 'dead', locked_by = null, locked_until = null, finished_at = clock_timestamp(),
         last_error = format('lease expired on attempt %s of %s (worker %s)',
                             j.attempts, j.max_attempts, j.locked_by)
   where (j.org_id, j.job_id) in (
           select c.org_id, c.job_id from memory.jobs c
            where c.status = 'running' and c.locked_until < clock_timestamp()
              and c.attempts >= c.max_attempts
              for update skip locked);
  -- Deliveries first: a lane that takes them (workers/runner.py keeps one
  -- lane apart from them) runs them before other kinds, within the caps.
  if 'deliver_webhook' = any (p_kinds) then
    v_org_cap := memory_internal.webhook_in_flight_cap('org');
    v_endpoint_cap := memory_internal.webhook_in_flight_cap('endpoint');
    -- Orgs and endpoints at their cap now (read without a lock; each claim
    -- counts again under the org's lock): their deliveries are not candidates.
    -- The running rows are few (one per lane at most): jobs_lease_idx.
    select coalesce(array_agg(distinct r.org_id) filter (where r.org_n >= v_org_cap), '{}'),
           coalesce(array_agg(r.org_id::text || ' ' || r.endpoint_id)
                      filter (where r.endpoint_n >= v_endpoint_cap), '{}')
      into v_full_orgs, v_full_endpoints
      from (select x.org_id, x.payload ->> 'endpoint_id' as endpoint_id,
                   count(*) over (partition by x.org_id) as org_n,
                   count(*) over (partition by x.org_id, x.payload ->> 'endpoint_id') as endpoint_n
              from memory.jobs x
             where x.status = 'running' and x.locked_until >= clock_timestamp()
               and x.kind = 'deliver_webhook') r;
    -- Expired leases first, then ready deliveries, each in its index's order.
    for v_cand in
      select x.org_id, x.job_id, x.payload ->> 'endpoint_id' as endpoint_id from memory.jobs x
       where x.status = 'running' and x.locked_until < clock_timestamp()
         and x.attempts < x.max_attempts and x.kind = 'deliver_webhook'
         and not x.org_id = any (v_full_orgs)
         and not (x.org_id::text || ' ' || (x.payload ->> 'endpoint_id')) = any (v_full_endpoints)
       order by x.locked_until
         for update skip locked
    loop
      v_try := memory_internal.claim_delivery(p_worker, p_lease, v_cand.org_id, v_cand.job_id,
                                              v_cand.endpoint_id, v_org_cap, v_endpoint_cap, v_held);
      v_held := v_try.p_held;
      v_job := v_try.claimed;
      if v_job.job_id is not null then
        return next v_job;
        v_claimed := v_claimed + 1;
        exit when v_claimed >= p_limit;
      end if;
    end loop;
    if v_claimed < p_limit then
      for v_cand in
        select x.org_id, x.job_id, x.payload ->> 'endpoint_id' as endpoint_id from memory.jobs x
         where x.status = 'queued' and x.run_at <= clock_timestamp() and x.kind = 'deliver_webhook'
           and not x.org_id = any (v_full_orgs)
           and not (x.org_id::text || ' ' || (x.payload ->> 'endpoint_id')) = any (v_full_endpoints)
         order by x.run_at, x.job_id
           for update skip locked
      loop
        v_try := memory_internal.claim_delivery(p_worker, p_lease, v_cand.org_id, v_cand.job_id,
                                                v_cand.endpoint_id, v_org_cap, v_endpoint_cap, v_held);
        v_held := v_try.p_held;
        v_job := v_try.claimed;
        if v_job.job_id is not null then
          return next v_job;
          v_claimed := v_claimed + 1;
          exit when v_claimed >= p_limit;
        end if;
      end loop;
    end if;
  end if;
  if cardinality(v_kinds) > 0 and v_claimed < p_limit then
    -- Projects whose model budget is reached: their model jobs stay where
    -- they are until the period rolls or the budget is raised
    -- (functions/083_model_usage.sql).  None paused (the plan is custom):
    -- the condition folds away and the claims below plan as without it.
    if v_kinds && v_model_kinds then
      v_paused := memory_internal.budget_paused_projects();
    end if;
    -- Expired leases first, then ready jobs: two statements, so each walks its
    -- own partial index in order (one OR-ed condition made the planner sort
    -- every ready row of a long queue).
    return query
    update memory.jobs j
       set attempts = j.attempts + 1, locked_by = p_worker,
           locked_until = clock_timestamp() + p_lease
     where (j.org_id, j.job_id) in (
             select c.org_id, c.job_id from memory.jobs c
              where c.status = 'running' and c.locked_until < clock_timestamp()
                and c.attempts < c.max_attempts and c.kind = any (v_kinds)
                and (cardinality(v_paused) = 0 or not c.kind = any (v_model_kinds) or c.project_id is null
                     or not c.project_id = any (v_paused))
              order by c.locked_until
              limit p_limit - v_claimed
                for update skip locked)
    returning j.*;
    get diagnostics v_n = row_count;
    v_claimed := v_claimed + v_n;
    if v_claimed < p_limit then
      return query
      update memory.jobs j
         set status = 'running', attempts = j.attempts + 1, locked_by = p_worker,
             locked_until = clock_timestamp() + p_lease
       where (j.org_id, j.job_id) in (
               select c.org_id, c.job_id from memory.jobs c
                where c.status = 'queued' and c.run_at <= clock_timestamp()
                  and c.kind = any (v_kinds)
                  and (cardinality(v_paused) = 0 or not c.kind = any (v_model_kinds) or c.project_id is null
                       or not c.project_id = any (v_paused))
                order by c.run_at, c.job_id
                limit p_limit - v_claimed
                  for update skip locked)
      returning j.*;
      get diagnostics v_n = row_count;
      v_claimed := v_claimed + v_n;
    end if;
  end if;
end
$$;
comment on function memory_worker.claim_jobs(text, text[], integer, interval) is
  'Lease up to p_limit ready jobs of the given kinds to a worker (FOR UPDATE SKIP LOCKED: concurrent workers never get the same job). A running job whose lease expired is ready again. A deliver_webhook job is leased only while its org and its endpoint have fewer deliveries in flight than their caps (the session''s chronomem.webhook_max_in_flight_per_org / _per_endpoint, default 4 and 2), counted under a per-org lock; the others stay queued. A project whose model budget is reached (memory.model_budget: paused) gets none of its model jobs (memory_internal.model_job_kinds: enrich, summarize_communities) leased until the period rolls or the budget is raised; they stay queued.';

create or replace function memory_worker.complete_job(
  p_org uuid, p_job bigint, p_worker text, p_result jsonb default null)
  returns boolean
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    with done as (
      update memory.jobs j
         set status = 'done', result = p_result, locked_by = null, locked_until = null,
             finished_at = clock_timestamp(), last_error = null
       where j.org_id = p_org and j.job_id = p_job and j.status = 'running' and j.locked_by = p_worker
         and memory_internal.in_scope(j.org_id)
      returning 1)
    select exists (select from done)
  $$;
comment on function memory_worker.complete_job(uuid, bigint, text, jsonb) is
  'Mark a leased job done. False when the lease was lost (another worker reclaimed it): the caller''s work must then be idempotent, as every job''s is.';

create or replace function memory_worker.fail_job(
  p_org uuid, p_job bigint, p_worker text, p_error text, p_retryable boolean default true)
  returns text
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    update memory.jobs j
       set status = case when p_retryable and j.attempts < j.max_attempts then 'queued' else 'dead' end,
           -- Exponential backoff: 2, 4, 8 ... seconds, at most an hour.
           run_at = clock_timestamp() + least(interval '1 hour', interval '1 second' * power(2, j.attempts)),
           last_error = left(p_error, 4000), locked_by = null, locked_until = null,
           finished_at = case when p_retryable and j.attempts < j.max_attempts then null else clock_timestamp() end
     where j.org_id = p_org and j.job_id = p_job and j.status = 'running' and j.locked_by = p_worker
         and memory_internal.in_scope(j.org_id)
    returning j.status
  $$;
comment on function memory_worker.fail_job(uuid, bigint, text, text, boolean) is
  'Record a failed attempt: queued again with exponential backoff, or dead (kept with its last error) after max_attempts or when not retryable. Returns the new status.';

create or replace function memory_worker.park_job(p_org uuid, p_job bigint, p_worker text, p_reason text)
  returns boolean
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    with parked as (
      update memory.jobs j
         set status = 'waiting', attempts = greatest(j.attempts - 1, 0), last_error = p_reason,
             locked_by = null, locked_until = null
       where j.org_id = p_org and j.job_id = p_job and j.status = 'running' and j.locked_by = p_worker
         and memory_internal.in_scope(j.org_id)
      returning 1)
    select exists (select from parked)
  $$;
comment on function memory_worker.park_job(uuid, bigint, text, text) is
  'Set a job aside as waiting (e.g. enrich with no LLM endpoint configured), with the reason; the attempt does not count.';

-- A lane holding a long job (a slow model) renews its lease, so the job is
-- not reclaimed and run twice while it is still being worked on.
create or replace function memory_worker.extend_lease(
  p_org uuid, p_job bigint, p_worker text, p_lease interval default interval '5 minutes')
  returns boolean
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if p_lease is null or p_lease < interval '1 second' or p_lease > interval '1 day' then
    raise exception 'lease must be between 1 second and 1 day, got %', p_lease
      using errcode = 'invalid_parameter_value';
  end if;
  -- Only the holder renews; once another worker reclaimed the job (locked_by
  -- changed) or it finished, the answer is false and nothing changes.
  update memory.jobs j set locked_until = clock_timestamp() + p_lease
   where j.org_id = p_org and j.job_id = p_job and j.status = 'running' and j.locked_by = p_worker
     and memory_internal.in_scope(j.org_id);
  return found;
end
$$;
comment on function memory_worker.extend_lease(uuid, bigint, text, interval) is
  'Renew the lease of a running job held by p_worker to now + p_lease (the worker''s heartbeat). False when the job is no longer that worker''s: reclaimed after an expired lease, or finished.';

create or replace function memory_worker.resume_waiting_jobs(p_kinds text[]) returns integer
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    with resumed as (
      update memory.jobs j set status = 'queued', run_at = clock_timestamp(), last_error = null
       where j.status = 'waiting' and j.kind = any (p_kinds)
      returning 1)
    select count(*)::integer from resumed
  $$;
comment on function memory_worker.resume_waiting_jobs(text[]) is 'Queue waiting jobs of these kinds again (a worker that can now run them calls it at start).';

create or replace function memory_worker.enqueue_due_jobs() returns integer
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    with due as (
      select s.org_id, s.kind from memory.job_schedules s
       where s.next_run_at <= clock_timestamp()
         for update skip locked
    ), advanced as (
      update memory.job_schedules s set next_run_at = clock_timestamp() + s.every
        from due d where s.org_id = d.org_id and s.kind = d.kind
      returning s.org_id, s.kind
    ), queued as (
      insert into memory.jobs (org_id, kind, payload)
      select a.org_id, a.kind, '{}' from advanced a
      returning 1)
    select count(*)::integer from queued
  $$;
comment on function memory_worker.enqueue_due_jobs() is 'Turn due periodic schedules (per org) into jobs; safe to call from several workers at once.';

create or replace function memory_worker.purge_done_jobs(p_older_than interval default interval '7 days')
  returns integer
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    -- The periodic kinds' done jobs (those the org has a schedule for)
    -- after a day at most: the communities job runs every 5 minutes per
    -- org, and what it did is also in memory.community_runs.
    with gone as (
      delete from memory.jobs j
       where j.org_id = memory_internal.current_org() and j.status = 'done'
         and j.finished_at < clock_timestamp()
                             - case when exists (select from memory.job_schedules s
                                                  where s.org_id = j.org_id and s.kind = j.kind)
                                    then least(p_older_than, interval '1 day')
                                    else p_older_than end
      returning 1)
    select count(*)::integer from gone
  $$;
comment on function memory_worker.purge_done_jobs(interval) is 'Delete the current org''s finished jobs older than the given age, and those of the periodic kinds (the org''s job_schedules: reconcile_edges, communities, purge) older than a day (the periodic purge job).';
