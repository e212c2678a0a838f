-- 0042_extraction_schemas: a project's extraction schema (what the model is
-- asked to extract, versioned), each episode's enrichment (which schema
-- version and prompt produced its answer, its classification labels and
-- custom fields) and every item extraction dropped, with the reason
-- (functions/074_extraction_schemas.sql, functions/075_extraction.sql).

-- The reasons an extracted item is dropped: the one list (the check
-- constraint below calls it; functions/074 re-creates it unchanged).
create or replace function memory_internal.extraction_rejection_reasons()
  returns text[]
  language sql immutable parallel safe
  as $$
    select array['low_confidence', 'invalid_window', 'unknown_entity_type', 'unknown_predicate',
                 'schema_violation', 'parse_failure', 'unknown_fact_id']::text[]
  $$;
comment on function memory_internal.extraction_rejection_reasons() is
  'The reasons an extracted item is dropped (memory.extraction_rejections.reason): low_confidence, invalid_window, unknown_entity_type, unknown_predicate, schema_violation, parse_failure, unknown_fact_id.';

-- Versions of a project's extraction schema, append-only: the current one
-- is the highest version.
create table memory.extraction_schemas (
  org_id        uuid not null,
  project_id    uuid not null,
  version       integer not null constraint extraction_schemas_version_check check (version >= 1),
  document      jsonb not null
    constraint extraction_schemas_document_check check (jsonb_typeof(document) = 'object'),
  -- sha256 of the document as stored: what the prompt is built from.
  document_hash text not null,
  created_at    timestamptz not null default memory_internal.txn_instant(),
  created_by    text,
  primary key (org_id, project_id, version),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.extraction_schemas is
  'Versions of a project''s extraction schema (entity types, predicates, classification labels, custom fields), append-only; the current one is the highest version. Written by memory.set_extraction_schema, read by memory.extraction_schema.';

-- One row per enriched episode: what produced its extraction and what the
-- model classified and filled in.  Facts drawn from the episode trace back
-- here through their source_episode_id.
create table memory.episode_extractions (
  org_id         uuid not null,
  project_id     uuid not null,
  episode_id     uuid not null,
  schema_version integer,
  prompt_hash    text,
  model          text,
  structured     text
    constraint episode_extractions_structured_check
    check (structured in ('json_schema', 'json_object', 'text')),
  calls          integer not null default 1 constraint episode_extractions_calls_check check (calls >= 0),
  labels         text[] not null default '{}',
  fields         jsonb constraint episode_extractions_fields_check
    check (fields is null or jsonb_typeof(fields) = 'object'),
  counts         jsonb not null default '{}',
  extracted_at   timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, episode_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, episode_id) references memory.episodes on delete cascade
);
comment on table memory.episode_extractions is
  'An episode''s enrichment, one row per episode (the last answer applied): the schema version and prompt hash that produced it, the model, the structured-output mode and number of calls, its classification labels and custom fields, and per-section counts. Facts with source_episode_id = episode_id come from it.';

-- Every item extraction dropped (by the worker or by apply_extraction).
create table memory.extraction_rejections (
  org_id         uuid not null,
  project_id     uuid not null,
  rejection_id   bigint generated always as identity,
  episode_id     uuid not null,
  section        text not null
    constraint extraction_rejections_section_check
    check (section in ('answer', 'entities', 'facts', 'contradictions', 'notes', 'classification', 'fields')),
  item           jsonb,
  reason         text not null
    constraint extraction_rejections_reason_check
    check (reason = any (memory_internal.extraction_rejection_reasons())),
  message        text,
  schema_version integer,
  recorded_at    timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, rejection_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, episode_id) references memory.episodes on delete cascade
);
comment on table memory.extraction_rejections is
  'Every item extraction dropped, with its section, the item as the model gave it, the reason (memory_internal.extraction_rejection_reasons()) and a message: nothing is dropped silently. Read through memory.extraction_rejections_page and memory.episode_extraction.';
create index extraction_rejections_project_idx on memory.extraction_rejections (org_id, project_id, rejection_id);
create index extraction_rejections_episode_idx on memory.extraction_rejections (org_id, episode_id);

do $$
declare
  t text;
begin
  foreach t in array array['memory.extraction_schemas', 'memory.episode_extractions',
                           'memory.extraction_rejections'] loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
    execute format('grant select on %s to chronomem_app, chronomem_analyst', t);
  end loop;
end
$$;

-- apply_extraction takes the answer's provenance (p_meta); search and
-- context take label and field filters.  The old signatures would make
-- shorter calls ambiguous.
drop function if exists memory_worker.apply_extraction(uuid, jsonb, real, integer);
drop function if exists memory.search_rows(uuid, text, vector, timestamptz, timestamptz, integer, text[], text);
drop function if exists memory.search(uuid, text, vector, timestamptz, timestamptz, integer, text[], text);
drop function if exists memory.context(uuid, text, vector, timestamptz, timestamptz, integer, integer);
drop function if exists memory_http.search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text);
drop function if exists memory_http.context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer);

-- A retried job records the same rejection once.
create unique index extraction_rejections_item_idx on memory.extraction_rejections
  (org_id, episode_id, section, reason, md5(coalesce(item::text, '') || '|' || coalesce(message, '')));
