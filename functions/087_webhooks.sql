-- Webhooks: endpoints (create, rotate, update, delete, list), the outbox
-- (events become deliver_webhook jobs in the writing transaction) and what
-- the worker calls to sign a delivery and log each attempt.
--
-- A deliver_webhook job's payload:
--   {event_id: "msg_<uuid>" (webhook-id, the same on every attempt and for
--    every endpoint of one event), event_type, endpoint_id,
--    fact_ids: the facts the body names (a wipe drops bodies naming wiped facts),
--    body: the JSON body as text, fixed at enqueue time so every attempt
--          sends the same bytes}
-- Bodies (all carry type, project_id, org_id and at, the record-time instant):
--   fact.asserted     {fact_id, triple, content, valid_from, valid_until (null: open)}
--   fact.superseded   {old_fact_id, new_fact_id, triple {subject, predicate, object}
--                      (the superseded fact's), valid_until (where its window now ends)}
--   fact.retracted    {fact_id, triple, reason}
--   fact.contradicted {fact_id, triple, valid_until, reason}
--   fact.expired      {fact_id, triple, valid_until, reason}
--   fact.restored     {fact_id, triple, valid_until (null: open again), reason}
--   memory.wiped      {scope, counts}
--   episode.enriched  whatever apply_extraction passes (episode_id, ...)

-- (The event types, memory.webhook_event_types(), live in
-- sql/0032_webhook_fact_asserted.sql, beside the check constraint of
-- memory.webhook_endpoints that reads them: a new type is a migration.)

-- Attempts per delivery: the queue's backoff (2, 4, 8 ... s, at most an
-- hour) over 12 attempts spans about 68 minutes of receiver downtime.
create or replace function memory_internal.webhook_max_attempts() returns integer
  language sql immutable parallel safe
  as $$ select 12 $$;

-- A new signing secret: whsec_ + base64 of 24 random bytes (Svix's format).
-- gen_random_uuid() draws from the server's strong random source; hashing
-- three of them gives 24 uniformly random bytes without pgcrypto.
create or replace function memory_internal.new_webhook_secret() returns text
  language sql volatile
  as $$
    select 'whsec_' || encode(substring(sha256(
             uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
             || uuid_send(gen_random_uuid())) from 1 for 24), 'base64')
  $$;

-- Client input checks.  Errors name the field (the diagnostics' column).
create or replace function memory_internal.webhook_url(p_url text) returns text
  language plpgsql immutable
as $$
declare
  v_url text := btrim(p_url);
begin
  if v_url is null or v_url = '' then
    raise exception 'url is required' using errcode = 'invalid_parameter_value', column = 'url';
  end if;
  if length(v_url) > 2048 then
    raise exception 'url must be at most 2048 characters' using errcode = 'invalid_parameter_value', column = 'url';
  end if;
  -- scheme://[userinfo@]host[:port][/path?query#fragment], no whitespace.
  if v_url !~* '^https?://([^/?#@[:space:]]+@)?(\[[0-9a-f:.]+\]|[^/?#:@[:space:]\[\]]+)(:[0-9]{1,5})?([/?#][^[:space:]]*)?$' then
    raise exception 'url must be an absolute http or https URL, not "%"', left(v_url, 200)
      using errcode = 'invalid_parameter_value', column = 'url';
  end if;
  return v_url;
end
$$;

-- An endpoint's subscription: the listed types, de-duplicated and sorted,
-- or '{*}' for every type, including types added later (NULL or ['*']).
create or replace function memory_internal.webhook_event_type_list(p_types text[]) returns text[]
  language plpgsql stable
as $$
declare
  v_unknown text;
begin
  if p_types is null then  -- no filter: every type, now and later
    return '{*}';
  end if;
  if cardinality(p_types) = 0 or array_position(p_types, null) is not null then
    raise exception 'event_types must list at least one event type (or be null for all of them)'
      using errcode = 'invalid_parameter_value', column = 'event_types';
  end if;
  if '*' = any (p_types) then
    if exists (select from unnest(p_types) u where u <> '*') then
      raise exception 'event_types: "*" (every type) cannot be combined with other types'
        using errcode = 'invalid_parameter_value', column = 'event_types';
    end if;
    return '{*}';
  end if;
  select u into v_unknown from unnest(p_types) u
   where u not in (select t.event_type from memory.webhook_event_types() t) limit 1;
  if v_unknown is not null then
    raise exception 'unknown event type "%"', left(v_unknown, 100)
      using errcode = 'invalid_parameter_value', column = 'event_types',
            hint = 'memory.webhook_event_types() lists them; "*" is every type.';
  end if;
  return array(select distinct u from unnest(p_types) u order by 1);
end
$$;

-- Whether an endpoint subscribed to p_event_types receives events of
-- p_type: the one test the outbox applies.
create or replace function memory_internal.webhook_wants(p_event_types text[], p_type text)
  returns boolean
  language sql immutable parallel safe
  as $$ select p_type = any (p_event_types) or p_event_types = '{*}' $$;
comment on function memory_internal.webhook_wants(text[], text) is
  'Whether an endpoint subscribed to p_event_types (a list, or {*} for every type) receives events of type p_type.';

-- A live (not deleted) endpoint of a project in the current org, locked.
create or replace function memory_internal.webhook_endpoint(p_project uuid, p_endpoint uuid)
  returns memory.webhook_endpoints
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  e memory.webhook_endpoints;
begin
  select w.* into e from memory.webhook_endpoints w
   where w.org_id = v_org and w.project_id = p_project and w.endpoint_id = p_endpoint
     and w.deleted_at is null
     for update;
  if e.endpoint_id is null then
    raise exception 'webhook endpoint % not found in project %', p_endpoint, p_project
      using errcode = 'no_data_found';
  end if;
  return e;
end
$$;

create or replace function memory_internal.webhook_view(e memory.webhook_endpoints) returns jsonb
  language sql stable
  set timezone = 'UTC'
  as $$
    select jsonb_build_object(
      'endpoint_id', e.endpoint_id, 'project_id', e.project_id, 'url', e.url,
      'event_types', to_jsonb(e.event_types), 'enabled', e.enabled,
      'created_at', e.created_at, 'updated_at', e.updated_at)
  $$;

-- Drop an endpoint's deliveries not sent yet (disabled or deleted): done,
-- unsent, with the reason as the job's result, so re-enabling the endpoint
-- does not send them.  A delivery in flight finishes its attempt.
create or replace function memory_internal.drop_queued_deliveries(
  p_org uuid, p_project uuid, p_endpoint uuid, p_reason text)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
  v_now timestamptz := clock_timestamp();  -- a value: Citus routes no UPDATE calling it
begin
  update memory.jobs j
     set status = 'done', result = jsonb_build_object('skipped', p_reason),
         finished_at = v_now
   where j.org_id = p_org and j.project_id = p_project and j.kind = 'deliver_webhook'
     and j.status in ('queued', 'waiting') and j.payload ->> 'endpoint_id' = p_endpoint::text;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_internal.drop_queued_deliveries(uuid, uuid, uuid, text) is
  'Mark an endpoint''s queued deliveries done and unsent, with p_reason as their result (the endpoint was disabled or deleted). Returns how many.';

--------------------------------------------------------------------------
-- Endpoints
--------------------------------------------------------------------------
create or replace function memory.create_webhook(
  p_project uuid, p_url text, p_event_types text[] default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  e memory.webhook_endpoints;
  v_secret text := memory_internal.new_webhook_secret();
begin
  insert into memory.webhook_endpoints (org_id, project_id, url, event_types)
  values (v_org, p_project, memory_internal.webhook_url(p_url),
          memory_internal.webhook_event_type_list(p_event_types))
  returning * into e;
  insert into memory_internal.webhook_secrets (org_id, endpoint_id, secret)
  values (v_org, e.endpoint_id, v_secret);
  return memory_internal.webhook_view(e) || jsonb_build_object('secret', v_secret);
end
$$;
comment on function memory.create_webhook(uuid, text, text[]) is
  'Add a webhook endpoint to a project: an http(s) URL and the event types it wants (see memory.webhook_event_types(); NULL or {*}: every type, including types added later). Returns the endpoint with its signing secret (whsec_...): the only time the secret is shown, until memory.rotate_webhook_secret.';

create or replace function memory.rotate_webhook_secret(p_project uuid, p_endpoint uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  e memory.webhook_endpoints := memory_internal.webhook_endpoint(p_project, p_endpoint);
  v_secret text := memory_internal.new_webhook_secret();
begin
  insert into memory_internal.webhook_secrets as s (org_id, endpoint_id, secret)
  values (e.org_id, e.endpoint_id, v_secret)
  on conflict (org_id, endpoint_id) do update set secret = excluded.secret, created_at = excluded.created_at;
  update memory.webhook_endpoints w set updated_at = now()
   where w.org_id = e.org_id and w.endpoint_id = e.endpoint_id
  returning * into e;
  return memory_internal.webhook_view(e) || jsonb_build_object('secret', v_secret);
end
$$;
comment on function memory.rotate_webhook_secret(uuid, uuid) is
  'Replace an endpoint''s signing secret and return the new one (shown only here). Every delivery attempt from now on, retries of older events included, is signed with the new secret only.';

create or replace function memory.update_webhook(
  p_project uuid, p_endpoint uuid, p_url text default null, p_event_types text[] default null,
  p_enabled boolean default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  e memory.webhook_endpoints := memory_internal.webhook_endpoint(p_project, p_endpoint);
  -- Checked here, not inside the UPDATE: Citus routes no statement that calls a
  -- non-immutable function within CASE or COALESCE.
  v_url text := case when p_url is not null then memory_internal.webhook_url(p_url) end;
  v_event_types text[] := case when p_event_types is not null
                               then memory_internal.webhook_event_type_list(p_event_types) end;
begin
  update memory.webhook_endpoints w
     set url = coalesce(v_url, w.url),
         event_types = coalesce(v_event_types, w.event_types),
         enabled = coalesce(p_enabled, w.enabled),
         updated_at = now()
   where w.org_id = e.org_id and w.endpoint_id = e.endpoint_id
  returning * into e;
  if not e.enabled then
    perform memory_internal.drop_queued_deliveries(e.org_id, e.project_id, e.endpoint_id,
                                                   'endpoint disabled');
  end if;
  return memory_internal.webhook_view(e);
end
$$;
comment on function memory.update_webhook(uuid, uuid, text, text[], boolean) is
  'Change an endpoint''s URL, event types (a non-empty list; {*}: every type, including types added later) or enabled flag; NULL keeps a value. Events are queued only for enabled endpoints; disabling one drops its queued deliveries (done, result {"skipped": "endpoint disabled"}), so enabling it again sends only later events.';

create or replace function memory.delete_webhook(p_project uuid, p_endpoint uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  e memory.webhook_endpoints := memory_internal.webhook_endpoint(p_project, p_endpoint);
begin
  update memory.webhook_endpoints w
     set enabled = false, deleted_at = now(), updated_at = now()
   where w.org_id = e.org_id and w.endpoint_id = e.endpoint_id;
  perform memory_internal.drop_queued_deliveries(e.org_id, e.project_id, e.endpoint_id,
                                                 'endpoint deleted');
  delete from memory_internal.webhook_secrets s
   where s.org_id = e.org_id and s.endpoint_id = e.endpoint_id;
  return jsonb_build_object('endpoint_id', e.endpoint_id, 'deleted', true);
end
$$;
comment on function memory.delete_webhook(uuid, uuid) is
  'Delete an endpoint: it receives nothing more (queued deliveries are dropped), its secret is destroyed, and it no longer appears in memory.list_webhooks. Its delivery log is kept.';

create or replace function memory.list_webhooks(p_project uuid)
  returns table (endpoint_id uuid, url text, event_types text[], enabled boolean,
                 created_at timestamptz, updated_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);  -- raises for an unknown project
begin
  return query
    select e.endpoint_id, e.url, e.event_types, e.enabled, e.created_at, e.updated_at
      from memory.webhook_endpoints e
     where e.org_id = v_org and e.project_id = p_project and e.deleted_at is null
     order by e.created_at, e.endpoint_id;
end
$$;
comment on function memory.list_webhooks(uuid) is
  'A project''s webhook endpoints (not deleted ones), oldest first. Never the secrets.';

create or replace function memory.webhook_deliveries(
  p_project uuid, p_endpoint uuid default null, p_limit integer default 100,
  p_before bigint default null)
  returns table (delivery_id bigint, event_id text, event_type text, endpoint_id uuid,
                 attempt integer, status_code integer, outcome text, error text,
                 duration_ms integer, attempted_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);  -- raises for an unknown project
begin
  return query
    select d.delivery_id, d.event_id, d.event_type, d.endpoint_id, d.attempt, d.status_code,
           d.outcome, d.error, d.duration_ms, d.attempted_at
      from memory.webhook_delivery_log d
     where d.org_id = v_org and d.project_id = p_project
       and (p_endpoint is null or d.endpoint_id = p_endpoint)
       and (p_before is null or d.delivery_id < p_before)
     order by d.delivery_id desc
     limit least(greatest(coalesce(p_limit, 100), 1), 1000);
end
$$;
comment on function memory.webhook_deliveries(uuid, uuid, integer, bigint) is
  'The delivery log of a project (or one endpoint), newest attempt first: event id (webhook-id), type, attempt, HTTP status or error, outcome, duration. p_before: a delivery_id, for the next page.';

--------------------------------------------------------------------------
-- Outbox
--------------------------------------------------------------------------
create or replace function memory_internal.webhook_payload(
  p_event_id text, p_type text, p_endpoint uuid, p_body text, p_fact_ids uuid[])
  returns jsonb
  language sql immutable
  as $$
    select jsonb_build_object('event_id', p_event_id, 'event_type', p_type,
                              'endpoint_id', p_endpoint, 'fact_ids', to_jsonb(p_fact_ids),
                              'body', p_body)
  $$;

-- Queue one event for every enabled endpoint of the project subscribed to
-- its type, in the caller's transaction.  The body gets type, project_id,
-- org_id and at (this transaction's record-time instant) unless it has
-- them.  Returns the number of deliveries queued (0: nobody listens).
create or replace function memory_internal.enqueue_webhook_event(
  p_org uuid, p_project uuid, p_type text, p_body jsonb default '{}',
  p_fact_ids uuid[] default '{}')
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_event text;
  v_body text;
  v_n integer;
begin
  if p_type is null or p_type not in (select t.event_type from memory.webhook_event_types() t) then
    raise exception 'unknown webhook event type %', coalesce(p_type, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  if not exists (select from memory.webhook_endpoints e
                  where e.org_id = p_org and e.project_id = p_project and e.enabled
                    and memory_internal.webhook_wants(e.event_types, p_type)) then
    return 0;
  end if;
  v_event := 'msg_' || gen_random_uuid();
  v_body := (jsonb_build_object('type', p_type) || coalesce(p_body, '{}')
             || jsonb_build_object('project_id', p_project, 'org_id', p_org,
                                   'at', coalesce(p_body -> 'at', to_jsonb(memory_internal.txn_instant()))))::text;
  insert into memory.jobs (org_id, project_id, kind, payload, max_attempts)
  select p_org, p_project, 'deliver_webhook',
         memory_internal.webhook_payload(v_event, p_type, e.endpoint_id, v_body, coalesce(p_fact_ids, '{}')),
         memory_internal.webhook_max_attempts()
    from memory.webhook_endpoints e
   where e.org_id = p_org and e.project_id = p_project and e.enabled
     and memory_internal.webhook_wants(e.event_types, p_type)
   order by e.endpoint_id;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_internal.enqueue_webhook_event(uuid, uuid, text, jsonb, uuid[]) is
  'Outbox: queue a webhook event (one deliver_webhook job per subscribed, enabled endpoint of the project) in the caller''s transaction. p_fact_ids: facts the body names, so a wipe can drop it.';

-- fact.asserted, fact.superseded, fact.retracted, fact.contradicted,
-- fact.expired, fact.restored: from the fact event log, whoever wrote it (assert_facts,
-- retract_fact, close_fact, apply_extraction, wipe, merges and splits), in
-- its transaction, once per statement.
create or replace function memory_internal.tg_fact_events__webhooks() returns trigger
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_projects uuid[];
  v_payloads jsonb[];
begin
  -- Nearly free when nobody listens: one probe of a partial index.
  if not exists (select from memory.webhook_endpoints e
                  where e.org_id = memory_internal.current_org() and e.enabled) then
    return null;
  end if;
  with ev as materialized (
    -- materialized (and gen_random_uuid() is volatile): one message id per
    -- event, shared by all the endpoints it goes to.
    select n.*, 'fact.' || n.event_type as type, 'msg_' || gen_random_uuid() as msg_id
      from new_rows n
     where n.event_type in ('asserted', 'superseded', 'retracted', 'contradicted', 'expired',
                            'restored')
       and exists (select from memory.webhook_endpoints e
                    where e.org_id = n.org_id and e.project_id = n.project_id and e.enabled
                      and e.org_id = memory_internal.current_org()  -- named, for Citus
                      and memory_internal.webhook_wants(e.event_types, 'fact.' || n.event_type))
  ), bodies as (
    select ev.org_id, ev.project_id, ev.event_id, ev.type, ev.msg_id,
           array_remove(array[ev.fact_id, nullif(ev.new_fact_id, ev.fact_id)], null) as fact_ids,
           (jsonb_build_object('type', ev.type)
            || case ev.event_type
                 when 'asserted' then jsonb_build_object(
                   'fact_id', ev.fact_id, 'content', f.content, 'valid_from', f.valid_from,
                   'valid_until', nullif(memory_internal.range_until(ev.new_range, f.valid_from),
                                         'infinity'))
                 when 'superseded' then jsonb_build_object(
                   'old_fact_id', ev.fact_id, 'new_fact_id', ev.new_fact_id,
                   'valid_until', memory_internal.range_until(ev.new_range, f.valid_from))
                 when 'retracted' then jsonb_build_object(
                   'fact_id', ev.fact_id, 'reason', ev.reason)
                 -- contradicted, expired (always a closed or empty window),
                 -- restored (null when open again)
                 else jsonb_build_object(
                   'fact_id', ev.fact_id, 'reason', ev.reason,
                   'valid_until', nullif(memory_internal.range_until(ev.new_range, f.valid_from),
                                         'infinity'))
               end
            || jsonb_build_object(
                 'triple', jsonb_build_object('subject', s.name, 'predicate', f.predicate_label,
                                              'object', coalesce(o.name, f.object_literal)),
                 'project_id', ev.project_id, 'org_id', ev.org_id, 'at', ev.occurred_at))::text
             as body
      from ev
     cross join lateral (
       select v.subject_id, v.predicate_label, v.object_entity_id, v.object_literal, v.valid_from,
              v.content
         from memory_internal.fact_versions(ev.project_id) v
        where v.org_id = memory_internal.current_org() and v.fact_id = ev.fact_id
       offset 0) f
      join memory.entities s
        on s.org_id = memory_internal.current_org() and s.entity_id = f.subject_id
      left join memory.entities o
        on o.org_id = memory_internal.current_org() and o.entity_id = f.object_entity_id
  )
  select array_agg(b.project_id order by b.event_id, e.endpoint_id),
         array_agg(memory_internal.webhook_payload(b.msg_id, b.type, e.endpoint_id, b.body,
                                                   b.fact_ids)
                   order by b.event_id, e.endpoint_id)
    into v_projects, v_payloads
    from bodies b
    join memory.webhook_endpoints e
      on e.org_id = memory_internal.current_org() and e.project_id = b.project_id and e.enabled
     and memory_internal.webhook_wants(e.event_types, b.type);
  -- Gathered first, inserted second: on Citus this trigger runs on the org's
  -- shard, where an INSERT fed by a join is refused but one fed by arrays is
  -- routed (docs/decisions/020-citus-forms-of-the-functions.md).
  insert into memory.jobs (org_id, project_id, kind, payload, max_attempts)
  select memory_internal.current_org(), u.project_id, 'deliver_webhook', u.payload,
         memory_internal.webhook_max_attempts()
    from unnest(v_projects, v_payloads) with ordinality u(project_id, payload, n)
   order by u.n;
  return null;
end
$$;

-- A wipe takes the wiped content out of the outbox: deliveries whose body
-- names a fact that no longer exists lose their body, and those not sent
-- yet are dropped (a wipe means forget: nothing wiped leaves the database
-- afterwards, nor stays readable in the job queue).  Called by memory.wipe
-- before its receipt is taken, so the receipt counts these jobs.
create or replace function memory_internal.drop_wiped_webhook_bodies(
  p_org uuid, p_project uuid, p_at timestamptz)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
begin
  update memory.jobs j
     set payload = (j.payload - 'body') || jsonb_build_object('body_wiped', p_at),
         status = case when j.status in ('queued', 'waiting') then 'done' else j.status end,
         result = case when j.status in ('queued', 'waiting')
                       then '{"skipped": "wiped before delivery"}'::jsonb else j.result end,
         finished_at = case when j.status in ('queued', 'waiting') then clock_timestamp()
                            else j.finished_at end
   where j.org_id = p_org and j.project_id = p_project and j.kind = 'deliver_webhook'
     and j.payload ? 'body'
     and exists (select from jsonb_array_elements_text(j.payload -> 'fact_ids') x(id)
                  where not exists (select from memory_internal.fact_versions(p_project) v
                                     where v.org_id = p_org and v.fact_id = x.id::uuid));
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_internal.drop_wiped_webhook_bodies(uuid, uuid, timestamptz) is
  'Inside memory.wipe: webhook deliveries whose body names a fact that no longer exists lose the body (body_wiped: the instant), and those not sent yet are marked done as skipped. Returns the jobs changed.';

-- memory.wiped: from the wipe's audit row, in the wipe's transaction.
create or replace function memory_internal.tg_audit_log__webhooks() returns trigger
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  r record;
begin
  for r in select n.* from new_rows n where n.action = 'wipe' and n.project_id is not null
            order by n.audit_id loop
    perform memory_internal.enqueue_webhook_event(
      r.org_id, r.project_id, 'memory.wiped',
      jsonb_build_object('scope', r.resource, 'counts', r.counts, 'at', r.occurred_at));
  end loop;
  return null;
end
$$;

create or replace trigger "60_webhooks" after insert on memory.fact_events
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_fact_events__webhooks();
create or replace trigger "60_webhooks" after insert on memory.audit_log
  referencing new table as new_rows
  for each statement execute function memory_internal.tg_audit_log__webhooks();

--------------------------------------------------------------------------
-- Delivery (the worker, under the job's org scope)
--------------------------------------------------------------------------
create or replace function memory_worker.webhook_target(p_endpoint uuid)
  returns table (url text, secret text, enabled boolean)
  language sql stable
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select e.url, s.secret, e.enabled and s.secret is not null
      from memory.webhook_endpoints e
      left join memory_internal.webhook_secrets s
        on s.org_id = e.org_id and s.endpoint_id = e.endpoint_id
     where e.org_id = memory_internal.current_org() and e.endpoint_id = p_endpoint
  $$;
comment on function memory_worker.webhook_target(uuid) is
  'For the worker: where to send an endpoint''s deliveries and the secret to sign them with (current org). A deleted endpoint (its row kept for its delivery log) has no secret and is not enabled; no row: no such endpoint in the org.';

create or replace function memory_worker.log_webhook_attempt(
  p_job bigint, p_status_code integer, p_error text, p_duration_ms integer,
  p_retryable boolean)
  returns text
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  j memory.jobs;
  v_outcome text;
begin
  select x.* into j from memory.jobs x
   where x.org_id = memory_internal.current_org() and x.job_id = p_job
     and x.kind = 'deliver_webhook' and x.status = 'running';
  if j.job_id is null then
    raise exception 'no running deliver_webhook job % in this org', p_job using errcode = 'no_data_found';
  end if;
  v_outcome := case when p_status_code between 200 and 299 then 'delivered'
                    when coalesce(p_retryable, false) and j.attempts < j.max_attempts then 'retrying'
                    else 'failed' end;
  insert into memory.webhook_delivery_log
    (org_id, project_id, job_id, event_id, event_type, endpoint_id, attempt, status_code,
     outcome, error, duration_ms)
  values (j.org_id, j.project_id, j.job_id, j.payload ->> 'event_id', j.payload ->> 'event_type',
          (j.payload ->> 'endpoint_id')::uuid, j.attempts, p_status_code, v_outcome,
          left(p_error, 1000), greatest(coalesce(p_duration_ms, 0), 0));
  return v_outcome;
end
$$;
comment on function memory_worker.log_webhook_attempt(bigint, integer, text, integer, boolean) is
  'For the worker: log one delivery attempt of a running deliver_webhook job (in the attempt''s transaction). Returns the outcome: delivered (2xx), retrying (p_retryable and attempts remain) or failed.';
