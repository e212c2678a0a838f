-- 0041_console: sign-in for the operator console and for bearer JWTs.
--
-- memory_internal.auth_sessions holds sign-in sessions: an API key exchanged
-- for a console session, or a JWT the process has verified (its signature,
-- issuer, audience and expiry) mapped to a project and permissions by
-- memory_internal.oidc_mappings.  A session's token (cms_<session id>_<secret>)
-- is checked by memory_http.authenticate like an API key; only its secret's
-- sha256 is stored.  The mappings are written by the owner role only (an
-- operator in `chronomem psql`), through memory.set_oidc_mapping: the app role
-- can neither read nor write them, so it cannot open a session in an org that
-- has no mapping (docs/decisions/017-console-sign-in-and-jwt-trust.md).

create table memory_internal.oidc_mappings (
  org_id       uuid not null,
  project_id   uuid not null,
  mapping_id   uuid not null default gen_random_uuid(),
  -- The token's iss, exactly; and one of its aud values, exactly.
  issuer       text not null check (length(issuer) between 1 and 500),
  audience     text not null check (length(audience) between 1 and 500),
  -- A claim of the token (a top-level name such as sub, groups, org) and the
  -- value it must hold: equal to it, or, for an array claim, one of its
  -- elements.
  claim        text not null check (claim ~ '^[A-Za-z_][A-Za-z0-9_.:/-]{0,99}$'),
  value        text not null check (length(value) between 1 and 500),
  permissions  text[] not null check (
    cardinality(permissions) >= 1 and array_position(permissions, null) is null
    and permissions <@ memory_http.permissions()),
  created_at   timestamptz not null default now(),
  primary key (org_id, mapping_id),
  unique (org_id, issuer, audience, claim, value, project_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory_internal.oidc_mappings is
  'Which verified JWTs sign in where: a token of issuer and audience whose claim holds value gets permissions (memory_http.permissions()) on project. Written by the owner (memory.set_oidc_mapping); read by memory_http.open_oidc_session.';
-- open_oidc_session finds the mappings of an issuer before it knows the org.
create index oidc_mappings_issuer_idx on memory_internal.oidc_mappings (issuer, audience);
create index oidc_mappings_project_idx on memory_internal.oidc_mappings (org_id, project_id);

alter table memory_internal.oidc_mappings enable row level security;
alter table memory_internal.oidc_mappings force row level security;
create policy tenant_isolation on memory_internal.oidc_mappings
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
-- Like api_keys' key_lookup: only the owner's functions read across orgs.
create policy mapping_lookup on memory_internal.oidc_mappings for select to chronomem_owner
  using (true);
revoke all on memory_internal.oidc_mappings from public;

create table memory_internal.auth_sessions (
  org_id       uuid not null,
  project_id   uuid not null,
  session_id   uuid not null default gen_random_uuid(),
  -- sha256 of the secret's 32 bytes; the token is shown once, to the process.
  secret_hash  bytea not null check (length(secret_hash) = 32),
  method       text not null check (method in ('api_key', 'oidc')),
  -- api_key: the key exchanged for it (revoking the key ends the session).
  key_id       uuid,
  -- oidc: the mappings that granted it (deleting one ends the session), and
  -- who signed in.
  mapping_ids  uuid[],
  issuer       text,
  subject      text,
  permissions  text[] not null check (
    cardinality(permissions) >= 1 and array_position(permissions, null) is null
    and permissions <@ memory_http.permissions()),
  created_at   timestamptz not null default now(),
  last_seen_at timestamptz not null default now(),
  -- NULL: no idle expiry (a bearer JWT's session lasts as long as the JWT).
  idle_timeout interval check (idle_timeout > interval '0'),
  expires_at   timestamptz not null,
  primary key (org_id, session_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, key_id) references memory_internal.api_keys on delete cascade,
  check ((method = 'api_key') = (key_id is not null)),
  check ((method = 'oidc') = (mapping_ids is not null and issuer is not null
                              and subject is not null)),
  check (expires_at > created_at)
);
comment on table memory_internal.auth_sessions is
  'Sign-in sessions: an API key exchanged for a console session, or a verified JWT mapped by memory_internal.oidc_mappings. The token''s secret is stored as a sha256 only; permissions are the key''s or the mappings''; idle and absolute expiry. Checked by memory_http.authenticate (tokens cms_...).';
-- authenticate() finds a session by the id in the token before it knows the org.
create index auth_sessions_session_id_idx on memory_internal.auth_sessions (session_id);
create index auth_sessions_key_idx on memory_internal.auth_sessions (org_id, key_id)
  where key_id is not null;
create index auth_sessions_project_idx on memory_internal.auth_sessions (org_id, project_id);

alter table memory_internal.auth_sessions enable row level security;
alter table memory_internal.auth_sessions force row level security;
create policy tenant_isolation on memory_internal.auth_sessions
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
create policy session_lookup on memory_internal.auth_sessions for select to chronomem_owner
  using (true);
revoke all on memory_internal.auth_sessions from public;
