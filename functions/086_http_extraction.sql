-- The HTTP and MCP layer's calls of extraction schemas, episode enrichment
-- and rejections (schema memory_http; functions/074_extraction_schemas.sql).
-- Each checks the key's permission for its call
-- (memory_http.call_permissions) and makes one call of the SQL API.
-- CREATE OR REPLACE only.

create or replace function memory_http.set_extraction_schema(p_project uuid, p_document jsonb)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.set_extraction_schema'), p_project);
  -- set_extraction_schema writes the audit row itself.
  return memory.set_extraction_schema(p_project, p_document, memory_internal.api_actor());
end
$$;
comment on function memory_http.set_extraction_schema(uuid, jsonb) is
  'API: memory.set_extraction_schema as the authorized key (needs configuration:write); audited.';

create or replace function memory_http.extraction_schema(p_project uuid, p_version integer default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.extraction_schema'), p_project);
  return memory.extraction_schema(p_project, p_version);
end
$$;
comment on function memory_http.extraction_schema(uuid, integer) is
  'API: memory.extraction_schema (needs configuration:read).';

create or replace function memory_http.extraction_schema_versions(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.extraction_schema_versions'), p_project);
  return jsonb_build_object('versions', (
    select coalesce(jsonb_agg(to_jsonb(v) order by v.version desc), '[]')
      from memory.extraction_schema_versions(p_project) v));
end
$$;
comment on function memory_http.extraction_schema_versions(uuid) is
  'API: memory.extraction_schema_versions as JSON {versions} (needs configuration:read).';

create or replace function memory_http.episode_extraction(p_project uuid, p_episode uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.episode_extraction'), p_project);
  return memory.episode_extraction(p_project, p_episode);
end
$$;
comment on function memory_http.episode_extraction(uuid, uuid) is
  'API: memory.episode_extraction (needs project:read).';

create or replace function memory_http.extraction_rejections(
  p_project uuid, p_reason text default null, p_limit integer default 50, p_after bigint default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_rows jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.extraction_rejections'), p_project);
  select coalesce(jsonb_agg(to_jsonb(r) order by r.rejection_id), '[]') into v_rows
    from memory.list_extraction_rejections(p_project, p_reason, p_limit, p_after) r;
  return jsonb_build_object(
    'rejections', v_rows,
    'next_cursor', case when jsonb_array_length(v_rows) = p_limit
                        then v_rows -> (p_limit - 1) -> 'rejection_id' end);
end
$$;
comment on function memory_http.extraction_rejections(uuid, text, integer, bigint) is
  'API: memory.list_extraction_rejections as JSON {rejections, next_cursor} (needs project:read); next_cursor is the cursor of the next page, NULL on the last.';
