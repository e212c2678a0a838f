-- Sign-in sessions (memory_internal.auth_sessions) and the OIDC claim mapping
-- (memory_internal.oidc_mappings): the console's sign-in with an API key, and
-- JWTs verified by the process, for the console and as bearer tokens of the
-- HTTP API.  A session token is cms_<session id, 32 hex>_<secret, 64 hex>;
-- memory_http.authenticate accepts it as it accepts an API key.
-- CREATE OR REPLACE only: re-applied on every migrate.

-- The longest a session lives, however active.
create or replace function memory_internal.session_max_age() returns interval
  language sql immutable parallel safe
  as $$ select interval '12 hours' $$;
comment on function memory_internal.session_max_age() is
  'The absolute lifetime of a sign-in session (12 hours), whatever its idle expiry.';

create or replace function memory_internal.parse_session_token(
  p_token text, out session_id uuid, out secret bytea)
  language sql immutable parallel safe
  as $$
    select m[1]::uuid, decode(m[2], 'hex')
      from (select regexp_match(p_token, '^cms_([0-9a-f]{32})_([0-9a-f]{64})$') as m) x
  $$;
comment on function memory_internal.parse_session_token(text) is
  'A session token cms_<session id>_<secret> split into its id and secret bytes; NULLs when malformed.';

-- When a session has ended; new_session's clean-up and authenticate_session
-- both ask this.
create or replace function memory_internal.session_expired(
  p_expires_at timestamptz, p_last_seen_at timestamptz, p_idle_timeout interval)
  returns boolean
  language sql stable parallel safe
  as $$ select p_expires_at <= now() or p_last_seen_at + p_idle_timeout <= now() $$;
comment on function memory_internal.session_expired(timestamptz, timestamptz, interval) is
  'Whether a sign-in session has ended: past its absolute expiry, or idle for its idle timeout since last seen.';

-- A new session row of the current org; returns its token.  Expired
-- sessions of the org are deleted first, so the table holds live ones (and
-- those that expired since the org last signed in).
create or replace function memory_internal.new_session(
  p_org uuid, p_project uuid, p_method text, p_key uuid, p_mappings uuid[], p_issuer text,
  p_subject text, p_permissions text[], p_idle interval, p_expires timestamptz)
  returns text
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_secret bytea := sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                           || uuid_send(gen_random_uuid()));
  v_id uuid := gen_random_uuid();
  -- The expired sessions and the sorted permissions as values: Citus routes no
  -- DELETE that adds a column's interval to a timestamp (a STABLE operator), nor an
  -- INSERT whose values hold a subquery.
  v_expired uuid[] := array(
    select s.session_id from memory_internal.auth_sessions s
     where s.org_id = p_org
       and memory_internal.session_expired(s.expires_at, s.last_seen_at, s.idle_timeout));
  v_permissions text[] := array(select distinct p from unnest(p_permissions) p order by p);
begin
  delete from memory_internal.auth_sessions s
   where s.org_id = p_org and s.session_id = any (v_expired);
  insert into memory_internal.auth_sessions
    (org_id, project_id, session_id, secret_hash, method, key_id, mapping_ids, issuer, subject,
     permissions, idle_timeout, expires_at)
  values (p_org, p_project, v_id, sha256(v_secret), p_method, p_key, p_mappings, p_issuer,
          p_subject, v_permissions, p_idle, p_expires);
  return 'cms_' || replace(v_id::text, '-', '') || '_' || encode(v_secret, 'hex');
end
$$;
comment on function memory_internal.new_session(uuid, uuid, text, uuid, uuid[], text, text, text[], interval, timestamptz) is
  'Store a sign-in session (deleting the org''s expired ones) and return its token cms_<id>_<secret>; only the secret''s sha256 is kept.';

create or replace function memory_internal.idle_interval(p_idle_seconds integer) returns interval
  language plpgsql immutable
as $$
begin
  if p_idle_seconds is not null and p_idle_seconds not between 60 and 86400 then
    raise exception 'idle_seconds must be between 60 and 86400' using
      errcode = 'invalid_parameter_value', detail = 'idle_seconds';
  end if;
  return make_interval(secs => p_idle_seconds);
end
$$;
comment on function memory_internal.idle_interval(integer) is
  'A session''s idle expiry from seconds (60 to 86400; NULL: none).';

create or replace function memory_http.open_key_session(
  p_token text, p_idle_seconds integer default 1800,
  out token text, out org_id uuid, out project_id uuid, out permissions text[],
  out expires_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
  v_idle interval := memory_internal.idle_interval(p_idle_seconds);
begin
  if p_idle_seconds is null then
    raise exception 'idle_seconds must be between 60 and 86400' using
      errcode = 'invalid_parameter_value', detail = 'idle_seconds';
  end if;
  -- An API key only: a session is not exchanged for another.
  if (memory_internal.parse_api_token(p_token)).key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  select * into a from memory_http.authenticate(p_token);
  if a.key_id is null then
    raise exception 'invalid API key' using errcode = 'invalid_authorization_specification';
  end if;
  expires_at := now() + memory_internal.session_max_age();
  token := memory_internal.new_session(a.org_id, a.project_id, 'api_key', a.key_id, null, null,
                                       null, a.permissions, v_idle, expires_at);
  org_id := a.org_id;
  project_id := a.project_id;
  permissions := a.permissions;
  perform memory_internal.audit(a.org_id, a.project_id, 'session.open', 'api_key:' || a.key_id);
end
$$;
comment on function memory_http.open_key_session(text, integer) is
  'Sign in with an API key: a session with the key''s org, project and permissions, idle expiry p_idle_seconds (60 to 86400) and at most memory_internal.session_max_age(); ends when the key is revoked. Returns the session token (cms_..., shown here only). Leaves the transaction scoped to the key''s org. 28000 for anything but a valid API key.';

-- The mappings a verified token's claims match: same issuer, one of its
-- audiences, and the mapped claim holding the value (equal, or an element of
-- an array claim).
create or replace function memory_internal.matching_mappings(
  p_issuer text, p_audiences text[], p_claims jsonb)
  returns setof memory_internal.oidc_mappings
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select m.* from memory_internal.oidc_mappings m
   where m.issuer = p_issuer and m.audience = any (p_audiences)
     and (p_claims -> m.claim = to_jsonb(m.value)
          or (jsonb_typeof(p_claims -> m.claim) = 'array'
              and p_claims -> m.claim @> jsonb_build_array(m.value)))
$$;
comment on function memory_internal.matching_mappings(text, text[], jsonb) is
  'The OIDC mappings that a token of p_issuer, with audiences p_audiences and claims p_claims, matches (across orgs: only security definer callers see them all).';

create or replace function memory_http.open_oidc_session(
  p_claims jsonb, p_idle_seconds integer default null,
  out token text, out org_id uuid, out project_id uuid, out permissions text[],
  out expires_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_issuer text := p_claims ->> 'iss';
  v_subject text := p_claims ->> 'sub';
  v_exp timestamptz;
  v_audiences text[];
  v_idle interval := memory_internal.idle_interval(p_idle_seconds);
  v_targets integer;
  v_mappings uuid[];
  v_permissions text[];
  v_org uuid;
  v_project uuid;
  -- The org in scope, if any (as bootstrap_api_key: a transaction scoped to one org
  -- reaches no other).
  v_scope uuid := memory_internal.current_org();
begin
  perform memory_internal.set_local('chronomem.org_id', ''),
          memory_internal.set_local('chronomem.api_key_id', ''),
          memory_internal.set_local('chronomem.api_project_id', ''),
          memory_internal.set_local('chronomem.api_permissions', ''),
          memory_internal.set_local('chronomem.api_actor', '');
  if jsonb_typeof(p_claims) is distinct from 'object' or v_issuer is null or v_subject is null
     or jsonb_typeof(p_claims -> 'exp') is distinct from 'number' then
    raise exception 'claims must hold iss, sub and exp' using
      errcode = 'invalid_authorization_specification';
  end if;
  v_exp := to_timestamp((p_claims ->> 'exp')::double precision);
  if v_exp <= now() then
    raise exception 'the token has expired' using errcode = 'invalid_authorization_specification';
  end if;
  v_audiences := case jsonb_typeof(p_claims -> 'aud')
    when 'string' then array[p_claims ->> 'aud']
    when 'array' then array(select jsonb_array_elements_text(p_claims -> 'aud'))
  end;
  select count(distinct (m.org_id, m.project_id)), array_agg(m.mapping_id order by m.mapping_id),
         min(m.org_id::text)::uuid, min(m.project_id::text)::uuid
    into v_targets, v_mappings, v_org, v_project
    from memory_internal.matching_mappings(v_issuer, coalesce(v_audiences, '{}'), p_claims) m
   where v_scope is null or m.org_id = v_scope;
  if v_targets = 0 then
    raise exception 'no mapping for this token''s issuer, audience and claims'
      using errcode = 'invalid_authorization_specification';
  elsif v_targets > 1 then
    raise exception 'this token''s claims map to more than one project'
      using errcode = 'invalid_authorization_specification',
            hint = 'Make the mappings of an issuer and audience name one project per user.';
  end if;
  select array_agg(distinct p order by p) into v_permissions
    from memory_internal.oidc_mappings m, unnest(m.permissions) p
   where m.org_id = v_org and m.mapping_id = any (v_mappings);
  perform memory.use_org(v_org);
  expires_at := least(v_exp, now() + memory_internal.session_max_age());
  token := memory_internal.new_session(v_org, v_project, 'oidc', null, v_mappings, v_issuer,
                                       v_subject, v_permissions, v_idle, expires_at);
  org_id := v_org;
  project_id := v_project;
  permissions := v_permissions;
  perform memory_internal.audit(v_org, v_project, 'session.open',
                                'oidc:' || v_issuer || '#' || v_subject);
end
$$;
comment on function memory_http.open_oidc_session(jsonb, integer) is
  'Sign in with a JWT whose signature, issuer, audience and expiry the calling process has verified (the database cannot check the signature; docs/decisions/017): p_claims are its claims (iss, sub, exp, aud, ...). The mappings of memory_internal.oidc_mappings that match (issuer, one audience, the claim''s value) give the project (they must name one) and the union of their permissions; no match, an expired exp or a match outside the org in scope is 28000. A session expires with the token (at most memory_internal.session_max_age()), idle after p_idle_seconds (NULL: no idle expiry), and ends when a mapping it used is deleted. Returns the session token (cms_..., shown here only).';

create or replace function memory_http.close_session(p_token text) returns boolean
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  a record;
  v_session uuid := (memory_internal.parse_session_token(p_token)).session_id;
begin
  if v_session is null then
    return false;
  end if;
  select * into a from memory_http.authenticate(p_token);
  if a.org_id is null then
    return false;
  end if;
  delete from memory_internal.auth_sessions s
   where s.org_id = a.org_id and s.session_id = v_session;
  return true;
end
$$;
comment on function memory_http.close_session(text) is
  'Sign out: delete the session of a valid session token (true), else nothing (false).';

-- For memory_http.authenticate: a session token's principal, with the
-- transaction scoped to its org; all NULL when the token is malformed,
-- unknown, wrong, expired, idle too long, or its key or a mapping is gone.
create or replace function memory_internal.authenticate_session(
  p_token text,
  out org_id uuid, out project_id uuid, out key_id uuid, out permissions text[])
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  c_nothing constant bytea := decode(repeat('00', 32), 'hex');
  v_token record := memory_internal.parse_session_token(p_token);
  s record;
  v_live boolean;
begin
  if v_token.session_id is null then
    return;
  end if;
  -- Across orgs (policy session_lookup), as api keys.
  select a.* into s from memory_internal.auth_sessions a where a.session_id = v_token.session_id;
  if not memory_internal.bytes_equal(sha256(v_token.secret), coalesce(s.secret_hash, c_nothing))
     or s.session_id is null
     or memory_internal.session_expired(s.expires_at, s.last_seen_at, s.idle_timeout) then
    return;
  end if;
  if s.method = 'api_key' then
    select k.revoked_at is null into v_live from memory_internal.api_keys k
     where k.org_id = s.org_id and k.key_id = s.key_id;
  else
    select count(*) = cardinality(s.mapping_ids) into v_live from memory_internal.oidc_mappings m
     where m.org_id = s.org_id and m.mapping_id = any (s.mapping_ids);
  end if;
  if not coalesce(v_live, false) then
    return;
  end if;
  -- The credential id the audited writes require: the key a console session
  -- came from, else the session itself; the actor names who signed in.
  key_id := coalesce(s.key_id, s.session_id);
  perform memory_internal.set_local('chronomem.org_id', s.org_id::text),
          memory_internal.set_local('chronomem.api_key_id', key_id::text),
          memory_internal.set_local('chronomem.api_project_id', s.project_id::text),
          memory_internal.set_local('chronomem.api_permissions', s.permissions::text),
          memory_internal.set_local('chronomem.api_actor',
                                    case when s.method = 'oidc' then 'oidc:' || s.issuer || '#' || s.subject
                                         else '' end);
  -- At most once a minute, never waiting (as api keys' last_used_at).
  update memory_internal.auth_sessions a set last_seen_at = now()
   where a.org_id = s.org_id and a.session_id = s.session_id
     and a.session_id in (select b.session_id from memory_internal.auth_sessions b
                           where b.org_id = s.org_id and b.session_id = s.session_id
                             and b.last_seen_at < now() - interval '1 minute'
                             for update skip locked);
  org_id := s.org_id;
  project_id := s.project_id;
  permissions := s.permissions;
end
$$;
comment on function memory_internal.authenticate_session(text) is
  'memory_http.authenticate for a session token (cms_...): the session''s org, project, credential id and permissions with the transaction scoped to its org, or all NULL.';

--------------------------------------------------------------------------
-- The claim mapping, for operators (owner role only: no client role may
-- execute these or read the table)
--------------------------------------------------------------------------
create or replace function memory.set_oidc_mapping(
  p_project uuid, p_issuer text, p_audience text, p_claim text, p_value text,
  p_permissions text[])
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_bad text;
  v_id uuid;
begin
  select p into v_bad from unnest(coalesce(p_permissions, '{}')) p
   where p is null or not p = any (memory_http.permissions()) limit 1;
  if found or coalesce(cardinality(p_permissions), 0) = 0 then
    raise exception 'permissions must name at least one of %; unknown: %',
      memory_http.permissions(), coalesce(quote_literal(v_bad), 'none')
      using errcode = 'invalid_parameter_value', detail = 'permissions';
  end if;
  insert into memory_internal.oidc_mappings as m
    (org_id, project_id, issuer, audience, claim, value, permissions)
  values (v_org, p_project, p_issuer, p_audience, p_claim, p_value,
          array(select distinct p from unnest(p_permissions) p order by p))
  on conflict (org_id, issuer, audience, claim, value, project_id)
    do update set permissions = excluded.permissions
  returning m.mapping_id into v_id;
  -- Sessions opened under the old permissions end with them.
  delete from memory_internal.auth_sessions s
   where s.org_id = v_org and v_id = any (s.mapping_ids);
  perform memory_internal.audit(v_org, p_project, 'oidc_mapping.set', 'oidc_mapping:' || v_id);
  return v_id;
end
$$;
comment on function memory.set_oidc_mapping(uuid, text, text, text, text, text[]) is
  'For operators (owner role): JWTs of p_issuer for p_audience whose claim p_claim holds p_value (equal, or an element of an array claim) sign in to p_project of the current org with p_permissions. Setting an existing mapping replaces its permissions and ends the sessions it granted. Returns the mapping id.';

create or replace function memory.oidc_mappings()
  returns table (mapping_id uuid, project_id uuid, issuer text, audience text, claim text,
                 value text, permissions text[], created_at timestamptz)
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select m.mapping_id, m.project_id, m.issuer, m.audience, m.claim, m.value, m.permissions,
         m.created_at
    from memory_internal.oidc_mappings m
   where m.org_id = memory_internal.current_org()
   order by m.created_at, m.mapping_id
$$;
comment on function memory.oidc_mappings() is
  'For operators (owner role): the OIDC mappings of the current org, oldest first.';

create or replace function memory.delete_oidc_mapping(p_mapping uuid) returns boolean
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.current_org();
  v_project uuid;
begin
  delete from memory_internal.oidc_mappings m where m.org_id = v_org and m.mapping_id = p_mapping
  returning m.project_id into v_project;
  if v_project is null then
    return false;
  end if;
  delete from memory_internal.auth_sessions s
   where s.org_id = v_org and p_mapping = any (s.mapping_ids);
  perform memory_internal.audit(v_org, v_project, 'oidc_mapping.delete',
                                'oidc_mapping:' || p_mapping);
  return true;
end
$$;
comment on function memory.delete_oidc_mapping(uuid) is
  'For operators (owner role): delete an OIDC mapping of the current org and end the sessions it granted; false when there is none.';
