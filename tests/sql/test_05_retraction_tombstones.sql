-- 05 retraction and tombstones.  A retracted claim never held: its record
-- time ends, what it closed gets its window back, and the claim is refused
-- until a caller overrides.  Runs as chronomem_app.
--
-- known_at: within one transaction now() is constant, so (as in
-- test_04_as_of.sql) pg_temp.shift_back moves the project's record-time
-- columns back one hour after each step, as superuser with triggers off:
-- Acme is recorded at now() - 2h, Globex at now() - 1h, the retraction at now().
BEGIN;
select plan(41);

create procedure pg_temp.put(p_k text, p_facts jsonb, p_override boolean default false)
  language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id('p'), p_facts,
                                                           p_override_tombstones => p_override)) $$;
create procedure pg_temp.retract(p_k text, p_fact uuid, p_reason text default null)
  language sql as $$
  insert into pg_temp.res values (p_k, memory.retract_fact(pg_temp.id('p'), p_fact, p_reason)) $$;
create function pg_temp.fact(p_k text) returns memory.facts language sql stable as $$
  select v.* from memory_internal.fact_versions(pg_temp.id('p')) v where v.fact_id = pg_temp.id(p_k) $$;
create function pg_temp.works(p_at timestamptz, p_known timestamptz default now()) returns text
  language sql stable as $$
  select string_agg(f.object_key, ',' order by f.object_key)
    from memory.facts_at(pg_temp.id('p'), p_at, p_known) f
   where f.predicate = 'works at' and f.subject_id = (select subject_id from pg_temp.fact('acme')) $$;

set local role chronomem_app;
do $$
declare o uuid; b uuid;
begin
  -- Org B: a fact that org A must not be able to retract.
  b := memory.create_org('retraction org B');
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('org_b', b), ('p_b', memory.create_project(b, 'p'));
  insert into pg_temp.ids select 'fact_b', (r #>> '{results,0,fact_id}')::uuid
    from memory.assert_facts(pg_temp.id('p_b'),
           '[{"subject": "Alice", "predicate": "works at", "object": "Globex"}]') r;
  o := memory.create_org('retraction org A');
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
end $$;

call pg_temp.put('acme', '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}]');
insert into ids select 'acme', (pg_temp.r('acme') #>> '{results,0,fact_id}')::uuid;
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
call pg_temp.put('globex', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
insert into ids select 'globex', (pg_temp.r('globex') #>> '{results,0,fact_id}')::uuid;
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
select is(pg_temp.works('2023-01-01Z'), 'globex', 'before the retraction Alice works at Globex in 2023');

-- Retraction.
call pg_temp.retract('retract1', pg_temp.id('globex'), 'wrong Alice');
select is(pg_temp.r('retract1'), jsonb_build_object('fact_id', pg_temp.id('globex'), 'status', 'retracted',
                                                    'restored', jsonb_build_array(pg_temp.id('acme'))),
          'retract_fact reports the fact it restored');
select is((pg_temp.fact('globex')).invalid_at, now(), 'record time of the retracted fact ends now');
select is((pg_temp.fact('globex')).valid_range, '[2022-01-01 00:00:00+00,)'::tstzrange,
          'its world-time window is kept (nothing is deleted)');
select is((pg_temp.fact('acme')).valid_range, '[2020-01-01 00:00:00+00,)'::tstzrange,
          'the predecessor''s window is restored');
select is((select event_type || ' ' || reason from memory.fact_events where fact_id = pg_temp.id('globex')
            order by event_id desc limit 1), 'retracted wrong Alice', 'a retracted event with the reason');
select is((select event_type || ' ' || new_range::text || ' ' || (occurred_at = now())::text
             from memory.fact_events where fact_id = pg_temp.id('acme') order by event_id desc limit 1),
          'restored ["2020-01-01 00:00:00+00",) true', 'a restored event with the window given back');
select is(pg_temp.works('2023-01-01Z'), 'acme', 'now Alice works at Acme in 2023');
select is(pg_temp.works('2023-01-01Z', now() - interval '30 minutes'), 'globex',
          'known_at before the retraction still shows the retracted fact');
select is(pg_temp.works('2023-01-01Z', now() - interval '90 minutes'), 'acme',
          'known_at before Globex was recorded shows Acme');
select is(pg_temp.works('2021-01-01Z', now() - interval '30 minutes'), 'acme',
          'at an instant the retracted fact did not cover, nothing changes');
select is((select s.status from memory.subject_timeline(pg_temp.id('p'), 'Alice', 'works at') s
            where s.fact_id = pg_temp.id('globex')), 'retracted', 'subject_timeline marks it retracted');

select is((select array_agg(h.event_type || ' ' || h.object order by h.occurred_at, h.event_type, h.object)
             from memory.fact_history(pg_temp.id('p'), pg_temp.id('acme')) h),
          array['asserted Acme', 'asserted Globex', 'superseded Acme', 'restored Acme', 'retracted Globex'],
          'fact_history tells the identity''s story in record-time order (one instant''s events by name)');

-- Tombstone.
select is((select t.predicate || ' ' || t.object_key || ' ' || (t.fact_id = pg_temp.id('globex'))::text
                  || ' ' || coalesce(t.lifted_at::text, 'not lifted')
             from memory.tombstones t where t.project_id = pg_temp.id('p')),
          'works at globex true not lifted', 'one tombstone on (Alice, works at, globex)');
call pg_temp.put('again', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
select is(pg_temp.r('again') - 'results' - 'superseded_pairs',
          '{"inserted": 0, "superseded": 0, "skipped": 0, "refused": 1, "invalid": 0}'::jsonb,
          'the same claim again is refused');
select is(pg_temp.r('again') #> '{results,0}',
          jsonb_build_object('index', 0, 'status', 'refused', 'reason', 'retracted', 'retracted_fact_id', pg_temp.id('globex')),
          'the refusal names the retracted fact');
call pg_temp.put('again2', '[{"subject": "alice", "predicate": "Works At", "object": "GLOBEX!", "content": "Alice joined Globex",
                              "valid_from": "2023-05-01T00:00:00Z"}]');
select is((pg_temp.r('again2')->>'refused')::int, 1, 'another wording and instant of the claim is refused too');
select is((select count(*)::int from memory_internal.fact_versions(pg_temp.id('p')) where object_key = 'globex'), 1,
          'refusals store nothing');
select is(pg_temp.works('2023-06-01Z'), 'acme', 'and change nothing');
call pg_temp.put('control', '[{"subject": "Bob", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"},
                              {"subject": "Alice", "predicate": "likes", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
select is((pg_temp.r('control')->>'inserted')::int, 2,
          'positive control: another subject, or another predicate, with the same object is accepted');

-- Override accepts the claim and lifts the tombstone.
call pg_temp.put('override', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]', true);
insert into ids select 'globex2', (pg_temp.r('override') #>> '{results,0,fact_id}')::uuid;
select is(pg_temp.r('override') - 'results' - 'superseded_pairs',
          '{"inserted": 1, "superseded": 1, "skipped": 0, "refused": 0, "invalid": 0}'::jsonb,
          'override: inserted, and it supersedes Acme again');
select is((select (lifted_at = now())::text || ' ' || (lifted_by = pg_temp.id('globex2'))::text
             from memory.tombstones where fact_id = pg_temp.id('globex')), 'true true',
          'the tombstone is lifted by the new fact');
select is(pg_temp.works('2023-01-01Z'), 'globex', 'Globex holds again in 2023');
call pg_temp.put('after_lift', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
select is(pg_temp.r('after_lift') #>> '{results,0,status}', 'skipped', 'after the lift the claim is skipped, not refused');

-- Retracting twice is a no-op.
insert into snap values
  ('events', (select count(*)::text from memory.fact_events where project_id = pg_temp.id('p'))),
  ('tombstones', (select count(*)::text from memory.tombstones where project_id = pg_temp.id('p'))),
  ('audit', (select count(*)::text from memory.audit_log where project_id = pg_temp.id('p')));
call pg_temp.retract('twice', pg_temp.id('globex'));
select is(pg_temp.r('twice')->>'status', 'already_retracted', 'retracting a retracted fact reports it');
select is((select count(*)::text from memory.fact_events where project_id = pg_temp.id('p'))
          || ' ' || (select count(*)::text from memory.tombstones where project_id = pg_temp.id('p'))
          || ' ' || (select count(*)::text from memory.audit_log where project_id = pg_temp.id('p')),
          (select string_agg(v, ' ' order by array_position(array['events', 'tombstones', 'audit'], k)) from snap),
          '... and writes no event, tombstone or audit row');
select is(pg_temp.works('2023-01-01Z'), 'globex', '... and changes no window');

-- A retraction that restores nothing (cardinality many).
call pg_temp.retract('likes', (pg_temp.r('control') #>> '{results,1,fact_id}')::uuid);
select is(pg_temp.r('likes')->'restored', '[]'::jsonb, 'retracting a fact that closed nothing restores nothing');

-- Restoration gives back exactly what the retracted fact took: up to the
-- next remaining fact, and never past the fact's own claimed end.
do $$ begin perform memory.declare_predicate(pg_temp.id('p'), 'lives in', 'one'); end $$;
call pg_temp.put('carol', '[{"subject": "Carol", "predicate": "lives in", "object": "Paris", "valid_from": "2018-01-01T00:00:00Z"},
                            {"subject": "Carol", "predicate": "lives in", "object": "Berlin", "valid_from": "2019-01-01T00:00:00Z"},
                            {"subject": "Carol", "predicate": "lives in", "object": "Rome", "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.retract('berlin', (pg_temp.r('carol') #>> '{results,1,fact_id}')::uuid);
select is((select string_agg(object_key || ' ' || valid_range::text, '; ' order by valid_from)
             from memory_internal.fact_versions(pg_temp.id('p')) where content like 'Carol%' and invalid_at is null),
          'paris ["2018-01-01 00:00:00+00","2020-01-01 00:00:00+00"); rome ["2020-01-01 00:00:00+00",)',
          'retracting the middle version restores its predecessor up to the next remaining one');
call pg_temp.put('dan', '[{"subject": "Dan", "predicate": "lives in", "object": "Oslo", "valid_from": "2020-01-01T00:00:00Z"}]');
insert into res select 'dan_close', memory.close_fact(pg_temp.id('p'), (pg_temp.r('dan') #>> '{results,0,fact_id}')::uuid, '2021-01-01Z');
call pg_temp.put('bergen', '[{"subject": "Dan", "predicate": "lives in", "object": "Bergen", "valid_from": "2020-06-01T00:00:00Z"}]');
call pg_temp.retract('bergen_r', (pg_temp.r('bergen') #>> '{results,0,fact_id}')::uuid);
select is((select string_agg(object_key || ' ' || valid_range::text, '; ' order by valid_from)
             from memory_internal.fact_versions(pg_temp.id('p')) where content like 'Dan%' and invalid_at is null),
          'oslo ["2020-01-01 00:00:00+00","2021-01-01 00:00:00+00")',
          'a restored fact that had been closed (expired) keeps its own end');

-- A close at an instant no client could write back is refused, naming it;
-- the fact stays as it was (the control: Dan's Oslo window above).
select throws_ok($$ select memory.close_fact(pg_temp.id('p'), (pg_temp.r('dan') #>> '{results,0,fact_id}')::uuid,
                                             '10000-01-01Z') $$,
                 '22023', null, 'a close in year 10000 is refused (22023)');
select throws_ok($$ select memory.close_fact(pg_temp.id('p'), (pg_temp.r('dan') #>> '{results,0,fact_id}')::uuid,
                                             '0001-01-01 00:00:00+00'::timestamptz - interval '1 second') $$,
                 '22023', null, 'a close in 1 BC is refused (22023)');

-- Audit and counters.
select is((select counts from memory.audit_log where action = 'retract_fact' and resource = 'fact:' || pg_temp.id('globex')),
          '{"restored": 1}'::jsonb, 'the retraction is audited with counts');
select is((select jsonb_object_agg(metric, value) from memory.counters(pg_temp.id('p'))
            where metric in ('facts_retracted', 'facts_refused')),
          '{"facts_retracted": 4, "facts_refused": 2}'::jsonb, 'counters count retractions and refusals');

-- Another org's fact: not found, and untouched.
select throws_ok($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'another org''s fact id in my project: not found');
select throws_ok($$ select memory.retract_fact(pg_temp.id('p_b'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'another org''s project: not found');
select throws_ok($$ select memory.retract_fact(pg_temp.id('p'), gen_random_uuid()) $$, 'P0002', null,
                 'an unknown fact id: not found');
select is((select count(*)::int from memory.tombstones where project_id = pg_temp.id('p_b')), 0,
          'scoped to A, B''s tombstones are invisible anyway (no rows)');
do $$ begin perform memory.use_org(pg_temp.id('org_b'), true); end $$;
select is((select coalesce(invalid_at::text, 'current') from memory_internal.fact_versions(pg_temp.id('p_b'))
            where fact_id = pg_temp.id('fact_b')), 'current', 'org B''s fact is still current');
select is((select count(*)::int from memory.tombstones where project_id = pg_temp.id('p_b')), 0,
          'org B has no tombstone');
do $$ begin perform memory.use_org(pg_temp.id('org'), true); end $$;
select is((select count(*)::int from memory.facts_at(pg_temp.id('p_b'))), 0, 'back in org A, B''s facts are invisible');

select * from finish();
ROLLBACK;
