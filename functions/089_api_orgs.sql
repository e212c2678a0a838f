-- The HTTP API's org-level reads: the calling key's org, and the projects
-- of that org the key may see.  Like 086 and 088: every route runs
-- memory.authorize_key (or memory.authorize) first, which scopes the
-- transaction to the key's org, then one call from here.  CREATE OR
-- REPLACE only: re-applied on every migrate.

-- Like memory.authorize, for a route any valid key may call, whatever its
-- permissions (its own org, the projects it can see).  Raises 28000 for a
-- bad token.
create or replace function memory.authorize_key(
  p_token text,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
begin
  select * into a from memory.authenticate(p_token);
  if a.key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  org_id := a.org_id;
  project_id := a.project_id;
  key_id := a.key_id;
  permissions := a.permissions;
end
$$;
comment on function memory.authorize_key(text) is
  'memory.authenticate, requiring only a valid key (no permission): scopes the transaction to the key''s org; for API routes every key may call (its org, its visible projects). Raises 28000 for a bad token.';

-- The key this transaction authenticated, or 28000 (guards against a
-- caller that forgot memory.authorize*).
create or replace function memory_internal.require_api_key() returns uuid
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_key uuid := memory_internal.api_key_id();
begin
  if v_key is null or memory_internal.current_org() is null then
    raise exception 'no API key authorized in this transaction'
      using errcode = 'invalid_authorization_specification',
            hint = 'Call memory.authorize_key(token) first.';
  end if;
  return v_key;
end
$$;
comment on function memory_internal.require_api_key() is
  'The API key authorized in this transaction; raises 28000 when there is none (no org scope or no key).';

create or replace function memory.api_org()
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
comment on function memory.api_org() is
  'API: the authorized key''s org (id, name, created_at); any valid key. Never another org.';

create or replace function memory.api_list_projects()
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
comment on function memory.api_list_projects() is
  'API: the projects of the authorized key''s org that the key may see, oldest first: every one for a project:manage key, only its own project otherwise.';

--------------------------------------------------------------------------
-- Grants (090_grants.sql revokes PUBLIC's execute from every function)
--------------------------------------------------------------------------
revoke execute on function
  memory.authorize_key(text),
  memory_internal.require_api_key(),
  memory.api_org(),
  memory.api_list_projects()
  from public;
grant execute on function
  memory.authorize_key(text),
  memory.api_org(),
  memory.api_list_projects()
  to chronomem_app;
-- Called by the invoker-rights functions above as the calling role.
grant execute on function
  memory_internal.require_api_key()
  to chronomem_app;
