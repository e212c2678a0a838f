-- 03 supersession: the write state machine of memory.assert_facts.
-- Runs as chronomem_app.  Every fact has an explicit valid_from, so the
-- windows are known; all subjects are distinct, so the cases are independent.
BEGIN;
select plan(52);

-- assert_facts on the test project, result kept under a name (put: as a
-- statement, no output row; putr: inside an assertion).
create procedure pg_temp.put(p_k text, p_facts jsonb, p_override boolean default false)
  language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id('p'), p_facts,
                                                           p_override_tombstones => p_override)) $$;
create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
create function pg_temp.putr(p_k text, p_facts jsonb, p_override boolean default false)
  returns jsonb language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id('p'), p_facts,
                                                           p_override_tombstones => p_override))
  returning r $$;
-- The newest stored version of a claim (subject, predicate, object).
create function pg_temp.fid(p_subject text, p_predicate text, p_object text) returns uuid
  language sql stable as $$
  select v.fact_id from memory_internal.fact_versions(pg_temp.id('p')) v
    join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id
   where s.normalized_name = memory.normalize_text(p_subject)
     and v.predicate = memory.normalize_text(p_predicate)
     and v.object_key = memory.normalize_text(p_object)
   order by v.fact_seq desc limit 1 $$;
create function pg_temp.rng(p_fact uuid) returns tstzrange language sql stable as $$
  select v.valid_range from memory_internal.fact_versions(pg_temp.id('p')) v where v.fact_id = p_fact $$;
-- All windows of a subject's predicate, in world-time order, as text.
create function pg_temp.windows(p_subject text, p_predicate text) returns text language sql stable as $$
  select string_agg(v.object_key || ' ' || v.valid_range::text, '; ' order by v.valid_from, v.fact_seq)
    from memory_internal.fact_versions(pg_temp.id('p')) v
    join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id
   where s.normalized_name = memory.normalize_text(p_subject)
     and v.predicate = memory.normalize_text(p_predicate) and v.invalid_at is null $$;

set local role chronomem_app;
do $$
declare o uuid := memory.create_org('supersession org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
  perform memory.declare_predicate(pg_temp.id('p'), 'Lives In', 'one');
  -- likes: several at once (an undeclared predicate would open a conflict).
  perform memory.declare_predicate(pg_temp.id('p'), 'likes', 'many');
end $$;

-- A. Same subject, predicate and object, new content: the new version
-- supersedes ('likes' is undeclared, so cardinality many).
call pg_temp.put('a1', '[{"subject": "Bob", "predicate": "likes", "object": "tea",
                            "content": "Bob likes tea", "valid_from": "2020-01-01T00:00:00Z"}]');
insert into ids values ('bob_tea_1', pg_temp.fid('Bob', 'likes', 'tea'));
call pg_temp.put('a2', '[{"subject": "Bob", "predicate": "likes", "object": "tea",
                            "content": "Bob likes green tea a lot", "valid_from": "2021-01-01T00:00:00Z"}]');
insert into ids values ('bob_tea_2', pg_temp.fid('Bob', 'likes', 'tea'));
select is(pg_temp.r('a2') - 'results', '{"inserted": 1, "superseded": 1, "skipped": 0, "refused": 0, "invalid": 0, "superseded_pairs": []}'::jsonb
            || jsonb_build_object('superseded_pairs', jsonb_build_array(jsonb_build_object(
                 'old_fact_id', pg_temp.id('bob_tea_1'), 'new_fact_id', pg_temp.id('bob_tea_2')))),
          'new content: counts and the old -> new pair');
select is(pg_temp.rng(pg_temp.id('bob_tea_1')), '[2020-01-01 00:00:00+00,2021-01-01 00:00:00+00)'::tstzrange,
          'the old version is closed at the new one''s start');
select is(pg_temp.rng(pg_temp.id('bob_tea_2')), '[2021-01-01 00:00:00+00,)'::tstzrange, 'the new version is open');
-- New versions get time-ordered ids (memory_internal.new_fact_id), so the
-- btrees keyed on fact ids grow at their right edge.
-- (Read from the text, not with uuid_extract_*: those need PostgreSQL 17.)
create function pg_temp.uuid_ms(p_id uuid) returns bigint language sql as $$
  select ('x' || left(replace(p_id::text, '-', ''), 12))::bit(48)::bigint $$;
select is(substr(pg_temp.id('bob_tea_2')::text, 15, 1), '7', 'fact ids are UUID version 7');
select ok(pg_temp.uuid_ms(pg_temp.id('bob_tea_1')) <= pg_temp.uuid_ms(pg_temp.id('bob_tea_2'))
          and pg_temp.uuid_ms(pg_temp.id('bob_tea_2')) <= floor(extract(epoch from clock_timestamp()) * 1000),
          'a later version''s id is stamped no earlier, and no later than now');
-- The layout built before PostgreSQL 18: the instant's milliseconds lead,
-- then the random bits with the version set; an earlier instant sorts
-- first even with all its random bits set (and a later one with none).
reset role;
select is(memory_internal.uuid_v7('ffffffff-ffff-4fff-bfff-ffffffffffff', '2024-01-01 00:00:00.0019+00'),
          '018cc251-f401-7fff-bfff-ffffffffffff'::uuid,
          'uuid_v7: 48 bits of Unix milliseconds, version 7, the random bits and variant kept');
select ok(memory_internal.uuid_v7('ffffffff-ffff-4fff-bfff-ffffffffffff', '2024-01-01 00:00:00+00')
          < memory_internal.uuid_v7('00000000-0000-4000-8000-000000000000', '2024-01-01 00:00:00.001+00'),
          'uuid_v7: a later millisecond sorts after an earlier one whatever the random bits');
select ok(memory_internal.uuid_v7('00000000-0000-4000-8000-000000000000', '2024-01-01 00:00:00+00')
          < memory_internal.uuid_v7('ffffffff-ffff-4fff-bfff-ffffffffffff', '2024-01-01 00:00:00+00'),
          'uuid_v7: within one millisecond the random bits order (control)');
set local role chronomem_app;
select is(pg_temp.r('a2') #> '{results,0,superseded}', jsonb_build_array(pg_temp.id('bob_tea_1')),
          'the per-fact result lists what it superseded');

-- B. Cardinality one: a new object supersedes the old (works at Acme -> Globex).
call pg_temp.put('b1', '[{"subject": "Alice", "predicate": "works at", "object": "Acme",
                            "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.put('b2', '[{"subject": "Alice", "predicate": "Works at:", "object": "Globex",
                            "valid_from": "2022-01-01T00:00:00Z"}]');
insert into ids values ('alice_acme', pg_temp.fid('Alice', 'works at', 'Acme')),
                       ('alice_globex', pg_temp.fid('Alice', 'works at', 'Globex'));
select is((pg_temp.r('b2')->>'superseded')::int, 1, 'works at Globex supersedes works at Acme');
select is(pg_temp.windows('Alice', 'works at'),
          'acme ["2020-01-01 00:00:00+00","2022-01-01 00:00:00+00"); globex ["2022-01-01 00:00:00+00",)',
          'Acme holds until Globex starts; Globex is open');
select is((select e.new_fact_id::text || ' ' || e.new_range::text from memory.fact_events e
            where e.fact_id = pg_temp.id('alice_acme') and e.event_type = 'superseded'),
          pg_temp.id('alice_globex')::text || ' ["2020-01-01 00:00:00+00","2022-01-01 00:00:00+00")',
          'a superseded event names the successor and the new window');
select is((select count(*)::int from memory.facts_at(pg_temp.id('p'), '2023-01-01Z')
            where predicate = 'works at' and subject_id = (select subject_id from memory_internal.fact_versions(pg_temp.id('p'))
                                                            where fact_id = pg_temp.id('alice_acme'))),
          1, 'in 2023 Alice works at one place');

-- C. Positive control: cardinality many keeps both objects.
call pg_temp.put('c1', '[{"subject": "Alice", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01T00:00:00Z"},
                           {"subject": "Alice", "predicate": "likes", "object": "coffee", "valid_from": "2021-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Alice', 'likes'),
          'tea ["2020-01-01 00:00:00+00",); coffee ["2021-01-01 00:00:00+00",)',
          'likes tea and likes coffee both stay open (cardinality many)');
select is((pg_temp.r('c1')->>'superseded')::int, 0, 'nothing superseded');

-- D. Three successive versions chain with adjacent windows.
call pg_temp.put('d1', '[{"subject": "Carol", "predicate": "lives in", "object": "Paris", "valid_from": "2018-01-01T00:00:00Z"}]');
call pg_temp.put('d2', '[{"subject": "Carol", "predicate": "lives in", "object": "Berlin", "valid_from": "2019-01-01T00:00:00Z"}]');
call pg_temp.put('d3', '[{"subject": "Carol", "predicate": "lives in", "object": "Rome", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Carol', 'lives in'),
          'paris ["2018-01-01 00:00:00+00","2019-01-01 00:00:00+00"); '
          || 'berlin ["2019-01-01 00:00:00+00","2020-01-01 00:00:00+00"); rome ["2020-01-01 00:00:00+00",)',
          'Paris, Berlin, Rome: adjacent windows, the last one open');
select is((select count(*)::int
             from unnest(array['2018-06-01Z', '2019-06-01Z', '2020-06-01Z']::timestamptz[]) t,
                  lateral memory.facts_at(pg_temp.id('p'), t) f
            where f.content like 'Carol%'), 3,
          'one residence at each of three instants');

-- E. Identical re-assertion is skipped: the same batch twice changes nothing.
call pg_temp.put('e1', '[{"subject": "Dave", "predicate": "works at", "object": "Initech",
                            "content": "Dave works at Initech", "valid_from": "2019-01-01T00:00:00Z"},
                           {"subject": "Dave", "predicate": "likes", "object": "jazz", "valid_from": "2019-01-01T00:00:00Z"}]');
insert into snap values
  ('facts', (select count(*)::text from memory_internal.fact_versions(pg_temp.id('p')))),
  ('windows', pg_temp.windows('Dave', 'works at') || ' | ' || pg_temp.windows('Dave', 'likes')),
  ('events', (select count(*)::text from memory.fact_events where project_id = pg_temp.id('p')));
call pg_temp.put('e2', '[{"subject": "Dave", "predicate": "works at", "object": "Initech",
                            "content": "Dave works at Initech", "valid_from": "2019-01-01T00:00:00Z"},
                           {"subject": "Dave", "predicate": "likes", "object": "jazz", "valid_from": "2019-01-01T00:00:00Z"}]');
select is(pg_temp.r('e2') - 'results', '{"inserted": 0, "superseded": 0, "skipped": 2, "refused": 0, "invalid": 0, "superseded_pairs": []}'::jsonb,
          'the repeated batch: both facts skipped');
select is((select count(*)::text from memory_internal.fact_versions(pg_temp.id('p'))),
          (select v from snap where k = 'facts'), 'no fact row added');
select is(pg_temp.windows('Dave', 'works at') || ' | ' || pg_temp.windows('Dave', 'likes'),
          (select v from snap where k = 'windows'), 'windows unchanged');
select is((select count(*)::text from memory.fact_events where project_id = pg_temp.id('p')),
          (select v from snap where k = 'events'), 'no event written');
select is((select support_count from memory_internal.fact_versions(pg_temp.id('p'))
            where fact_id = pg_temp.fid('Dave', 'works at', 'Initech')), 2, 'support_count counts the repetition');
select is(pg_temp.putr('e3', '[{"subject": "Dave", "predicate": "works at", "object": "initech!",
                                "content": "dave works at initech", "valid_from": "2021-06-01T00:00:00Z"}]')->>'inserted', '1',
          'the same claim restated from a later instant is a new version (arrival order cannot lose it)');
select is(pg_temp.putr('e4', '[{"subject": "Dave", "predicate": "works at", "object": "Initech",
                                "content": "Dave was promoted at Initech", "valid_from": "2021-06-01T00:00:00Z"}]')->>'inserted', '1',
          'positive control: same object, new content, later instant is inserted');

-- F. Same start instant: the newer assertion wins, the older window is empty.
call pg_temp.put('f1', '[{"subject": "Erin", "predicate": "works at", "object": "Xerox", "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.put('f2', '[{"subject": "Erin", "predicate": "works at", "object": "Yahoo", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Erin', 'works at'), 'xerox empty; yahoo ["2020-01-01 00:00:00+00",)',
          'same start: the older assertion''s window is empty, the newer holds');
select is((pg_temp.r('f2')->>'superseded')::int, 1, 'the empty one counts as superseded');
select is((select string_agg(object_key, ',') from memory.facts_at(pg_temp.id('p'), '2020-01-01Z')
            where content like 'Erin%'), 'yahoo', 'facts_at at the shared start sees only the newer');
call pg_temp.put('f3', '[{"subject": "Fay", "predicate": "works at", "object": "Xerox", "valid_from": "2020-01-01T00:00:00Z"},
                           {"subject": "Fay", "predicate": "works at", "object": "Yahoo", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Fay', 'works at'), 'xerox empty; yahoo ["2020-01-01 00:00:00+00",)',
          'within one batch the later fact is the newer assertion');

-- G. An explicit historical window coexists with the current fact.
call pg_temp.put('g1', '[{"subject": "Gus", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
call pg_temp.put('g2', '[{"subject": "Gus", "predicate": "works at", "object": "Acme", "content": "Gus worked at Acme 2019-2021",
                            "valid_from": "2019-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"}]');
select is(pg_temp.r('g2') - 'results', '{"inserted": 1, "superseded": 0, "skipped": 0, "refused": 0, "invalid": 0, "superseded_pairs": []}'::jsonb,
          'the historical fact is inserted and supersedes nothing');
select is(pg_temp.windows('Gus', 'works at'),
          'acme ["2019-01-01 00:00:00+00","2021-01-01 00:00:00+00"); globex ["2022-01-01 00:00:00+00",)',
          'both keep their windows');
select is((select array_agg(event_type::text) from memory.fact_events where fact_id = pg_temp.fid('Gus', 'works at', 'Globex')),
          array['asserted'], 'the current fact got no event from the historical one');
select is((select count(*)::int from memory.facts_at(pg_temp.id('p'), '2021-06-01Z') where content like 'Gus%'), 0,
          'between the two windows Gus works nowhere');

-- H. Out-of-order arrival converges to the in-order state.
call pg_temp.put('h1', '[{"subject": "Hal", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
call pg_temp.put('h2', '[{"subject": "Hal", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Hal', 'works at'),
          'acme ["2020-01-01 00:00:00+00","2022-01-01 00:00:00+00"); globex ["2022-01-01 00:00:00+00",)',
          'the late older fact is closed at the newer one''s start; the newer is not flipped');
select is((select array_agg(event_type::text) from memory.fact_events where fact_id = pg_temp.fid('Hal', 'works at', 'Globex')),
          array['asserted'], 'the newer fact was not touched');
call pg_temp.put('h3', '[{"subject": "Ivy", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.put('h4', '[{"subject": "Ivy", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
select is(pg_temp.windows('Hal', 'works at'), pg_temp.windows('Ivy', 'works at'),
          'out of order (Hal) and in order (Ivy) end in the same windows');

-- I. Counts over a mixed batch: inserted, superseded, skipped, refused, invalid.
call pg_temp.put('i0', '[{"subject": "Jan", "predicate": "works at", "object": "Umbrella", "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.fid('Jan', 'works at', 'Umbrella')) $$);
call pg_temp.put('i1', '[{"subject": "Jan", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01T00:00:00Z"},
                           {"subject": "Bob", "predicate": "likes", "object": "tea", "content": "Bob likes tea, strongly",
                            "valid_from": "2022-01-01T00:00:00Z"},
                           {"subject": "Alice", "predicate": "likes", "object": "coffee", "valid_from": "2021-01-01T00:00:00Z"},
                           {"subject": "Jan", "predicate": "works at", "object": "Umbrella", "valid_from": "2020-01-01T00:00:00Z"},
                           {"predicate": "likes", "object": "tea"}]');
select is(pg_temp.r('i1') - 'results' - 'superseded_pairs',
          '{"inserted": 2, "superseded": 1, "skipped": 1, "refused": 1, "invalid": 1}'::jsonb, 'counts of a mixed batch');
select is((select array_agg(x->>'status' order by (x->>'index')::int) from jsonb_array_elements(pg_temp.r('i1')->'results') x),
          array['inserted', 'inserted', 'skipped', 'refused', 'invalid'], 'one result per fact, in batch order');
select is(pg_temp.r('i1')->'superseded_pairs',
          jsonb_build_array(jsonb_build_object('old_fact_id', pg_temp.id('bob_tea_2'),
                                               'new_fact_id', pg_temp.fid('Bob', 'likes', 'tea'))),
          'superseded_pairs names the closed fact and its successor');
select is(pg_temp.r('i1') #>> '{results,3,reason}', 'retracted', 'the refusal says why');

-- J. Invalid facts are reported with their field; the valid ones are inserted.
call pg_temp.put('j1', '[{"subject": "Kim", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01T00:00:00Z"},
                           {"predicate": "likes", "object": "tea"},
                           {"subject": "Kim", "predicate": "likes", "object": "rum", "valid_from": "not a date"},
                           {"subject": "Kim", "predicate": "likes", "object": "gin",
                            "valid_from": "2021-01-01T00:00:00Z", "valid_to": "2020-01-01T00:00:00Z"},
                           {"subject": "Kim", "predicate": "likes", "object": "ale",
                            "valid_from": "2021-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"},
                           {"subject": "Kim", "predicate": "likes", "object": "cider", "confidence": 1.5},
                           "Kim likes wine",
                           {"subject": "Kim", "predicate": "likes", "object": "jazz", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.r('j1') - 'results' - 'superseded_pairs',
          '{"inserted": 2, "superseded": 0, "skipped": 0, "refused": 0, "invalid": 6}'::jsonb,
          'six invalid facts reported, two valid ones inserted');
select is((select array_agg(coalesce(x #>> '{error,field}', x->>'status') order by (x->>'index')::int)
             from jsonb_array_elements(pg_temp.r('j1')->'results') x),
          array['inserted', 'subject', 'valid_from', 'valid_to', 'valid_to', 'confidence', 'fact', 'inserted'],
          'each invalid fact names its field');
select ok((select bool_and(length(x #>> '{error,message}') > 0 and x->>'status' = 'invalid')
             from jsonb_array_elements(pg_temp.r('j1')->'results') x where x ? 'error'),
          'each invalid fact carries a message');
select is(pg_temp.windows('Kim', 'likes'), 'tea ["2020-01-01 00:00:00+00",); jazz ["2020-01-01 00:00:00+00",)',
          'only the valid facts of the batch were stored');

-- K. Zone-less timestamps are UTC whatever the session's time zone.
set local timezone = 'America/New_York';
call pg_temp.put('k1', '[{"subject": "Lena", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01 00:00:00"}]');
select is(lower(pg_temp.rng(pg_temp.fid('Lena', 'likes', 'tea'))), '2020-01-01 00:00:00+00'::timestamptz,
          'a zone-less valid_from is read as UTC');
reset timezone;

-- L. valid_from defaults: the source episode's occurred_at, else now().
reset role;
insert into memory.sessions (org_id, project_id, session_id, external_id)
values (pg_temp.id('org'), pg_temp.id('p'), gen_random_uuid(), 'chat-1');
insert into memory.episodes (org_id, project_id, session_id, episode_id, seq, role, content, occurred_at)
select org_id, project_id, session_id, gen_random_uuid(), 1, 'user', 'I moved to Oslo.', '2019-05-05T10:00:00Z'
  from memory.sessions where external_id = 'chat-1' and project_id = pg_temp.id('p');
insert into ids select 'episode', episode_id from memory.episodes where project_id = pg_temp.id('p');
set local role chronomem_app;
call pg_temp.put('l1', jsonb_build_array(jsonb_build_object('subject', 'Mo', 'predicate', 'lives in', 'object', 'Oslo',
                                                              'source_episode_id', pg_temp.id('episode'))));
select is(lower(pg_temp.rng(pg_temp.fid('Mo', 'lives in', 'Oslo'))), '2019-05-05T10:00:00Z'::timestamptz,
          'no valid_from: the source episode''s occurred_at');
insert into res values ('l2', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Ned", "predicate": "likes", "object": "tea"}]', p_source_episode => pg_temp.id('episode')));
call pg_temp.put('l3', '[{"subject": "Ola", "predicate": "likes", "object": "tea"}]');
select is(lower(pg_temp.rng((pg_temp.r('l2') #>> '{results,0,fact_id}')::uuid)), '2019-05-05T10:00:00Z'::timestamptz,
          'the batch''s source episode also gives valid_from');
select is(lower(pg_temp.rng((pg_temp.r('l3') #>> '{results,0,fact_id}')::uuid)), now(),
          'no valid_from and no episode: now()');
select is(pg_temp.putr('l4', '[{"subject": "Pia", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01T00:00:00Z",
                               "source_episode_id": "00000000-0000-0000-0000-000000000000"}]') #>> '{results,0,error,field}',
          'source_episode_id', 'an unknown episode is reported, not raised');

-- N. Declaring a predicate re-keys its stored facts; switching to 'one' is
-- refused while a subject holds several objects at once.
select throws_ok($$ select memory.declare_predicate(pg_temp.id('p'), 'likes', 'one') $$, '23P01', null,
                 'likes cannot become cardinality one while Alice likes tea and coffee at once');
call pg_temp.put('n1', '[{"subject": "Quinn", "predicate": "drives", "object": "a Volvo", "valid_from": "2018-01-01T00:00:00Z",
                          "valid_to": "2019-01-01T00:00:00Z"},
                         {"subject": "Quinn", "predicate": "drives", "object": "a Saab", "valid_from": "2020-01-01T00:00:00Z"}]');
select is(memory.declare_predicate(pg_temp.id('p'), 'Drives', 'ONE'), 'one', 'drives becomes cardinality one (no overlap)');
select is((select string_agg(identity_object, ',') from memory_internal.fact_versions(pg_temp.id('p')) where predicate = 'drives'),
          ',', 'its stored facts now share one identity');

-- M. Whole-batch errors raise.
select throws_ok($$ select memory.assert_facts(pg_temp.id('p'), '{"subject": "x"}') $$, '22023', null,
                 'a batch that is not an array is refused');

select * from finish();
ROLLBACK;
