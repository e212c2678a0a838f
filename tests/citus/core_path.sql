-- The API's core path through a Citus coordinator, as chronomem_app: an org and a
-- project, a predicate, a conversation, two facts (the second supersedes the first),
-- what holds now and at an earlier instant, the graph, a search. Each call is its own
-- transaction, scoped by memory.use_org (a session scope does not reach the workers).
-- Stops at the first error:
--   psql -h 127.0.0.1 -p 9700 -U chronomem_app -d chronomem_test -f tests/citus/core_path.sql
\set ON_ERROR_STOP on
begin;
select memory.create_org('smoke') as org \gset
select memory.use_org(:'org') ;
select memory.create_project(:'org', 'p' || clock_timestamp()) as project \gset
commit;
\echo step: declare
begin; select memory.use_org(:'org');
select memory.declare_predicate(:'project', 'works at', 'one');
commit;
\echo step: ingest
begin; select memory.use_org(:'org');
select memory.ingest(:'project', 's1', '[{"role": "user", "content": "Alice joined Acme in March 2021."}]');
commit;
\echo step: assert 1
begin; select memory.use_org(:'org');
select memory.assert_facts(:'project', '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity", "content": "Alice works at Acme.", "valid_from": "2021-03-01"}]');
commit;
\echo step: assert 2
begin; select memory.use_org(:'org');
select memory.assert_facts(:'project', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity", "content": "Alice moved to Globex.", "valid_from": "2024-06-01"}]');
commit;
\echo step: reads
begin; select memory.use_org(:'org');
select subject, predicate, object, valid_from, valid_until from memory.readable_facts_at(:'project');
select subject, predicate, object from memory.readable_facts_at(:'project', '2022-03-01');
select count(*) from memory.edges_at(:'project');
commit;
\echo step: search
begin; select memory.use_org(:'org');
select r ->> 'kind' as kind, r ->> 'text' as text from jsonb_array_elements(memory.search(:'project', 'where does Alice work') -> 'results') r;
commit;
