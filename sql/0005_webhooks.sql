-- 0005_webhooks: outgoing webhooks.  Endpoints per project, their signing
-- secrets (apart, readable by no client role), and a delivery log with one
-- row per attempt.  Events are enqueued as deliver_webhook jobs in the
-- writing transaction (outbox) by the triggers and functions in
-- functions/087_webhooks.sql; the worker signs and sends them.

create table memory.webhook_endpoints (
  org_id      uuid not null,
  project_id  uuid not null,
  endpoint_id uuid not null default gen_random_uuid(),
  url         text not null check (length(url) <= 2048 and url ~* '^https?://[^[:space:]]+$'),
  -- Fixed vocabulary (memory.webhook_event_types()); at least one.
  event_types text[] not null check (
    cardinality(event_types) >= 1
    and event_types <@ array['fact.superseded', 'fact.retracted', 'fact.contradicted',
                             'episode.enriched', 'memory.wiped']),
  enabled     boolean not null default true,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now(),
  -- Deleting keeps the row (the delivery log names it) but disables it for good.
  deleted_at  timestamptz,
  primary key (org_id, endpoint_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  check (deleted_at is null or not enabled)
);
comment on table memory.webhook_endpoints is
  'Webhook endpoints of a project: URL, the event types it subscribes to, enabled. The signing secret is not here (memory_internal.webhook_secrets, readable by no client role). Written through memory.create_webhook / update_webhook / delete_webhook.';
-- The outbox triggers' first question, asked on every batch of fact events:
-- does this org have any enabled endpoint?  One probe of this index.
create index webhook_endpoints_enabled_idx on memory.webhook_endpoints (org_id, project_id)
  where enabled;

-- Signing secrets, "whsec_<base64>" (the Svix format).  The worker must read
-- them to sign, so they are stored as they are; only security definer
-- functions reach this table (no role has a grant on it).
create table memory_internal.webhook_secrets (
  org_id      uuid not null,
  endpoint_id uuid not null,
  secret      text not null check (secret ~ '^whsec_[A-Za-z0-9+/]{16,}={0,2}$'),
  created_at  timestamptz not null default now(),
  primary key (org_id, endpoint_id),
  foreign key (org_id, endpoint_id) references memory.webhook_endpoints on delete cascade
);
comment on table memory_internal.webhook_secrets is
  'The current signing secret of each webhook endpoint (whsec_ + base64 of 24 random bytes). Shown once by memory.create_webhook and memory.rotate_webhook_secret; read by the worker through memory.webhook_target.';

create table memory.webhook_delivery_log (
  org_id       uuid not null,
  project_id   uuid not null,
  delivery_id  bigint generated always as identity,
  job_id       bigint not null,
  -- The message id sent as webhook-id: the same on every attempt of an event.
  event_id     text not null,
  event_type   text not null,
  endpoint_id  uuid not null,
  attempt      integer not null check (attempt >= 1),
  status_code  integer check (status_code between 100 and 599),
  -- delivered (2xx), retrying (will be attempted again after the queue's
  -- backoff) or failed (not retried: a 4xx, a refused destination, or the
  -- last attempt).
  outcome      text not null check (outcome in ('delivered', 'retrying', 'failed')),
  error        text,
  duration_ms  integer not null check (duration_ms >= 0),
  attempted_at timestamptz not null default now(),
  primary key (org_id, delivery_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, endpoint_id) references memory.webhook_endpoints on delete cascade,
  check ((outcome = 'delivered') = coalesce(status_code between 200 and 299, false))
);
comment on table memory.webhook_delivery_log is
  'One row per webhook delivery attempt: event (webhook-id), endpoint, attempt number, HTTP status or error, duration, outcome. Never the body. Read through memory.webhook_deliveries.';
create index webhook_delivery_log_endpoint_idx on memory.webhook_delivery_log
  (org_id, project_id, endpoint_id, delivery_id);
create index webhook_delivery_log_event_idx on memory.webhook_delivery_log (org_id, event_id);

-- A wipe finds the project's pending and finished deliveries (to drop the
-- wiped content from their bodies) without scanning other kinds of jobs.
create index jobs_webhook_project_idx on memory.jobs (org_id, project_id)
  where kind = 'deliver_webhook';

do $$
declare
  t regclass;
begin
  foreach t in array array['memory.webhook_endpoints', 'memory_internal.webhook_secrets',
                           'memory.webhook_delivery_log']::regclass[]
  loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
  end loop;
end
$$;

revoke all on memory.webhook_endpoints, memory.webhook_delivery_log,
              memory_internal.webhook_secrets from public;
-- Endpoints (no secret) and the log are readable like every table in schema
-- memory; the secrets table has no grant at all.
grant select on memory.webhook_endpoints, memory.webhook_delivery_log
  to chronomem_app, chronomem_analyst;
