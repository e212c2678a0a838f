-- Extraction schemas: what a project asks the extraction model for (entity
-- types, predicates, classification labels, custom fields), versioned;
-- each episode's enrichment; and every item extraction dropped, with its
-- reason.  apply_extraction (functions/075_extraction.sql) enforces the
-- schema.  CREATE OR REPLACE only.

create or replace function memory_internal.extraction_rejection_reasons()
  returns text[]
  language sql immutable parallel safe
  as $$
    select array['low_confidence', 'invalid_window', 'unknown_entity_type', 'unknown_predicate',
                 'schema_violation', 'parse_failure', 'unknown_fact_id']::text[]
  $$;
comment on function memory_internal.extraction_rejection_reasons() is
  'The reasons an extracted item is dropped (memory.extraction_rejections.reason): low_confidence, invalid_window, unknown_entity_type, unknown_predicate, schema_violation, parse_failure, unknown_fact_id.';

-- The sections a rejection is recorded under.
create or replace function memory_internal.extraction_sections()
  returns text[]
  language sql immutable parallel safe
  as $$ select array['answer', 'entities', 'facts', 'contradictions', 'notes', 'classification', 'fields']::text[] $$;
comment on function memory_internal.extraction_sections() is
  'The sections of an extraction answer a rejection names: answer (the whole answer: parse failures), entities, facts, contradictions, notes, classification, fields.';

--------------------------------------------------------------------------
-- The schema document
--------------------------------------------------------------------------

-- Named declarations (entity_types, predicates, labels): an array of
-- objects with a snake_case name, unique, and a description.  Raises 22023
-- naming the path of the first problem; returns the entries with only the
-- documented keys.
create or replace function memory_internal.check_schema_names(
  p_list jsonb, p_key text, p_extra text[])
  returns jsonb
  language plpgsql immutable
as $$
declare
  x jsonb;
  i integer := 0;
  v_names text[] := '{}';
  v_out jsonb := '[]';
  v_path text;
  k text;
begin
  if p_list is null or p_list = 'null' then
    return '[]';
  end if;
  if jsonb_typeof(p_list) <> 'array' then
    raise exception '% must be an array', p_key using errcode = 'invalid_parameter_value', detail = p_key;
  end if;
  for x in select e from jsonb_array_elements(p_list) e loop
    v_path := format('%s[%s]', p_key, i);
    if jsonb_typeof(x) <> 'object' then
      raise exception '% must be an object', v_path using errcode = 'invalid_parameter_value', detail = v_path;
    end if;
    for k in select jsonb_object_keys(x) loop
      if not k = any (array['name', 'description'] || p_extra) then
        raise exception '%.% is not a known key (%)', v_path, k,
          array_to_string(array['name', 'description'] || p_extra, ', ')
          using errcode = 'invalid_parameter_value', detail = v_path || '.' || k;
      end if;
    end loop;
    if jsonb_typeof(x -> 'name') is distinct from 'string' or x ->> 'name' !~ '^[a-z][a-z0-9_]{0,62}$' then
      raise exception '%.name must be a snake_case name (a-z, 0-9, _; starting with a letter; at most 63 characters)', v_path
        using errcode = 'invalid_parameter_value', detail = v_path || '.name';
    end if;
    if (x ->> 'name') = any (v_names) then
      raise exception '%.name "%" is declared twice', v_path, x ->> 'name'
        using errcode = 'invalid_parameter_value', detail = v_path || '.name';
    end if;
    if coalesce(jsonb_typeof(x -> 'description'), 'null') not in ('string', 'null') then
      raise exception '%.description must be a string', v_path
        using errcode = 'invalid_parameter_value', detail = v_path || '.description';
    end if;
    v_names := v_names || (x ->> 'name');
    v_out := v_out || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
               'name', x ->> 'name', 'description', nullif(btrim(x ->> 'description'), ''))) || (x - 'name' - 'description'));
    i := i + 1;
  end loop;
  return v_out;
end
$$;
comment on function memory_internal.check_schema_names(jsonb, text, text[]) is
  'Validate one list of an extraction schema (entity_types, predicates, labels): objects with a unique snake_case name, a description and only the keys p_extra adds; 22023 naming the path (predicates[2].name) otherwise. Returns the entries trimmed.';

-- The whole document (contract: entity_types, predicates, labels, fields,
-- allow_other_predicates, allow_other_entity_types), returned normalized
-- with its defaults.
create or replace function memory_internal.check_extraction_schema(p_document jsonb)
  returns jsonb
  language plpgsql immutable
as $$
declare
  c_keys constant text[] := array['entity_types', 'predicates', 'labels', 'fields',
                                  'allow_other_predicates', 'allow_other_entity_types'];
  v_types jsonb;
  v_preds jsonb;
  v_labels jsonb;
  v_fields jsonb := p_document -> 'fields';
  x jsonb;
  i integer := 0;
  k text;
begin
  if p_document is null or jsonb_typeof(p_document) <> 'object' then
    raise exception 'the extraction schema must be a JSON object' using errcode = 'invalid_parameter_value',
      detail = 'document';
  end if;
  for k in select jsonb_object_keys(p_document) loop
    if not k = any (c_keys) then
      raise exception '% is not a key of an extraction schema (%)', k, array_to_string(c_keys, ', ')
        using errcode = 'invalid_parameter_value', detail = k;
    end if;
  end loop;
  v_types := memory_internal.check_schema_names(p_document -> 'entity_types', 'entity_types', '{}');
  v_labels := memory_internal.check_schema_names(p_document -> 'labels', 'labels', '{}');
  v_preds := memory_internal.check_schema_names(p_document -> 'predicates', 'predicates',
                                                array['cardinality', 'object_type']);
  for x in select e from jsonb_array_elements(v_preds) e loop
    if coalesce(jsonb_typeof(x -> 'cardinality'), 'null') <> 'null'
       and (jsonb_typeof(x -> 'cardinality') <> 'string' or x ->> 'cardinality' not in ('one', 'many')) then
      raise exception 'predicates[%].cardinality must be one or many', i
        using errcode = 'invalid_parameter_value', detail = format('predicates[%s].cardinality', i);
    end if;
    if coalesce(jsonb_typeof(x -> 'object_type'), 'null') <> 'null'
       and (jsonb_typeof(x -> 'object_type') <> 'string'
            or x ->> 'object_type' not in ('entity', 'literal', 'date', 'number')) then
      raise exception 'predicates[%].object_type must be entity, literal, date or number', i
        using errcode = 'invalid_parameter_value', detail = format('predicates[%s].object_type', i);
    end if;
    i := i + 1;
  end loop;
  v_preds := (select coalesce(jsonb_agg(jsonb_strip_nulls(e) order by o), '[]')
                from jsonb_array_elements(v_preds) with ordinality t(e, o));
  if v_fields = 'null' then
    v_fields := null;
  end if;
  if v_fields is not null then
    if jsonb_typeof(v_fields) <> 'object' or v_fields -> 'type' is distinct from '"object"' then
      raise exception 'fields must be a JSON Schema of type object ({"type": "object", ...}) or null'
        using errcode = 'invalid_parameter_value', detail = 'fields';
    end if;
    if coalesce(jsonb_typeof(v_fields -> 'properties'), 'object') <> 'object' then
      raise exception 'fields.properties must be an object' using errcode = 'invalid_parameter_value',
        detail = 'fields.properties';
    end if;
    for k, x in select j.key, j.value from jsonb_each(coalesce(v_fields -> 'properties', '{}')) j loop
      if jsonb_typeof(x) <> 'object' then
        raise exception 'fields.properties.% must be a JSON Schema (an object)', k
          using errcode = 'invalid_parameter_value', detail = 'fields.properties.' || k;
      end if;
      if x ? 'type' and not (
           (jsonb_typeof(x -> 'type') = 'string'
            and x ->> 'type' in ('string', 'number', 'integer', 'boolean', 'array', 'object', 'null'))
           or (jsonb_typeof(x -> 'type') = 'array' and not exists (
                 select from jsonb_array_elements(x -> 'type') t
                  where jsonb_typeof(t) <> 'string'
                     or t #>> '{}' not in ('string', 'number', 'integer', 'boolean', 'array', 'object', 'null')))) then
        raise exception 'fields.properties.%.type must be a JSON Schema type (string, number, integer, boolean, array, object, null)', k
          using errcode = 'invalid_parameter_value', detail = 'fields.properties.' || k || '.type';
      end if;
      if x ? 'enum' and jsonb_typeof(x -> 'enum') <> 'array' then
        raise exception 'fields.properties.%.enum must be an array', k
          using errcode = 'invalid_parameter_value', detail = 'fields.properties.' || k || '.enum';
      end if;
    end loop;
    if coalesce(jsonb_typeof(v_fields -> 'required'), 'array') <> 'array'
       or exists (select from jsonb_array_elements(coalesce(v_fields -> 'required', '[]')) r
                   where jsonb_typeof(r) <> 'string'
                      or not coalesce(v_fields -> 'properties', '{}') ? (r #>> '{}')) then
      raise exception 'fields.required must be an array of names of fields.properties'
        using errcode = 'invalid_parameter_value', detail = 'fields.required';
    end if;
    if coalesce(jsonb_typeof(v_fields -> 'additionalProperties'), 'boolean') not in ('boolean', 'object') then
      raise exception 'fields.additionalProperties must be a boolean or a JSON Schema'
        using errcode = 'invalid_parameter_value', detail = 'fields.additionalProperties';
    end if;
  end if;
  foreach k in array array['allow_other_predicates', 'allow_other_entity_types'] loop
    if coalesce(jsonb_typeof(p_document -> k), 'null') not in ('boolean', 'null') then
      raise exception '% must be true or false', k using errcode = 'invalid_parameter_value', detail = k;
    end if;
  end loop;
  return jsonb_build_object(
    'entity_types', v_types, 'predicates', v_preds, 'labels', v_labels, 'fields', v_fields,
    'allow_other_predicates', coalesce((p_document ->> 'allow_other_predicates')::boolean, true),
    'allow_other_entity_types', coalesce((p_document ->> 'allow_other_entity_types')::boolean, true));
end
$$;
comment on function memory_internal.check_extraction_schema(jsonb) is
  'Validate an extraction schema document (entity_types, predicates with cardinality one/many and object_type entity/literal/date/number, labels, fields: a JSON Schema of type object or null, allow_other_predicates, allow_other_entity_types); 22023 naming the path of the first problem. Returns it normalized, defaults filled in.';

-- A value against one property's JSON Schema (the subset an extraction
-- schema's fields use: type, enum).  NULL when it conforms, else why not.
create or replace function memory_internal.field_problem(p_schema jsonb, p_value jsonb)
  returns text
  language sql immutable parallel safe
  as $$
    select case
      when p_schema ? 'type' and not (
             case jsonb_typeof(p_value)
               when 'number' then array['number']
                                  || case when p_value::text ~ '^-?[0-9]+$' then array['integer'] else '{}' end
               else array[jsonb_typeof(p_value)] end
             && case jsonb_typeof(p_schema -> 'type')
                  when 'array' then array(select jsonb_array_elements_text(p_schema -> 'type'))
                  else array[p_schema ->> 'type'] end) then
        format('must be of type %s, not %s', p_schema -> 'type', jsonb_typeof(p_value))
      when p_schema ? 'enum' and not exists (select from jsonb_array_elements(p_schema -> 'enum') e
                                              where e = p_value) then
        format('must be one of %s', p_schema -> 'enum')
    end
  $$;
comment on function memory_internal.field_problem(jsonb, jsonb) is
  'Why a custom field''s value does not conform to its property''s JSON Schema (type, enum), or NULL when it does.';

--------------------------------------------------------------------------
-- Versions
--------------------------------------------------------------------------
create or replace function memory_internal.current_extraction_schema(p_org uuid, p_project uuid)
  returns jsonb
  language sql stable
  as $$
    select s.document || jsonb_build_object('version', s.version)
      from memory.extraction_schemas s
     where s.org_id = p_org and s.project_id = p_project
     order by s.version desc limit 1
  $$;
comment on function memory_internal.current_extraction_schema(uuid, uuid) is
  'The project''s current extraction schema document with its version, or NULL when none is set.';

create or replace function memory_internal.extraction_schema_json(s memory.extraction_schemas)
  returns jsonb
  language sql stable
  as $$
    select jsonb_build_object('project_id', s.project_id, 'version', s.version, 'document', s.document,
                              'document_hash', s.document_hash, 'created_at', s.created_at,
                              'created_by', s.created_by)
  $$;
comment on function memory_internal.extraction_schema_json(memory.extraction_schemas) is
  'One stored extraction schema version as the API returns it.';

create or replace function memory.set_extraction_schema(
  p_project uuid, p_document jsonb, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_doc jsonb := memory_internal.check_extraction_schema(p_document);
  v_actor text := coalesce(p_actor, session_user);
  v_cur memory.extraction_schemas;
  v_new memory.extraction_schemas;
  x jsonb;
begin
  -- One writer of a project's schema at a time: versions without gaps.
  perform pg_advisory_xact_lock(hashtextextended('extraction_schema:' || p_project::text, 0));
  select s.* into v_cur from memory.extraction_schemas s
   where s.org_id = v_org and s.project_id = p_project order by s.version desc limit 1;
  -- The same document again is the current version (a PUT retried).
  if v_cur.version is not null and v_cur.document = v_doc then
    return memory_internal.extraction_schema_json(v_cur) || jsonb_build_object('created', false);
  end if;
  insert into memory.extraction_schemas (org_id, project_id, version, document, document_hash, created_by)
  values (v_org, p_project, coalesce(v_cur.version, 0) + 1, v_doc,
          encode(sha256(convert_to(v_doc::text, 'UTF8')), 'hex'), v_actor)
  returning * into v_new;
  -- A declared cardinality is the project's (one definition: supersession
  -- follows the schema).
  for x in select e from jsonb_array_elements(v_doc -> 'predicates') e where e ? 'cardinality' loop
    perform memory_internal.declare_cardinality(
      p_project, x ->> 'name', x ->> 'cardinality', 'declared',
      jsonb_build_object('extraction_schema_version', v_new.version), null, v_actor);
  end loop;
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'extraction_schema.set', 'project:' || p_project, v_actor,
          jsonb_build_object('version', v_new.version,
                             'predicates', jsonb_array_length(v_doc -> 'predicates'),
                             'entity_types', jsonb_array_length(v_doc -> 'entity_types'),
                             'labels', jsonb_array_length(v_doc -> 'labels')));
  return memory_internal.extraction_schema_json(v_new) || jsonb_build_object('created', true);
end
$$;
comment on function memory.set_extraction_schema(uuid, jsonb, text) is
  'Store a new version of the project''s extraction schema (entity_types, predicates with description, cardinality one/many and object_type entity/literal/date/number, labels, fields: a JSON Schema of type object, allow_other_predicates, allow_other_entity_types), validated (22023 naming the path, e.g. predicates[2].cardinality). Predicates with a cardinality are declared on the project (memory.declare_predicate''s rules). The same document as the current version stores nothing (created false). Audited.';

create or replace function memory.extraction_schema(p_project uuid, p_version integer default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_row memory.extraction_schemas;
begin
  select s.* into v_row from memory.extraction_schemas s
   where s.org_id = v_org and s.project_id = p_project
     and (p_version is null or s.version = p_version)
   order by s.version desc limit 1;
  if v_row.version is null then
    raise exception '%', case when p_version is null
                              then format('project %s has no extraction schema', p_project)
                              else format('project %s has no extraction schema version %s', p_project, p_version) end
      using errcode = 'no_data_found';
  end if;
  return memory_internal.extraction_schema_json(v_row);
end
$$;
comment on function memory.extraction_schema(uuid, integer) is
  'A version of the project''s extraction schema (the current one by default): {project_id, version, document, document_hash, created_at, created_by}; no_data_found when there is none.';

create or replace function memory.extraction_schema_versions(p_project uuid)
  returns table (version integer, document_hash text, created_at timestamptz, created_by text)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  return query
    select s.version, s.document_hash, s.created_at, s.created_by
      from memory.extraction_schemas s
     where s.org_id = v_org and s.project_id = p_project
     order by s.version desc;
end
$$;
comment on function memory.extraction_schema_versions(uuid) is
  'Every version of the project''s extraction schema, newest first (version, document_hash, created_at, created_by).';

--------------------------------------------------------------------------
-- Rejections
--------------------------------------------------------------------------

-- Record rejected items of an episode's extraction (each {section, item,
-- reason, message}); the same item with the same reason and message is
-- recorded once (a retried job).  Counted per reason for /metrics
-- (extraction_rejected:<reason>).  Returns the rows recorded.
create or replace function memory_internal.record_rejections(
  p_org uuid, p_project uuid, p_episode uuid, p_items jsonb, p_schema_version integer)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
  v_reasons text[];
  x jsonb;
  i integer := 0;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    raise exception 'rejections must be an array' using errcode = 'invalid_parameter_value', detail = 'items';
  end if;
  for x in select e from jsonb_array_elements(p_items) e loop
    if jsonb_typeof(x) <> 'object' then
      raise exception 'items[%] must be an object', i using errcode = 'invalid_parameter_value',
        detail = format('items[%s]', i);
    end if;
    if jsonb_typeof(x -> 'section') is distinct from 'string'
       or not (x ->> 'section') = any (memory_internal.extraction_sections()) then
      raise exception 'items[%].section must be one of %', i,
        array_to_string(memory_internal.extraction_sections(), ', ')
        using errcode = 'invalid_parameter_value', detail = format('items[%s].section', i);
    end if;
    if jsonb_typeof(x -> 'reason') is distinct from 'string'
       or not (x ->> 'reason') = any (memory_internal.extraction_rejection_reasons()) then
      raise exception 'items[%].reason must be one of %', i,
        array_to_string(memory_internal.extraction_rejection_reasons(), ', ')
        using errcode = 'invalid_parameter_value', detail = format('items[%s].reason', i);
    end if;
    if coalesce(jsonb_typeof(x -> 'message'), 'null') not in ('string', 'null') then
      raise exception 'items[%].message must be a string', i using errcode = 'invalid_parameter_value',
        detail = format('items[%s].message', i);
    end if;
    i := i + 1;
  end loop;
  with ins as (
    insert into memory.extraction_rejections
      (org_id, project_id, episode_id, section, item, reason, message, schema_version)
    select p_org, p_project, p_episode, e ->> 'section', nullif(e -> 'item', 'null'), e ->> 'reason',
           left(e ->> 'message', 2000), p_schema_version
      from jsonb_array_elements(p_items) e
    on conflict do nothing
    returning reason)
  select coalesce(array_agg(ins.reason), '{}') into v_reasons from ins;
  v_n := cardinality(v_reasons);
  perform memory_internal.bump_counters(p_org, p_project, array_agg('extraction_rejected:' || g.reason),
                                        array_agg(g.n))
     from (select u.reason, count(*)::bigint as n from unnest(v_reasons) u(reason) group by u.reason) g
   having count(*) > 0;
  return coalesce(v_n, 0);
end
$$;
comment on function memory_internal.record_rejections(uuid, uuid, uuid, jsonb, integer) is
  'Record rejected extraction items of an episode ({section, item, reason, message}, validated: 22023 naming items[i].field); an identical item already recorded is skipped. Bumps the extraction_rejected:<reason> counters; returns the rows recorded.';

create or replace function memory_worker.record_extraction_rejections(
  p_episode uuid, p_items jsonb, p_meta jsonb default '{}')
  returns integer
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  ep memory.episodes;
begin
  -- The org named as a value (the scope RLS applies): Citus routes the read.
  select e.* into ep from memory.episodes e
   where e.org_id = memory_internal.current_org() and e.episode_id = p_episode;
  if ep.episode_id is null then
    raise exception 'episode % not found', p_episode using errcode = 'no_data_found';
  end if;
  return memory_internal.record_rejections(
    ep.org_id, ep.project_id, p_episode, p_items,
    case when jsonb_typeof(p_meta -> 'schema_version') = 'number' then (p_meta ->> 'schema_version')::integer end);
end
$$;
comment on function memory_worker.record_extraction_rejections(uuid, jsonb, jsonb) is
  'The worker''s rejections of an episode''s extraction (what it could not parse or validate before apply_extraction: sections answer, entities, facts, contradictions, notes, classification, fields), each {section, item, reason, message}; p_meta.schema_version is recorded with them. Returns the rows recorded (an identical one already recorded is skipped).';

create or replace function memory.list_extraction_rejections(
  p_project uuid, p_reason text default null, p_limit integer default 50, p_after bigint default null,
  p_episode uuid default null)
  returns table (rejection_id bigint, episode_id uuid, section text, item jsonb, reason text,
                 message text, schema_version integer, recorded_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_limit is null or p_limit not between 1 and 500 then
    raise exception 'limit must be between 1 and 500' using errcode = 'invalid_parameter_value',
      detail = 'limit';
  end if;
  if p_reason is not null and not p_reason = any (memory_internal.extraction_rejection_reasons()) then
    raise exception 'reason must be one of %', array_to_string(memory_internal.extraction_rejection_reasons(), ', ')
      using errcode = 'invalid_parameter_value', detail = 'reason';
  end if;
  return query
    select r.rejection_id, r.episode_id, r.section, r.item, r.reason, r.message, r.schema_version,
           r.recorded_at
      from memory.extraction_rejections r
     where r.org_id = v_org and r.project_id = p_project
       and (p_reason is null or r.reason = p_reason)
       and (p_episode is null or r.episode_id = p_episode)
       and (p_after is null or r.rejection_id > p_after)
     order by r.rejection_id
     limit p_limit;
end
$$;
comment on function memory.list_extraction_rejections(uuid, text, integer, bigint, uuid) is
  'The project''s rejected extraction items, oldest first, a page of p_limit (1-500) after rejection id p_after, optionally of one reason or one episode.';

--------------------------------------------------------------------------
-- Enrichment
--------------------------------------------------------------------------
create or replace function memory.episode_extraction(p_project uuid, p_episode uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_row memory.episode_extractions;
begin
  if not exists (select from memory.episodes e
                  where e.org_id = v_org and e.episode_id = p_episode and e.project_id = p_project) then
    raise exception 'episode % not found in project %', p_episode, p_project using errcode = 'no_data_found';
  end if;
  select x.* into v_row from memory.episode_extractions x where x.org_id = v_org and x.episode_id = p_episode;
  return jsonb_build_object(
    'episode_id', p_episode,
    'extracted', v_row.episode_id is not null,
    'schema_version', v_row.schema_version, 'prompt_hash', v_row.prompt_hash, 'model', v_row.model,
    'structured', v_row.structured, 'calls', v_row.calls,
    'labels', to_jsonb(coalesce(v_row.labels, '{}')), 'fields', v_row.fields,
    'counts', coalesce(v_row.counts, '{}'), 'extracted_at', v_row.extracted_at,
    'rejections', (select coalesce(jsonb_agg(jsonb_build_object(
                      'rejection_id', r.rejection_id, 'section', r.section, 'item', r.item,
                      'reason', r.reason, 'message', r.message, 'schema_version', r.schema_version,
                      'recorded_at', r.recorded_at) order by r.rejection_id), '[]')
                     from memory.extraction_rejections r
                    where r.org_id = v_org and r.episode_id = p_episode));
end
$$;
comment on function memory.episode_extraction(uuid, uuid) is
  'An episode''s enrichment: whether it was extracted, the schema version, prompt hash, model, structured-output mode and calls that produced it, its classification labels and custom fields, per-section counts, and every item rejected with its reason. no_data_found when the episode is not the project''s.';

-- The search filter: an episode (or a fact, by its source episode) whose
-- enrichment carries all of p_labels and whose fields contain p_fields.
create or replace function memory_internal.extraction_matches(
  p_org uuid, p_project uuid, p_kind text, p_id uuid, p_labels text[], p_fields jsonb)
  returns boolean
  language sql stable
  as $$
    select exists (
      select from memory.episode_extractions x
       where x.org_id = p_org
         and x.episode_id = case p_kind
               when 'episode' then p_id
               when 'fact' then (select v.source_episode_id from memory_internal.fact_versions(p_project) v
                                  where v.org_id = p_org and v.fact_id = p_id)
             end
         and x.project_id = p_project
         and (p_labels is null or x.labels @> p_labels)
         and (p_fields is null or coalesce(x.fields, '{}') @> p_fields))
  $$;
comment on function memory_internal.extraction_matches(uuid, uuid, text, uuid, text[], jsonb) is
  'memory.search''s label and field filter for one hit: the episode (a fact: its source episode) was extracted with every label of p_labels and fields containing p_fields (jsonb @>). Entities are not filtered.';
