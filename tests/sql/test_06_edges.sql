-- 06 edges (invariant 4): an edge is current exactly while some current fact
-- asserts it.  Edge rows are immutable but for expired_at: a window that
-- closes expires the old row and inserts the closed one, at the fact's
-- instant.  Runs as chronomem_app; drift for reconcile_edges is made as
-- superuser.
BEGIN;
select plan(33);

-- Assert facts (objects are entities) and name the first inserted fact.
create procedure pg_temp.put(p_k text, p_facts jsonb) language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id('p'), p_facts));
  insert into pg_temp.ids select p_k, (pg_temp.r(p_k) #>> '{results,0,fact_id}')::uuid
   where pg_temp.r(p_k) #>> '{results,0,fact_id}' is not null $$;
create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
create function pg_temp.ent(p_name text) returns uuid language sql stable as $$
  select entity_id from memory.entities
   where project_id = pg_temp.id('p') and normalized_name = memory.normalize_text(p_name) $$;
-- Current edge rows from a source for a relation: "target window" in order.
create function pg_temp.edges(p_source text, p_relation text) returns text language sql stable as $$
  select string_agg(t.normalized_name || ' ' || e.valid_range::text, '; ' order by lower(e.valid_range))
    from memory.edges e join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
   where e.project_id = pg_temp.id('p') and e.source_id = pg_temp.ent(p_source)
     and e.relation = p_relation and e.expired_at is null $$;
-- The one current edge row of a key covering an instant.
create function pg_temp.edge_id(p_source text, p_target text, p_relation text, p_at timestamptz) returns uuid
  language sql stable as $$
  select e.edge_id from memory.edges e
   where e.project_id = pg_temp.id('p') and e.source_id = pg_temp.ent(p_source)
     and e.target_id = pg_temp.ent(p_target) and e.relation = p_relation
     and e.expired_at is null and e.valid_range @> p_at $$;
create function pg_temp.fact(p_k text) returns memory.facts language sql stable as $$
  select v.* from memory_internal.fact_versions(pg_temp.id('p')) v where v.fact_id = pg_temp.id(p_k) $$;
-- Invariant 4 as two queries: current edges, and the maximal windows of the
-- union of current facts' windows per (subject, object entity, predicate).
create function pg_temp.have() returns table (s uuid, t uuid, rel text, r tstzrange) language sql stable as $$
  select source_id, target_id, relation, valid_range from memory.edges
   where project_id = pg_temp.id('p') and expired_at is null $$;
create function pg_temp.want() returns table (s uuid, t uuid, rel text, r tstzrange) language sql stable as $$
  select subject_id, object_entity_id, predicate, unnest(range_agg(valid_range))
    from memory_internal.fact_versions(pg_temp.id('p'))
   where invalid_at is null and object_entity_id is not null and not isempty(valid_range)
   group by 1, 2, 3 $$;

set local role chronomem_app;
do $$
declare o uuid := memory.create_org('edges org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
end $$;

-- A fact whose object is an entity makes an edge; a literal object does not.
call pg_temp.put('acme', '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
                           "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.put('green', '[{"subject": "Alice", "predicate": "likes", "object": "green tea", "object_type": "literal",
                            "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.edges('Alice', 'works at'), 'acme ["2020-01-01 00:00:00+00",)', 'works at Acme: one open edge');
select is(pg_temp.edges('Alice', 'likes'), null, 'a literal object makes no edge');
insert into ids values ('e_acme_open', pg_temp.edge_id('Alice', 'Acme', 'works at', '2021-01-01Z'));

-- Supersession by another key closes the old edge at the fact's instant.
call pg_temp.put('globex', '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity",
                             "valid_from": "2022-01-01T00:00:00Z"}]');
select is(pg_temp.edges('Alice', 'works at'),
          'acme ["2020-01-01 00:00:00+00","2022-01-01 00:00:00+00"); globex ["2022-01-01 00:00:00+00",)',
          'Acme edge closed where Globex starts; Globex edge open');
select is((select expired_at from memory.edges where edge_id = pg_temp.id('e_acme_open')),
          (pg_temp.fact('acme')).range_changed_at, 'the open Acme row expired at the instant the fact''s window closed');
select is((select recorded_at from memory.edges where edge_id = pg_temp.edge_id('Alice', 'Acme', 'works at', '2021-01-01Z')),
          (pg_temp.fact('acme')).range_changed_at, 'the closed Acme row was recorded at that same instant');
select is((select valid_range from memory.edges where edge_id = pg_temp.id('e_acme_open')),
          '[2020-01-01 00:00:00+00,)'::tstzrange, 'the expired row is unchanged but for expired_at');
select is((select string_agg(t.normalized_name, ',') from memory.edges_at(pg_temp.id('p'), '2021-06-01Z') e
             join memory.entities t on t.entity_id = e.target_id), 'acme', 'edges_at 2021: Acme');
select is((select string_agg(t.normalized_name, ',') from memory.edges_at(pg_temp.id('p'), '2023-06-01Z') e
             join memory.entities t on t.entity_id = e.target_id), 'globex', 'edges_at 2023: Globex only');
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()', 'invariant 4 after a supersession');

-- Same key: a new version of the same triple keeps the same edge row.
call pg_temp.put('tea1', '[{"subject": "Bob", "predicate": "likes", "object": "Tea", "object_type": "entity",
                           "content": "Bob likes tea", "valid_from": "2020-01-01T00:00:00Z"}]');
insert into ids values ('e_tea', pg_temp.edge_id('Bob', 'Tea', 'likes', '2021-01-01Z'));
call pg_temp.put('tea2', '[{"subject": "Bob", "predicate": "likes", "object": "tea", "content": "Bob loves tea",
                           "valid_from": "2021-01-01T00:00:00Z"}]');
select is((pg_temp.r('tea2')->>'superseded')::int, 1, 'the new version of Bob likes tea supersedes the old');
select is(pg_temp.edge_id('Bob', 'Tea', 'likes', '2023-01-01Z'), pg_temp.id('e_tea'), 'the edge row is the same one');
select is((select count(*)::int from memory.edges where source_id = pg_temp.ent('Bob')), 1, 'and no other row was written');
select is(pg_temp.edges('Bob', 'likes'), 'tea ["2020-01-01 00:00:00+00",)', 'its window spans both versions');

-- Retraction expires the edge no current fact asserts any more.
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('globex')) $$);
select is((select count(*)::int from memory.edges where target_id = pg_temp.ent('Globex') and expired_at is null), 0,
          'retracting Globex expires its edge');
select is((select expired_at from memory.edges where target_id = pg_temp.ent('Globex')), now(),
          'expired at the retraction''s instant');
select is(pg_temp.edges('Alice', 'works at'), 'acme ["2020-01-01 00:00:00+00",)', 'the restored Acme fact has its open edge back');
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()', 'invariant 4 after a retraction');

-- Another fact still asserting keeps the edge.
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('tea2')) $$);
select is(pg_temp.edge_id('Bob', 'Tea', 'likes', '2023-01-01Z'), pg_temp.id('e_tea'),
          'retracting one version of Bob likes tea keeps the edge the other still asserts (same row)');
select is((select expired_at from memory.edges where edge_id = pg_temp.id('e_tea')), null, 'not expired');
call pg_temp.put('jazz_old', '[{"subject": "Cy", "predicate": "likes", "object": "Jazz", "object_type": "entity",
                               "content": "Cy liked jazz in 2018",
                               "valid_from": "2018-01-01T00:00:00Z", "valid_to": "2019-01-01T00:00:00Z"}]');
call pg_temp.put('jazz_new', '[{"subject": "Cy", "predicate": "likes", "object": "Jazz", "content": "Cy likes jazz again",
                               "valid_from": "2020-01-01T00:00:00Z"}]');
select is(pg_temp.edges('Cy', 'likes'), 'jazz ["2018-01-01 00:00:00+00","2019-01-01 00:00:00+00"); jazz ["2020-01-01 00:00:00+00",)',
          'two windows of one triple: two edge rows');
insert into ids values ('e_jazz_new', pg_temp.edge_id('Cy', 'Jazz', 'likes', '2021-01-01Z'));
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('jazz_old')) $$);
select is(pg_temp.edges('Cy', 'likes'), 'jazz ["2020-01-01 00:00:00+00",)', 'retracting the 2018 fact removes only its window');
select is(pg_temp.edge_id('Cy', 'Jazz', 'likes', '2021-01-01Z'), pg_temp.id('e_jazz_new'), 'the other window''s row is untouched');

-- close_fact closes the edge with the fact.
call pg_temp.exec($$ select memory.close_fact(pg_temp.id('p'), pg_temp.id('jazz_new'), '2024-01-01Z') $$);
select is(pg_temp.edges('Cy', 'likes'), 'jazz ["2020-01-01 00:00:00+00","2024-01-01 00:00:00+00")', 'close_fact closes the edge');

-- Rollback keeps: a change undone by ROLLBACK TO leaves the edge as it was.
insert into ids values ('e_acme_now', pg_temp.edge_id('Alice', 'Acme', 'works at', '2023-01-01Z'));
savepoint before_change;
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.id('acme')) $$);
call pg_temp.put('initech', '[{"subject": "Alice", "predicate": "works at", "object": "Initech", "object_type": "entity",
                              "valid_from": "2021-01-01T00:00:00Z"}]');
rollback to savepoint before_change;
select is(pg_temp.edge_id('Alice', 'Acme', 'works at', '2023-01-01Z'), pg_temp.id('e_acme_now'),
          'after rollback the Acme edge is the same current row');
select is((select count(*)::int from memory.edges where target_id = pg_temp.ent('Acme') and expired_at is null), 1,
          'and nothing else was left behind');

-- reconcile_edges: nothing to report on a consistent project ...
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()', 'invariant 4 before reconciliation');
insert into res values ('rec0', memory.reconcile_edges(1000, pg_temp.id('p')));
select is(pg_temp.r('rec0') - 'keys_checked',
          '{"keys_healed": 0, "edges_expired": 0, "edges_inserted": 0, "objects_adopted": 0, "healed": []}'::jsonb,
          'reconcile_edges reports nothing on a consistent project');

-- ... and heals drift made behind its back (as superuser).
reset role;
delete from memory.edges where edge_id = pg_temp.edge_id('Cy', 'Jazz', 'likes', '2021-01-01Z');
insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range)
values (pg_temp.id('org'), pg_temp.id('p'), pg_temp.ent('Alice'), pg_temp.ent('Cy'), 'knows', '[2020-01-01Z,)');
update memory.edges set valid_range = '[2019-01-01Z,)' where edge_id = pg_temp.id('e_tea');
set local role chronomem_app;
select is((select count(*)::int from ((select * from pg_temp.have() except select * from pg_temp.want())
                                        union all
                                        (select * from pg_temp.want() except select * from pg_temp.have())) d), 4,
          'the drift is visible (control): a missing, a bogus and a wrong row');
insert into res values ('rec1', memory.reconcile_edges(1000, pg_temp.id('p')));
select is(pg_temp.r('rec1') - 'healed' - 'keys_checked',
          '{"keys_healed": 3, "edges_expired": 2, "edges_inserted": 2, "objects_adopted": 0}'::jsonb, 'three keys healed');
select set_eq($$ select h->>'relation' as rel, (h->>'expired')::int as expired, (h->>'inserted')::int as inserted
                   from jsonb_array_elements(pg_temp.r('rec1')->'healed') h $$,
              $$ values ('knows', 1, 0), ('likes', 1, 1), ('likes', 0, 1) $$,
              'each healed key is reported with what was expired and inserted');
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()', 'invariant 4 holds again');
select is((select count(*)::int from memory.edges where relation = 'knows' and expired_at is not null), 1,
          'the bogus edge is expired, not deleted');
insert into res values ('rec2', memory.reconcile_edges());
select is((pg_temp.r('rec2')->>'keys_healed')::int, 0, 'a second run (whole org) finds nothing');

select * from finish();
ROLLBACK;
