-- The worker protocol (schema memory_worker): claim, complete, fail, park,
-- lease, and the periodic jobs' queueing and purge.  CREATE OR REPLACE only: re-applied on every migrate.

-- The ready jobs of the given kinds, in the queue's order, read without a
-- lock: candidates for memory_worker.claim_jobs, which then claims them org
-- by org under row locks (SKIP LOCKED) and checks again that each is ready
-- (memory_internal.job_ready, whose two cases these branches read apart).
-- p_expired: running jobs whose lease expired (a worker that died) with
-- attempts left, oldest lease first; else queued jobs that are due, oldest
-- first.  Those after (p_after_at, p_after_job) in that order, at most
-- p_limit.  Left out: model jobs of the projects in p_paused, and the
-- deliveries of the orgs in p_skip_orgs and of the endpoints ('<org> <id>')
-- in p_skip_endpoints.  Each branch walks its partial index in order.
create or replace function memory_internal.ready_jobs(
  p_kinds text[], p_expired boolean, p_after_at timestamptz, p_after_job bigint,
  p_limit integer, p_paused uuid[] default '{}', p_skip_orgs uuid[] default '{}',
  p_skip_endpoints text[] default '{}')
  returns table (org_id uuid, job_id bigint, endpoint_id text, ready_at timestamptz)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_custom_plan
as $$
declare
  v_model_kinds constant text[] := memory_internal.model_job_kinds();
begin
  if p_expired then
    return query
    select x.org_id, x.job_id, x.payload ->> 'endpoint_id', x.locked_until
      from memory.jobs x
     where x.status = 'running' and x.locked_until < clock_timestamp()
       and x.attempts < x.max_attempts and x.kind = any (p_kinds)
       and (p_after_job is null or (x.locked_until, x.job_id) > (p_after_at, p_after_job))
       and (cardinality(p_paused) = 0 or not x.kind = any (v_model_kinds)
            or x.project_id is null or not x.project_id = any (p_paused))
       and not x.org_id = any (p_skip_orgs)
       and not (x.org_id::text || ' ' || (x.payload ->> 'endpoint_id')) = any (p_skip_endpoints)
     order by x.locked_until, x.job_id
     limit p_limit;
  else
    return query
    select x.org_id, x.job_id, x.payload ->> 'endpoint_id', x.run_at
      from memory.jobs x
     where x.status = 'queued' and x.run_at <= clock_timestamp() and x.kind = any (p_kinds)
       and (p_after_job is null or (x.run_at, x.job_id) > (p_after_at, p_after_job))
       and (cardinality(p_paused) = 0 or not x.kind = any (v_model_kinds)
            or x.project_id is null or not x.project_id = any (p_paused))
       and not x.org_id = any (p_skip_orgs)
       and not (x.org_id::text || ' ' || (x.payload ->> 'endpoint_id')) = any (p_skip_endpoints)
     order by x.run_at, x.job_id
     limit p_limit;
  end if;
end
$$;
comment on function memory_internal.ready_jobs(text[], boolean, timestamptz, bigint, integer, uuid[], uuid[], text[]) is
  'For memory_worker.claim_jobs: up to p_limit ready jobs of these kinds after (p_after_at, p_after_job) in the queue''s order, read without a lock: expired leases with attempts left (p_expired, by locked_until) or due queued jobs (by run_at, job_id); without the model jobs of paused projects and the deliveries of the orgs and endpoints given.';

-- Claim up to p_limit ready jobs of the given kinds, across orgs, and
-- lease them to p_worker.  Expired leases (a worker that died) are ready
-- again.  Webhook deliveries are claimed apart, within the caps of
-- memory_internal.webhook_in_flight_cap: a delivery waits on a tenant's
-- server, and one org's slow endpoints must not take every lane of every
-- worker; what is over a cap stays queued, in order, for a later claim.
--
-- The queue is read in windows of candidates (memory_internal.ready_jobs,
-- no lock), and each window is claimed org by org: every statement that
-- locks or writes names one org, so on Citus it is routed to that org's
-- shard (a row lock over many shards is refused there), and on one server
-- it walks the primary key.  A window holds the next candidates in the
-- queue's order, twice as many as are still wanted and 8 more, so claims
-- racing for the same rows (SKIP LOCKED) still fill up from one window;
-- when a window is used up without enough, the next one is read after it.
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
  v_try record;
  v_job memory.jobs;
  v_paused uuid[] := '{}';
  v_expired boolean;
  v_dead_orgs uuid[];
  v_any_expired boolean;
  v_window integer;
  v_org uuid;
  v_org_jobs bigint[];
  v_pos integer;
  v_end integer;
  v_take integer;
  -- One window of candidates, in the queue's order.
  v_orgs uuid[];
  v_jobs bigint[];
  v_endpoints text[];
  v_ready_at timestamptz[];
  v_after_at timestamptz;
  v_after_job bigint;
begin
  if p_worker is null or p_worker = '' then
    raise exception 'worker name must not be empty' using errcode = 'invalid_parameter_value';
  end if;
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    raise exception 'limit must be between 1 and 1000' using errcode = 'invalid_parameter_value';
  end if;
  -- Expired leases (the running rows are few, one per lane at most:
  -- jobs_lease_idx): the orgs of those on their last attempt, and whether
  -- any other is there to claim again.
  select coalesce(array_agg(distinct c.org_id) filter (where c.attempts >= c.max_attempts), '{}'),
         coalesce(bool_or(c.attempts < c.max_attempts), false)
    into v_dead_orgs, v_any_expired
    from memory.jobs c
   where c.status = 'running' and c.locked_until < clock_timestamp();
  -- A job whose worker died on its last attempt is dead, not running forever.
  foreach v_org in array v_dead_orgs loop
    update memory.jobs j
       set status = 'dead', locked_by = null, locked_until = null, finished_at = clock_timestamp(),
           last_error = format('lease expired on attempt %s of %s (worker %s)',
                               j.attempts, j.max_attempts, j.locked_by)
     where j.org_id = v_org
       and j.job_id in (
             select c.job_id from memory.jobs c
              where c.org_id = v_org and c.status = 'running'
                and c.locked_until < clock_timestamp() and c.attempts >= c.max_attempts
                for update skip locked);
  end loop;
  -- Deliveries first: a lane that takes them (workers/runner.py keeps one
  -- lane apart from them) runs them before other kinds, within the caps.
  if 'deliver_webhook' = any (p_kinds) then
    v_org_cap := memory_internal.webhook_in_flight_cap('org');
    v_endpoint_cap := memory_internal.webhook_in_flight_cap('endpoint');
    -- Orgs and endpoints at their cap now (read without a lock; each claim
    -- counts again under the org's lock): their deliveries are not candidates.
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
    -- Expired leases first, then ready deliveries, one candidate at a time.
    foreach v_expired in array array[true, false] loop
      v_after_job := null;
      while v_claimed < p_limit and (v_any_expired or not v_expired) loop
        v_window := least(1000, 2 * (p_limit - v_claimed) + 8);
        select array_agg(r.org_id order by r.ready_at, r.job_id),
               array_agg(r.job_id order by r.ready_at, r.job_id),
               array_agg(r.endpoint_id order by r.ready_at, r.job_id),
               array_agg(r.ready_at order by r.ready_at, r.job_id)
          into v_orgs, v_jobs, v_endpoints, v_ready_at
          from memory_internal.ready_jobs(array['deliver_webhook'], v_expired, v_after_at,
                                          v_after_job, v_window, '{}', v_full_orgs,
                                          v_full_endpoints) r;
        exit when v_jobs is null;
        for i in 1 .. cardinality(v_jobs) loop
          v_try := memory_internal.claim_delivery(p_worker, p_lease, v_orgs[i], v_jobs[i],
                                                  v_endpoints[i], v_org_cap, v_endpoint_cap, v_held);
          v_held := v_try.p_held;
          v_job := v_try.claimed;
          if v_job.job_id is not null then
            return next v_job;
            v_claimed := v_claimed + 1;
            exit when v_claimed >= p_limit;
          end if;
        end loop;
        exit when cardinality(v_jobs) < v_window;
        v_after_at := v_ready_at[cardinality(v_jobs)];
        v_after_job := v_jobs[cardinality(v_jobs)];
      end loop;
    end loop;
  end if;
  if cardinality(v_kinds) > 0 and v_claimed < p_limit then
    -- Projects whose model budget is reached: their model jobs stay where
    -- they are until the period rolls or the budget is raised
    -- (functions/083_model_usage.sql).
    if v_kinds && memory_internal.model_job_kinds() then
      v_paused := memory_internal.budget_paused_projects();
    end if;
    -- Expired leases first, then ready jobs.
    foreach v_expired in array array[true, false] loop
      v_after_job := null;
      while v_claimed < p_limit and (v_any_expired or not v_expired) loop
        v_window := least(1000, 2 * (p_limit - v_claimed) + 8);
        select array_agg(r.org_id order by r.ready_at, r.job_id),
               array_agg(r.job_id order by r.ready_at, r.job_id),
               array_agg(r.ready_at order by r.ready_at, r.job_id)
          into v_orgs, v_jobs, v_ready_at
          from memory_internal.ready_jobs(v_kinds, v_expired, v_after_at, v_after_job,
                                          v_window, v_paused) r;
        exit when v_jobs is null;
        -- The window's candidates in chunks of as many as are still wanted,
        -- each chunk claimed org by org (the orgs in the order of their
        -- first candidate): what is claimed is the oldest of the queue,
        -- whichever orgs it is of.  An org takes as many as it has in the
        -- chunk, of its candidates from the chunk on: one that another
        -- claim holds is made up for by the org's next (SKIP LOCKED, in one
        -- statement), or else by the next chunk.
        v_pos := 1;
        while v_claimed < p_limit and v_pos <= cardinality(v_jobs) loop
          v_end := least(cardinality(v_jobs), v_pos + (p_limit - v_claimed) - 1);
          foreach v_org in array array(
              select u.o from unnest(v_orgs[v_pos:v_end]) with ordinality u(o, n)
               group by u.o order by min(u.n))
          loop
            v_take := cardinality(array_positions(v_orgs[v_pos:v_end], v_org));
            v_org_jobs := array(select u.j from unnest(v_orgs[v_pos:], v_jobs[v_pos:]) u(o, j)
                                 where u.o = v_org);
            -- Ready, checked again under the row's lock: a job another
            -- claim took meanwhile is left out.  (A CTE, locked once: as an
            -- IN subquery beside the org's index scan, its LIMIT could be
            -- run again per row.)
            return query
            with locked as materialized (
              select c.job_id from memory.jobs c
               where c.org_id = v_org and c.job_id = any (v_org_jobs)
                 and memory_internal.job_ready(c.status, c.run_at, c.locked_until, c.attempts,
                                               c.max_attempts, clock_timestamp())
               -- Expired leases (locked_until is set only while running)
               -- before queued jobs, each in the queue's order.
               order by c.locked_until nulls last, c.run_at, c.job_id
               limit v_take
                 for update skip locked)
            update memory.jobs j
               set status = 'running', attempts = j.attempts + 1, locked_by = p_worker,
                   locked_until = clock_timestamp() + p_lease
              from locked l
             where j.org_id = v_org and j.job_id = l.job_id
            returning j.*;
            get diagnostics v_n = row_count;
            v_claimed := v_claimed + v_n;
          end loop;
          v_pos := v_end + 1;
        end loop;
        exit when cardinality(v_jobs) < v_window;
        v_after_at := v_ready_at[cardinality(v_jobs)];
        v_after_job := v_jobs[cardinality(v_jobs)];
      end loop;
    end loop;
  end if;
end
$$;
comment on function memory_worker.claim_jobs(text, text[], integer, interval) is
  'Lease up to p_limit ready jobs of the given kinds to a worker, oldest first (FOR UPDATE SKIP LOCKED, org by org: concurrent workers never get the same job). A running job whose lease expired is ready again. A deliver_webhook job is leased only while its org and its endpoint have fewer deliveries in flight than their caps (the session''s chronomem.webhook_max_in_flight_per_org / _per_endpoint, default 4 and 2), counted under a per-org lock; the others stay queued. A project whose model budget is reached (memory.model_budget: paused) gets none of its model jobs (memory_internal.model_job_kinds: enrich, summarize_communities) leased until the period rolls or the budget is raised; they stay queued.';

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
           -- Exponential backoff: 2, 4, 8 ... seconds, at most an hour (on UTC
           -- timestamps: immutable, which Citus requires of an UPDATE's
           -- expressions on a column).
           run_at = (clock_timestamp() at time zone 'UTC'
                     + least(interval '1 hour', interval '1 second' * power(2, j.attempts))) at time zone 'UTC',
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

-- Org by org (each statement names its org: routed on Citus, which refuses
-- a row lock over many shards): the org's due schedules are advanced under
-- their row locks (SKIP LOCKED: a schedule another worker is advancing is
-- its), and one job queued for each.
create or replace function memory_worker.enqueue_due_jobs() returns integer
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
  v_kinds text[];
  v_queued integer := 0;
begin
  foreach v_org in array array(
      select distinct s.org_id from memory.job_schedules s where s.next_run_at <= clock_timestamp())
  loop
    with due as (
      select s.kind from memory.job_schedules s
       where s.org_id = v_org and s.next_run_at <= clock_timestamp()
         for update skip locked
    ), advanced as (
      -- On UTC timestamps: a schedule runs every so long whatever the
      -- session's time zone (and the arithmetic is immutable, which Citus
      -- requires of an UPDATE's expressions on a column).
      update memory.job_schedules s
         set next_run_at = (clock_timestamp() at time zone 'UTC' + s.every) at time zone 'UTC'
        from due d where s.org_id = v_org and s.kind = d.kind
      returning s.kind)
    select array_agg(a.kind) into v_kinds from advanced a;
    if v_kinds is not null then
      insert into memory.jobs (org_id, kind, payload) select v_org, k, '{}' from unnest(v_kinds) k;
      v_queued := v_queued + cardinality(v_kinds);
    end if;
  end loop;
  return v_queued;
end
$$;
comment on function memory_worker.enqueue_due_jobs() is 'Turn due periodic schedules (per org) into jobs; safe to call from several workers at once.';

create or replace function memory_worker.purge_done_jobs(p_older_than interval default interval '7 days')
  returns integer
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org constant uuid := memory_internal.current_org();
  -- The periodic kinds' done jobs (those the org has a schedule for) go
  -- after a day at most: the communities job runs every 5 minutes per org,
  -- and what it did is also in memory.community_runs.  The cut-offs are
  -- read first: Citus refuses a volatile call in a DELETE's condition.
  v_periodic constant text[] := array(select s.kind from memory.job_schedules s where s.org_id = v_org);
  v_before constant timestamptz := clock_timestamp() - p_older_than;
  v_periodic_before constant timestamptz := clock_timestamp() - least(p_older_than, interval '1 day');
  v_n integer;
begin
  delete from memory.jobs j
   where j.org_id = v_org and j.status = 'done'
     and j.finished_at < case when j.kind = any (v_periodic) then v_periodic_before else v_before end;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_worker.purge_done_jobs(interval) is 'Delete the current org''s finished jobs older than the given age, and those of the periodic kinds (the org''s job_schedules: reconcile_edges, communities, purge) older than a day (the periodic purge job).';
