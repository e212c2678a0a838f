-- 26 extraction schemas: a project's schema document is validated (22023
-- naming the path), versioned and append-only; its cardinalities are
-- declared on the project; extraction_context offers it; apply_extraction
-- holds the answer to it (the version the worker asked with), records every
-- item it drops with a reason (once, however often a job retries) and
-- stores the episode's labels and fields; search and context filter by
-- them; the worker records its own rejections; another org sees nothing;
-- wipes take enrichment and rejections with them.  Runs as chronomem_app.
BEGIN;
select plan(66);
set local timezone = 'UTC';

create function pg_temp.ep(p_project text, p_session text, p_text text) returns uuid language sql as $$
  select (memory.ingest(pg_temp.id(p_project), p_session,
                        jsonb_build_array(jsonb_build_object('role', 'user', 'content', p_text))) #>> '{episode_ids,0}')::uuid $$;
create function pg_temp.reasons(p_episode text) returns text language sql stable as $$
  select coalesce(string_agg(r.section || ':' || r.reason, ',' order by r.section, r.reason, r.rejection_id), '')
    from memory.list_extraction_rejections(pg_temp.id('p'), p_limit => 500, p_episode => pg_temp.id(p_episode)) r $$;
create function pg_temp.objs(p_project text, p_subject text) returns text language sql stable as $$
  select coalesce(string_agg(f.predicate || '=' || f.object, ',' order by f.predicate, f.object), '')
    from memory.readable_facts_at(pg_temp.id(p_project)) f where f.subject = p_subject $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('schema org A'); b uuid := memory.create_org('schema org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  insert into pg_temp.ids values
    ('e1', pg_temp.ep('p', 'chat', 'Ann works at Acme and was born on 1990-02-03; she asks about an invoice.')),
    ('e2', pg_temp.ep('p', 'chat', 'Ann also likes tea and talks about the invoice again.')),
    ('e3', pg_temp.ep('p', 'other', 'Cy asks about the invoice for the support desk.')),
    ('eq', pg_temp.ep('q', 'chat', 'Dee works at Globex.'));
end $$;

-- A. The document is validated, each problem named by its path.
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '[]') $$, '22023',
                 'the extraction schema must be a JSON object', 'not an object: 22023');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"predicate": []}') $$, '22023',
                 'predicate is not a key of an extraction schema (entity_types, predicates, labels, fields, allow_other_predicates, allow_other_entity_types)',
                 'an unknown key: named with the keys there are');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'),
                    '{"predicates": [{"name": "works_at"}, {"name": "likes", "cardinality": "several"}]}') $$, '22023',
                 'predicates[1].cardinality must be one or many', 'a cardinality: named by its path');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"predicates": [{"name": "Works At"}]}') $$, '22023',
                 'predicates[0].name must be a snake_case name (a-z, 0-9, _; starting with a letter; at most 63 characters)',
                 'a name that is not snake_case');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"labels": [{"name": "billing"}, {"name": "billing"}]}') $$, '22023',
                 'labels[1].name "billing" is declared twice', 'a name declared twice');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"entity_types": [{"name": ""}]}') $$, '22023',
                 'entity_types[0].name must be a snake_case name (a-z, 0-9, _; starting with a letter; at most 63 characters)',
                 'an empty name');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"predicates": [{"name": "born_on", "object_type": "time"}]}') $$, '22023',
                 'predicates[0].object_type must be entity, literal, date or number', 'an object type');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"fields": {"type": "array"}}') $$, '22023',
                 'fields must be a JSON Schema of type object ({"type": "object", ...}) or null', 'fields not an object schema');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'),
                    '{"fields": {"type": "object", "properties": {"a": {"type": "text"}}}}') $$, '22023',
                 'fields.properties.a.type must be a JSON Schema type (string, number, integer, boolean, array, object, null)',
                 'a property of an unknown JSON type');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'),
                    '{"fields": {"type": "object", "properties": {}, "required": ["a"]}}') $$, '22023',
                 'fields.required must be an array of names of fields.properties', 'required names no property');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"allow_other_predicates": "no"}') $$, '22023',
                 'allow_other_predicates must be true or false', 'a flag that is not a boolean');
select throws_ok($$ select memory.set_extraction_schema(pg_temp.id('p'), '{"labels": [{"name": "x", "why": 1}]}') $$, '22023',
                 'labels[0].why is not a known key (name, description)', 'an unknown key of an entry');
select is((select count(*)::int from memory.extraction_schemas where project_id = pg_temp.id('p'))
          + (select count(*)::int from memory.predicates_of(pg_temp.id('p'))), 0,
          'a refused document stores nothing and declares nothing');

-- B. Versions.
select throws_ok($$ select memory.extraction_schema(pg_temp.id('p')) $$, 'P0002', null, 'no schema yet: no_data_found');
insert into res values ('v1', memory.set_extraction_schema(pg_temp.id('p'),
  '{"predicates": [{"name": "works_at", "description": "Current employer", "cardinality": "one", "object_type": "entity"}]}', 'tester'));
select is(pg_temp.r('v1') - 'created_at' - 'document_hash' - 'project_id',
          '{"version": 1, "created": true, "created_by": "tester", "document": {"entity_types": [], "labels": [], "fields": null,
            "predicates": [{"name": "works_at", "description": "Current employer", "cardinality": "one", "object_type": "entity"}],
            "allow_other_predicates": true, "allow_other_entity_types": true}}'::jsonb,
          'version 1 stored, defaults filled in');
select is(pg_temp.r('v1') ->> 'document_hash', encode(sha256(convert_to((pg_temp.r('v1') -> 'document')::text, 'UTF8')), 'hex'),
          'document_hash is the sha256 of the stored document');
select is((select string_agg(d.predicate || ' ' || d.cardinality, ',') from memory.predicates_of(pg_temp.id('p')) d), 'works at one',
          'the schema''s cardinality is declared on the project (one definition)');
select is((select c.cause || ' ' || (c.evidence ->> 'extraction_schema_version') from memory.predicate_changes(pg_temp.id('p')) c),
          'declared 1', '... and logged as declared by schema version 1');
select is(memory.set_extraction_schema(pg_temp.id('p'), pg_temp.r('v1') -> 'document') - 'created_at' - 'document_hash' - 'document' - 'project_id',
          '{"created": false, "version": 1, "created_by": "tester"}'::jsonb, 'the same document again stores no version');
insert into res values ('v2', memory.set_extraction_schema(pg_temp.id('p'), '{
  "entity_types": [{"name": "person"}, {"name": "company"}],
  "predicates": [{"name": "works_at", "cardinality": "one", "object_type": "entity"},
                 {"name": "born_on", "description": "Date of birth", "object_type": "date"},
                 {"name": "age", "object_type": "number"}],
  "labels": [{"name": "billing", "description": "About an invoice"}, {"name": "support"}],
  "fields": {"type": "object", "properties": {"priority": {"type": "integer"}, "channel": {"enum": ["mail", "chat"]}},
             "required": ["priority"], "additionalProperties": false},
  "allow_other_predicates": false, "allow_other_entity_types": false}'));
select is((pg_temp.r('v2') ->> 'version')::int, 2, 'a new document is version 2');
select is((select array_agg(v.version order by v.version desc) from memory.extraction_schema_versions(pg_temp.id('p')) v),
          array[2, 1], 'versions, newest first');
select is(memory.extraction_schema(pg_temp.id('p')) ->> 'version', '2', 'the current one is the highest');
select is(memory.extraction_schema(pg_temp.id('p'), 1) -> 'document', pg_temp.r('v1') -> 'document', 'an earlier version stays readable');
select throws_ok($$ select memory.extraction_schema(pg_temp.id('p'), 9) $$, 'P0002', null, 'a version that does not exist: no_data_found');
select throws_ok($$ update memory.extraction_schemas set version = 5 $$, '42501', null, 'the app role cannot rewrite versions');

-- C. What extraction_context offers follows the schema.
select is(memory_worker.extraction_context(pg_temp.id('eq')) -> 'schema', 'null'::jsonb, 'no schema: schema is null');
select is(memory_worker.extraction_context(pg_temp.id('e1')) -> 'schema',
          (pg_temp.r('v2') -> 'document') || '{"version": 2}', 'schema: the current document with its version');
select is(memory_worker.extraction_context(pg_temp.id('e1')) -> 'predicates',
          '[{"predicate": "age", "object_type": "number"},
            {"predicate": "born_on", "description": "Date of birth", "object_type": "date"},
            {"predicate": "works_at", "cardinality": "one", "object_type": "entity"}]'::jsonb,
          'predicates: the schema''s with descriptions and object types, merged with the declared ones');

-- D. apply_extraction holds the answer to the schema.
insert into res values ('payload', '{
  "entities": [{"name": "Ann", "type": "person"}, {"name": "Robo", "type": "robot"}],
  "facts": [{"subject": "Ann", "predicate": "works_at", "object": "Acme", "confidence": 0.9},
            {"subject": "Ann", "predicate": "likes", "object": "tea"},
            {"subject": "Bob", "predicate": "likes", "object": "jazz"},
            {"subject": "Ann", "predicate": "born_on", "object": "soon"},
            {"subject": "Ann", "predicate": "born on", "object": "1990-02-03"},
            {"subject": "Ann", "predicate": "age", "object": "thirty"},
            {"subject": "Ann", "predicate": "works_at", "object": "Initech", "confidence": 0.1},
            {"subject": "Ann", "predicate": "works_at", "object": "Hooli", "valid_from": "yesterday"},
            {"subject": "Ann", "predicate": "works_at", "object": "Acme", "object_type": "literal"}],
  "contradictions": [{"fact_id": "00000000-0000-0000-0000-000000000001"}],
  "classification": ["billing", "Spam", 7],
  "fields": {"priority": 2, "channel": "fax", "colour": "red"}}');
insert into res values ('d1', memory_worker.apply_extraction(pg_temp.id('e1'), pg_temp.r('payload'), 0.5, 6,
  '{"schema_version": 2, "prompt_hash": "ab12", "model": "small-model", "structured": "json_object", "calls": 2}'));
select is(pg_temp.r('d1') -> 'failed_sections', '[]'::jsonb, 'no section failed');
select is(pg_temp.r('d1') -> 'rejected',
          '{"invalid_window": 1, "low_confidence": 1, "schema_violation": 7, "unknown_entity_type": 1,
            "unknown_fact_id": 1, "unknown_predicate": 2}'::jsonb, 'every dropped item counted by reason');
select is(pg_temp.objs('p', 'Ann'), 'born on=1990-02-03,works_at=Acme', 'the facts the schema accepts are stored (a date as a literal)');
select is((select count(*)::int from memory.entities where project_id = pg_temp.id('p') and name = 'Robo'), 0,
          'an entity of an undeclared type is not stored');
select is(pg_temp.reasons('e1'),
          'classification:schema_violation,classification:schema_violation,contradictions:unknown_fact_id,entities:unknown_entity_type,'
          || 'facts:invalid_window,facts:low_confidence,facts:schema_violation,facts:schema_violation,facts:schema_violation,'
          || 'facts:unknown_predicate,facts:unknown_predicate,fields:schema_violation,fields:schema_violation',
          'each dropped item is recorded with its section and reason');
select is((select r.item from memory.extraction_rejections r
            where r.episode_id = pg_temp.id('e1') and r.reason = 'schema_violation' and r.message like '%must be a date%'),
          '{"subject": "Ann", "predicate": "born_on", "object": "soon"}'::jsonb, 'the item as the model gave it');
select is((select string_agg(r.message, ' | ' order by r.message) from memory.extraction_rejections r
            where r.episode_id = pg_temp.id('e1') and r.section in ('fields', 'classification')),
          'a label must be a non-empty string | fields.channel must be one of ["mail", "chat"] | fields.colour is not a property of the schema''s fields | label "Spam" is not in the extraction schema',
          'labels and fields are checked against the schema, with messages');
select is((select count(*)::int from memory.extraction_rejections r
            where r.episode_id = pg_temp.id('e1') and r.schema_version = 2), 13, 'rejections record the schema version');
insert into res values ('x1', memory.episode_extraction(pg_temp.id('p'), pg_temp.id('e1')));
select is(pg_temp.r('x1') - 'counts' - 'rejections' - 'extracted_at',
          jsonb_build_object('episode_id', pg_temp.id('e1'), 'extracted', true, 'schema_version', 2, 'prompt_hash', 'ab12',
                             'model', 'small-model', 'structured', 'json_object', 'calls', 2,
                             'labels', '["billing"]'::jsonb, 'fields', '{"priority": 2}'::jsonb),
          'the enrichment: labels and fields kept, with what produced them');
select is(jsonb_array_length(pg_temp.r('x1') -> 'rejections'), 13, '... and its rejections');
select is((select count(*)::int from memory_internal.fact_versions(pg_temp.id('p')) v
             join memory.episode_extractions x on x.org_id = v.org_id and x.episode_id = v.source_episode_id
            where x.schema_version = 2 and x.prompt_hash = 'ab12'), 2,
          'stored facts trace to the schema version and prompt hash through their source episode');
insert into res values ('d1b', memory_worker.apply_extraction(pg_temp.id('e1'), pg_temp.r('payload'), 0.5, 6,
  '{"schema_version": 2, "prompt_hash": "ab12", "model": "small-model", "structured": "json_object", "calls": 2}'));
select is((select count(*)::int from memory.extraction_rejections where episode_id = pg_temp.id('e1')), 13,
          'a retried job records no rejection twice');
select is((select sum(c.value)::int from memory.counters(pg_temp.id('p')) c where c.metric like 'extraction\_rejected:%'), 13,
          'rejections counted once per reason for /metrics');
select is((select c.value::int from memory.counters(pg_temp.id('p')) c where c.metric = 'extraction_rejected:unknown_predicate'), 2,
          '... extraction_rejected:unknown_predicate (the reason a label of one series)');

-- The version the worker asked with decides: version 1 allows any predicate.
insert into res values ('d2', memory_worker.apply_extraction(pg_temp.id('e2'),
  '{"facts": [{"subject": "Ann", "predicate": "likes", "object": "tea"}], "classification": ["anything"]}', 0.5, 6,
  '{"schema_version": 1}'));
select is(pg_temp.objs('p', 'Ann'), 'born on=1990-02-03,likes=tea,works_at=Acme', 'schema version 1 accepts what version 2 refused');
select is(pg_temp.reasons('e2'), 'classification:schema_violation', '... and version 1 declares no labels');
select is((memory_worker.apply_extraction(pg_temp.id('e2'), '{"facts": [{"subject": "Ann", "predicate": "likes", "object": "cake"}]}')
           -> 'rejected'), '{"schema_violation": 1, "unknown_predicate": 1}'::jsonb,
          'without schema_version the current one applies (an unknown predicate, the required field missing)');
-- No schema: today's behaviour, labels and fields stored as given.
insert into res values ('dq', memory_worker.apply_extraction(pg_temp.id('eq'),
  '{"facts": [{"subject": "Dee", "predicate": "works at", "object": "Globex"}], "classification": ["Sales"], "fields": {"any": [1]}}'));
select is(memory.episode_extraction(pg_temp.id('q'), pg_temp.id('eq')) - 'counts' - 'rejections' - 'extracted_at' - 'episode_id',
          '{"calls": 1, "model": null, "fields": {"any": [1]}, "labels": ["Sales"], "extracted": true, "structured": null, "prompt_hash": null, "schema_version": null}'::jsonb,
          'no schema: the facts, labels and fields are accepted as given');
select throws_ok($$ select memory_worker.apply_extraction(pg_temp.id('e1'), '{}', 0.5, 6, '{"schema_version": 9}') $$, '22023',
                 'extraction meta: schema_version 9 does not exist', 'meta naming a version that does not exist: 22023');
select throws_ok($$ select memory_worker.apply_extraction(pg_temp.id('e1'), '{}', 0.5, 6, '{"structured": "xml"}') $$, '22023',
                 null, 'meta with an unknown structured mode: 22023');

-- E. The worker's own rejections.
select is(memory_worker.record_extraction_rejections(pg_temp.id('e3'),
            '[{"section": "answer", "item": null, "reason": "parse_failure", "message": "not JSON"}]', '{"schema_version": 2}'),
          1, 'the worker records a parse failure');
select is(memory_worker.record_extraction_rejections(pg_temp.id('e3'),
            '[{"section": "answer", "item": null, "reason": "parse_failure", "message": "not JSON"}]', '{"schema_version": 2}'),
          0, '... once');
select throws_ok($$ select memory_worker.record_extraction_rejections(pg_temp.id('e3'), '[{"section": "answer", "reason": "bad"}]') $$,
                 '22023', 'items[0].reason must be one of low_confidence, invalid_window, unknown_entity_type, unknown_predicate, schema_violation, parse_failure, unknown_fact_id',
                 'an unknown reason: 22023 naming the item');
select throws_ok($$ select memory_worker.record_extraction_rejections(pg_temp.id('e3'), '[{"section": "body", "reason": "parse_failure"}]') $$,
                 '22023', 'items[0].section must be one of answer, entities, facts, contradictions, notes, classification, fields',
                 'an unknown section: 22023');

-- F. The page of rejections.
select is((select string_agg(r.reason, ',') from memory.list_extraction_rejections(pg_temp.id('p'), 'parse_failure') r),
          'parse_failure', 'filtered by reason');
select is((select count(*)::int from memory.list_extraction_rejections(pg_temp.id('p'), null, 50,
             (select max(r.rejection_id) from memory.list_extraction_rejections(pg_temp.id('p'), null, 10) r)) r),
          (select count(*)::int - 10 from memory.extraction_rejections where project_id = pg_temp.id('p')) ,
          'paged after a rejection id');
select throws_ok($$ select * from memory.list_extraction_rejections(pg_temp.id('p'), 'nope') $$, '22023', null, 'an unknown reason: 22023');

-- G. Search and context filter by labels and fields.
select is((select string_agg(h ->> 'kind' || ':' || coalesce(h ->> 'session', h ->> 'predicate'), ',' order by h ->> 'kind', h ->> 'text')
             from jsonb_array_elements(memory.search(pg_temp.id('p'), 'invoice Acme', p_legs => array['episode_fulltext', 'fact_fulltext'],
                                                     p_labels => array['billing']) -> 'results') h),
          'episode:chat,fact:works_at', 'labels: the labelled episode and the facts drawn from it');
select is((select count(*)::int from jsonb_array_elements(memory.search(pg_temp.id('p'), 'invoice Acme',
             p_legs => array['episode_fulltext', 'fact_fulltext']) -> 'results') h), 4,
          'positive control: unfiltered, every episode about an invoice and the fact');
select is(jsonb_array_length(memory.search(pg_temp.id('p'), 'invoice', p_legs => array['episode_fulltext', 'fact_fulltext'],
                                           p_labels => array['billing', 'support']) -> 'results'), 0,
          'all of the labels: an episode with one of them does not match');
select is((select string_agg(h ->> 'kind', ',') from jsonb_array_elements(memory.search(pg_temp.id('p'), 'invoice',
             p_legs => array['episode_fulltext'], p_fields => '{"priority": 2}') -> 'results') h),
          'episode', 'fields: containment');
select is((select string_agg(x ->> 'id', ',') from jsonb_array_elements(memory.context(pg_temp.id('p'), 'invoice',
             p_labels => array['billing']) -> 'episodes') x), pg_temp.id('e1')::text, 'context takes the same filter');
select throws_ok($$ select memory.search(pg_temp.id('p'), 'invoice', p_fields => '[1]') $$, '22023',
                 'fields must be a JSON object (matched with @>)', 'fields that are not an object: 22023');

-- H. Another org sees nothing.
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok($$ select memory.episode_extraction(pg_temp.id('p'), pg_temp.id('e1')) $$, 'P0002', null,
                 'another org: the episode''s enrichment is not found');
select is((select count(*)::int from memory.extraction_rejections) + (select count(*)::int from memory.episode_extractions)
          + (select count(*)::int from memory.extraction_schemas), 0, 'another org reads no row of the three tables');
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;

-- I. Wipes.  A subject wipe takes the rejections naming the subject; a
-- session wipe the enrichment and rejections of its episodes; the schema stays.
do $$ begin perform memory.wipe(pg_temp.id('p'), p_subject => 'Ann'); end $$;
select is(pg_temp.reasons('e1'), 'classification:schema_violation,classification:schema_violation,contradictions:unknown_fact_id,entities:unknown_entity_type,facts:unknown_predicate,fields:schema_violation,fields:schema_violation',
          'subject wipe: the rejected facts naming Ann go, the others stay (Bob''s fact, labels, fields)');
do $$ begin perform memory.wipe(pg_temp.id('p'), p_session => 'chat'); end $$;
select is((select count(*)::int from memory.episode_extractions where project_id = pg_temp.id('p'))
          || ' ' || (select count(*)::int from memory.extraction_rejections where project_id = pg_temp.id('p')),
          '0 1', 'session wipe: its episodes'' enrichment and rejections go (the other session''s stays)');
do $$ begin perform memory.wipe(pg_temp.id('p')); end $$;
select is((select count(*)::int from memory.extraction_rejections where project_id = pg_temp.id('p'))
          || ' ' || (select count(*)::int from memory.extraction_schemas where project_id = pg_temp.id('p')),
          '0 2', 'project wipe: the rest goes, the schema (a setting) stays');

select * from finish();
ROLLBACK;
