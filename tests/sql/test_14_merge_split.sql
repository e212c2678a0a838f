-- 14 merging entities and splitting them again: after merge_entities and
-- after split_entity the invariants hold (no two current versions of one
-- identity overlap, edges equal their facts' windows), names resolve to the
-- right entity, and what held before a merge holds again after the split.
-- Runs as chronomem_app, in one transaction.
BEGIN;
select plan(17);

set local role chronomem_app;
do $$
declare o uuid := memory.create_org('merge split org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
end $$;

-- What holds, by name (p_from shown as p_to), at a few instants: the state
-- a split must give back.
create function pg_temp.held(p_from text default null, p_to text default null) returns text
  language sql stable as $$
  select string_agg(format('%s|%s %s %s %s', x.at::date, x.s, x.p, x.o, x.r),
                    '; ' order by x.at, x.s, x.p, x.o)
    from (select i.at, coalesce(nullif(s.name, p_from), p_to, s.name) as s, f.predicate as p,
                 coalesce(nullif(coalesce(o.name, f.object_literal), p_from), p_to,
                          coalesce(o.name, f.object_literal)) as o, f.valid_range as r
            from unnest(array['2020-06-01', '2021-06-01', '2022-06-01']::timestamptz[]) i(at)
           cross join lateral memory.facts_at(pg_temp.id('p'), i.at) f
            join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
            left join memory.entities o
              on o.org_id = f.org_id and o.entity_id = f.object_entity_id) x $$;
-- Invariant 1 over current versions, and invariant 4 as reconcile_edges sees it.
create function pg_temp.overlaps() returns bigint language sql stable as $$
  select count(*) from memory_internal.fact_versions(pg_temp.id('p')) a
    join memory_internal.fact_versions(pg_temp.id('p')) b
      on a.subject_id = b.subject_id and a.predicate = b.predicate
     and a.identity_object = b.identity_object and a.fact_id < b.fact_id
   where a.invalid_at is null and b.invalid_at is null and a.valid_range && b.valid_range $$;
create function pg_temp.drift() returns bigint language sql as $$
  select (memory.reconcile_edges(1000, pg_temp.id('p')) ->> 'keys_healed')::bigint $$;

do $$
begin
  perform memory.declare_predicate(pg_temp.id('p'), 'lives in', 'one');
  perform memory.upsert_entity(pg_temp.id('p'), n) from unnest(array['Melanie', 'Mel']) n;
  perform memory.add_alias(pg_temp.id('p'), 'Mel', 'Mellie');
  perform memory.assert_facts(pg_temp.id('p'), '[
    {"subject": "Melanie", "predicate": "lives in", "object": "Paris", "valid_from": "2020-01-01Z"},
    {"subject": "Mel", "predicate": "lives in", "object": "Berlin", "valid_from": "2021-01-01Z"},
    {"subject": "Bob", "predicate": "knows", "object": "Melanie", "object_type": "entity", "valid_from": "2020-01-01Z"},
    {"subject": "Bob", "predicate": "knows", "object": "Mellie", "object_type": "entity", "valid_from": "2021-01-01Z"}
  ]'::jsonb);
end $$;
insert into pg_temp.snap values ('before', pg_temp.held());

-- merge ---------------------------------------------------------------------
select throws_ok($$ select memory.merge_entities(pg_temp.id('p'), 'Melanie', 'Nobody') $$,
                 'P0002', null, 'an unknown name is not found');
insert into pg_temp.res values ('preview',
  memory.merge_entities(pg_temp.id('p'), 'Melanie', 'Mel', p_dry_run => true));
select is(pg_temp.held(), (select v from pg_temp.snap where k = 'before'), 'a dry run changes nothing');
insert into pg_temp.res values ('merge', memory.merge_entities(pg_temp.id('p'), 'Melanie', 'MEL'));
select is(pg_temp.r('merge') - 'entity_id', (pg_temp.r('preview') - 'entity_id') || '{"dry_run": false}',
          'the dry run answered what the merge did');
select is(pg_temp.r('merge') ->> 'facts_superseded', '2',
          'the merge closed Paris at Berlin and Bob knows Melanie at Bob knows Mellie');
select is(pg_temp.overlaps(), 0::bigint, 'no two current versions of one identity overlap');
select is(pg_temp.drift(), 0::bigint, 'edges equal their facts after the merge');
select is(memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'mellie'),
          memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'melanie'),
          'the absorbed entity''s alias resolves to the kept one');
select is((select count(*) from memory.entities where project_id = pg_temp.id('p') and name = 'Mel'),
          0::bigint, 'the absorbed entity is gone');
select isnt(pg_temp.held(), (select v from pg_temp.snap where k = 'before'), 'the merge changed what holds');
select is(memory.merge_entities(pg_temp.id('p'), 'mel', 'Melanie') ->> 'merged', 'false',
          'merging an entity with itself changes nothing');

-- split ---------------------------------------------------------------------
select throws_ok($$ select memory.split_entity(pg_temp.id('p'), 'Melanie') $$,
                 '22023', null, 'an entity''s own name cannot be split off');
select throws_ok($$ select memory.split_entity(pg_temp.id('p'), 'Nobody') $$,
                 'P0002', null, 'an unknown alias is not found');
insert into pg_temp.res values ('split', memory.split_entity(pg_temp.id('p'), 'Mel'));
select is(pg_temp.overlaps(), 0::bigint, 'no overlap after the split');
select is(pg_temp.drift(), 0::bigint, 'edges equal their facts after the split');
select isnt(memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'mel'),
            memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'melanie'),
            'Mel is an entity of its own again');
-- Mellie (Mel's alias, written as such) is Melanie's until split off too.
select lives_ok($$ select memory.split_entity(pg_temp.id('p'), 'Mellie') $$, 'Mellie split off');
select is(pg_temp.held('Mellie', 'Mel'), (select v from pg_temp.snap where k = 'before'),
          'what held before the merge holds again (Bob knows Mellie, now its own entity)');

select * from finish();
ROLLBACK;
