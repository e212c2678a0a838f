-- 0037_permissions_once: the permission vocabulary is defined once.  The
-- api_keys check constraint held its own copy of the list that
-- memory_http.permissions() gives the HTTP and MCP layer; the constraint now
-- calls the function, which lives here (not in functions/) because the
-- table depends on it: a permission is added by a migration that replaces
-- it.  Immutable, so the constraint folds to a constant when planned.
create or replace function memory_http.permissions() returns text[]
  language sql immutable parallel safe
  as $$
    select array['project:read', 'project:write', 'project:manage',
                 'configuration:read', 'configuration:write',
                 'members:read', 'members:write']::text[]
  $$;
comment on function memory_http.permissions() is
  'The fixed vocabulary of API key permissions, the one list (memory_internal.api_keys'' check constraint calls it). project:read/write: the key''s project''s memory (facts, episodes, search); configuration:read/write: its predicates and webhooks; project:manage: every project of the org (create projects, manage keys) and implies every other permission; members:read/write: reserved.';

alter table memory_internal.api_keys
  drop constraint api_keys_permissions_check,
  add constraint api_keys_permissions_check check (
    cardinality(permissions) >= 1 and array_position(permissions, null) is null
    and permissions <@ memory_http.permissions());
