-- 0001_core: schemas, roles, the temporal fact store's tables, constraints,
-- indexes and row-level security.  Versioned DDL: never edit after release,
-- add sql/0002_*.sql instead.  Functions live in functions/ (re-applied on
-- every migrate) and are granted there.
--
-- Runs as the owner role (chronomem_owner), which owns every object here.
-- pgvector must already exist (it is not a trusted extension; the embedded
-- bootstrap creates it as superuser); btree_gist and pg_trgm are trusted.

create extension if not exists btree_gist;
create extension if not exists pg_trgm;
create extension if not exists vector;

create schema memory;
comment on schema memory is
  'Chronomem public API: tables analysts read and the functions every client calls.';
create schema memory_internal;
comment on schema memory_internal is
  'Chronomem helpers: reachable by the functions in schema memory, not part of the API.';

-- Roles.  The app role (API, worker, tests) and the analyst role own nothing;
-- created here so a fresh database is usable, kept if they already exist
-- (roles are cluster-wide).
do $$
begin
  if not exists (select from pg_roles where rolname = 'chronomem_app') then
    create role chronomem_app login;
  end if;
  if not exists (select from pg_roles where rolname = 'chronomem_analyst') then
    create role chronomem_analyst login;
  end if;
end
$$;

revoke all on schema memory, memory_internal from public;
grant usage on schema memory to chronomem_app, chronomem_analyst;
grant usage on schema memory_internal to chronomem_app, chronomem_analyst;

-- The org scope every policy is keyed on: a setting written by memory.use_org.
create function memory_internal.current_org() returns uuid
  language sql stable parallel safe
  as $$ select nullif(current_setting('chronomem.org_id', true), '')::uuid $$;
comment on function memory_internal.current_org() is
  'The org the current transaction (or session) is scoped to, or NULL.';

-- Record time.  A writer stamps it with now(), its transaction's start,
-- unless it waited for a lock while another writer committed rows it now
-- changes: then with the latest instant among those rows, so record time
-- never runs backwards for a row.  memory_internal.begin_write() fixes the
-- instant once the locks are held; defaults and record-time reads use it.
create function memory_internal.txn_instant() returns timestamptz
  language sql stable parallel safe
  as $$
    select coalesce(nullif(current_setting('chronomem.write_instant', true), '')::timestamptz, now())
  $$;
comment on function memory_internal.txn_instant() is
  'This transaction''s record-time instant: now(), or later when memory_internal.begin_write() found newer rows under its locks.';

create function memory_internal.range_until(p_range tstzrange, p_from timestamptz)
  returns timestamptz
  language sql immutable parallel safe
  as $$ select case when isempty(p_range) then p_from else coalesce(upper(p_range), 'infinity') end $$;
comment on function memory_internal.range_until(tstzrange, timestamptz) is
  'End of a fact''s window as a timestamp: infinity when open, its start when empty.';

--------------------------------------------------------------------------
-- Tenancy
--------------------------------------------------------------------------
create table memory.orgs (
  org_id     uuid primary key default gen_random_uuid(),
  name       text not null check (length(btrim(name)) between 1 and 200),
  created_at timestamptz not null default now()
);
comment on table memory.orgs is 'Tenants. Every other row carries its org_id.';

create table memory.projects (
  org_id     uuid not null references memory.orgs on delete cascade,
  project_id uuid not null default gen_random_uuid(),
  name       text not null check (length(btrim(name)) between 1 and 200),
  created_at timestamptz not null default now(),
  primary key (org_id, project_id),
  unique (org_id, name)
);
comment on table memory.projects is
  'A memory space inside an org. Entities, facts and edges are scoped per project.';
create index projects_project_id_idx on memory.projects (project_id);

create table memory.predicates (
  org_id      uuid not null,
  project_id  uuid not null,
  predicate   text not null check (predicate <> ''),
  cardinality text not null check (cardinality in ('one', 'many')),
  declared_at timestamptz not null default now(),
  primary key (org_id, project_id, predicate),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.predicates is
  'Declared predicate cardinality. ''one'': a new object supersedes the old one; undeclared predicates are ''many''.';

--------------------------------------------------------------------------
-- Conversations (filled by ingest; facts may cite an episode as source)
--------------------------------------------------------------------------
create table memory.sessions (
  org_id      uuid not null,
  project_id  uuid not null,
  session_id  uuid not null default gen_random_uuid(),
  external_id text not null check (length(external_id) between 1 and 200),
  metadata    jsonb not null default '{}',
  created_at  timestamptz not null default now(),
  primary key (org_id, session_id),
  unique (org_id, project_id, external_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.sessions is 'A conversation, named by the client''s external id.';

create table memory.episodes (
  org_id      uuid not null,
  project_id  uuid not null,
  session_id  uuid not null,
  episode_id  uuid not null default gen_random_uuid(),
  seq         integer not null check (seq >= 1),
  role        text not null check (role in ('user', 'assistant', 'system', 'tool')),
  content     text not null check (content <> ''),
  metadata    jsonb not null default '{}',
  occurred_at timestamptz not null,
  created_at  timestamptz not null default now(),
  primary key (org_id, episode_id),
  unique (org_id, session_id, seq),
  foreign key (org_id, session_id) references memory.sessions on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.episodes is
  'One message of a session, stored before any model reads it. occurred_at is world time.';
create index episodes_project_idx on memory.episodes (org_id, project_id, occurred_at);

--------------------------------------------------------------------------
-- Entities
--------------------------------------------------------------------------
create table memory.entities (
  org_id          uuid not null,
  project_id      uuid not null,
  entity_id       uuid not null default gen_random_uuid(),
  name            text not null check (length(name) between 1 and 500),
  normalized_name text not null check (normalized_name <> ''),
  entity_type     text,
  summary         text,
  created_at      timestamptz not null default now(),
  primary key (org_id, entity_id),
  unique (org_id, project_id, normalized_name),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.entities is
  'A named thing in a project: one row per normalized name per project. Resolution is exact, never fuzzy.';
create index entities_name_trgm_idx on memory.entities using gin (normalized_name gin_trgm_ops);

create table memory.entity_aliases (
  org_id           uuid not null,
  project_id       uuid not null,
  normalized_alias text not null check (normalized_alias <> ''),
  alias            text not null,
  entity_id        uuid not null,
  created_at       timestamptz not null default now(),
  primary key (org_id, project_id, normalized_alias),
  foreign key (org_id, entity_id) references memory.entities on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.entity_aliases is 'Another name that resolves to an existing entity.';
create index entity_aliases_entity_idx on memory.entity_aliases (org_id, entity_id);

--------------------------------------------------------------------------
-- Facts: the temporal core
--------------------------------------------------------------------------
create table memory.facts (
  org_id            uuid not null,
  project_id        uuid not null,
  fact_id           uuid not null default gen_random_uuid(),
  -- Assertion order: breaks ties between facts of one identity that start
  -- at the same instant (the newer assertion wins).
  fact_seq          bigint generated always as identity,
  subject_id        uuid not null,
  predicate         text not null check (predicate <> ''),
  predicate_label   text not null,
  object_entity_id  uuid,
  object_literal    text,
  object_key        text not null check (object_key <> ''),
  -- '' when the predicate is cardinality one (the object is not part of the
  -- identity), else object_key.
  identity_object   text not null,
  content           text not null check (length(content) between 1 and 8192),
  content_key       text not null,
  confidence        real not null default 1 check (confidence between 0 and 1),
  source            text not null check (source in ('api', 'extraction', 'import')),
  source_episode_id uuid,
  actor             text,
  -- World time.  valid_from never changes; asserted_until is the claimed end
  -- (NULL = open) and only a contradiction or expiry lowers it; valid_range
  -- is what the store currently believes: [valid_from, least(asserted_until,
  -- start of the next fact of the same identity)).  Empty when a newer fact
  -- with the same start won.
  valid_from        timestamptz not null check (isfinite(valid_from)),
  asserted_until    timestamptz check (asserted_until >= valid_from),
  valid_range       tstzrange not null,
  -- valid_range's end as a plain timestamp ('infinity' when open, valid_from
  -- when empty), so reads test valid_from <= at < valid_until: timestamp
  -- comparisons are leakproof, so the planner keeps its statistics for them
  -- under forced row-level security (range operators get a fixed guess).
  valid_until       timestamptz not null
                    generated always as (memory_internal.range_until(valid_range, valid_from)) stored,
  -- Record time.  recorded_at: when the store started believing the fact;
  -- invalid_at: when a retraction ended that belief; range_changed_at: when
  -- valid_range last changed (earlier ranges are in fact_events).
  recorded_at       timestamptz not null default memory_internal.txn_instant(),
  range_changed_at  timestamptz not null default memory_internal.txn_instant(),
  invalid_at        timestamptz,
  support_count     integer not null default 1 check (support_count >= 1),
  last_seen_at      timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, fact_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, subject_id) references memory.entities,
  foreign key (org_id, object_entity_id) references memory.entities,
  foreign key (org_id, source_episode_id) references memory.episodes,
  check (object_entity_id is not null or object_literal is not null),
  check (identity_object in ('', object_key)),
  check (isempty(valid_range) or lower(valid_range) = valid_from),
  check (invalid_at is null or invalid_at >= recorded_at),
  -- Invariant 1: no two current facts of one identity overlap in world time.
  constraint facts_no_overlap exclude using gist (
    org_id with =, project_id with =, subject_id with =, predicate with =,
    identity_object with =, valid_range with &&
  ) where (invalid_at is null)
);
comment on table memory.facts is
  'Subject-predicate-object facts with a valid-time window (valid_range) and record time (recorded_at..invalid_at). Read them through memory.facts_at(project, at, known_at).';
comment on column memory.facts.valid_range is
  'World-time window the store currently believes; earlier beliefs are kept in memory.fact_events.';
comment on column memory.facts.invalid_at is 'Set by retraction: the store stopped believing the fact.';

-- The write path's lookup (all versions of one identity in world-time
-- order); its prefix also serves per-subject history and wipe.
create index facts_identity_idx on memory.facts
  (org_id, project_id, subject_id, predicate, identity_object, valid_from, fact_seq);
-- facts_at, known_at = now: current beliefs by instant.
create index facts_current_window_idx on memory.facts (org_id, project_id, valid_until, valid_from)
  where invalid_at is null;
-- facts_at, earlier known_at: the few rows whose belief changed since.
create index facts_range_changed_idx on memory.facts (org_id, project_id, range_changed_at);
create index facts_invalid_at_idx on memory.facts (org_id, project_id, invalid_at)
  where invalid_at is not null;
create index facts_object_idx on memory.facts (org_id, object_entity_id)
  where object_entity_id is not null;
create index facts_episode_idx on memory.facts (org_id, source_episode_id)
  where source_episode_id is not null;

create table memory.fact_events (
  org_id      uuid not null,
  project_id  uuid not null,
  event_id    bigint generated always as identity,
  fact_id     uuid not null,
  event_type  text not null check (event_type in
    ('asserted', 'superseded', 'contradicted', 'expired', 'retracted', 'restored')),
  old_fact_id uuid,
  new_fact_id uuid,
  old_range   tstzrange,
  new_range   tstzrange,
  occurred_at timestamptz not null default memory_internal.txn_instant(),
  actor       text,
  reason      text,
  primary key (org_id, event_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.fact_events is
  'Append-only log of every change to a fact: asserted, superseded, contradicted, expired, retracted, restored (a retraction gave back a closed window). new_range is the valid window believed from occurred_at on.';
create index fact_events_fact_idx on memory.fact_events (org_id, fact_id, occurred_at, event_id);
create index fact_events_project_idx on memory.fact_events (org_id, project_id, occurred_at);

create table memory.tombstones (
  org_id     uuid not null,
  project_id uuid not null,
  subject_id uuid not null,
  predicate  text not null,
  object_key text not null,
  fact_id    uuid not null,
  reason     text,
  created_at timestamptz not null default memory_internal.txn_instant(),
  lifted_at  timestamptz,
  lifted_by  uuid,
  primary key (org_id, fact_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.tombstones is
  'A retracted claim (subject, predicate, object). assert_facts refuses it again unless told to override, which lifts the tombstone. Wipe never writes tombstones.';
create unique index tombstones_claim_idx on memory.tombstones
  (org_id, project_id, subject_id, predicate, object_key) where lifted_at is null;

--------------------------------------------------------------------------
-- Edges: materialized from facts whose subject and object are entities
--------------------------------------------------------------------------
create table memory.edges (
  org_id      uuid not null,
  project_id  uuid not null,
  edge_id     uuid not null default gen_random_uuid(),
  source_id   uuid not null,
  target_id   uuid not null,
  relation    text not null,
  valid_range tstzrange not null check (not isempty(valid_range)),
  recorded_at timestamptz not null default memory_internal.txn_instant(),
  expired_at  timestamptz,
  primary key (org_id, edge_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, source_id) references memory.entities,
  foreign key (org_id, target_id) references memory.entities,
  check (expired_at is null or expired_at >= recorded_at),
  constraint edges_no_overlap exclude using gist (
    org_id with =, project_id with =, source_id with =, target_id with =,
    relation with =, valid_range with &&
  ) where (expired_at is null)
);
comment on table memory.edges is
  'Graph edges: one row per (source, target, relation) and maximal window in which some current fact asserts it. Rows are immutable but for expired_at (record time), so edges can be read at any known_at through memory.edges_at.';
create index edges_current_idx on memory.edges using gist (org_id, project_id, valid_range)
  where expired_at is null;
create index edges_key_idx on memory.edges (org_id, project_id, source_id, target_id, relation);
create index edges_target_idx on memory.edges (org_id, target_id);

--------------------------------------------------------------------------
-- Audit and counters
--------------------------------------------------------------------------
create table memory.audit_log (
  org_id      uuid not null,
  audit_id    bigint generated always as identity,
  project_id  uuid,
  action      text not null,
  resource    text,
  actor       text not null default current_user,
  counts      jsonb not null default '{}',
  occurred_at timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, audit_id)
);
comment on table memory.audit_log is
  'Append-only audit trail (wipes, retractions, ...): who did what, with counts, never content.';

create table memory_internal.counters (
  org_id     uuid not null,
  project_id uuid not null,
  metric     text not null,
  -- Writers add to one of several rows so concurrent batches rarely wait
  -- on each other's counter row.
  shard      smallint not null,
  value      bigint not null default 0,
  primary key (org_id, project_id, metric, shard)
);
comment on table memory_internal.counters is
  'Monotonic counters (facts_superseded, facts_retracted, facts_refused, ...), sharded; read through memory.counters.';

-- One fact of an assert_facts batch: as parsed and validated (first
-- block), then resolved to entities and an identity (second block).
create type memory_internal.fact_input as (
  idx                integer,
  fact_id            uuid,
  subject_name       text,
  subject_norm       text,
  subject_type       text,
  predicate          text,
  predicate_label    text,
  object_name        text,
  object_norm        text,
  object_kind        text,
  object_entity_type text,
  content            text,
  content_key        text,
  confidence         real,
  valid_from         timestamptz,
  valid_to           timestamptz,
  source_episode_id  uuid,
  subject_id         uuid,
  object_entity_id   uuid,
  object_key         text,
  identity_object    text,
  lock_key           bigint,
  round              integer
);

--------------------------------------------------------------------------
-- Row-level security: forced, keyed on the transaction's org.
--------------------------------------------------------------------------
do $$
declare
  t regclass;
begin
  foreach t in array array[
    'memory.orgs', 'memory.projects', 'memory.predicates', 'memory.sessions',
    'memory.episodes', 'memory.entities', 'memory.entity_aliases', 'memory.facts',
    'memory.fact_events', 'memory.tombstones', 'memory.edges', 'memory.audit_log',
    'memory_internal.counters']::regclass[]
  loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
  end loop;
end
$$;

-- Reads are granted; writes go through the functions in schema memory
-- (security definer), so no client can bypass the state machine.
revoke all on all tables in schema memory, memory_internal from public;
grant select on all tables in schema memory to chronomem_app, chronomem_analyst;
