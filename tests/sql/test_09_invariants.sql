-- 09 invariants enforced by the database itself, whoever writes: the
-- exclusion constraints reject overlapping current rows even from the owner
-- writing directly (each with a positive control beside it: the same row is
-- accepted where the invariant allows it), and the logs are append-only.
BEGIN;
select plan(29);

create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
-- SQL inserting a direct copy of a stored fact (new id, everything else the
-- same unless overridden; for cardinality many the identity follows the
-- object): the excluded row is given every chance to look legitimate.
create function pg_temp.copy_fact(p_fact text, p_project text default 'p', p_range tstzrange default null,
                                  p_invalid_at timestamptz default null, p_object text default null,
                                  p_subject text default null)
  returns text language sql as $$
  select format($i$
    insert into memory.facts (org_id, project_id, subject_id, predicate, predicate_label, object_entity_id,
                              object_literal, object_key, identity_object, content, content_key, confidence,
                              source, valid_from, asserted_until, valid_range, invalid_at)
    select org_id, %L, coalesce(%L::uuid, subject_id), predicate, predicate_label, object_entity_id,
           coalesce(%L, object_literal), coalesce(%L, object_key),
           case identity_object when '' then '' else coalesce(%L, identity_object) end, content, content_key, confidence,
           source, coalesce(lower(%L::tstzrange), valid_from), null, coalesce(%L::tstzrange, valid_range), %L
      from memory.facts where fact_id = %L $i$,
    pg_temp.id(p_project), (select i.id from pg_temp.ids i where i.k = p_subject), p_object, p_object, p_object, p_range, p_range, p_invalid_at, pg_temp.id(p_fact)) $$;

set local role chronomem_app;
do $$
declare o uuid := memory.create_org('invariants org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p')), ('q', memory.create_project(o, 'q'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
  insert into pg_temp.ids values ('q alice', memory.upsert_entity(pg_temp.id('q'), 'Alice'));
  insert into pg_temp.ids select 'acme', (r #>> '{results,0,fact_id}')::uuid
    from memory.assert_facts(pg_temp.id('p'), '[{"subject": "Alice", "predicate": "works at", "object": "Acme",
                                                 "object_type": "entity", "valid_from": "2020-01-01T00:00:00Z"}]') r;
  insert into pg_temp.ids select 'tea', (r #>> '{results,0,fact_id}')::uuid
    from memory.assert_facts(pg_temp.id('p'), '[{"subject": "Bob", "predicate": "likes", "object": "tea",
                                                 "valid_from": "2020-01-01T00:00:00Z"}]') r;
end $$;

-- Invariant 1, written directly by the owner (forced RLS: scoped like anyone).
set local role chronomem_owner;
call pg_temp.exec($$ select memory.use_org(pg_temp.id('org'), true) $$);
select throws_ok(pg_temp.copy_fact('acme'), '23P01', null,
                 'an exact copy of a current fact (same text, object, window) is rejected');
select throws_ok(pg_temp.copy_fact('acme', p_range => '[2021-01-01Z,2022-01-01Z)'), '23P01', null,
                 'a copy whose window lies inside the current one is rejected');
select throws_ok(pg_temp.copy_fact('acme', p_range => '[2019-01-01Z,2020-01-01 00:00:00.000001Z)'), '23P01', null,
                 'a copy overlapping by one microsecond is rejected');
select lives_ok(pg_temp.copy_fact('acme', p_range => '[2019-01-01Z,2020-01-01Z)'),
                'positive control: the same fact ending exactly where the current one starts is accepted');
select throws_ok(pg_temp.copy_fact('acme', p_range => '[2023-01-01Z,)', p_object => 'globex'), '23P01', null,
                 'cardinality one: another object overlapping in the same identity is rejected');
select lives_ok(pg_temp.copy_fact('tea', p_range => '[2023-01-01Z,)', p_object => 'coffee'),
                'positive control: cardinality many, another object (another identity) is accepted');
select lives_ok(pg_temp.copy_fact('acme', p_invalid_at => now()),
                'positive control: the exact copy is accepted when it is retracted (not current)');
-- A fact's subject is an entity of the fact's own project (facts_subject_fkey,
-- sql/0013), so the copy cannot even be placed in project q.
select throws_ok(pg_temp.copy_fact('acme', p_project => 'q'), '23503', null,
                 'the exact copy in another project is refused: its subject is an entity of project p');
select lives_ok(pg_temp.copy_fact('acme', p_project => 'q', p_subject => 'q alice'),
                'positive control: the same claim in another project (about its own Alice) is accepted');
select lives_ok(pg_temp.copy_fact('acme', p_range => 'empty'),
                'positive control: a copy with an empty window (a same-start loser) is accepted');
select throws_ok(replace(pg_temp.copy_fact('acme'), 'coalesce(lower(', 'coalesce(''2019-06-01''::timestamptz, lower('),
                 '23514', null, 'a window that does not start at valid_from is rejected (check constraint)');

-- After the API retracts a current fact, its exact copy is accepted (Bob
-- likes tea: the controls above left extra rows in Alice's identity).
select throws_ok(pg_temp.copy_fact('tea'), '23P01', null, 'an exact copy of Bob likes tea is rejected while it is current');
set local role chronomem_app;
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('tea')) $$);
set local role chronomem_owner;
select lives_ok(pg_temp.copy_fact('tea'), 'positive control: once it is retracted, the same window is free');

-- Invariant 4's constraint: no two current edges of one key overlap.
select throws_ok($$ insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range)
                    select org_id, project_id, source_id, target_id, relation, valid_range from memory.edges
                     where project_id = pg_temp.id('p') and relation = 'works at' and expired_at is null limit 1 $$,
                 '23P01', null, 'a copy of a current edge is rejected');
select lives_ok($$ insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range, expired_at)
                   select org_id, project_id, source_id, target_id, relation, valid_range, now() from memory.edges
                    where project_id = pg_temp.id('p') and relation = 'works at' and expired_at is null limit 1 $$,
                'positive control: the same edge row is accepted when expired');

-- One active tombstone per claim.
select throws_ok($$ insert into memory.tombstones (org_id, project_id, subject_id, predicate, object_key, fact_id)
                    select org_id, project_id, subject_id, predicate, object_key, gen_random_uuid()
                      from memory.tombstones where fact_id = pg_temp.id('tea') $$,
                 '23505', null, 'a second active tombstone on the same claim is rejected');

-- fact_events and audit_log are append-only, even for the owner.
select throws_ok($$ update memory.fact_events set reason = 'edited' where project_id = pg_temp.id('p') $$,
                 '42501', null, 'owner cannot update fact_events');
select throws_ok($$ delete from memory.fact_events where project_id = pg_temp.id('p') $$,
                 '42501', null, 'owner cannot delete fact_events');
select throws_ok($$ update memory.audit_log set actor = 'someone else' $$, '42501', null, 'owner cannot update audit_log');
select throws_ok($$ delete from memory.audit_log $$, '42501', null, 'owner cannot delete from audit_log');
select cmp_ok((select count(*)::int from memory.audit_log), '>', 0, 'the audit log has rows to protect (control)');
reset role;
select throws_ok($$ update memory.fact_events set reason = 'edited' $$, '42501', null,
                 'even a superuser cannot update fact_events (trigger)');

-- The app role writes only through the functions.
set local role chronomem_app;
select throws_ok($$ delete from memory.facts where fact_id = pg_temp.id('acme') $$, '42501', null, 'app cannot delete a fact');
select throws_ok($$ update memory.facts set invalid_at = now() where fact_id = pg_temp.id('acme') $$, '42501', null,
                 'app cannot retract a fact by hand');
select throws_ok($$ update memory.fact_events set reason = 'x' $$, '42501', null, 'app cannot update fact_events');
call pg_temp.exec($$ select set_config('chronomem.wiping', 'on', true) $$);
select throws_ok($$ delete from memory.fact_events $$, '42501', null,
                 'app cannot delete fact_events, even with chronomem.wiping set');
select throws_ok($$ delete from memory.audit_log $$, '42501', null, 'app cannot delete from audit_log');

-- Invariant 2: supersession and retraction delete nothing.
select is((select invalid_at from memory_internal.fact_versions(pg_temp.id('p')) where fact_id = pg_temp.id('tea')),
          now(), 'the retracted fact is still stored, with its record time closed');
select is((select array_agg(event_type order by event_id) from memory.fact_events where fact_id = pg_temp.id('tea')),
          array['asserted', 'retracted'], 'and its events are all there');

select * from finish();
ROLLBACK;
