-- 0004_api: what the HTTP API needs: API keys (stored hashed, per project,
-- with permissions from a fixed vocabulary), and cross-org reads that only
-- the owner's security definer functions make (key lookup by id, metric
-- totals for /metrics).

create table memory_internal.api_keys (
  org_id       uuid not null,
  project_id   uuid not null,
  key_id       uuid not null default gen_random_uuid(),
  name         text not null check (length(btrim(name)) between 1 and 200),
  -- The start of the token (cmk_ and 12 hex digits of the key id), shown in
  -- listings so people can tell keys apart.  Never part of the secret.
  prefix       text not null check (prefix ~ '^cmk_[0-9a-f]{12}$'),
  -- sha256 of the secret's 32 bytes; the secret itself is shown once and
  -- never stored.
  secret_hash  bytea not null check (length(secret_hash) = 32),
  permissions  text[] not null check (
    cardinality(permissions) >= 1 and array_position(permissions, null) is null
    and permissions <@ array['project:read', 'project:write', 'project:manage',
                             'configuration:read', 'configuration:write',
                             'members:read', 'members:write']::text[]),
  created_at   timestamptz not null default now(),
  created_by   text not null,
  revoked_at   timestamptz,
  last_used_at timestamptz,
  primary key (org_id, key_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  check (revoked_at is null or revoked_at >= created_at)
);
comment on table memory_internal.api_keys is
  'API keys of the HTTP API: one project each, permissions from a fixed vocabulary, the secret stored as a sha256 hash only. Read through memory.list_api_keys; checked by memory.authenticate / memory.authorize.';
-- authenticate() finds a key by the id in the token before it knows the
-- org.  Not unique (keys include org_id, invariant 5); key ids are random.
create index api_keys_key_id_idx on memory_internal.api_keys (key_id);
create index api_keys_project_idx on memory_internal.api_keys (org_id, project_id, created_at);

alter table memory_internal.api_keys enable row level security;
alter table memory_internal.api_keys force row level security;
create policy tenant_isolation on memory_internal.api_keys
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
-- memory.authenticate (security definer) reads a key by its id across orgs
-- to learn the org; like memory.jobs for workers, only the owner's
-- functions can, and only to read.
create policy key_lookup on memory_internal.api_keys for select to chronomem_owner using (true);

-- /metrics shows totals across orgs (memory.metric_totals, security definer).
create policy metric_totals on memory_internal.counters for select to chronomem_owner using (true);

-- No client reads keys directly, not even their hashes.
revoke all on memory_internal.api_keys from public;
