-- The HTTP layer's webhook calls (schema memory_http): the audited writes
-- (wrappers of 087's endpoint functions, as 086_http_writes.sql does for
-- facts and predicates) and the paged delivery log of one endpoint.  (The
-- authorization for a route that names no project, authorize_own_project,
-- is in 086_http_auth.sql.)  CREATE OR REPLACE only: re-applied on every
-- migrate.

create or replace function memory_http.create_webhook(
  p_project uuid, p_url text, p_event_types text[] default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.create_webhook'), p_project);
  v_result := memory.create_webhook(p_project, p_url, p_event_types);
  -- Never the secret, nor the URL (it may carry credentials): counts only.
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'webhook.create',
    'webhook:' || (v_result ->> 'endpoint_id'),
    jsonb_build_object('event_types', jsonb_array_length(v_result -> 'event_types')));
  return v_result;
end
$$;
comment on function memory_http.create_webhook(uuid, text, text[]) is
  'API: memory.create_webhook as the authorized key (needs configuration:write); audited. The answer carries the secret (shown only here).';

create or replace function memory_http.update_webhook(
  p_project uuid, p_endpoint uuid, p_url text default null, p_event_types text[] default null,
  p_enabled boolean default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.update_webhook'), p_project);
  v_result := memory.update_webhook(p_project, p_endpoint, p_url, p_event_types, p_enabled);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'webhook.update',
    'webhook:' || p_endpoint,
    jsonb_build_object('url', p_url is not null, 'event_types', p_event_types is not null,
                       'enabled', p_enabled is not null));
  return v_result;
end
$$;
comment on function memory_http.update_webhook(uuid, uuid, text, text[], boolean) is
  'API: memory.update_webhook as the authorized key (needs configuration:write); audited with which fields changed.';

create or replace function memory_http.delete_webhook(p_project uuid, p_endpoint uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.delete_webhook'), p_project);
  v_result := memory.delete_webhook(p_project, p_endpoint);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'webhook.delete',
    'webhook:' || p_endpoint);
  return v_result;
end
$$;
comment on function memory_http.delete_webhook(uuid, uuid) is
  'API: memory.delete_webhook as the authorized key (needs configuration:write); audited.';

create or replace function memory_http.rotate_webhook_secret(p_project uuid, p_endpoint uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.rotate_webhook_secret'), p_project);
  v_result := memory.rotate_webhook_secret(p_project, p_endpoint);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'webhook.rotate_secret',
    'webhook:' || p_endpoint);
  return v_result;
end
$$;
comment on function memory_http.rotate_webhook_secret(uuid, uuid) is
  'API: memory.rotate_webhook_secret as the authorized key (needs configuration:write); audited (never the secret).';

-- The delivery log of one endpoint (a deleted one too: its log is kept),
-- newest attempt first, keyset-paged by delivery_id.  An endpoint that is
-- not the project's (another org's, or unknown) is not found.
create or replace function memory_http.webhook_deliveries(
  p_project uuid, p_endpoint uuid, p_limit integer default 100, p_before bigint default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_rows jsonb;
  v_n integer;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  if not exists (select from memory.webhook_endpoints e
                  where e.org_id = v_org and e.project_id = p_project
                    and e.endpoint_id = p_endpoint) then
    raise exception 'webhook endpoint % not found in project %', p_endpoint, p_project
      using errcode = 'no_data_found';
  end if;
  -- One row more than asked says whether there is a next page.
  select coalesce(jsonb_agg(to_jsonb(d) order by d.delivery_id desc), '[]'), count(*)
    into v_rows, v_n
    from memory.webhook_deliveries(p_project, p_endpoint, p_limit + 1, p_before) d;
  if v_n > p_limit then
    v_rows := v_rows - p_limit;
  end if;
  return jsonb_build_object(
    'deliveries', v_rows,
    'next_cursor', case when v_n > p_limit then v_rows -> (p_limit - 1) -> 'delivery_id' end);
end
$$;
comment on function memory_http.webhook_deliveries(uuid, uuid, integer, bigint) is
  'API: an endpoint''s delivery log (memory.webhook_deliveries) as JSON, newest first; pass next_cursor as p_before for the next page. no_data_found for an endpoint not in the project.';
