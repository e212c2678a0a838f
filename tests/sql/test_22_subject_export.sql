-- 22 subject export: memory.export_subject(project, subject) holds every
-- version of the facts naming the subject (as subject, as object, as a
-- plain-name object not taken over), their windows and events, the episodes
-- that are their sources or name it or an alias as whole words (and not the
-- others), every edge row touching it and the notes about it, in a fixed
-- order; it is scoped to the org like every read, and the analyst may run
-- it as the other readers.  Runs as chronomem_app;
-- the rows no function writes on its own (a plain-name object an alias
-- has not taken over yet, a note) are inserted as superuser.
--
-- Org A, project p ("plan" and "works at" cardinality one):
--   Ann plan pro [2024-01-01, 2024-03-01) superseded by enterprise;
--   Ann lives in Paris, retracted; Ann works at Acme, then Globex (an
--   expired edge row); Ann likes tea, drawn from the episode "Joanna likes
--   tea"; Ben knows Ann; Cat met Annie (an alias); Eve met Zoe, Zoe made an
--   alias of Ann afterwards without adoption; Dan likes Zed (not Ann's).
-- Org B, project r: Bob only.
BEGIN;
select plan(26);

create function pg_temp.export(p_subject text default 'Ann') returns jsonb language sql as $$
  select memory.export_subject(pg_temp.id('p'), p_subject) $$;
create function pg_temp.col(p_arr jsonb, p_key text) returns text[] language sql immutable as $$
  select array(select x ->> p_key from jsonb_array_elements(p_arr) with ordinality e(x, o) order by o) $$;
create function pg_temp.fact(p_content text) returns jsonb language sql as $$
  select x from jsonb_array_elements(pg_temp.export() -> 'facts') x where x ->> 'content' = p_content $$;

set local role chronomem_app;
do $$
declare
  a uuid := memory.create_org('export org A');
  b uuid := memory.create_org('export org B');
  p uuid;
  v_tea uuid;
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  perform memory.assert_facts(pg_temp.id('r'), '[{"subject": "Bob", "predicate": "likes", "object": "tea"}]');

  perform memory.use_org(a);
  p := memory.create_project(a, 'p');
  insert into pg_temp.ids values ('p', p);
  perform memory.declare_predicate(p, 'plan', 'one');
  perform memory.declare_predicate(p, 'works at', 'one');
  perform memory.ingest(p, 'chat', '[
    {"role": "user", "content": "Ann''s plan is pro", "occurred_at": "2024-01-02T00:00:00Z"},
    {"role": "user", "content": "Joanna likes tea", "occurred_at": "2024-01-03T00:00:00Z"},
    {"role": "assistant", "content": "ANNIE said hi", "occurred_at": "2024-01-04T00:00:00Z"},
    {"role": "user", "content": "Über Ann’s Reise", "occurred_at": "2024-01-04T00:01:00Z"},
    {"role": "user", "content": "Café chatter", "occurred_at": "2024-01-04T00:02:00Z"}]');
  perform memory.ingest(p, 'other', '[{"role": "user", "content": "Nothing about anyone", "occurred_at": "2024-01-05T00:00:00Z"}]');
  select e.episode_id into v_tea from memory.episodes e where e.project_id = p and e.content = 'Joanna likes tea';
  perform memory.assert_facts(p, '[
    {"subject": "Ann", "predicate": "plan", "object": "pro", "valid_from": "2024-01-01T00:00:00Z"},
    {"subject": "Ann", "predicate": "plan", "object": "enterprise", "valid_from": "2024-03-01T00:00:00Z"},
    {"subject": "Ann", "predicate": "lives in", "object": "Paris", "valid_from": "2024-01-01T00:00:00Z"},
    {"subject": "Ann", "predicate": "works at", "object": "Acme", "object_type": "entity", "valid_from": "2020-01-01T00:00:00Z"},
    {"subject": "Ben", "predicate": "knows", "object": "Ann", "object_type": "entity", "valid_from": "2024-01-01T00:00:00Z"},
    {"subject": "Eve", "predicate": "met", "object": "Zoe", "valid_from": "2024-01-01T00:00:00Z"},
    {"subject": "Dan", "predicate": "likes", "object": "Zed", "object_type": "entity"}]');
  perform memory.assert_facts(p, jsonb_build_array(jsonb_build_object(
    'subject', 'Ann', 'predicate', 'likes', 'object', 'tea', 'source_episode_id', v_tea)));
  perform memory.assert_facts(p, '[{"subject": "Ann", "predicate": "works at", "object": "Globex", "object_type": "entity", "valid_from": "2022-01-01T00:00:00Z"}]');
  perform memory.add_alias(p, 'Ann', 'Annie');
  perform memory.assert_facts(p, '[{"subject": "Cat", "predicate": "met", "object": "Annie", "valid_from": "2024-01-01T00:00:00Z"}]');
  perform memory.retract_fact(p, (select v.fact_id from memory_internal.fact_versions(p) v
                                   where v.content = 'Ann lives in Paris'), 'never lived there');
end $$;
reset role;
-- An alias written the way a concurrent writer leaves one (the plain-name
-- object "Zoe" not taken over yet, as memory.wipe finds it), and a note.
insert into memory.entity_aliases (org_id, project_id, normalized_alias, alias, entity_id)
select e.org_id, e.project_id, 'zoe', 'Zoe', e.entity_id from memory.entities e
 where e.project_id = pg_temp.id('p') and e.normalized_name = 'ann';
insert into memory.notes (org_id, project_id, kind, subject_id, content)
select e.org_id, e.project_id, 'preference', e.entity_id, 'Ann prefers email' from memory.entities e
 where e.project_id = pg_temp.id('p') and e.normalized_name = 'ann';
set local role chronomem_app;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;

-- The facts: every version, in order (as subject first, then by predicate,
-- subject and world time).
select is(pg_temp.col(pg_temp.export() -> 'facts', 'content'),
          array['Ann likes tea', 'Ann lives in Paris', 'Ann plan pro', 'Ann plan enterprise',
                'Ann works at Acme', 'Ann works at Globex', 'Ben knows Ann', 'Cat met Annie', 'Eve met Zoe'],
          'every version naming Ann, as subject and as object, in order; Dan likes Zed is not there');
select is(array(select x::uuid from unnest(pg_temp.col(pg_temp.export() -> 'facts', 'fact_id')) x order by 1),
          array(select v.fact_id from memory_internal.fact_versions(pg_temp.id('p')) v
                  join memory.entities s on s.entity_id = v.subject_id
                  left join memory.entities o on o.entity_id = v.object_entity_id
                 where s.normalized_name = 'ann' or o.normalized_name = 'ann' or v.content = 'Eve met Zoe'
                 order by 1),
          'the fact ids are exactly those versions');
select is(pg_temp.col(pg_temp.export() -> 'facts', 'status'),
          array['current', 'retracted', 'ended', 'current', 'ended', 'current', 'current', 'current', 'current'],
          'each version''s status');
select is(pg_temp.fact('Ann plan pro') ->> 'valid_to', '2024-03-01T00:00:00+00:00',
          'the superseded plan''s valid window ends where enterprise begins');
select is(pg_temp.col(pg_temp.fact('Ann plan pro') -> 'events', 'event_type'), array['asserted', 'superseded'],
          'its events, in order');
select is((pg_temp.fact('Ann plan pro') #>> '{events,1,new_fact_id}')::uuid,
          (pg_temp.fact('Ann plan enterprise') ->> 'fact_id')::uuid, 'the supersession names its successor');
select ok(pg_temp.fact('Ann lives in Paris') ->> 'invalid_at' is not null
          and pg_temp.fact('Ann lives in Paris') ->> 'recorded_at' is not null,
          'the retracted version''s record window is closed');
select is(pg_temp.col(pg_temp.fact('Ann lives in Paris') -> 'events', 'reason'), array[null, 'never lived there'],
          'the retraction event keeps its reason');
select is(array[pg_temp.fact('Ben knows Ann') ->> 'named_as', pg_temp.fact('Ben knows Ann') ->> 'object_type',
                pg_temp.fact('Eve met Zoe') ->> 'named_as', pg_temp.fact('Eve met Zoe') ->> 'object_type',
                pg_temp.fact('Ann plan pro') ->> 'named_as'],
          array['object', 'entity', 'object', 'auto', 'subject'],
          'named as subject or object; a plain-name object not taken over is auto');

-- The entity and its aliases; by an alias, the same.
select is(pg_temp.export() #>> '{entity,name}', 'Ann', 'the entity');
select is(pg_temp.export() #> '{entity,aliases}', '["Annie", "Zoe"]'::jsonb, 'its aliases');
select is(pg_temp.export('annie') - 'subject' - 'exported_at', pg_temp.export() - 'subject' - 'exported_at',
          'asked by an alias: the same document');
select is(pg_temp.export('annie') ->> 'subject', 'annie', 'subject: the name asked');

-- Episodes: the facts' sources and the whole-word mentions of a name, not the others.
select is(pg_temp.col(pg_temp.export() -> 'episodes', 'content'),
          array['Ann''s plan is pro', 'Joanna likes tea', 'ANNIE said hi', 'Über Ann’s Reise'],
          'the mentions (Ann''s, ANNIE, Ann’s in non-ASCII text) and the source, by session and sequence; '
          'not "Café chatter" nor "Nothing about anyone"');
select is(pg_temp.col(pg_temp.export() -> 'episodes', 'is_source') || pg_temp.col(pg_temp.export() -> 'episodes', 'mentions'),
          array['false', 'true', 'false', 'false', 'true', 'false', 'true', 'true'],
          '"Joanna likes tea" is there as a source, not a mention (Joanna is not Ann)');
select is(pg_temp.col(pg_temp.export() -> 'episodes', 'session'), array['chat', 'chat', 'chat', 'chat'],
          'with the session id');

-- Edges: every row touching Ann, the expired ones included.
select is(array(select x::uuid from unnest(pg_temp.col(pg_temp.export() -> 'edges', 'edge_id')) x order by 1),
          array(select g.edge_id from memory.edges g join memory.entities n on n.entity_id in (g.source_id, g.target_id)
                 where g.project_id = pg_temp.id('p') and n.normalized_name = 'ann' order by 1),
          'every edge row touching Ann');
select ok(exists (select from jsonb_array_elements(pg_temp.export() -> 'edges') x
                   where x ->> 'target' = 'Acme' and x ->> 'expired_at' is not null),
          'an expired row among them (the Acme edge, cut by Globex)');
select is(pg_temp.col(pg_temp.export() -> 'notes', 'content'), array['Ann prefers email'], 'the note about Ann');

-- Not found: a subject the project does not know; another org's project.
select throws_ok($$ select pg_temp.export('Nobody') $$, 'P0002',
                 format('subject "Nobody" not found in project %s', pg_temp.id('p')), 'an unknown subject: P0002');
select throws_ok($$ select pg_temp.export(' ') $$, '22023', 'subject must not be empty', 'an empty subject');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok($$ select pg_temp.export() $$, 'P0002', format('project %s not found', pg_temp.id('p')),
                 'org B asking for A''s project: not found');
select throws_ok(format($$ select memory.export_subject(%L, 'Ann') $$, pg_temp.id('r')), 'P0002',
                 format('subject "Ann" not found in project %s', pg_temp.id('r')),
                 'org B asking its own project for Ann: not found');
select is(memory.export_subject(pg_temp.id('r'), 'Bob') #>> '{facts,0,content}', 'Bob likes tea',
          'control: B''s own subject is exported');

-- The analyst reads it as the other readers; the API's wrapper needs a key.
reset role;
set local role chronomem_analyst;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
select is(jsonb_array_length(pg_temp.export() -> 'facts'), 9, 'the analyst exports the same facts');
reset role;
set local role chronomem_app;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
select throws_ok($$ select memory_http.export_subject(pg_temp.id('p'), 'Ann') $$, '28000',
                 'no API key authorized in this transaction', 'memory_http.export_subject without a key: refused');

select * from finish();
ROLLBACK;
