-- The HTTP and MCP layer (schema memory_http): API keys, authentication
-- and authorization.  Every route runs one transaction: memory_http.authorize(token,
-- permission, project) -- which scopes the transaction to the key's org --
-- then one call of memory_http or the SQL API.  CREATE OR REPLACE only: re-applied on every migrate.

--------------------------------------------------------------------------
-- Permissions
--------------------------------------------------------------------------
-- memory_http.permissions(), the vocabulary, lives in sql/0037: the
-- api_keys check constraint calls it.

-- Which permission each call of the HTTP and MCP layer needs: the one
-- statement of it.  A route or an MCP tool is memory_http.authorize_call
-- (token, the function it calls, project) and then that call; the audited
-- writes below check the same row again.  A call not listed is refused.
-- NULL: any valid key of the org may make the call.
create or replace function memory_http.call_permissions()
  returns table (call text, permission text)
  language sql immutable parallel safe
  as $$
    select * from (values
      ('memory.fact_changes', 'project:read'),
      ('memory.get_project', 'project:read'),
      ('memory.graph_neighbors', 'project:read'),
      ('memory.list_communities', 'project:read'),
      ('memory.list_entities', 'project:read'),
      ('memory.list_facts', 'project:read'),
      ('memory.list_sessions', 'project:read'),
      ('memory.project_backlog', 'project:read'),
      ('memory.project_overview', 'project:read'),
      ('memory.fact_detail', 'project:read'),
      ('memory.session_messages', 'project:read'),
      ('memory.get_attachment', 'project:read'),
      ('memory.attachment_content', 'project:read'),
      ('memory_http.context', 'project:read'),
      ('memory_http.export_subject', 'project:read'),
      ('memory_http.fact_history', 'project:read'),
      ('memory_http.get_conflict', 'project:read'),
      ('memory_http.episode_extraction', 'project:read'),
      ('memory_http.extraction_rejections', 'project:read'),
      ('memory_http.list_conflicts', 'project:read'),
      ('memory_http.search', 'project:read'),
      ('memory_http.timeline', 'project:read'),
      ('memory_http.model_usage', 'project:read'),
      ('memory_http.assert_facts', 'project:write'),
      ('memory_http.ingest', 'project:write'),
      ('memory_http.ingest_attachments', 'project:write'),
      ('memory_http.merge_entities', 'project:write'),
      ('memory_http.refresh_communities', 'project:write'),
      ('memory_http.retract_fact', 'project:write'),
      ('memory_http.split_entity', 'project:write'),
      ('memory_http.upsert_entity', 'project:write'),
      ('memory_http.wipe', 'project:write'),
      ('memory_http.resolve_conflict', 'memory:review'),
      ('memory_http.review_fact', 'memory:review'),
      ('memory.list_webhooks', 'configuration:read'),
      ('memory.predicates_of', 'configuration:read'),
      ('memory.redaction_rules_of', 'configuration:read'),
      ('memory.webhook_event_types', 'configuration:read'),
      ('memory_http.webhook_deliveries', 'configuration:read'),
      ('memory_http.conflict_policy', 'configuration:read'),
      ('memory_http.extraction_schema', 'configuration:read'),
      ('memory_http.extraction_schema_versions', 'configuration:read'),
      ('memory_http.predicate_changes', 'configuration:read'),
      ('memory_http.suggest_cardinality', 'configuration:read'),
      ('memory_http.model_budget', 'configuration:read'),
      ('memory_http.create_webhook', 'configuration:write'),
      ('memory_http.declare_predicate', 'configuration:write'),
      ('memory_http.delete_redaction_rule', 'configuration:write'),
      ('memory_http.delete_webhook', 'configuration:write'),
      ('memory_http.rotate_webhook_secret', 'configuration:write'),
      ('memory_http.set_redaction_rule', 'configuration:write'),
      ('memory_http.set_retention', 'configuration:write'),
      ('memory_http.set_conflict_policy', 'configuration:write'),
      ('memory_http.set_extraction_schema', 'configuration:write'),
      ('memory_http.undo_predicate_change', 'configuration:write'),
      ('memory_http.update_webhook', 'configuration:write'),
      ('memory_http.create_api_key', 'project:manage'),
      ('memory_http.create_project', 'project:manage'),
      ('memory_http.delete_project', 'project:manage'),
      ('memory_http.list_api_keys', 'project:manage'),
      ('memory_http.revoke_api_key', 'project:manage'),
      ('memory_http.set_model_budget', 'project:manage'),
      ('memory_http.list_projects', null),
      ('memory_http.org', null)
    ) c(call, permission)
  $$;
comment on function memory_http.call_permissions() is
  'Every call the HTTP and MCP layer makes for a client, with the permission it needs (NULL: any valid key of the org): the one statement of it, read by memory_http.authorize_call and by the audited writes.';

create or replace function memory_http.call_permission(p_call text) returns text
  language plpgsql immutable parallel safe
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_permission text;
begin
  select c.permission into v_permission from memory_http.call_permissions() c where c.call = p_call;
  if not found then
    raise exception 'unknown call %', coalesce(quote_literal(p_call), 'NULL')
      using errcode = 'invalid_parameter_value',
            hint = 'Every call of the HTTP and MCP layer is listed in memory_http.call_permissions().';
  end if;
  return v_permission;
end
$$;
comment on function memory_http.call_permission(text) is
  'The permission memory_http.call_permissions() gives a call (NULL: any valid key); 22023 for a call it does not list.';

-- Does a key (its permissions and project) grant p_permission on
-- p_project (NULL: the org itself, e.g. creating a project)?
create or replace function memory_internal.api_allows(
  p_key_permissions text[], p_key_project uuid, p_permission text, p_project uuid)
  returns boolean
  language sql immutable parallel safe
  as $$
    select coalesce(
      'project:manage' = any (p_key_permissions)
      or (p_project is not null and p_project = p_key_project
          and p_permission = any (p_key_permissions)),
      false)
  $$;
comment on function memory_internal.api_allows(text[], uuid, text, uuid) is
  'The permission rule: project:manage covers every project of the key''s org and every permission; any other permission covers the key''s own project only.';

--------------------------------------------------------------------------
-- Tokens
--------------------------------------------------------------------------
-- Equality whose time depends on the lengths only, not on where the first
-- difference is.
create or replace function memory_internal.bytes_equal(p_a bytea, p_b bytea) returns boolean
  language plpgsql immutable strict parallel safe
as $$
declare
  v_diff integer := length(p_a) # length(p_b);
begin
  for i in 0 .. least(length(p_a), length(p_b)) - 1 loop
    v_diff := v_diff | (get_byte(p_a, i) # get_byte(p_b, i));
  end loop;
  return v_diff = 0;
end
$$;
comment on function memory_internal.bytes_equal(bytea, bytea) is
  'Constant-time comparison (for equal lengths) of two byte strings.';

-- A token is cmk_<key id, 32 hex>_<secret, 64 hex>.  NULLs when malformed.
create or replace function memory_internal.parse_api_token(
  p_token text, out key_id uuid, out secret bytea)
  language sql immutable parallel safe
  as $$
    select m[1]::uuid, decode(m[2], 'hex')
      from (select regexp_match(p_token, '^cmk_([0-9a-f]{32})_([0-9a-f]{64})$') as m) x
  $$;

-- The API key this transaction authenticated (memory_http.authenticate sets it).
create or replace function memory_internal.api_key_id() returns uuid
  language sql stable parallel safe
  as $$ select nullif(current_setting('chronomem.api_key_id', true), '')::uuid $$;

-- Who did it, for audit rows and fact events: the user an OIDC session
-- signed in, else the API key (or the session standing for it), else the role.
create or replace function memory_internal.api_actor() returns text
  language sql stable parallel safe
  as $$ select coalesce(nullif(current_setting('chronomem.api_actor', true), ''),
                        'api_key:' || memory_internal.api_key_id()::text, session_user::text) $$;

create or replace function memory_internal.audit(
  p_org uuid, p_project uuid, p_action text, p_resource text, p_counts jsonb default '{}')
  returns void
  language sql
  as $$
    insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
    values (p_org, p_project, p_action, p_resource, memory_internal.api_actor(),
            coalesce(p_counts, '{}'))
  $$;

--------------------------------------------------------------------------
-- Keys
--------------------------------------------------------------------------
create or replace function memory_http.create_api_key(
  p_project uuid, p_name text, p_permissions text[],
  out key_id uuid, out token text, out prefix text, out name text, out project_id uuid,
  out permissions text[], out created_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_bad text;
  v_secret bytea;
  v_permissions text[];
begin
  if p_name is null or length(btrim(p_name)) not between 1 and 200 then
    raise exception 'name must be 1 to 200 characters' using errcode = 'invalid_parameter_value',
      detail = 'name';
  end if;
  if p_permissions is null or cardinality(p_permissions) = 0 then
    raise exception 'permissions must name at least one of %', memory_http.permissions()
      using errcode = 'invalid_parameter_value', detail = 'permissions';
  end if;
  select p into v_bad from unnest(p_permissions) p
   where p is null or not p = any (memory_http.permissions()) limit 1;
  if found then
    raise exception 'unknown permission %; permissions are %',
      coalesce(quote_literal(v_bad), 'NULL'), memory_http.permissions()
      using errcode = 'invalid_parameter_value', detail = 'permissions';
  end if;

  -- 256 bits: sha256 over three random UUIDs (366 bits from the server's
  -- strong random source; no pgcrypto needed).
  v_secret := sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                     || uuid_send(gen_random_uuid()));
  key_id := gen_random_uuid();
  token := 'cmk_' || replace(key_id::text, '-', '') || '_' || encode(v_secret, 'hex');
  prefix := left(token, 16);
  -- (into a variable first: Citus plans no subquery in an INSERT's VALUES)
  v_permissions := array(select distinct p from unnest(p_permissions) p order by p);
  insert into memory_internal.api_keys as k
    (org_id, project_id, key_id, name, prefix, secret_hash, permissions, created_by)
  values (v_org, p_project, key_id, btrim(p_name), prefix, sha256(v_secret),
          v_permissions, memory_internal.api_actor())
  returning k.name, k.project_id, k.permissions, k.created_at
    into name, project_id, permissions, created_at;
  perform memory_internal.audit(v_org, p_project, 'api_key.create', 'api_key:' || key_id,
                                jsonb_build_object('permissions', cardinality(permissions)));
end
$$;
comment on function memory_http.create_api_key(uuid, text, text[]) is
  'Create an API key for a project of the current org with the given permissions (memory_http.permissions()). The token (cmk_<key id>_<secret>) is returned here only; the store keeps a sha256 of the secret.';

create or replace function memory_http.list_api_keys(p_project uuid)
  returns table (key_id uuid, project_id uuid, name text, prefix text, permissions text[],
                 created_at timestamptz, created_by text, revoked_at timestamptz,
                 last_used_at timestamptz)
  language plpgsql stable
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  -- The owner may read keys of every org (key_lookup): filter explicitly.
  return query
    select k.key_id, k.project_id, k.name, k.prefix, k.permissions, k.created_at, k.created_by,
           k.revoked_at, k.last_used_at
      from memory_internal.api_keys k
     where k.org_id = v_org and k.project_id = p_project
     order by k.created_at, k.key_id;
end
$$;
comment on function memory_http.list_api_keys(uuid) is
  'API keys of a project of the current org, revoked ones included; never a secret or its hash.';

create or replace function memory_http.revoke_api_key(
  p_project uuid, p_key uuid,
  out key_id uuid, out status text, out revoked_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_revoked timestamptz;
begin
  select k.revoked_at into v_revoked from memory_internal.api_keys k
   where k.org_id = v_org and k.project_id = p_project and k.key_id = p_key
     for update;
  if not found then
    raise exception 'API key % not found in project %', p_key, p_project
      using errcode = 'no_data_found';
  end if;
  key_id := p_key;
  if v_revoked is not null then
    status := 'already_revoked';
    revoked_at := v_revoked;
    return;
  end if;
  update memory_internal.api_keys k set revoked_at = now()
   where k.org_id = v_org and k.key_id = p_key
  returning k.revoked_at into revoked_at;
  status := 'revoked';
  perform memory_internal.audit(v_org, p_project, 'api_key.revoke', 'api_key:' || p_key);
end
$$;
comment on function memory_http.revoke_api_key(uuid, uuid) is
  'Revoke an API key of a project of the current org: every later request with it is refused. Idempotent.';

--------------------------------------------------------------------------
-- Authentication and authorization
--------------------------------------------------------------------------
create or replace function memory_http.authenticate(
  p_token text,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  -- Compared against when the key id is unknown, so that costs the same.
  c_nothing constant bytea := decode(repeat('00', 32), 'hex');
  v_token record := memory_internal.parse_api_token(p_token);
  k record;
  v_ok boolean;
begin
  -- A failed attempt leaves the transaction with no org and no key.
  perform memory_internal.set_local('chronomem.org_id', ''),
          memory_internal.set_local('chronomem.api_key_id', ''),
          memory_internal.set_local('chronomem.api_project_id', ''),
          memory_internal.set_local('chronomem.api_permissions', ''),
          memory_internal.set_local('chronomem.api_actor', '');
  -- A sign-in session (functions/086_http_sessions.sql) stands for its key
  -- or its OIDC mapping.
  if left(p_token, 4) = 'cms_' then
    select s.org_id, s.project_id, s.key_id, s.permissions into org_id, project_id, key_id, permissions
      from memory_internal.authenticate_session(p_token) s;
    return;
  end if;
  if v_token.key_id is null then
    return;
  end if;
  -- Across orgs (policy key_lookup): the token names the key, not its org.
  select a.org_id, a.project_id, a.key_id, a.permissions, a.secret_hash, a.revoked_at into k
    from memory_internal.api_keys a where a.key_id = v_token.key_id;
  v_ok := memory_internal.bytes_equal(sha256(v_token.secret), coalesce(k.secret_hash, c_nothing));
  if not v_ok or k.key_id is null or k.revoked_at is not null then
    return;
  end if;

  perform memory_internal.set_local('chronomem.org_id', k.org_id::text),
          memory_internal.set_local('chronomem.api_key_id', k.key_id::text),
          memory_internal.set_local('chronomem.api_project_id', k.project_id::text),
          memory_internal.set_local('chronomem.api_permissions', k.permissions::text);
  -- At most once a minute, and never waiting: a request that finds the row
  -- locked (another request with the same key) leaves it.
  update memory_internal.api_keys a set last_used_at = now()
   where a.org_id = k.org_id and a.key_id = k.key_id
     and a.key_id in (select b.key_id from memory_internal.api_keys b
                       where b.org_id = k.org_id and b.key_id = k.key_id
                         and (b.last_used_at is null or b.last_used_at < now() - interval '1 minute')
                         for update skip locked);
  org_id := k.org_id;
  project_id := k.project_id;
  key_id := k.key_id;
  permissions := k.permissions;
end
$$;
comment on function memory_http.authenticate(text) is
  'Check an API token (cmk_<key id>_<secret>) or a sign-in session''s (cms_<session id>_<secret>, memory_http.open_key_session / open_oidc_session): on success scope this transaction to the key''s org (like memory.use_org) and return the key''s org, project, id and permissions; on any failure (malformed, unknown, wrong secret, revoked) all NULL and no org scope. The secret is compared in constant time.';

create or replace function memory_http.authorize(
  p_token text, p_permission text, p_project uuid default null,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
begin
  if p_permission is null or not p_permission = any (memory_http.permissions()) then
    raise exception 'unknown permission %', coalesce(quote_literal(p_permission), 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  select * into a from memory_http.authenticate(p_token);
  if a.key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  -- Another org's project is "not found" (never "forbidden"): its
  -- existence is not the caller's to learn.
  if p_project is not null then
    perform memory_internal.project_org(p_project);
  end if;
  if not memory_internal.api_allows(a.permissions, a.project_id, p_permission, p_project) then
    raise exception 'this API key does not grant % on %', p_permission,
      coalesce('project ' || p_project, 'this org')
      using errcode = 'CM403';
  end if;
  org_id := a.org_id;
  project_id := a.project_id;
  key_id := a.key_id;
  permissions := a.permissions;
end
$$;
comment on function memory_http.authorize(text, text, uuid) is
  'memory_http.authenticate, then require p_permission on p_project (NULL: on the org). Raises SQLSTATE 28000 for a bad token, P0002 for a project not in the key''s org, CM403 when the key does not grant the permission.';

-- For the audited writes below: the key this transaction authorized must
-- grant p_permission on p_project.  Guards against a caller that forgot
-- memory_http.authorize (the settings are the app role's to set: this is not a
-- boundary against the app role itself).
create or replace function memory_internal.require_api(p_permission text, p_project uuid)
  returns uuid
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_key uuid := memory_internal.api_key_id();
begin
  if v_key is null or memory_internal.current_org() is null then
    raise exception 'no API key authorized in this transaction'
      using errcode = 'invalid_authorization_specification',
            hint = 'Call memory_http.authorize(token, permission, project) first.';
  end if;
  if p_project is not null then
    perform memory_internal.project_org(p_project);
  end if;
  if not memory_internal.api_allows(
           nullif(current_setting('chronomem.api_permissions', true), '')::text[],
           nullif(current_setting('chronomem.api_project_id', true), '')::uuid,
           p_permission, p_project) then
    raise exception 'this API key does not grant % on %', p_permission,
      coalesce('project ' || p_project, 'this org')
      using errcode = 'CM403';
  end if;
  return v_key;
end
$$;

--------------------------------------------------------------------------
-- Bootstrap (CLI): an org, a project and a first key in one call
--------------------------------------------------------------------------
create or replace function memory_http.bootstrap_api_key(
  p_org uuid, p_org_name text, p_project_name text, p_key_name text, p_permissions text[])
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := p_org;
  v_project uuid;
  v_created_org boolean := false;
  v_created_project boolean := false;
  k record;
begin
  if (p_org is null) = (p_org_name is null) then
    raise exception 'give an org id or a new org''s name, not both or neither'
      using errcode = 'invalid_parameter_value', detail = 'org';
  end if;
  -- A transaction scoped to one org cannot make keys in another: to it the
  -- other org is not found, like an unknown one.
  if not memory_internal.in_scope(coalesce(p_org, memory_internal.current_org())) then
    raise exception 'org % not found', p_org using errcode = 'no_data_found';
  end if;
  -- Org names are not unique and other orgs are invisible: a name always
  -- makes a new org; an existing org is named by its id.
  if v_org is null then
    v_org := memory.create_org(p_org_name);
    v_created_org := true;
  end if;
  perform memory.use_org(v_org);
  select p.project_id into v_project from memory.projects p
   where p.org_id = v_org and p.name = btrim(p_project_name);
  if v_project is null then
    v_project := memory.create_project(v_org, p_project_name);
    v_created_project := true;
  end if;
  select * into k from memory_http.create_api_key(v_project, p_key_name, p_permissions);
  return jsonb_build_object(
    'org_id', v_org, 'org_created', v_created_org,
    'project_id', v_project, 'project_created', v_created_project,
    'key_id', k.key_id, 'token', k.token, 'prefix', k.prefix, 'permissions', k.permissions);
end
$$;
comment on function memory_http.bootstrap_api_key(uuid, text, text, text, text[]) is
  'For operators (chronomem create-key): in an existing org (by id) or a new one (by name), find or create a project by name and create an API key for it. Leaves the transaction scoped to that org. A transaction already scoped to another org gets "org not found".';


-- Like memory_http.authorize, for a route that names no project: the key must
-- grant p_permission on its own project (or hold project:manage).  Raises
-- 28000 for a bad token and CM403 when the key lacks the permission.
create or replace function memory_http.authorize_own_project(
  p_token text, p_permission text,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
begin
  if p_permission is null or not p_permission = any (memory_http.permissions()) then
    raise exception 'unknown permission %', coalesce(quote_literal(p_permission), 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  select * into a from memory_http.authenticate(p_token);
  if a.key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  if not memory_internal.api_allows(a.permissions, a.project_id, p_permission, a.project_id) then
    raise exception 'this API key does not grant %', p_permission using errcode = 'CM403';
  end if;
  org_id := a.org_id;
  project_id := a.project_id;
  key_id := a.key_id;
  permissions := a.permissions;
end
$$;
comment on function memory_http.authorize_own_project(text, text) is
  'memory_http.authenticate, then require p_permission on the key''s own project (project:manage covers it too); for API routes that name no project. Raises 28000 for a bad token, CM403 when the key does not grant the permission.';


-- Like memory_http.authorize, for a route any valid key may call, whatever its
-- permissions (its own org, the projects it can see).  Raises 28000 for a
-- bad token.
create or replace function memory_http.authorize_key(
  p_token text,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
begin
  select * into a from memory_http.authenticate(p_token);
  if a.key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  org_id := a.org_id;
  project_id := a.project_id;
  key_id := a.key_id;
  permissions := a.permissions;
end
$$;
comment on function memory_http.authorize_key(text) is
  'memory_http.authenticate, requiring only a valid key (no permission): scopes the transaction to the key''s org; for API routes every key may call (its org, its visible projects). Raises 28000 for a bad token.';

-- What every route and MCP tool runs before its one call: authorize the
-- key for that call, with the permission memory_http.call_permissions()
-- gives it, on p_project (p_own_project: the route names no project and
-- the key's own is meant; neither: the org).  So HTTP, MCP and any other
-- client of this layer cannot disagree on what a call needs.
create or replace function memory_http.authorize_call(
  p_token text, p_call text, p_project uuid default null, p_own_project boolean default false)
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_permission text := memory_http.call_permission(p_call);
begin
  if v_permission is null then
    return (select a.key_id from memory_http.authorize_key(p_token) a);
  elsif p_own_project then
    return (select a.key_id from memory_http.authorize_own_project(p_token, v_permission) a);
  end if;
  return (select a.key_id from memory_http.authorize(p_token, v_permission, p_project) a);
end
$$;
comment on function memory_http.authorize_call(text, text, uuid, boolean) is
  'Authorize an API key for one call of the HTTP and MCP layer (a function named as in memory_http.call_permissions()): the permission that list gives it, on p_project (p_own_project: the key''s own project; neither: the org). Returns the key id; raises as memory_http.authorize (28000, P0002, CM403), and 22023 for a call not listed.';

-- The key this transaction authenticated, or 28000 (guards against a
-- caller that forgot memory_http.authorize*).
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
            hint = 'Call memory_http.authorize_key(token) first.';
  end if;
  return v_key;
end
$$;
comment on function memory_internal.require_api_key() is
  'The API key authorized in this transaction; raises 28000 when there is none (no org scope or no key).';
