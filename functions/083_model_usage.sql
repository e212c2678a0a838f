-- Model usage and budgets: every model call a project's jobs make is
-- recorded with the tokens the endpoint reported (memory_worker.
-- record_model_call), summed per UTC day (memory.model_usage_periods), read
-- per job kind and model (memory.model_usage), and counted against the
-- project's optional token budget per day or month (memory.set_model_budget,
-- memory.model_budget).  A project whose budget is reached gets none of its
-- model jobs (memory_internal.model_job_kinds) handed out
-- (memory_worker.claim_jobs reads
-- memory_internal.budget_paused_projects) until the period rolls or the
-- budget is raised or removed: they stay queued.  CREATE OR REPLACE only:
-- re-applied on every migrate.

-- The start of the budget period (UTC day or month) holding p_at.
create or replace function memory_internal.model_period_start(p_period text, p_at timestamptz)
  returns timestamptz
  language sql immutable parallel safe
  as $$ select date_trunc(p_period, p_at at time zone 'UTC') at time zone 'UTC' $$;
comment on function memory_internal.model_period_start(text, timestamptz) is
  'The start of the UTC day or month (p_period: day, month) that holds p_at: budget periods and the days of memory.model_usage_periods.';

-- Tokens in plus out of the project's calls since p_start (a period start:
-- the day rows from it on).
create or replace function memory_internal.model_tokens_since(
  p_org uuid, p_project uuid, p_start timestamptz)
  returns bigint
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select coalesce(sum(u.tokens_in + u.tokens_out), 0)::bigint from memory.model_usage_periods u
     where u.org_id = p_org and u.project_id = p_project and u.period_start >= p_start
  $$;
comment on function memory_internal.model_tokens_since(uuid, uuid, timestamptz) is
  'Tokens in plus out of a project''s model calls recorded on the UTC days from p_start on (what its budget counts).';

-- The job kinds that call the model, and so wait while their project's
-- budget is reached: extraction and community summaries.
create or replace function memory_internal.model_job_kinds()
  returns text[]
  language sql immutable parallel safe
  as $$ select array['enrich', 'summarize_communities'] $$;
comment on function memory_internal.model_job_kinds() is
  'The job kinds that call the model (enrich, summarize_communities): a project whose model budget is reached gets none of them claimed, and its backlog shows them paused.';

-- The projects (of every org) whose budget is reached in the current
-- period: claim_jobs' one read (the budgets table holds one row per
-- project with a budget; the paused ones are fewer).
create or replace function memory_internal.budget_paused_projects()
  returns uuid[]
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select coalesce(array_agg(b.project_id), '{}') from memory.model_budgets b
     where b.paused_period_start is not null
       and b.paused_period_start = memory_internal.model_period_start(b.period, clock_timestamp())
  $$;
comment on function memory_internal.budget_paused_projects() is
  'Projects whose model budget is reached in the current period (their model jobs, memory_internal.model_job_kinds, are not claimed). Read as the owner, across orgs, inside memory_worker.claim_jobs.';

-- The one implementation; p_at lets a test place a call in an earlier period.
create or replace function memory_internal.record_model_call_at(
  p_project uuid, p_job_kind text, p_job_id bigint, p_episode uuid, p_model text,
  p_operation text, p_tokens_in integer, p_tokens_out integer, p_latency_ms double precision,
  p_outcome text, p_at timestamptz)
  returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_tokens_in integer := coalesce(p_tokens_in, 0);
  v_tokens_out integer := coalesce(p_tokens_out, 0);
  v_budget memory.model_budgets;
  v_start timestamptz;
begin
  if p_job_kind is null or not p_job_kind = any (memory_internal.job_kinds()) then
    raise exception 'job_kind must be one of %, got %', memory_internal.job_kinds(), p_job_kind
      using errcode = 'invalid_parameter_value';
  end if;
  if p_model is null or p_model = '' or length(p_model) > 200 then
    raise exception 'model must be a non-empty name of at most 200 characters'
      using errcode = 'invalid_parameter_value';
  end if;
  if p_operation is null or p_operation not in ('chat', 'embeddings') then
    raise exception 'operation must be chat or embeddings, got %', p_operation
      using errcode = 'invalid_parameter_value';
  end if;
  if p_outcome is null or p_outcome not in ('ok', 'error', 'timeout', 'rate_limited', 'parse_failure') then
    raise exception 'outcome must be ok, error, timeout, rate_limited or parse_failure, got %', p_outcome
      using errcode = 'invalid_parameter_value';
  end if;
  if v_tokens_in < 0 or v_tokens_out < 0 then
    raise exception 'tokens_in and tokens_out must not be negative, got % and %', v_tokens_in, v_tokens_out
      using errcode = 'invalid_parameter_value';
  end if;
  if p_latency_ms is null or not (p_latency_ms >= 0 and p_latency_ms < 'infinity') then
    raise exception 'latency_ms must be a finite number >= 0, got %', p_latency_ms
      using errcode = 'invalid_parameter_value';
  end if;
  if p_at is null then
    raise exception 'the call''s instant must not be null' using errcode = 'invalid_parameter_value';
  end if;
  insert into memory.model_calls (org_id, project_id, job_kind, job_id, episode_id, model, operation,
                                  tokens_in, tokens_out, latency_ms, outcome, called_at)
  values (v_org, p_project, p_job_kind, p_job_id, p_episode, p_model, p_operation,
          v_tokens_in, v_tokens_out, p_latency_ms, p_outcome, p_at);
  insert into memory.model_usage_periods as u (org_id, project_id, period_start, job_kind, outcome, shard,
                                               calls, tokens_in, tokens_out, latency_ms)
  values (v_org, p_project, memory_internal.model_period_start('day', p_at), p_job_kind, p_outcome,
          (pg_backend_pid() % 8)::smallint, 1, v_tokens_in, v_tokens_out, p_latency_ms)
  on conflict (org_id, project_id, period_start, job_kind, outcome, shard) do update
     set calls = u.calls + 1, tokens_in = u.tokens_in + excluded.tokens_in,
         tokens_out = u.tokens_out + excluded.tokens_out, latency_ms = u.latency_ms + excluded.latency_ms;
  -- /metrics' totals (memory.metric_totals; thin_api/metrics.py labels them).
  perform memory_internal.bump_counters(
    v_org, p_project,
    array['model_calls:' || p_job_kind || ':' || p_outcome, 'model_tokens_in:' || p_job_kind,
          'model_tokens_out:' || p_job_kind, 'model_latency_us:' || p_job_kind],
    array[1, v_tokens_in, v_tokens_out, round(p_latency_ms * 1000)::bigint]);
  -- A project with a budget: its calls take the budget row's lock in turn,
  -- so the sum below sees every committed call and the one that reaches the
  -- budget pauses the project (projects without one pay one index probe).
  select * into v_budget from memory.model_budgets b
   where b.org_id = v_org and b.project_id = p_project
     for update;
  if found then
    v_start := memory_internal.model_period_start(v_budget.period, clock_timestamp());
    if v_budget.paused_period_start is distinct from v_start
       and memory_internal.model_tokens_since(v_org, p_project, v_start) >= v_budget.tokens then
      update memory.model_budgets b set paused_period_start = v_start
       where b.org_id = v_org and b.project_id = p_project;
    end if;
  end if;
end
$$;
comment on function memory_internal.record_model_call_at(uuid, text, bigint, uuid, text, text, integer, integer, double precision, text, timestamptz) is
  'memory_worker.record_model_call with the call''s instant given (tests place calls in an earlier period).';

create or replace function memory_worker.record_model_call(
  p_project uuid, p_job_kind text, p_job_id bigint, p_episode uuid, p_model text,
  p_operation text, p_tokens_in integer, p_tokens_out integer, p_latency_ms double precision,
  p_outcome text)
  returns void
  language sql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select memory_internal.record_model_call_at(p_project, p_job_kind, p_job_id, p_episode, p_model,
                                                p_operation, p_tokens_in, p_tokens_out, p_latency_ms,
                                                p_outcome, clock_timestamp())
  $$;
comment on function memory_worker.record_model_call(uuid, text, bigint, uuid, text, text, integer, integer, double precision, text) is
  'Record one model call of a project''s job (in the org scope the job runs under): job kind and id, episode (or NULL), model, operation (chat, embeddings), the tokens the endpoint reported (NULL: 0), latency in ms and outcome (ok, error, timeout, rate_limited, parse_failure). Adds to the day''s totals and, when the project''s budget is reached by it, pauses the project''s extraction for the rest of the period. Bad input raises 22023 naming the field.';

create or replace function memory.model_usage(
  p_project uuid, p_since timestamptz default null, p_until timestamptz default null)
  returns table (job_kind text, model text, operation text, calls bigint, tokens_in bigint,
                 tokens_out bigint, latency_ms_total double precision, latency_ms_avg double precision,
                 latency_ms_p95 double precision, errors bigint)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_since is not null and p_until is not null and p_until < p_since then
    raise exception 'until must not be before since' using errcode = 'invalid_parameter_value';
  end if;
  return query
  select c.job_kind, c.model, c.operation, count(*), sum(c.tokens_in)::bigint, sum(c.tokens_out)::bigint,
         sum(c.latency_ms), avg(c.latency_ms),
         percentile_cont(0.95) within group (order by c.latency_ms),
         count(*) filter (where c.outcome <> 'ok')
    from memory.model_calls c
   where c.org_id = v_org and c.project_id = p_project
     and (p_since is null or c.called_at >= p_since)
     and (p_until is null or c.called_at < p_until)
   group by c.job_kind, c.model, c.operation
   order by c.job_kind, c.model, c.operation;
end
$$;
comment on function memory.model_usage(uuid, timestamptz, timestamptz) is
  'A project''s model calls in [p_since, p_until) (NULL: unbounded) per job kind, model and operation: calls, tokens in and out, latency total, average and 95th percentile in ms, and errors (calls whose outcome is not ok).';

create or replace function memory.model_budget(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_budget memory.model_budgets;
  v_start timestamptz;
begin
  select * into v_budget from memory.model_budgets b where b.org_id = v_org and b.project_id = p_project;
  if not found then
    return jsonb_build_object('tokens', null, 'period', null, 'used', null, 'period_start', null,
                              'period_end', null, 'paused', false);
  end if;
  v_start := memory_internal.model_period_start(v_budget.period, clock_timestamp());
  return jsonb_build_object(
    'tokens', v_budget.tokens, 'period', v_budget.period,
    'used', memory_internal.model_tokens_since(v_org, p_project, v_start),
    'period_start', v_start,
    'period_end', v_start + case v_budget.period when 'day' then interval '1 day' else interval '1 month' end,
    'paused', v_budget.paused_period_start is not distinct from v_start);
end
$$;
comment on function memory.model_budget(uuid) is
  'A project''s model token budget: {tokens, period (day or month, UTC), used (tokens in plus out of the period''s calls so far), period_start, period_end, paused}. paused: the budget is reached, so the project''s enrich jobs wait (queued) until period_end or a larger budget. No budget: tokens and period null, paused false.';

create or replace function memory.set_model_budget(
  p_project uuid, p_tokens bigint, p_period text default 'month')
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_start timestamptz;
  v_reached boolean;
begin
  if p_tokens is null then
    delete from memory.model_budgets b where b.org_id = v_org and b.project_id = p_project;
    if found then
      perform memory_internal.audit(v_org, p_project, 'model_budget.remove', 'project:' || p_project);
    end if;
    return memory.model_budget(p_project);
  end if;
  if p_tokens < 0 then
    raise exception 'tokens must be >= 0 (or null: no budget), got %', p_tokens
      using errcode = 'invalid_parameter_value';
  end if;
  if p_period is null or p_period not in ('day', 'month') then
    raise exception 'period must be day or month, got %', p_period using errcode = 'invalid_parameter_value';
  end if;
  v_start := memory_internal.model_period_start(p_period, clock_timestamp());
  insert into memory.model_budgets as b (org_id, project_id, tokens, period, paused_period_start, updated_at)
  values (v_org, p_project, p_tokens, p_period, null, clock_timestamp())
  on conflict (org_id, project_id) do update
     set tokens = excluded.tokens, period = excluded.period, updated_at = excluded.updated_at;
  -- Reached already (a budget lowered below what the period used), or no
  -- longer (raised): the pause follows at once.  (The use read first: Citus
  -- refuses a function that reads tables inside an UPDATE's CASE.)
  v_reached := memory_internal.model_tokens_since(v_org, p_project, v_start) >= p_tokens;
  update memory.model_budgets b
     set paused_period_start = case when v_reached then v_start end
   where b.org_id = v_org and b.project_id = p_project;
  perform memory_internal.audit(v_org, p_project, 'model_budget.set', 'project:' || p_project,
                                jsonb_build_object('tokens', p_tokens, 'period', p_period));
  return memory.model_budget(p_project);
end
$$;
comment on function memory.set_model_budget(uuid, bigint, text) is
  'Set a project''s model token budget per UTC day or month (p_period), counting tokens in plus out of every call its jobs make; p_tokens NULL removes it. When the period''s calls reach it, the project''s model jobs (enrich, summarize_communities) stay queued until the period rolls or the budget is raised. Audited (model_budget.set with tokens and period; model_budget.remove when one was removed). Returns memory.model_budget. Bad input raises 22023 naming the field.';
