-- 07 tenancy: forced row-level security keyed on memory.use_org, tested as
-- the roles clients log in as (chronomem_app, chronomem_analyst), never as
-- superuser.  Org B gets a row in every table; org A must see none of them.
BEGIN;
select plan(51);

create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
create procedure pg_temp.scope(p_k text) language plpgsql as $$
begin perform memory.use_org(pg_temp.id(p_k), true); end $$;
-- Rows of a table the current role sees, with org_id = p_org (any org when NULL).
create function pg_temp.nrows(p_table regclass, p_org uuid) returns bigint language plpgsql as $$
declare n bigint;
begin
  execute format('select count(*) from %s where $1 is null or org_id = $1', p_table) into n using p_org;
  return n;
end $$;
create function pg_temp.tables() returns setof regclass language sql immutable as $$
  select unnest(array['memory.orgs', 'memory.projects', 'memory.predicates', 'memory.sessions',
    'memory.episodes', 'memory.entities', 'memory.entity_aliases', 'memory.facts', 'memory.fact_events',
    'memory.tombstones', 'memory.edges', 'memory.audit_log', 'memory_internal.counters']::regclass[]) $$;
-- Org B's Acme fact as B sees it: window and number of events.
create function pg_temp.b_state() returns text language sql stable as $$
  select v.valid_range::text || ' ' || (select count(*) from memory.fact_events e where e.fact_id = v.fact_id)
    from memory_internal.fact_versions(pg_temp.id('p_b')) v where v.fact_id = pg_temp.id('fact_b') $$;

set local role chronomem_app;
-- Org B: a row in every table.
do $$
declare b uuid := memory.create_org('tenancy org B');
begin
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('org_b', b), ('p_b', memory.create_project(b, 'shared name'));
  perform memory.declare_predicate(pg_temp.id('p_b'), 'works at', 'one');
  insert into pg_temp.ids select 'fact_b', (r #>> '{results,0,fact_id}')::uuid
    from memory.assert_facts(pg_temp.id('p_b'),
           '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
              "valid_from": "2020-01-01T00:00:00Z"}]') r;
  perform memory.add_alias(pg_temp.id('p_b'), 'Alice', 'Al');
  perform memory.retract_fact(pg_temp.id('p_b'), (r #>> '{results,0,fact_id}')::uuid)
    from memory.assert_facts(pg_temp.id('p_b'), '[{"subject": "Alice", "predicate": "likes", "object": "tea"}]') r;
end $$;
reset role;
insert into memory.sessions (org_id, project_id, external_id) values (pg_temp.id('org_b'), pg_temp.id('p_b'), 'chat');
insert into memory.episodes (org_id, project_id, session_id, seq, role, content, occurred_at)
select org_id, project_id, session_id, 1, 'user', 'hello', now() from memory.sessions where external_id = 'chat';
set local role chronomem_app;
insert into snap values ('b_state', pg_temp.b_state());

-- Org A: the same triple in two projects.
do $$
declare a uuid := memory.create_org('tenancy org A');
begin
  perform memory.use_org(a, true);
  insert into pg_temp.ids values ('org_a', a), ('p_a', memory.create_project(a, 'shared name')),
                                  ('p_a2', memory.create_project(a, 'second'));
  perform memory.declare_predicate(pg_temp.id('p_a'), 'works at', 'one');
  perform memory.declare_predicate(pg_temp.id('p_a2'), 'works at', 'one');
  perform memory.assert_facts(pg_temp.id('p_a'), '[{"subject": "Alice", "predicate": "works at", "object": "Acme",
                                    "object_type": "entity", "valid_from": "2020-01-01T00:00:00Z"}]');
  perform memory.assert_facts(pg_temp.id('p_a2'), '[{"subject": "Alice", "predicate": "works at", "object": "Acme",
                                    "object_type": "entity", "valid_from": "2020-01-01T00:00:00Z"}]');
end $$;

-- Positive control first: scoped to B, every table has B rows.
call pg_temp.scope('org_b');
select is_empty('select t::text from pg_temp.tables() t where pg_temp.nrows(t, pg_temp.id(''org_b'')) = 0',
                'scoped to B, every table shows B rows (control)');
call pg_temp.scope('org_a');

-- Scoped to A: no B row in any table, and nothing but A.
select is_empty('select t::text from pg_temp.tables() t where pg_temp.nrows(t, pg_temp.id(''org_b'')) > 0',
                'scoped to A, no table shows a B row');
select is_empty('select t::text from pg_temp.tables() t
                  where pg_temp.nrows(t, null) <> pg_temp.nrows(t, pg_temp.id(''org_a''))',
                'scoped to A, every visible row is A''s');
select cmp_ok(pg_temp.nrows('memory.facts', null), '>', 0::bigint, 'A''s own facts are visible (control)');

-- Every function on B's project: not found, or nothing.
select throws_ok($$ select memory.assert_facts(pg_temp.id('p_b'), '[{"subject": "x", "predicate": "y", "object": "z"}]') $$,
                 'P0002', null, 'assert_facts on B''s project: not found');
select throws_ok($$ select memory.retract_fact(pg_temp.id('p_b'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'retract_fact on B''s project: not found');
select throws_ok($$ select memory.retract_fact(pg_temp.id('p_a'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'retract_fact of B''s fact through A''s project: not found');
select throws_ok($$ select memory.close_fact(pg_temp.id('p_b'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'close_fact on B''s project: not found');
select throws_ok($$ select memory.close_fact(pg_temp.id('p_a'), pg_temp.id('fact_b')) $$, 'P0002', null,
                 'close_fact of B''s fact through A''s project: not found');
select throws_ok($$ select memory.declare_predicate(pg_temp.id('p_b'), 'likes', 'one') $$, 'P0002', null,
                 'declare_predicate on B''s project: not found');
select throws_ok($$ select memory.upsert_entity(pg_temp.id('p_b'), 'Mallory') $$, 'P0002', null,
                 'upsert_entity on B''s project: not found');
select throws_ok($$ select memory.add_alias(pg_temp.id('p_b'), 'Alice', 'Ally') $$, 'P0002', null,
                 'add_alias on B''s project: not found');
select throws_ok($$ select memory.wipe(pg_temp.id('p_b')) $$, 'P0002', null, 'wipe of B''s project: not found');
select throws_ok($$ select memory.create_project(pg_temp.id('org_b'), 'intruder') $$, 'P0002', null,
                 'create_project in org B while scoped to A: not found');
select throws_ok($$ select * from memory.subject_timeline(pg_temp.id('p_b'), 'Alice') $$, 'P0002', null,
                 'subject_timeline of B''s project: not found');
select is_empty($$
  select 'facts_at' from memory.facts_at(pg_temp.id('p_b'), '2021-01-01Z')
  union all select 'facts_at known' from memory.facts_at(pg_temp.id('p_b'), '2021-01-01Z', now() - interval '1 day')
  union all select 'edges_at' from memory.edges_at(pg_temp.id('p_b'), '2021-01-01Z')
  union all select 'fact_history' from memory.fact_history(pg_temp.id('p_b'), pg_temp.id('fact_b'))
  union all select 'fact_versions' from memory_internal.fact_versions(pg_temp.id('p_b'))
  union all select 'counters' from memory.counters(pg_temp.id('p_b'))
  union all select 'predicates_of' from memory.predicates_of(pg_temp.id('p_b'))
$$, 'the readers return nothing of B''s project');
select is((memory.reconcile_edges(1000, pg_temp.id('p_b'))->>'keys_checked')::int, 0,
          'reconcile_edges does not reach B''s project');

-- Direct writes are refused to the app role: functions are the only way.
select throws_ok($$ insert into memory.orgs (name) values ('sneaky') $$, '42501', null, 'app cannot insert into orgs');
select throws_ok($$ insert into memory.facts (org_id, project_id, subject_id, predicate, predicate_label, object_literal,
                      object_key, identity_object, content, content_key, source, valid_from, valid_range)
                    select org_id, project_id, subject_id, predicate, predicate_label, 'x', 'x', '', 'x', 'x', 'api',
                           valid_from, valid_range from memory_internal.fact_versions(pg_temp.id('p_a')) limit 1 $$,
                 '42501', null, 'app cannot insert into facts');
select throws_ok($$ update memory.facts set confidence = 0.5 $$, '42501', null, 'app cannot update facts');
select throws_ok($$ delete from memory.facts $$, '42501', null, 'app cannot delete facts');
select throws_ok($$ update memory.edges set expired_at = now() $$, '42501', null, 'app cannot update edges');
select throws_ok($$ delete from memory.tombstones $$, '42501', null, 'app cannot delete tombstones');
select throws_ok($$ insert into memory.fact_events (org_id, project_id, fact_id, event_type)
                    values (pg_temp.id('org_a'), pg_temp.id('p_a'), gen_random_uuid(), 'asserted') $$,
                 '42501', null, 'app cannot insert fact events');
select throws_ok($$ truncate memory.audit_log $$, '42501', null, 'app cannot truncate the audit log');

-- use_org: an unknown org is refused, and the scope stays what it was.
select throws_ok($$ select memory.use_org(gen_random_uuid(), true) $$, 'P0002', null, 'use_org with an unknown org: not found');
select is(current_setting('chronomem.org_id'), pg_temp.id('org_a')::text, 'after the refusal the scope is still A');
select throws_ok($$ select memory.use_org(null) $$, '22004', null, 'use_org(NULL) is refused');
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select is_empty('select t::text from pg_temp.tables() t where pg_temp.nrows(t, null) > 0',
                'with no org scope, no table shows any row');
select throws_ok($$ select memory.assert_facts(pg_temp.id('p_a'), '[]') $$, 'P0002', null,
                 'with no org scope, A''s project is not found either');
call pg_temp.scope('org_a');

-- Same triple elsewhere: a supersession in A's project touches nothing else.
select is((memory.assert_facts(pg_temp.id('p_a'), '[{"subject": "Alice", "predicate": "works at", "object": "Globex",
                                                    "object_type": "entity", "valid_from": "2022-01-01T00:00:00Z"}]')
           ->>'superseded')::int, 1, 'Globex supersedes Acme in A''s project');
select is((select string_agg(object_key || ' ' || valid_range::text, '; ' order by valid_from)
             from memory_internal.fact_versions(pg_temp.id('p_a2'))),
          'acme ["2020-01-01 00:00:00+00",)', 'A''s other project keeps Acme open');
select is((select count(*)::int from memory.fact_events where project_id = pg_temp.id('p_a2')), 1,
          'A''s other project got no event');
select is((select count(*)::int from memory.edges where project_id = pg_temp.id('p_a2') and expired_at is null
             and upper_inf(valid_range)), 1, 'A''s other project keeps its open edge');
select isnt((select subject_id from memory_internal.fact_versions(pg_temp.id('p_a2'))),
            (select subject_id from memory_internal.fact_versions(pg_temp.id('p_a')) limit 1),
            'Alice of one project is not Alice of the other');
call pg_temp.scope('org_b');
select is(pg_temp.b_state(), (select v from snap where k = 'b_state'), 'org B''s Acme fact: same window, no new event');
select is((select count(*)::int from memory.edges where project_id = pg_temp.id('p_b') and expired_at is null), 1,
          'org B''s edge is still current');
call pg_temp.scope('org_a');

-- The analyst reads its org and writes nothing.
set local role chronomem_analyst;
select lives_ok($$ select memory.use_org(pg_temp.id('org_a'), true) $$, 'analyst may scope itself to an org');
select cmp_ok(pg_temp.nrows('memory.facts', pg_temp.id('org_a')), '>', 0::bigint, 'analyst reads A''s facts');
select is((select count(*)::int from memory.facts_at(pg_temp.id('p_a'), '2023-01-01Z')), 1, 'analyst may call facts_at');
select is_empty('select t::text from pg_temp.tables() t where pg_temp.nrows(t, pg_temp.id(''org_b'')) > 0',
                'analyst scoped to A sees no B row');
select throws_ok($$ select memory.assert_facts(pg_temp.id('p_a'), '[]') $$, '42501', null, 'analyst cannot call assert_facts');
select throws_ok($$ select memory.retract_fact(pg_temp.id('p_a'), gen_random_uuid()) $$, '42501', null,
                 'analyst cannot call retract_fact');
select throws_ok($$ select memory.wipe(pg_temp.id('p_a')) $$, '42501', null, 'analyst cannot call wipe');
select throws_ok($$ delete from memory.facts $$, '42501', null, 'analyst cannot delete facts');

-- Operators in psql (analyst, owner) list the orgs before choosing one, and
-- see nothing else unscoped; scoped, only their org's row.
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select is((select count(*)::int from memory.orgs where org_id in (pg_temp.id('org_a'), pg_temp.id('org_b'))), 2,
          'unscoped, the analyst lists the orgs (A and B)');
select is_empty('select t::text from pg_temp.tables() t where t <> ''memory.orgs''::regclass and pg_temp.nrows(t, null) > 0',
                'unscoped, the analyst sees no row of any other table');
select lives_ok($$ select memory.use_org(pg_temp.id('org_a'), true) $$, 'the analyst picks org A');
select is((select array_agg(org_id) from memory.orgs), array[pg_temp.id('org_a')],
          'scoped to A, the analyst sees A''s org row only');
reset role;
set local role chronomem_owner;
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select is((select count(*)::int from memory.orgs where org_id in (pg_temp.id('org_a'), pg_temp.id('org_b'))), 2,
          'unscoped, the owner (chronomem psql) lists the orgs too');
reset role;
set local role chronomem_app;
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select is_empty('select org_id from memory.orgs', 'the app role, unscoped, still sees no org');

select * from finish();
ROLLBACK;
