-- The HTTP API's SQL: API keys, authentication and authorization, the
-- audited write calls of the API, and the paged/JSON reads its routes make.
-- Every route runs one transaction: memory.authorize(token, permission,
-- project) -- which scopes the transaction to the key's org -- then one call
-- from this file or the SQL API.  CREATE OR REPLACE only: re-applied on
-- every migrate.

--------------------------------------------------------------------------
-- Permissions
--------------------------------------------------------------------------
create or replace function memory.api_permissions() returns text[]
  language sql immutable parallel safe
  as $$
    select array['project:read', 'project:write', 'project:manage',
                 'configuration:read', 'configuration:write',
                 'members:read', 'members:write']::text[]
  $$;
comment on function memory.api_permissions() is
  'The fixed vocabulary of API key permissions. project:read/write: the key''s project''s memory (facts, episodes, search); configuration:read/write: its predicates; project:manage: every project of the org (create projects, manage keys) and implies every other permission; members:read/write: reserved.';

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

-- The API key this transaction authenticated (memory.authenticate sets it).
create or replace function memory_internal.api_key_id() returns uuid
  language sql stable parallel safe
  as $$ select nullif(current_setting('chronomem.api_key_id', true), '')::uuid $$;

-- Who did it, for audit rows and fact events: the API key, else the role.
create or replace function memory_internal.api_actor() returns text
  language sql stable parallel safe
  as $$ select coalesce('api_key:' || memory_internal.api_key_id()::text, session_user::text) $$;

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
create or replace function memory.create_api_key(
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
begin
  if p_name is null or length(btrim(p_name)) not between 1 and 200 then
    raise exception 'name must be 1 to 200 characters' using errcode = 'invalid_parameter_value',
      detail = 'name';
  end if;
  if p_permissions is null or cardinality(p_permissions) = 0 then
    raise exception 'permissions must name at least one of %', memory.api_permissions()
      using errcode = 'invalid_parameter_value', detail = 'permissions';
  end if;
  select p into v_bad from unnest(p_permissions) p
   where p is null or not p = any (memory.api_permissions()) limit 1;
  if found then
    raise exception 'unknown permission %; permissions are %',
      coalesce(quote_literal(v_bad), 'NULL'), memory.api_permissions()
      using errcode = 'invalid_parameter_value', detail = 'permissions';
  end if;

  -- 256 bits: sha256 over three random UUIDs (366 bits from the server's
  -- strong random source; no pgcrypto needed).
  v_secret := sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                     || uuid_send(gen_random_uuid()));
  key_id := gen_random_uuid();
  token := 'cmk_' || replace(key_id::text, '-', '') || '_' || encode(v_secret, 'hex');
  prefix := left(token, 16);
  insert into memory_internal.api_keys as k
    (org_id, project_id, key_id, name, prefix, secret_hash, permissions, created_by)
  values (v_org, p_project, key_id, btrim(p_name), prefix, sha256(v_secret),
          array(select distinct p from unnest(p_permissions) p order by p),
          memory_internal.api_actor())
  returning k.name, k.project_id, k.permissions, k.created_at
    into name, project_id, permissions, created_at;
  perform memory_internal.audit(v_org, p_project, 'api_key.create', 'api_key:' || key_id,
                                jsonb_build_object('permissions', cardinality(permissions)));
end
$$;
comment on function memory.create_api_key(uuid, text, text[]) is
  'Create an API key for a project of the current org with the given permissions (memory.api_permissions()). The token (cmk_<key id>_<secret>) is returned here only; the store keeps a sha256 of the secret.';

create or replace function memory.list_api_keys(p_project uuid)
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
comment on function memory.list_api_keys(uuid) is
  'API keys of a project of the current org, revoked ones included; never a secret or its hash.';

create or replace function memory.revoke_api_key(
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
comment on function memory.revoke_api_key(uuid, uuid) is
  'Revoke an API key of a project of the current org: every later request with it is refused. Idempotent.';

--------------------------------------------------------------------------
-- Authentication and authorization
--------------------------------------------------------------------------
create or replace function memory.authenticate(
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
  perform set_config('chronomem.org_id', '', true),
          set_config('chronomem.api_key_id', '', true),
          set_config('chronomem.api_project_id', '', true),
          set_config('chronomem.api_permissions', '', true);
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

  perform set_config('chronomem.org_id', k.org_id::text, true),
          set_config('chronomem.api_key_id', k.key_id::text, true),
          set_config('chronomem.api_project_id', k.project_id::text, true),
          set_config('chronomem.api_permissions', k.permissions::text, true);
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
comment on function memory.authenticate(text) is
  'Check an API token (cmk_<key id>_<secret>): on success scope this transaction to the key''s org (like memory.use_org) and return the key''s org, project, id and permissions; on any failure (malformed, unknown, wrong secret, revoked) all NULL and no org scope. The secret is compared in constant time.';

create or replace function memory.authorize(
  p_token text, p_permission text, p_project uuid default null,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
begin
  if p_permission is null or not p_permission = any (memory.api_permissions()) then
    raise exception 'unknown permission %', coalesce(quote_literal(p_permission), 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  select * into a from memory.authenticate(p_token);
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
comment on function memory.authorize(text, text, uuid) is
  'memory.authenticate, then require p_permission on p_project (NULL: on the org). Raises SQLSTATE 28000 for a bad token, P0002 for a project not in the key''s org, CM403 when the key does not grant the permission.';

-- For the audited writes below: the key this transaction authorized must
-- grant p_permission on p_project.  Guards against a caller that forgot
-- memory.authorize (the settings are the app role's to set: this is not a
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
            hint = 'Call memory.authorize(token, permission, project) first.';
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
create or replace function memory.bootstrap_api_key(
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
  select * into k from memory.create_api_key(v_project, p_key_name, p_permissions);
  return jsonb_build_object(
    'org_id', v_org, 'org_created', v_created_org,
    'project_id', v_project, 'project_created', v_created_project,
    'key_id', k.key_id, 'token', k.token, 'prefix', k.prefix, 'permissions', k.permissions);
end
$$;
comment on function memory.bootstrap_api_key(uuid, text, text, text, text[]) is
  'For operators (chronomem create-key): in an existing org (by id) or a new one (by name), find or create a project by name and create an API key for it. Leaves the transaction scoped to that org. A transaction already scoped to another org gets "org not found".';

--------------------------------------------------------------------------
-- Audited writes: one call per mutating request; each writes one audit row
-- (retract_fact and wipe write their own) with the key as actor.
--------------------------------------------------------------------------
create or replace function memory.api_create_project(p_name text)
  returns table (project_id uuid, org_id uuid, name text, created_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_project uuid;
begin
  perform memory_internal.require_api('project:manage', null);
  if p_name is null or length(btrim(p_name)) not between 1 and 200 then
    raise exception 'name must be 1 to 200 characters' using errcode = 'invalid_parameter_value',
      detail = 'name';
  end if;
  v_project := memory.create_project(memory_internal.current_org(), p_name);
  perform memory_internal.audit(memory_internal.current_org(), v_project, 'project.create',
                                'project:' || v_project);
  return query select * from memory.get_project(v_project);
end
$$;
comment on function memory.api_create_project(text) is
  'API: create a project in the authorized key''s org (needs project:manage); audited.';

create or replace function memory.get_project(p_project uuid)
  returns table (project_id uuid, org_id uuid, name text, created_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.project_org(p_project);
  return query select p.project_id, p.org_id, p.name, p.created_at
                 from memory.projects p where p.project_id = p_project;
end
$$;
comment on function memory.get_project(uuid) is 'A project of the current org; no_data_found otherwise.';

create or replace function memory.api_assert_facts(
  p_project uuid, p_facts jsonb, p_override_tombstones boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_result := memory.assert_facts(p_project, p_facts, 'api', null,
                                  coalesce(p_override_tombstones, false),
                                  memory_internal.api_actor());
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'facts.assert',
    'project:' || p_project,
    jsonb_build_object('facts', jsonb_array_length(p_facts)) || (v_result - 'superseded_pairs' - 'results'));
  -- The API names the count superseded_count (superseded is per fact).
  return (v_result - 'superseded') || jsonb_build_object('superseded_count', v_result -> 'superseded');
end
$$;
comment on function memory.api_assert_facts(uuid, jsonb, boolean) is
  'API: memory.assert_facts as the authorized key (needs project:write); audited with the counts.';

create or replace function memory.api_ingest(
  p_project uuid, p_session text, p_messages jsonb, p_idempotency_key text default null,
  p_session_metadata jsonb default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_result := memory.ingest(p_project, p_session, p_messages, p_idempotency_key, p_session_metadata);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'memory.ingest',
    'session:' || (v_result ->> 'session_id'),
    jsonb_build_object('episodes', jsonb_array_length(v_result -> 'episode_ids'),
                       'replayed', v_result -> 'replayed'));
  return v_result;
end
$$;
comment on function memory.api_ingest(uuid, text, jsonb, text, jsonb) is
  'API: memory.ingest as the authorized key (needs project:write); audited with counts.';

create or replace function memory.api_retract_fact(p_project uuid, p_fact uuid, p_reason text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api('project:write', p_project);
  -- retract_fact writes the audit row (retract_fact, fact:<id>) itself.
  return memory.retract_fact(p_project, p_fact, p_reason, memory_internal.api_actor());
end
$$;
comment on function memory.api_retract_fact(uuid, uuid, text) is
  'API: memory.retract_fact as the authorized key (needs project:write); audited by retract_fact.';

create or replace function memory.api_wipe(
  p_project uuid, p_session text default null, p_subject text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api('project:write', p_project);
  -- wipe writes the audit row (wipe, scope, counts) itself.
  return memory.wipe(p_project, p_session, p_subject, memory_internal.api_actor());
end
$$;
comment on function memory.api_wipe(uuid, text, text) is
  'API: memory.wipe as the authorized key (needs project:write); audited by wipe.';

create or replace function memory.api_delete_project(p_project uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api('project:manage', p_project);
  return memory.delete_project(p_project, memory_internal.api_actor());
end
$$;
comment on function memory.api_delete_project(uuid) is
  'API: memory.delete_project as the authorized key (needs project:manage); audited by delete_project.';

create or replace function memory.api_declare_predicate(
  p_project uuid, p_predicate text, p_cardinality text)
  returns table (predicate text, cardinality text, declared_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api('configuration:write', p_project);
  perform memory.declare_predicate(p_project, p_predicate, p_cardinality);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'predicate.declare',
    'predicate:' || memory.normalize_text(p_predicate));
  return query select d.predicate, d.cardinality, d.declared_at from memory.predicates_of(p_project) d
                where d.predicate = memory.normalize_text(p_predicate);
end
$$;
comment on function memory.api_declare_predicate(uuid, text, text) is
  'API: memory.declare_predicate as the authorized key (needs configuration:write); audited.';

-- An entity name the API takes (a name, an alias, merge's keep and absorb)
-- is at most 500 characters, as assert_facts takes a subject; the error
-- names the field.
create or replace function memory_internal.check_entity_name_length(p_field text, p_name text)
  returns void
  language plpgsql immutable
as $$
begin
  if length(p_name) > 500 then
    raise exception '% is longer than 500 characters', p_field using errcode = 'invalid_parameter_value';
  end if;
end
$$;
comment on function memory_internal.check_entity_name_length(text, text) is
  'Refuse an entity name over 500 characters given to the API, naming the field.';

-- An entity with its type, summary and aliases, as one write: facts stored
-- with any of its names as a plain-name object become its own (see
-- memory.add_alias).  The lengths are checked here, as assert_facts checks
-- a subject's, so that the error names the field (upsert_entity and
-- add_alias refuse a name with no letters or digits).
create or replace function memory.api_upsert_entity(
  p_project uuid, p_name text, p_entity_type text default null, p_summary text default null,
  p_aliases text[] default '{}')
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid;
  v_id uuid;
  v_alias text;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_org := memory_internal.project_org(p_project);
  perform memory_internal.check_entity_name_length('name', p_name);
  if length(p_summary) > 8192 then
    raise exception 'summary is longer than 8192 characters'
      using errcode = 'invalid_parameter_value';
  elsif cardinality(p_aliases) > 100 then
    raise exception 'aliases: at most 100 per call, got %', cardinality(p_aliases)
      using errcode = 'invalid_parameter_value';
  end if;
  foreach v_alias in array coalesce(p_aliases, '{}') loop
    perform memory_internal.check_entity_name_length('aliases: an alias', v_alias);
  end loop;
  v_id := memory.upsert_entity(p_project, p_name, p_entity_type, p_summary);
  foreach v_alias in array coalesce(p_aliases, '{}') loop
    perform memory.add_alias(p_project, p_name, v_alias);
  end loop;
  perform memory_internal.audit(v_org, p_project, 'entity.upsert', 'entity:' || v_id,
    jsonb_build_object('aliases', coalesce(cardinality(p_aliases), 0)));
  return memory_internal.entity_api_answer(v_org, v_id);
end
$$;
comment on function memory.api_upsert_entity(uuid, text, text, text, text[]) is
  'API: memory.upsert_entity and memory.add_alias for each alias, as the authorized key (needs project:write), in one transaction; audited. Facts stored with any of the names as a plain-name object become the entity''s.';

-- Two entities that are one thing, merged (memory.merge_entities): the
-- kept entity as the API shows it, and what the merge moved.
drop function if exists memory.api_merge_entities(uuid, text, text);
create or replace function memory.api_merge_entities(
  p_project uuid, p_keep text, p_absorb text, p_dry_run boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid;
  v_report jsonb;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_org := memory_internal.project_org(p_project);
  perform memory_internal.check_entity_name_length('keep', p_keep);
  perform memory_internal.check_entity_name_length('absorb', p_absorb);
  v_report := memory.merge_entities(p_project, p_keep, p_absorb, p_dry_run);
  if not p_dry_run then
    perform memory_internal.audit(v_org, p_project, 'entity.merge',
      'entity:' || (v_report ->> 'entity_id'), v_report - 'entity_id' - 'aliases');
  end if;
  return jsonb_build_object(
           'entity', memory_internal.entity_api_answer(v_org, (v_report ->> 'entity_id')::uuid))
         || (v_report - 'entity_id');
end
$$;
comment on function memory.api_merge_entities(uuid, text, text, boolean) is
  'API: memory.merge_entities as the authorized key (needs project:write); audited with the counts (a dry run is not). Returns the kept entity and what the merge moved (or would move).';

-- An alias split off into an entity of its own (memory.split_entity): the
-- new entity as the API shows it, and what the split moved.
create or replace function memory.api_split_entity(
  p_project uuid, p_name text, p_dry_run boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid;
  v_report jsonb;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_org := memory_internal.project_org(p_project);
  perform memory_internal.check_entity_name_length('name', p_name);
  v_report := memory.split_entity(p_project, p_name, p_dry_run);
  if not p_dry_run then
    perform memory_internal.audit(v_org, p_project, 'entity.split',
      'entity:' || (v_report ->> 'entity_id'), v_report - 'entity_id');
  end if;
  -- (A dry run's entity is gone with its rollback: only its name is known.)
  return jsonb_build_object(
           'entity', memory_internal.entity_api_answer(v_org, (v_report ->> 'entity_id')::uuid))
         || (v_report - 'entity_id');
end
$$;
comment on function memory.api_split_entity(uuid, text, boolean) is
  'API: memory.split_entity as the authorized key (needs project:write); audited with the counts (a dry run is not). Returns the new entity (null for a dry run) and what the split moved (or would move).';

--------------------------------------------------------------------------
-- Reads for the API (JSON, keyset-paged).  Timestamps come out in UTC.
--------------------------------------------------------------------------
create or replace function memory_internal.check_limit(p_limit integer, p_max integer) returns void
  language plpgsql immutable
as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > p_max then
    raise exception 'limit must be between 1 and %', p_max
      using errcode = 'invalid_parameter_value', detail = 'limit';
  end if;
end
$$;

create or replace function memory.list_facts(
  p_project uuid,
  p_at timestamptz default null,
  p_known_at timestamptz default null,
  p_subject text default null,
  p_predicate text default null,
  p_after uuid default null,
  p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_at timestamptz;
  v_known timestamptz;
  v_subject uuid;
  v_facts jsonb;
  v_n integer;
begin
  -- NULL instants mean now, as in every read.
  select i.at, i.known_at into v_at, v_known
    from memory_internal.read_instants(p_at, p_known_at) i;
  perform memory_internal.check_instants(v_at, v_known);
  perform memory_internal.check_limit(p_limit, 1000);
  if p_subject is not null then
    v_subject := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
    if v_subject is null then
      return jsonb_build_object('facts', '[]'::jsonb, 'next_cursor', null,
                                'as_of', v_at, 'known_at', v_known);
    end if;
  end if;
  -- One row more than asked says whether there is a next page.
  select coalesce(jsonb_agg(x.j order by x.fact_id), '[]'), count(*) into v_facts, v_n
    from (select f.fact_id, jsonb_build_object(
                   'fact_id', f.fact_id, 'subject', s.name, 'subject_id', f.subject_id,
                   'predicate', f.predicate_label, 'object', coalesce(o.name, f.object_literal),
                   'object_entity_id', f.object_entity_id, 'content', f.content,
                   'valid_from', lower(f.valid_range), 'valid_until', upper(f.valid_range),
                   'confidence', f.confidence, 'source', f.source,
                   'source_episode_id', f.source_episode_id, 'recorded_at', f.recorded_at) as j
            from memory.facts_at(p_project, v_at, v_known) f
            join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
            left join memory.entities o on o.org_id = f.org_id and o.entity_id = f.object_entity_id
           where (v_subject is null or f.subject_id = v_subject)
             and (p_predicate is null or f.predicate = memory.normalize_text(p_predicate))
             and (p_after is null or f.fact_id > p_after)
           order by f.fact_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_facts := v_facts - p_limit;
  end if;
  return jsonb_build_object(
    'facts', v_facts,
    'next_cursor', case when v_n > p_limit then v_facts -> (p_limit - 1) -> 'fact_id' end,
    'as_of', v_at, 'known_at', v_known);
end
$$;
comment on function memory.list_facts(uuid, timestamptz, timestamptz, text, text, uuid, integer) is
  'Facts effective at p_at as believed at p_known_at (defaults: now), optionally of one subject and/or predicate, ordered by fact_id and paged by keyset: pass next_cursor as p_after for the next page.';

-- A fact event as the API shows it (windows as bounds): fact_history's
-- answer and fact_changes' share it.
create or replace function memory_internal.fact_event_json(
  p_event_id bigint, p_occurred_at timestamptz, p_event_type text, p_fact uuid,
  p_old_fact uuid, p_new_fact uuid, p_old_range tstzrange, p_new_range tstzrange,
  p_actor text, p_reason text, p_subject text, p_predicate text, p_object text, p_content text)
  returns jsonb
  -- Stable, as jsonb_build_object of a timestamp is (the time zone): so it
  -- is inlined into the caller's query instead of called per event.
  language sql stable parallel safe
  as $$
    select jsonb_build_object(
             'event_id', p_event_id, 'occurred_at', p_occurred_at, 'event_type', p_event_type,
             'fact_id', p_fact, 'old_fact_id', p_old_fact, 'new_fact_id', p_new_fact,
             'old_valid_from', lower(p_old_range), 'old_valid_until', upper(p_old_range),
             'new_valid_from', lower(p_new_range), 'new_valid_until', upper(p_new_range),
             'new_window_empty', coalesce(isempty(p_new_range), false),
             'actor', p_actor, 'reason', p_reason, 'subject', p_subject,
             'predicate', p_predicate, 'object', p_object, 'content', p_content)
  $$;
comment on function memory_internal.fact_event_json(bigint, timestamptz, text, uuid, uuid, uuid, tstzrange, tstzrange, text, text, text, text, text, text) is
  'A fact event as the API shows it, windows as bounds (api_fact_history, fact_changes).';

create or replace function memory.api_fact_history(p_project uuid, p_fact uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  if not exists (select from memory_internal.fact_versions(p_project) v where v.fact_id = p_fact) then
    raise exception 'fact % not found in project %', p_fact, p_project using errcode = 'no_data_found';
  end if;
  return jsonb_build_object('fact_id', p_fact, 'events', coalesce((
    select jsonb_agg(memory_internal.fact_event_json(
             h.event_id, h.occurred_at, h.event_type, h.fact_id, h.old_fact_id, h.new_fact_id,
             h.old_range, h.new_range, h.actor, h.reason, h.subject, h.predicate, h.object,
             h.content)
           order by h.occurred_at, h.event_id)
      from memory.fact_history(p_project, p_fact) h), '[]'));
end
$$;
comment on function memory.api_fact_history(uuid, uuid) is
  'memory.fact_history as JSON with windows as bounds; no_data_found for a fact not in the project.';

create or replace function memory.api_timeline(
  p_project uuid, p_subject text, p_predicate text default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  if p_subject is null or btrim(p_subject) = '' then
    raise exception 'subject must not be empty' using errcode = 'invalid_parameter_value',
      detail = 'subject';
  end if;
  return jsonb_build_object('subject', p_subject, 'facts', coalesce((
    select jsonb_agg(jsonb_build_object(
             'fact_id', t.fact_id, 'predicate', t.predicate, 'object', t.object,
             'content', t.content, 'valid_from', t.valid_from,
             'window_from', lower(t.valid_range), 'window_until', upper(t.valid_range),
             'window_empty', isempty(t.valid_range), 'recorded_at', t.recorded_at,
             'retracted_at', t.invalid_at, 'status', t.status,
             'events', coalesce((
               select jsonb_agg(jsonb_build_object(
                        'event', e ->> 'event', 'at', (e ->> 'at')::timestamptz,
                        'new_fact_id', e -> 'new_fact_id', 'actor', e -> 'actor',
                        'reason', e -> 'reason') order by o)
                 from jsonb_array_elements(t.events) with ordinality u(e, o)), '[]'))
           order by n)
      from memory.subject_timeline(p_project, p_subject, p_predicate) with ordinality t(
             fact_id, predicate, object, content, valid_from, valid_range, recorded_at,
             invalid_at, status, events, n)), '[]'));
end
$$;
comment on function memory.api_timeline(uuid, text, text) is
  'memory.subject_timeline as JSON (windows as bounds), for the API.';

-- What the store came to believe in a span of record time: every event of
-- the project's facts (asserted, superseded, contradicted, expired,
-- retracted, restored) that occurred after p_since and at or before
-- p_until, oldest first, with the fact's triple -- "what changed since my
-- last session?".  p_until NULL is now (this transaction's record-time
-- instant, as known_at's default); p_since NULL is the beginning.  An event
-- occurs at its writer's record-time instant (its transaction's start,
-- memory_internal.begin_write), and becomes visible when that transaction
-- commits: a span that ends now can still gain the events of writers
-- running now, so a reader that polls keeps p_until a little in the past
-- or reads again from a little before its last one.  Wiped facts take
-- their events with them.  A keyset page on (occurred_at, event_id): pass
-- next_cursor as p_after, with the same span.  Read under row-level
-- security, as the caller; the span is read through fact_events_project_idx.
create or replace function memory.fact_changes(
  p_project uuid,
  p_since timestamptz default null,
  p_until timestamptz default null,
  p_after text default null,
  p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_until timestamptz;
  v_lo timestamptz := coalesce(p_since, '-infinity');
  v_after jsonb;
  v_after_at timestamptz;
  v_after_id bigint;
  v_rows jsonb;
  v_n integer;
  v_last jsonb;
begin
  select i.known_at into v_until from memory_internal.read_instants(null, p_until) i;
  if not isfinite(v_until) then
    raise exception 'until must be finite' using errcode = 'invalid_parameter_value', detail = 'until';
  end if;
  if v_lo > v_until then
    raise exception 'since (%) is later than until (%)', v_lo, v_until
      using errcode = 'invalid_parameter_value', detail = 'since';
  end if;
  perform memory_internal.check_limit(p_limit, 1000);
  if p_after is not null then
    begin
      v_after := convert_from(decode(p_after, 'hex'), 'UTF8')::jsonb;
      v_after_at := (v_after ->> 0)::timestamptz;
      v_after_id := (v_after ->> 1)::bigint;
    exception when others then
      v_after_id := null;
    end;
    if v_after_at is null or v_after_id is null then
      raise exception 'cursor is not a next_cursor of this list' using errcode = 'invalid_parameter_value',
        detail = 'cursor';
    end if;
    v_lo := greatest(v_lo, v_after_at);
  end if;
  -- One row more than asked says whether there is a next page.  The span's
  -- start is an index condition (occurred_at >= v_lo: timestamps compare
  -- leakproof under row-level security, a row comparison would not); the
  -- strict bound and the cursor's tie-break on event_id are filters.
  select coalesce(jsonb_agg(memory_internal.fact_event_json(
                    e.event_id, e.occurred_at, e.event_type, e.fact_id, e.old_fact_id, e.new_fact_id,
                    e.old_range, e.new_range, e.actor, e.reason, s.name, v.predicate_label,
                    coalesce(o.name, v.object_literal), v.content)
                  order by e.occurred_at, e.event_id), '[]'),
         count(*)
    into v_rows, v_n
    -- The page's events first (a writer's batch shares one instant: the
    -- sort within it reads the batch's events, not their facts), then each
    -- one's fact by its key (offset 0: a probe per event; as a join, a plan
    -- made without statistics read the project's facts for every event).
    from (select e.*
            from memory.fact_events e
           where e.org_id = v_org and e.project_id = p_project
             and e.occurred_at >= v_lo and e.occurred_at <= v_until
             and e.occurred_at > coalesce(p_since, '-infinity')
             and (v_after_id is null or e.occurred_at > v_after_at or e.event_id > v_after_id)
           order by e.occurred_at, e.event_id
           limit p_limit + 1) e
   cross join lateral (
     select x.org_id, x.subject_id, x.object_entity_id, x.predicate_label, x.object_literal, x.content
       from memory_internal.fact_versions(p_project) x
      where x.org_id = e.org_id and x.fact_id = e.fact_id
     offset 0) v
   -- And its names by key (as a join, the object's was a hash of the
   -- org's every entity on a page of a hundred events).
   cross join lateral (
     select n.name from memory.entities n where n.org_id = v.org_id and n.entity_id = v.subject_id
     offset 0) s
    left join lateral (
     select n.name from memory.entities n where n.org_id = v.org_id and n.entity_id = v.object_entity_id
     offset 0) o on true;
  if v_n > p_limit then
    v_rows := v_rows - p_limit;
    v_last := v_rows -> (p_limit - 1);
  end if;
  return jsonb_build_object(
    'changes', v_rows,
    'next_cursor', case when v_last is not null then encode(convert_to(
                     jsonb_build_array(v_last -> 'occurred_at', v_last -> 'event_id')::text, 'UTF8'), 'hex') end,
    'since', p_since, 'until', v_until);
end
$$;
comment on function memory.fact_changes(uuid, timestamptz, timestamptz, text, integer) is
  'What the store came to believe between two record-time instants: every event of the project''s facts (asserted, superseded, contradicted, expired, retracted, restored) after p_since (NULL: the beginning) and at or before p_until (NULL: now), oldest first, each with its fact''s subject, predicate, object and content; p_limit (1-1000) a page, next_cursor as p_after for the next. An event shows once its writer commits, stamped with its writer''s record-time instant: a span ending now can still gain events of writers running now.';

-- The sessions of a project by their external id (a keyset page: the
-- cursor is the last id), each with its last message's sequence number
-- and time: one probe of the (session, seq) key per session, however long
-- the sessions are.
create or replace function memory.list_sessions(
  p_project uuid, p_after text default null, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_sessions jsonb;
  v_n integer;
  v_last text;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select coalesce(jsonb_agg(x.j order by x.external_id), '[]'), count(*),
         max(x.external_id) filter (where x.rn = p_limit)
    into v_sessions, v_n, v_last
    from (select s.external_id, row_number() over (order by s.external_id) as rn,
                 jsonb_build_object(
                   'session_id', s.session_id, 'session', s.external_id,
                   'metadata', s.metadata, 'created_at', s.created_at,
                   'last_seq', l.seq, 'last_message_at', l.occurred_at) as j
            from memory.sessions s
            left join lateral (
              select e.seq, e.occurred_at from memory.episodes e
               where e.org_id = s.org_id and e.session_id = s.session_id
               order by e.seq desc limit 1) l on true
           where s.org_id = v_org and s.project_id = p_project
             and (p_after is null or s.external_id > p_after)
           order by s.external_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_sessions := v_sessions - p_limit;
  end if;
  return jsonb_build_object('sessions', v_sessions,
                            'next_cursor', case when v_n > p_limit then v_last end);
end
$$;
comment on function memory.list_sessions(uuid, text, integer) is
  'A project''s sessions by external id, each with its metadata, creation time and its last message''s sequence number and time (null when it has none), paged by keyset: pass next_cursor as p_after.';

create or replace function memory.session_messages(
  p_project uuid, p_session text, p_after_seq integer default 0, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  s memory.sessions;
  v_messages jsonb;
  v_n integer;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select * into s from memory.sessions x
   where x.org_id = v_org and x.project_id = p_project and x.external_id = btrim(p_session);
  if s.session_id is null then
    raise exception 'session "%" not found in project %', p_session, p_project
      using errcode = 'no_data_found';
  end if;
  select coalesce(jsonb_agg(x.j order by x.seq), '[]'), count(*) into v_messages, v_n
    from (select e.seq, jsonb_build_object(
                   'episode_id', e.episode_id, 'seq', e.seq, 'role', e.role, 'content', e.content,
                   'metadata', e.metadata, 'occurred_at', e.occurred_at,
                   'created_at', e.created_at, 'token_count', e.token_count) as j
            from memory.episodes e
           where e.org_id = v_org and e.session_id = s.session_id
             and e.seq > coalesce(p_after_seq, 0)
           order by e.seq
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_messages := v_messages - p_limit;
  end if;
  return jsonb_build_object(
    'session_id', s.session_id, 'session', s.external_id, 'metadata', s.metadata,
    'messages', v_messages,
    'next_cursor', case when v_n > p_limit then v_messages -> (p_limit - 1) -> 'seq' end);
end
$$;
comment on function memory.session_messages(uuid, text, integer, integer) is
  'The messages (episodes) of a session in order, paged by sequence number: pass next_cursor as p_after_seq.';

-- Search and context for the API: a query embedding the client sent must
-- have the installation's dimension (an error naming the field); one the
-- server computed with another dimension is dropped (the vector legs are
-- skipped, as without any embedding).
create or replace function memory_internal.api_query_embedding(
  p_client vector, p_computed vector)
  returns vector
  language plpgsql stable
as $$
declare
  v_dim integer := memory.embedding_dim();
begin
  if p_client is not null then
    if vector_dims(p_client) <> v_dim then
      raise exception 'query_embedding must have % dimensions, not %', v_dim, vector_dims(p_client)
        using errcode = 'invalid_parameter_value', detail = 'query_embedding';
    end if;
    return p_client;
  end if;
  if p_computed is not null and vector_dims(p_computed) = v_dim then
    return p_computed;
  end if;
  return null;
end
$$;

drop function if exists memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[]);
create or replace function memory.api_search(
  p_project uuid, p_query text, p_client_embedding vector default null,
  p_computed_embedding vector default null, p_at timestamptz default null,
  p_known_at timestamptz default null, p_k integer default 10, p_legs text[] default null,
  p_fusion text default 'scores')
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  return memory.search(p_project, p_query,
                       memory_internal.api_query_embedding(p_client_embedding, p_computed_embedding),
                       p_at, p_known_at, p_k, p_legs, p_fusion);
end
$$;
comment on function memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text) is
  'memory.search for the API: a client embedding of the wrong dimension is an error, a server-computed one is dropped.';

create or replace function memory.api_context(
  p_project uuid, p_query text, p_client_embedding vector default null,
  p_computed_embedding vector default null, p_at timestamptz default null,
  p_known_at timestamptz default null, p_max_tokens integer default 1500, p_k integer default 20)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  return memory.context(p_project, p_query,
                        memory_internal.api_query_embedding(p_client_embedding, p_computed_embedding),
                        p_at, p_known_at, p_max_tokens, p_k);
end
$$;
comment on function memory.api_context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer) is
  'memory.context for the API (embeddings as in memory.api_search).';

create or replace function memory.graph_neighbors(
  p_project uuid, p_entity text, p_depth integer default 1,
  p_at timestamptz default null, p_known_at timestamptz default null, p_limit integer default 200)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_at timestamptz;
  v_known timestamptz;
  v_root uuid;
  v_result jsonb;
begin
  -- NULL instants mean now, as in every read.
  select i.at, i.known_at into v_at, v_known
    from memory_internal.read_instants(p_at, p_known_at) i;
  perform memory_internal.check_instants(v_at, v_known);
  if p_depth is null or p_depth not between 1 and 3 then
    raise exception 'depth must be between 1 and 3' using errcode = 'invalid_parameter_value',
      detail = 'depth';
  end if;
  perform memory_internal.check_limit(p_limit, 1000);
  v_root := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_entity));
  if v_root is null then
    raise exception 'entity "%" not found in project %', p_entity, p_project
      using errcode = 'no_data_found';
  end if;
  with recursive g as (
    select e.edge_id, e.source_id, e.target_id, e.relation, e.valid_range
      from memory.edges_at(p_project, v_at, v_known) e
  ), walk (entity_id, depth) as (
    select v_root, 0
    union
    select case when g.source_id = w.entity_id then g.target_id else g.source_id end, w.depth + 1
      from walk w join g on w.entity_id in (g.source_id, g.target_id)
     where w.depth < p_depth
  ), nearest as (
    -- The closest first, then by name: p_limit of them, and one more to
    -- tell whether the limit left some out.
    select n.entity_id, n.name, n.entity_type, w.depth
      from (select w.entity_id, min(w.depth) as depth from walk w group by 1) w
      join memory.entities n on n.org_id = v_org and n.entity_id = w.entity_id
     order by w.depth, n.name, n.entity_id limit p_limit + 1
  ), reached as (
    select x.* from nearest x order by x.depth, x.name, x.entity_id limit p_limit
  ), walked as (
    select g.* from g
      join reached rs on rs.entity_id = g.source_id
      join reached rt on rt.entity_id = g.target_id
  )
  select jsonb_build_object(
    'entity', (select jsonb_build_object('entity_id', n.entity_id, 'name', n.name,
                                         'entity_type', n.entity_type)
                 from memory.entities n where n.org_id = v_org and n.entity_id = v_root),
    'depth', p_depth, 'as_of', v_at, 'known_at', v_known,
    'nodes', coalesce((select jsonb_agg(jsonb_build_object(
                                'entity_id', r.entity_id, 'name', r.name,
                                'entity_type', r.entity_type, 'depth', r.depth)
                              order by r.depth, r.name, r.entity_id)
                         from reached r),
                      '[]'),
    'truncated', (select count(*) from nearest) > p_limit,
    'edges', coalesce((select jsonb_agg(jsonb_build_object(
                                'edge_id', w.edge_id, 'source_id', w.source_id,
                                'target_id', w.target_id, 'relation', w.relation,
                                'valid_from', lower(w.valid_range),
                                'valid_until', upper(w.valid_range))
                              order by w.relation, w.source_id, w.target_id, w.edge_id)
                         from walked w), '[]'))
    into v_result;
  return v_result;
end
$$;
comment on function memory.graph_neighbors(uuid, text, integer, timestamptz, timestamptz, integer) is
  'The entities within p_depth (1-3) edges of an entity, over the edges effective at p_at as believed at p_known_at (defaults: now), with the edges between them: at most p_limit nodes, the closest first, then by name (truncated: the limit left some out).';

-- One entity as the API shows it: in the entity list, and as the answer
-- to an upsert.  A set-returning SQL function, called with cross join
-- lateral, so that the planner inlines it: as a scalar function (its alias
-- subquery keeps those from being inlined) it was called per row, and a
-- page of 1,000 entities took 8.2-8.7 ms against 5.0-5.8 written inline
-- (the list's query alone, on the 100k benchmark load).
drop function if exists memory_internal.entity_json(memory.entities);
create or replace function memory_internal.entity_api_json(p_entity memory.entities)
  returns table (j jsonb)
  language sql stable
  as $$
    select jsonb_build_object(
             'entity_id', p_entity.entity_id, 'name', p_entity.name,
             'entity_type', p_entity.entity_type, 'summary', p_entity.summary,
             'created_at', p_entity.created_at,
             'aliases', coalesce((select jsonb_agg(a.alias order by a.normalized_alias)
                                    from memory.entity_aliases a
                                   where a.org_id = p_entity.org_id
                                     and a.entity_id = p_entity.entity_id), '[]'))
  $$;

-- An entity as the API shows it, by id (NULL when there is none).
create or replace function memory_internal.entity_api_answer(p_org uuid, p_entity uuid)
  returns jsonb
  language sql stable
  as $$
    select ej.j
      from memory.entities e cross join lateral memory_internal.entity_api_json(e) ej
     where e.org_id = p_org and e.entity_id = p_entity
  $$;
comment on function memory_internal.entity_api_answer(uuid, uuid) is
  'The entity p_entity as the API shows it (entity_api_json), or NULL.';

create or replace function memory.list_entities(
  p_project uuid, p_after text default null, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_entities jsonb;
  v_n integer;
  v_last text;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select coalesce(jsonb_agg(x.j order by x.normalized_name), '[]'), count(*),
         max(x.normalized_name) filter (where x.rn = p_limit)
    into v_entities, v_n, v_last
    from (select n.normalized_name, row_number() over (order by n.normalized_name) as rn,
                 ej.j
            from memory.entities n
           cross join lateral memory_internal.entity_api_json(n) ej
           where n.org_id = v_org and n.project_id = p_project
             and (p_after is null or n.normalized_name > p_after)
           order by n.normalized_name
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_entities := v_entities - p_limit;
  end if;
  return jsonb_build_object('entities', v_entities,
                            'next_cursor', case when v_n > p_limit then v_last end);
end
$$;
comment on function memory.list_entities(uuid, text, integer) is
  'A project''s entities by normalized name, paged by keyset: pass next_cursor as p_after.';

drop function if exists memory.list_communities(uuid);
-- Paged by keyset over their order (largest first, then label, then id);
-- the cursor is those three values as hex-encoded JSON, so a page after a
-- recomputation (which makes new ids) still starts where the last one
-- ended.  Members: the first p_members by name, and how many more.
create or replace function memory.list_communities(
  p_project uuid, p_after text default null, p_limit integer default 100,
  p_members integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_after jsonb;
  v_size integer;
  v_label text;
  v_id uuid;
  v_page jsonb;
  v_n integer;
  v_last jsonb;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  if p_members is null or p_members < 0 or p_members > 10000 then
    raise exception 'members must be between 0 and 10000' using errcode = 'invalid_parameter_value',
      detail = 'members';
  end if;
  if p_after is not null then
    begin
      v_after := convert_from(decode(p_after, 'hex'), 'UTF8')::jsonb;
      v_size := (v_after ->> 0)::integer;
      v_label := v_after ->> 1;
      v_id := (v_after ->> 2)::uuid;
    exception when others then
      v_id := null;
    end;
    if v_id is null or v_size is null or v_label is null then
      raise exception 'cursor is not a next_cursor of this list' using errcode = 'invalid_parameter_value',
        detail = 'cursor';
    end if;
  end if;
  select coalesce(jsonb_agg(x.j order by x.rn), '[]'), count(*),
         max(jsonb_build_array(x.size, x.label, x.community_id)::text) filter (where x.rn = p_limit)::jsonb
    into v_page, v_n, v_last
    from (select c.size, c.label, c.community_id,
                 row_number() over (order by c.size desc, c.label, c.community_id) as rn,
                 jsonb_build_object(
                   'community_id', c.community_id, 'label', c.label, 'size', c.size,
                   'computed_at', c.computed_at,
                   'members', coalesce((
                     select jsonb_agg(jsonb_build_object('entity_id', n.entity_id, 'name', n.name)
                                      order by n.name, n.entity_id)
                       from (select n.entity_id, n.name
                               from memory.community_members m
                               join memory.entities n on n.org_id = m.org_id
                                                     and n.entity_id = m.entity_id
                              where m.org_id = c.org_id and m.community_id = c.community_id
                              order by n.name, n.entity_id
                              limit p_members) n), '[]'),
                   'more', greatest(c.size - p_members, 0)) as j
            from memory.communities c
           where c.org_id = v_org and c.project_id = p_project
             and (v_id is null
                  or (-c.size, c.label, c.community_id) > (-v_size, v_label, v_id))
           order by c.size desc, c.label, c.community_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_page := v_page - p_limit;
  end if;
  return jsonb_build_object(
    -- When they were last computed (null: never), so that "no communities"
    -- reads as "none found" or "not computed yet".
    'computed_at', (select r.computed_at from memory.community_runs r
                     where r.org_id = v_org and r.project_id = p_project),
    'communities', v_page,
    'next_cursor', case when v_n > p_limit then encode(convert_to(v_last::text, 'UTF8'), 'hex') end);
end
$$;
comment on function memory.list_communities(uuid, text, integer, integer) is
  'A project''s communities from the last memory.compute_communities run (computed_at: its time, null if none ran), largest first, p_limit (1-1000) a page: pass next_cursor as p_after. Each with its first p_members members by name and how many more.';

create or replace function memory.api_refresh_communities(p_project uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api('project:write', p_project);
  v_result := memory.refresh_communities(p_project);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'communities.refresh',
    'project:' || p_project,
    jsonb_build_object('computed', v_result -> 'computed', 'communities', v_result -> 'communities'));
  return v_result;
end
$$;
comment on function memory.api_refresh_communities(uuid) is
  'API: memory.refresh_communities as the authorized key (needs project:write): compute the project''s communities now if its graph changed since the last run. Audited.';

--------------------------------------------------------------------------
-- Operators: /metrics
--------------------------------------------------------------------------
create or replace function memory.metric_totals()
  returns table (metric text, value bigint)
  language sql stable
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select c.metric, sum(c.value)::bigint from memory_internal.counters c
     group by c.metric order by c.metric
  $$;
comment on function memory.metric_totals() is
  'Totals of every counter (facts_inserted, facts_superseded, facts_retracted, facts_refused, ...) across all orgs, for the operator''s /metrics; no per-org detail.';

--------------------------------------------------------------------------
-- Grants (090_grants.sql revokes PUBLIC's execute from every function)
--------------------------------------------------------------------------
revoke execute on all functions in schema memory, memory_internal from public;
grant execute on function
  memory.api_permissions(),
  memory.authenticate(text),
  memory.authorize(text, text, uuid),
  memory.create_api_key(uuid, text, text[]),
  memory.list_api_keys(uuid),
  memory.revoke_api_key(uuid, uuid),
  memory.bootstrap_api_key(uuid, text, text, text, text[]),
  memory.api_create_project(text),
  memory.get_project(uuid),
  memory.api_assert_facts(uuid, jsonb, boolean),
  memory.api_ingest(uuid, text, jsonb, text, jsonb),
  memory.api_retract_fact(uuid, uuid, text),
  memory.api_wipe(uuid, text, text),
  memory.api_delete_project(uuid),
  memory.api_declare_predicate(uuid, text, text),
  memory.api_upsert_entity(uuid, text, text, text, text[]),
  memory.api_merge_entities(uuid, text, text, boolean),
  memory.api_split_entity(uuid, text, boolean),
  memory.list_facts(uuid, timestamptz, timestamptz, text, text, uuid, integer),
  memory.api_fact_history(uuid, uuid),
  memory.api_timeline(uuid, text, text),
  memory.fact_changes(uuid, timestamptz, timestamptz, text, integer),
  memory.session_messages(uuid, text, integer, integer),
  memory.list_sessions(uuid, text, integer),
  memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text),
  memory.api_context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer),
  memory.graph_neighbors(uuid, text, integer, timestamptz, timestamptz, integer),
  memory.list_entities(uuid, text, integer),
  memory.list_communities(uuid, text, integer, integer),
  memory.api_refresh_communities(uuid),
  memory.metric_totals()
  to chronomem_app;
grant execute on function
  memory.api_permissions(),
  memory.get_project(uuid),
  memory.list_facts(uuid, timestamptz, timestamptz, text, text, uuid, integer),
  memory.api_fact_history(uuid, uuid),
  memory.api_timeline(uuid, text, text),
  memory.fact_changes(uuid, timestamptz, timestamptz, text, integer),
  memory.session_messages(uuid, text, integer, integer),
  memory.list_sessions(uuid, text, integer),
  memory.graph_neighbors(uuid, text, integer, timestamptz, timestamptz, integer),
  memory.list_entities(uuid, text, integer),
  memory.list_communities(uuid, text, integer, integer),
  memory.project_backlog(uuid)
  to chronomem_analyst;
-- Called by invoker-rights functions above as the calling role.
grant execute on function
  memory_internal.api_allows(text[], uuid, text, uuid),
  memory_internal.require_api(text, uuid),
  memory_internal.api_key_id(),
  memory_internal.api_actor(),
  memory_internal.check_limit(integer, integer),
  memory_internal.api_query_embedding(vector, vector),
  memory_internal.entity_api_json(memory.entities),
  memory_internal.fact_event_json(bigint, timestamptz, text, uuid, uuid, uuid, tstzrange, tstzrange,
                                  text, text, text, text, text, text)
  to chronomem_app, chronomem_analyst;
-- readyz compares the schema's revision with the code's.
grant select on public.alembic_version to chronomem_app;
