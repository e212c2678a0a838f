-- The HTTP and MCP layer's calls of model usage and budgets (schema
-- memory_http; functions/083_model_usage.sql).  Each checks the key's
-- permission for its call (memory_http.call_permissions) and makes one call
-- of the SQL API.  CREATE OR REPLACE only.

create or replace function memory_http.model_usage(
  p_project uuid, p_since timestamptz default null, p_until timestamptz default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.model_usage'), p_project);
  return jsonb_build_object(
    'since', p_since, 'until', p_until,
    'usage', (select coalesce(jsonb_agg(to_jsonb(u) order by u.job_kind, u.model, u.operation), '[]')
                from memory.model_usage(p_project, p_since, p_until) u));
end
$$;
comment on function memory_http.model_usage(uuid, timestamptz, timestamptz) is
  'API: memory.model_usage as JSON {since, until, usage: [{job_kind, model, operation, calls, tokens_in, tokens_out, latency_ms_total, latency_ms_avg, latency_ms_p95, errors}]} (needs project:read).';

create or replace function memory_http.model_budget(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.model_budget'), p_project);
  return memory.model_budget(p_project);
end
$$;
comment on function memory_http.model_budget(uuid) is
  'API: memory.model_budget (needs configuration:read).';

create or replace function memory_http.set_model_budget(p_project uuid, p_tokens bigint, p_period text)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.set_model_budget'), p_project);
  return memory.set_model_budget(p_project, p_tokens, coalesce(p_period, 'month'));
end
$$;
comment on function memory_http.set_model_budget(uuid, bigint, text) is
  'API: memory.set_model_budget (needs project:manage): tokens NULL removes the budget; period day or month (NULL: month).';
