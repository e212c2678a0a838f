-- 0043_model_usage: what the models cost.  Every model call a job makes
-- (the extraction chat, a remote embedding batch, a community summary) is
-- one row of memory.model_calls, with the tokens the endpoint reported and
-- the latency; memory.model_usage_periods keeps per-day totals (sharded:
-- concurrent workers add to different rows) that /metrics and the budget
-- read without scanning the calls.  A project's optional token budget per
-- day or month (memory.model_budgets) pauses its extraction when reached:
-- claim_jobs leaves its enrich jobs queued until the period rolls or the
-- budget is raised or removed (functions/083_model_usage.sql).  Calls hold
-- no content (counts, a model name, an episode id): accounting, not memory.

create table memory.model_calls (
  org_id      uuid not null,
  project_id  uuid not null,
  call_id     bigint generated always as identity,
  job_kind    text not null
    constraint model_calls_job_kind_check check (job_kind = any (memory_internal.job_kinds())),
  -- The job's id and episode: no foreign keys (a job is purged when done, an
  -- episode may be wiped; the accounting stays).
  job_id      bigint,
  episode_id  uuid,
  model       text not null
    constraint model_calls_model_check check (model <> '' and length(model) <= 200),
  operation   text not null
    constraint model_calls_operation_check check (operation in ('chat', 'embeddings')),
  tokens_in   integer not null constraint model_calls_tokens_in_check check (tokens_in >= 0),
  tokens_out  integer not null constraint model_calls_tokens_out_check check (tokens_out >= 0),
  latency_ms  double precision not null
    constraint model_calls_latency_ms_check check (latency_ms >= 0 and latency_ms < 'infinity'),
  outcome     text not null
    constraint model_calls_outcome_check
    check (outcome in ('ok', 'error', 'timeout', 'rate_limited', 'parse_failure')),
  called_at   timestamptz not null default clock_timestamp(),
  primary key (org_id, call_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.model_calls is
  'One model call a project''s job made: job kind and id, episode, model, operation (chat, embeddings), the tokens the endpoint reported, latency and outcome. No content. Written by memory_worker.record_model_call; read through memory.model_usage.';
create index model_calls_project_idx on memory.model_calls (org_id, project_id, called_at);
create index model_calls_episode_idx on memory.model_calls (org_id, episode_id)
  where episode_id is not null;

-- Per-day totals (UTC days), sharded like memory_internal.counters.
create table memory.model_usage_periods (
  org_id       uuid not null,
  project_id   uuid not null,
  period_start timestamptz not null,
  job_kind     text not null,
  outcome      text not null,
  shard        smallint not null,
  calls        bigint not null default 0,
  tokens_in    bigint not null default 0,
  tokens_out   bigint not null default 0,
  latency_ms   double precision not null default 0,
  primary key (org_id, project_id, period_start, job_kind, outcome, shard),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.model_usage_periods is
  'Model calls, tokens in and out and total latency per project, UTC day, job kind and outcome, in shards that concurrent workers add to (sum over shard). What budgets and /metrics read.';

create table memory.model_budgets (
  org_id              uuid not null,
  project_id          uuid not null,
  tokens              bigint not null constraint model_budgets_tokens_check check (tokens >= 0),
  period              text not null constraint model_budgets_period_check check (period in ('day', 'month')),
  -- The start of the period in which the budget was reached (the project's
  -- enrich jobs wait while it is the current period's), else null.
  paused_period_start timestamptz,
  updated_at          timestamptz not null default clock_timestamp(),
  primary key (org_id, project_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.model_budgets is
  'A project''s model token budget per UTC day or month (tokens in plus out of every call its jobs make). paused_period_start: the period in which it was reached; while that period lasts, claim_jobs hands out none of the project''s enrich jobs. Set by memory.set_model_budget.';

do $$
declare
  t text;
begin
  foreach t in array array['memory.model_calls', 'memory.model_usage_periods',
                           'memory.model_budgets'] loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
    execute format('grant select on %s to chronomem_app, chronomem_analyst', t);
  end loop;
end
$$;
-- claim_jobs (across orgs) reads which projects are paused.  /metrics reads
-- the totals from memory_internal.counters (record_model_call adds to them).
create policy worker_budgets on memory.model_budgets for select to chronomem_owner using (true);
