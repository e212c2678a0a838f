-- The HTTP layer's org-level reads (schema memory_http): the calling key's
-- org, and the projects of that org the key may see.  Like 086 and 088: every route runs
-- memory_http.authorize_key (or memory_http.authorize) first, which scopes the
-- transaction to the key's org, then one call from here.  CREATE OR
-- REPLACE only: re-applied on every migrate.

create or replace function memory_http.org()
  returns table (org_id uuid, name text, created_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api_key();
  return query select o.org_id, o.name, o.created_at
                 from memory.orgs o where o.org_id = memory_internal.current_org();
end
$$;
comment on function memory_http.org() is
  'API: the authorized key''s org (id, name, created_at); any valid key. Never another org.';

create or replace function memory_http.list_projects()
  returns table (project_id uuid, org_id uuid, name text, created_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_manage boolean;
  v_own uuid := nullif(current_setting('chronomem.api_project_id', true), '')::uuid;
begin
  perform memory_internal.require_api_key();
  v_manage := coalesce('project:manage' = any (
    nullif(current_setting('chronomem.api_permissions', true), '')::text[]), false);
  return query
    select p.project_id, p.org_id, p.name, p.created_at
      from memory.projects p
     where p.org_id = memory_internal.current_org()
       and (v_manage or p.project_id = v_own)
     order by p.created_at, p.project_id;
end
$$;
comment on function memory_http.list_projects() is
  'API: the projects of the authorized key''s org that the key may see, oldest first: every one for a project:manage key, only its own project otherwise.';
