-- The HTTP layer's audited writes (schema memory_http): one call per
-- mutating request; each writes one audit row (retract_fact and wipe write
-- their own) with the key as actor.  CREATE OR REPLACE only: re-applied on every migrate.

--------------------------------------------------------------------------
-- Audited writes: one call per mutating request; each writes one audit row
-- (retract_fact and wipe write their own) with the key as actor.
--------------------------------------------------------------------------
create or replace function memory_http.create_project(p_name text)
  returns table (project_id uuid, org_id uuid, name text, created_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_project uuid;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.create_project'), null);
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
comment on function memory_http.create_project(text) is
  'API: create a project in the authorized key''s org (needs project:manage); audited.';

create or replace function memory_http.assert_facts(
  p_project uuid, p_facts jsonb, p_override_tombstones boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.assert_facts'), p_project);
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
comment on function memory_http.assert_facts(uuid, jsonb, boolean) is
  'API: memory.assert_facts as the authorized key (needs project:write); audited with the counts.';

create or replace function memory_http.ingest(
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
  perform memory_internal.require_api(memory_http.call_permission('memory_http.ingest'), p_project);
  v_result := memory.ingest(p_project, p_session, p_messages, p_idempotency_key, p_session_metadata);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'memory.ingest',
    'session:' || (v_result ->> 'session_id'),
    jsonb_build_object('episodes', jsonb_array_length(v_result -> 'episode_ids'),
                       'replayed', v_result -> 'replayed'));
  return v_result;
end
$$;
comment on function memory_http.ingest(uuid, text, jsonb, text, jsonb) is
  'API: memory.ingest as the authorized key (needs project:write); audited with counts.';

create or replace function memory_http.retract_fact(p_project uuid, p_fact uuid, p_reason text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.retract_fact'), p_project);
  -- retract_fact writes the audit row (retract_fact, fact:<id>) itself.
  return memory.retract_fact(p_project, p_fact, p_reason, memory_internal.api_actor());
end
$$;
comment on function memory_http.retract_fact(uuid, uuid, text) is
  'API: memory.retract_fact as the authorized key (needs project:write); audited by retract_fact.';

create or replace function memory_http.wipe(
  p_project uuid, p_session text default null, p_subject text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.wipe'), p_project);
  -- wipe writes the audit row (wipe, scope, counts) itself.
  return memory.wipe(p_project, p_session, p_subject, memory_internal.api_actor());
end
$$;
comment on function memory_http.wipe(uuid, text, text) is
  'API: memory.wipe as the authorized key (needs project:write); audited by wipe.';

create or replace function memory_http.set_retention(p_project uuid, p_seconds bigint)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.set_retention'), p_project);
  -- set_retention writes the audit row itself.
  return memory.set_retention(p_project, make_interval(secs => p_seconds), memory_internal.api_actor());
end
$$;
comment on function memory_http.set_retention(uuid, bigint) is
  'API: memory.set_retention as the authorized key, in seconds (needs configuration:write); audited by set_retention.';

create or replace function memory_http.delete_project(p_project uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.delete_project'), p_project);
  return memory.delete_project(p_project, memory_internal.api_actor());
end
$$;
comment on function memory_http.delete_project(uuid) is
  'API: memory.delete_project as the authorized key (needs project:manage); audited by delete_project.';

create or replace function memory_http.declare_predicate(
  p_project uuid, p_predicate text, p_cardinality text)
  returns table (predicate text, cardinality text, declared_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.declare_predicate'), p_project);
  perform memory.declare_predicate(p_project, p_predicate, p_cardinality);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'predicate.declare',
    'predicate:' || memory.normalize_text(p_predicate));
  return query select d.predicate, d.cardinality, d.declared_at from memory.predicates_of(p_project) d
                where d.predicate = memory.normalize_text(p_predicate);
  -- Declared 'unknown': no declaration is left.
  if not found then
    return query select memory.normalize_text(p_predicate), 'unknown'::text, null::timestamptz;
  end if;
end
$$;
comment on function memory_http.declare_predicate(uuid, text, text) is
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
create or replace function memory_http.upsert_entity(
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
  perform memory_internal.require_api(memory_http.call_permission('memory_http.upsert_entity'), p_project);
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
  if v_id is null then
    raise exception 'the redaction policy drops this name: nothing was stored'
      using errcode = 'check_violation', detail = 'name';
  end if;
  foreach v_alias in array coalesce(p_aliases, '{}') loop
    perform memory.add_alias(p_project, p_name, v_alias);
  end loop;
  perform memory_internal.audit(v_org, p_project, 'entity.upsert', 'entity:' || v_id,
    jsonb_build_object('aliases', coalesce(cardinality(p_aliases), 0)));
  return memory_internal.entity_api_answer(v_org, v_id);
end
$$;
comment on function memory_http.upsert_entity(uuid, text, text, text, text[]) is
  'API: memory.upsert_entity and memory.add_alias for each alias, as the authorized key (needs project:write), in one transaction; audited. Facts stored with any of the names as a plain-name object become the entity''s.';

-- Two entities that are one thing, merged (memory.merge_entities): the
-- kept entity as the API shows it, and what the merge moved.
create or replace function memory_http.merge_entities(
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
  perform memory_internal.require_api(memory_http.call_permission('memory_http.merge_entities'), p_project);
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
comment on function memory_http.merge_entities(uuid, text, text, boolean) is
  'API: memory.merge_entities as the authorized key (needs project:write); audited with the counts (a dry run is not). Returns the kept entity and what the merge moved (or would move).';

-- An alias split off into an entity of its own (memory.split_entity): the
-- new entity as the API shows it, and what the split moved.
create or replace function memory_http.split_entity(
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
  perform memory_internal.require_api(memory_http.call_permission('memory_http.split_entity'), p_project);
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
comment on function memory_http.split_entity(uuid, text, boolean) is
  'API: memory.split_entity as the authorized key (needs project:write); audited with the counts (a dry run is not). Returns the new entity (null for a dry run) and what the split moved (or would move).';

create or replace function memory_http.refresh_communities(p_project uuid)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.refresh_communities'), p_project);
  v_result := memory.refresh_communities(p_project);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'communities.refresh',
    'project:' || p_project,
    jsonb_build_object('computed', v_result -> 'computed', 'communities', v_result -> 'communities'));
  return v_result;
end
$$;
comment on function memory_http.refresh_communities(uuid) is
  'API: memory.refresh_communities as the authorized key (needs project:write): compute the project''s communities now if its graph changed since the last run. Audited.';
