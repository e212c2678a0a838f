-- Chronomem demo: a fact superseded, and one question asked at two instants.
-- Run by `chronomem demo` / `chronomem up` through psql; every statement is
-- an ordinary call any SQL client can make.
\set QUIET on
select memory.create_org('demo') as org \gset
select memory.use_org(:'org', false) as org \gset
select memory.create_project(:'org', 'demo ' || to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US')) as project \gset
\set QUIET off

\echo
\echo '-- "works at" holds one object at a time: a new employer supersedes the old one.'
select memory.declare_predicate(:'project', 'works at', 'one');

\echo
\echo '-- March 2021: Alice joins Acme.'
select inserted, superseded, skipped, refused
  from jsonb_to_record(memory.assert_facts(:'project', '[
    {"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
     "content": "Alice works at Acme as a data engineer.", "valid_from": "2021-03-01"}]'))
    as r(inserted int, superseded int, skipped int, refused int);

\echo
\echo '-- June 2024: Alice moves to Globex. The Acme fact is closed, not deleted.'
select inserted, superseded, skipped, refused
  from jsonb_to_record(memory.assert_facts(:'project', '[
    {"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity",
     "content": "Alice moved to Globex.", "valid_from": "2024-06-01"}]'))
    as r(inserted int, superseded int, skipped int, refused int);

\echo
\echo '-- The same batch again is a no-op (skipped), whatever order retries arrive in.'
select inserted, superseded, skipped, refused
  from jsonb_to_record(memory.assert_facts(:'project', '[
    {"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity",
     "content": "Alice moved to Globex.", "valid_from": "2024-06-01"}]'))
    as r(inserted int, superseded int, skipped int, refused int);

\echo
\echo '-- Where does Alice work now?'
select subject, predicate, object, valid_from, valid_until
  from memory.readable_facts_at(:'project');

\echo
\echo '-- Where did Alice work on 1 March 2022? Same function, another instant.'
select subject, predicate, object, valid_from, valid_until
  from memory.readable_facts_at(:'project', '2022-03-01');

\echo
\echo '-- When did it change? Every version of the claim, with its window.'
select predicate, object, valid_range, status
  from memory.subject_timeline(:'project', 'alice');

\echo
\echo '-- The graph follows the facts: the Acme edge closed when the fact did.'
select s.name as source, e.relation, t.name as target, e.valid_range
  from memory.edges_at(:'project', '2022-03-01') e
  join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
  join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
union all
select s.name, e.relation, t.name, e.valid_range
  from memory.edges_at(:'project') e
  join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
  join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id;
