-- 08 wipe: hard delete of a session's, a subject's or a project's content.
-- Nothing wiped is readable at any instant or known_at afterwards, no
-- tombstone is written, the audit row holds counts only, predicates stay.
-- Runs as chronomem_app; sessions and episodes are inserted as superuser
-- (ingest is not part of these functions).
--
-- known_at: as in test_04_as_of.sql, pg_temp.shift_back moves the project's
-- record-time columns back one hour after each step (superuser, triggers
-- off): step 1 is recorded at now() - 2h, step 2 at now() - 1h, the wipes at now().
BEGIN;
select plan(58);

create temp table wiped (fact_id uuid primary key, scope text not null);
grant all on wiped to public;
create procedure pg_temp.put(p_k text, p_facts jsonb, p_project text default 'p') language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id(p_project), p_facts)) $$;
create procedure pg_temp.wipe(p_k text, p_session text default null, p_subject text default null) language sql as $$
  insert into pg_temp.res values (p_k, memory.wipe(pg_temp.id('p'), p_session, p_subject)) $$;
create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
create function pg_temp.fid(p_content text) returns uuid language sql stable as $$
  select fact_id from memory_internal.fact_versions(pg_temp.id('p')) where content = p_content $$;
-- Facts of project p visible at any of several world instants and known_at
-- instants whose content matches a pattern.
create function pg_temp.readable(p_like text) returns bigint language sql stable as $$
  select count(*) from unnest(array['2019-06-01Z', '2020-01-01Z', '2021-06-01Z', '2022-01-01Z', '2023-06-01Z',
                                    now()]::timestamptz[]) a,
                       unnest(array[now(), now() - interval '30 minutes', now() - interval '90 minutes']) k,
                       lateral memory.facts_at(pg_temp.id('p'), a, k) f
   where f.content like p_like $$;
create function pg_temp.edges_readable(p_target text) returns bigint language sql stable as $$
  select count(*) from unnest(array['2019-06-01Z', '2021-06-01Z', '2023-06-01Z', now()]::timestamptz[]) a,
                       unnest(array[now(), now() - interval '30 minutes', now() - interval '90 minutes']) k,
                       lateral memory.edges_at(pg_temp.id('p'), a, k) e
    join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id
   where t.normalized_name = p_target $$;
-- Rows of the event log that mention a fact wiped by one scope, in any column.
create function pg_temp.events_naming_wiped(p_scope text) returns bigint language sql stable as $$
  select count(*) from memory.fact_events e
   where e.project_id = pg_temp.id('p')
     and exists (select from pg_temp.wiped w where w.scope = p_scope
                    and w.fact_id in (e.fact_id, e.old_fact_id, e.new_fact_id)) $$;
-- Invariant 4: current edges = maximal windows of the current facts asserting them.
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
declare o uuid := memory.create_org('wipe org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p')), ('q', memory.create_project(o, 'q'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
  perform memory.declare_predicate(pg_temp.id('p'), 'best friend', 'one');
end $$;
reset role;
insert into memory.sessions (org_id, project_id, external_id)
values (pg_temp.id('org'), pg_temp.id('p'), 'chat-1'), (pg_temp.id('org'), pg_temp.id('p'), 'chat-2');
insert into memory.episodes (org_id, project_id, session_id, seq, role, content, occurred_at)
select org_id, project_id, session_id, 1, 'user', 'message of ' || external_id,
       case external_id when 'chat-1' then '2020-01-01Z'::timestamptz else '2022-01-01Z' end
  from memory.sessions where project_id = pg_temp.id('p');
insert into ids select s.external_id, e.episode_id from memory.episodes e join memory.sessions s using (org_id, session_id)
 where e.project_id = pg_temp.id('p');
set local role chronomem_app;

-- Step 1 (now() - 2h): facts from chat-1 and from the API.
insert into res values ('s1', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity", "content": "Alice works at Acme"},
    {"subject": "Alice", "predicate": "likes", "object": "tea", "content": "Alice likes tea"}]',
  p_source_episode => pg_temp.id('chat-1')));
call pg_temp.put('s1b', '[{"subject": "Carol", "predicate": "knows", "object": "Bob", "object_type": "entity",
                           "content": "Carol knows Bob", "valid_from": "2019-01-01T00:00:00Z"},
                          {"subject": "Carol", "predicate": "knows", "object": "Dan", "object_type": "entity",
                           "content": "Carol knows Dan", "valid_from": "2019-01-01T00:00:00Z"},
                          {"subject": "Bob", "predicate": "likes", "object": "Jazz", "object_type": "entity",
                           "content": "Bob likes jazz", "valid_from": "2019-01-01T00:00:00Z"},
                          {"subject": "Bob", "predicate": "works at", "object": "Initech",
                           "content": "Bob works at Initech", "valid_from": "2019-01-01T00:00:00Z"}]');
call pg_temp.put('s1c', '[{"subject": "Carol", "predicate": "best friend", "object": "Dan", "object_type": "entity",
                           "content": "Carol''s best friend is Dan", "valid_from": "2019-01-01T00:00:00Z"},
                          {"subject": "Carol", "predicate": "best friend", "object": "Bob", "object_type": "entity",
                           "content": "Carol''s best friend is Bob", "valid_from": "2021-01-01T00:00:00Z"}]');
call pg_temp.put('q1', '[{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
                          "content": "Alice works at Acme (q)"}]', 'q');
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
-- Step 2 (now() - 1h): chat-2 says Alice moved to Globex; the tea fact is retracted.
insert into res values ('s2', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity", "content": "Alice works at Globex"},
    {"subject": "Alice", "predicate": "likes", "object": "coffee", "content": "Alice likes coffee"}]',
  p_source_episode => pg_temp.id('chat-2')));
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.fid('Alice likes tea')) $$);
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), pg_temp.fid('Bob likes jazz')) $$);
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');

select is((select valid_range from memory_internal.fact_versions(pg_temp.id('p')) where content = 'Alice works at Acme'),
          '[2020-01-01 00:00:00+00,2022-01-01 00:00:00+00)'::tstzrange, 'before the wipe Globex had closed Acme (control)');
select is(pg_temp.readable('%Globex%') > 0 and pg_temp.edges_readable('globex') > 0, true,
          'before the wipe Globex is readable (control)');
insert into wiped select fact_id, 'session' from memory_internal.fact_versions(pg_temp.id('p')) where source_episode_id = pg_temp.id('chat-2');

-- Session wipe.
call pg_temp.wipe('w_session', 'chat-2');
select is(pg_temp.r('w_session') - 'fact_events' - 'edges' - 'stores',
          '{"scope": "session", "facts": 2, "entities": 0, "episodes": 1, "sessions": 1, "tombstones": 0}'::jsonb,
          'session wipe: two facts, one episode, one session');
select is(pg_temp.readable('%Globex%') + pg_temp.readable('%coffee%'), 0::bigint,
          'the wiped facts are readable at no instant and no known_at');
select is((select count(*) from memory_internal.fact_versions(pg_temp.id('p')) where fact_id in (select fact_id from wiped)),
          0::bigint, 'no stored version of them is left');
select is(pg_temp.edges_readable('globex'), 0::bigint, 'their edge is readable at no instant and no known_at');
select is((select count(*) from memory.edges where target_id = (select entity_id from memory.entities
                                                                where project_id = pg_temp.id('p') and normalized_name = 'globex')),
          0::bigint, 'no edge row of theirs is left, expired or not');
select is((select count(*) from memory.fact_events where fact_id in (select fact_id from wiped)), 0::bigint,
          'their events are deleted');
-- Wiped means "as if never asserted": a surviving fact's event that records
-- the closing a wiped fact caused (new_fact_id = the wiped fact) would keep
-- the wiped fact's id and world time (when Alice moved) readable.
select is(pg_temp.events_naming_wiped('session'), 0::bigint, 'no remaining event names a wiped fact');
select is((select string_agg(f.content, ',') from memory.facts_at(pg_temp.id('p'), '2023-06-01Z', now() - interval '30 minutes') f
            where f.predicate = 'works at' and f.content like 'Alice%'), 'Alice works at Acme',
          'read at a known_at before the wipe, Acme is not closed at the wiped fact''s start');
select is((select count(*) from memory.episodes e join memory.sessions s using (org_id, session_id)
            where s.external_id = 'chat-2'), 0::bigint, 'the session and its episodes are gone');
select is((select valid_range from memory_internal.fact_versions(pg_temp.id('p')) where content = 'Alice works at Acme'),
          '[2020-01-01 00:00:00+00,)'::tstzrange, 'what the wiped fact had closed is restored');
select is((select string_agg(f.content, ',') from memory.facts_at(pg_temp.id('p'), '2023-06-01Z') f where f.predicate = 'works at'
             and f.content like 'Alice%'), 'Alice works at Acme', 'Alice works at Acme in 2023 again');
select is((select count(*)::int from memory.edges_at(pg_temp.id('p'), '2023-06-01Z') e
             join memory.entities t on t.entity_id = e.target_id where t.normalized_name = 'acme'), 1,
          'the restored Acme fact has its open edge back');
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()', 'invariant 4 holds after the session wipe');
select is((select array_agg(fact_id) from memory.tombstones where project_id = pg_temp.id('p')),
          array[pg_temp.fid('Alice likes tea'), pg_temp.fid('Bob likes jazz')], 'the wipe wrote no tombstone');
select is((select counts from memory.audit_log where action = 'wipe' and resource = 'session'),
          (pg_temp.r('w_session') - 'scope'), 'the audit row holds the counts');
call pg_temp.put('reassert', '[{"subject": "Alice", "predicate": "likes", "object": "coffee", "content": "Alice likes coffee"}]');
select is(pg_temp.r('reassert') #>> '{results,0,status}', 'inserted', 'a wiped claim can be asserted again (it was not tombstoned)');
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('p'), (pg_temp.r('reassert') #>> '{results,0,fact_id}')::uuid) $$);

-- Subject wipe: every fact naming Bob, as subject or object.  Edge drift
-- left by the session wipe (if any) is healed first, so this part is judged
-- on its own.
insert into res values ('heal', memory.reconcile_edges(1000, pg_temp.id('p')));
insert into wiped select v.fact_id, 'subject' from memory_internal.fact_versions(pg_temp.id('p')) v
  join memory.entities e on e.entity_id in (v.subject_id, v.object_entity_id) where e.normalized_name = 'bob'
on conflict do nothing;
-- The communities of p, computed now: Bob's, and Alice's without him.
insert into res values ('communities', memory.compute_communities(pg_temp.id('p')));
insert into snap select n.normalized_name || '_community', m.community_id::text
  from memory.community_members m join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id
 where m.project_id = pg_temp.id('p') and n.normalized_name in ('bob', 'alice');
call pg_temp.wipe('w_subject', null, 'BOB');
select is(pg_temp.r('w_subject') - 'fact_events' - 'edges' - 'stores',
          '{"scope": "subject", "facts": 4, "entities": 1, "episodes": 0, "sessions": 0, "tombstones": 1}'::jsonb,
          'subject wipe: four facts, the entity and its tombstone');
select is(pg_temp.readable('%Bob%'), 0::bigint, 'nothing about Bob is readable at any instant or known_at');
select is((select count(*) from memory.entities where project_id = pg_temp.id('p') and normalized_name = 'bob'), 0::bigint,
          'the entity is gone');
select is((select count(*) from memory.edges e join memory.entities t on t.entity_id in (e.source_id, e.target_id)
            where e.project_id = pg_temp.id('p') and t.normalized_name in ('bob', 'jazz')), 0::bigint,
          'no edge to or from Bob is left');
select is(pg_temp.events_naming_wiped('subject'), 0::bigint, 'no remaining event names a wiped fact');
select is((select count(*) from memory.communities where community_id = (select v::uuid from snap where k = 'bob_community')),
          0::bigint, 'the community Bob was in is gone: its label and size named him (the job computes it again)');
select is((select count(*) from memory.communities
            where community_id = (select v::uuid from snap where k = 'alice_community')
              and community_id <> (select v::uuid from snap where k = 'bob_community')),
          1::bigint, 'control: Alice''s community, without Bob, stays');
select is((select valid_range from memory_internal.fact_versions(pg_temp.id('p')) where content = 'Carol''s best friend is Dan'),
          '[2019-01-01 00:00:00+00,)'::tstzrange, 'what a wiped fact about Bob had closed is restored');
select set_eq('select * from pg_temp.have()', 'select * from pg_temp.want()',
              'invariant 4 holds after the subject wipe (Carol''s edge to Dan is open again)');
select is(pg_temp.readable('Carol knows Dan'), 18::bigint, 'positive control: Carol knows Dan is untouched');
select is((select count(*)::int from memory.edges where project_id = pg_temp.id('p') and expired_at is null
             and relation = 'knows'), 1, 'and keeps its edge');
select is((select counts::text from memory.audit_log where action = 'wipe' and resource = 'subject'),
          (pg_temp.r('w_subject') - 'scope')::text, 'the audit row holds the counts');

-- Errors.
select throws_ok($$ select memory.wipe(pg_temp.id('p'), 'chat-1', 'Alice') $$, '22023', null, 'session and subject at once: refused');
select throws_ok($$ select memory.wipe(pg_temp.id('p'), 'no such chat') $$, 'P0002', null, 'unknown session: not found');
select throws_ok($$ select memory.wipe(pg_temp.id('p'), null, 'Nobody') $$, 'P0002', null, 'unknown subject: not found');

-- Project wipe.
call pg_temp.wipe('w_project');
select is(pg_temp.r('w_project')->>'scope', 'project', 'project wipe');
select is(pg_temp.readable('%'), 0::bigint, 'no fact is readable at any instant or known_at');
select is((select count(*) from memory_internal.fact_versions(pg_temp.id('p'))), 0::bigint, 'no stored version is left');
select is((select count(*) from memory.edges_at(pg_temp.id('p'), '2021-01-01Z', now() - interval '90 minutes'))
          + (select count(*) from memory.edges where project_id = pg_temp.id('p')), 0::bigint, 'no edge is left');
select is((select count(*) from memory.fact_events where project_id = pg_temp.id('p')), 0::bigint, 'no event is left');
select is((select count(*) from memory.tombstones where project_id = pg_temp.id('p')), 0::bigint,
          'no tombstone is left, and none was written');
select is((select count(*) from memory.entities where project_id = pg_temp.id('p'))
          + (select count(*) from memory.episodes where project_id = pg_temp.id('p'))
          + (select count(*) from memory.sessions where project_id = pg_temp.id('p')), 0::bigint,
          'no entity, episode or session is left');
select is((select string_agg(predicate || ':' || cardinality, ',') from memory.predicates_of(pg_temp.id('p'))),
          'best friend:one,works at:one', 'declared predicates survive');
select is((select count(*)::int from memory.facts_at(pg_temp.id('q'))), 1, 'the other project is untouched');
select is((select counts from memory.audit_log where action = 'wipe' and resource = 'project'),
          pg_temp.r('w_project') - 'scope', 'the audit row holds the counts');
select is_empty($$
  select a.audit_id from memory.audit_log a, jsonb_path_query(a.counts, 'strict $.**') c
   where a.project_id = pg_temp.id('p') and a.action = 'wipe'
     and jsonb_typeof(c) not in ('number', 'object')
  union all
  select a.audit_id from memory.audit_log a
   where a.project_id = pg_temp.id('p') and a.action = 'wipe'
     and (a::text ~* 'alice|bob|acme|globex|coffee|jazz|chat-|message')
$$, 'wipe audit rows hold numbers only, no content');
select cmp_ok((select value from memory.counters(pg_temp.id('p')) where metric = 'facts_purged'), '>=', 9::bigint,
              'purged facts are counted');
call pg_temp.put('after', '[{"subject": "Alice", "predicate": "likes", "object": "tea", "content": "Alice likes tea"}]');
select is(pg_temp.r('after') #>> '{results,0,status}', 'inserted', 'a claim retracted before the wipe is accepted again');

-- Wipes and the past: a subject wipe leaves every earlier known_at answering
-- as if the wiped facts had never been asserted, where they shared a
-- cardinality-one identity with facts that stay.  Each case is written twice,
-- once with the facts naming 東京 (project "a") and once without them ("a0"),
-- step for step (one hour apart), and after the wipe the two read the same at
-- every instant and every known_at, windows and edges included.
create function pg_temp.past(p_project text) returns text language sql stable as $$
  select string_agg(format('%s@%s:%s %s', a::date, k, f.content, f.valid_range), '; '
                    order by a, k, f.content)
    from unnest(array['2023-12-31Z', '2024-01-01Z', '2024-01-15Z', '2024-02-01Z', '2024-02-10Z',
                      '2024-02-15Z', '2024-02-20Z', '2024-03-01Z', '2024-04-01Z', '2024-06-01Z',
                      '2024-07-01Z', '2024-09-07Z', '2024-12-01Z']::timestamptz[]) a,
         generate_series(0, 9) k,
         lateral memory.facts_at(pg_temp.id(p_project), a, now() - k * interval '30 minutes') f $$;
create function pg_temp.past_edges(p_project text) returns text language sql stable as $$
  select string_agg(format('%s@%s:%s %s %s %s', a::date, k, s.name, e.relation, t.name, e.valid_range), '; '
                    order by a, k, s.name, t.name)
    from unnest(array['2024-01-15Z', '2024-02-10Z', '2024-02-20Z', '2024-04-01Z', '2024-07-01Z',
                      '2024-12-01Z']::timestamptz[]) a,
         generate_series(0, 9) k,
         lateral memory.edges_at(pg_temp.id(p_project), a, now() - k * interval '30 minutes') e
    join memory.entities s on s.org_id = e.org_id and s.entity_id = e.source_id
    join memory.entities t on t.org_id = e.org_id and t.entity_id = e.target_id $$;
create function pg_temp.lives(p_project text, p_at timestamptz, p_known timestamptz) returns text
  language sql stable as $$
  select string_agg(f.content, ',' order by f.content)
    from memory.facts_at(pg_temp.id(p_project), p_at, p_known) f where f.predicate = 'lives in' $$;
create function pg_temp.lives_fact(p_project text, p_content text) returns uuid language sql stable as $$
  select fact_id from memory_internal.fact_versions(pg_temp.id(p_project)) where content = p_content $$;
create procedure pg_temp.step(p_projects text[]) language plpgsql as $$
declare x text;
begin
  foreach x in array p_projects loop call pg_temp.shift_back(pg_temp.id(x), '1 hour'); end loop;
end $$;
set local role chronomem_app;
do $$
declare x text;
begin
  foreach x in array array['a', 'a0', 'b', 'b0', 'c', 'c0'] loop
    insert into pg_temp.ids values (x, memory.create_project(pg_temp.id('org'), 'wipes and the past ' || x));
    perform memory.declare_predicate(pg_temp.id(x), 'lives in', 'one');
  end loop;
end $$;

-- A: one batch of three moves (東京 in the middle), then a fact about 東京.
call pg_temp.put('a1', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-02-01T00:00:00Z"},
                         {"subject": "Zoë", "predicate": "lives in", "object": "東京", "object_type": "entity", "content": "Zoë lives in 東京", "valid_from": "2024-02-15T00:00:00Z"},
                         {"subject": "Zoë", "predicate": "lives in", "object": "Zürich", "object_type": "entity", "content": "Zoë lives in Zürich", "valid_from": "2024-09-07T00:00:00Z"}]', 'a');
call pg_temp.put('a01', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-02-01T00:00:00Z"},
                          {"subject": "Zoë", "predicate": "lives in", "object": "Zürich", "object_type": "entity", "content": "Zoë lives in Zürich", "valid_from": "2024-09-07T00:00:00Z"}]', 'a0');
call pg_temp.step(array['a', 'a0']);
call pg_temp.put('a2', '[{"subject": "東京", "predicate": "likes", "object": "tea", "content": "東京 likes tea", "valid_from": "2024-03-01T00:00:00Z"}]', 'a');
call pg_temp.step(array['a', 'a0']);
-- B: Paris; then 東京 cuts it; Paris is retracted.
call pg_temp.put('b1', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-01-01T00:00:00Z"}]', 'b');
call pg_temp.put('b01', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-01-01T00:00:00Z"}]', 'b0');
call pg_temp.step(array['b', 'b0']);
call pg_temp.put('b2', '[{"subject": "Zoë", "predicate": "lives in", "object": "東京", "object_type": "entity", "content": "Zoë lives in 東京", "valid_from": "2024-03-01T00:00:00Z"},
                         {"subject": "東京", "predicate": "likes", "object": "tea", "content": "東京 likes tea", "valid_from": "2024-01-01T00:00:00Z"}]', 'b');
call pg_temp.step(array['b', 'b0']);
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('b'), pg_temp.lives_fact('b', 'Zoë lives in Paris')) $$);
call pg_temp.exec($$ select memory.retract_fact(pg_temp.id('b0'), pg_temp.lives_fact('b0', 'Zoë lives in Paris')) $$);
call pg_temp.step(array['b', 'b0']);
-- C: 東京 from March; then Paris from January (laid out ending at March); Paris closed in June.
call pg_temp.put('c1', '[{"subject": "Zoë", "predicate": "lives in", "object": "東京", "object_type": "entity", "content": "Zoë lives in 東京", "valid_from": "2024-03-01T00:00:00Z"},
                         {"subject": "東京", "predicate": "likes", "object": "tea", "content": "東京 likes tea", "valid_from": "2024-01-01T00:00:00Z"}]', 'c');
call pg_temp.step(array['c', 'c0']);
call pg_temp.put('c2', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-01-01T00:00:00Z"}]', 'c');
call pg_temp.put('c02', '[{"subject": "Zoë", "predicate": "lives in", "object": "Paris", "object_type": "entity", "content": "Zoë lives in Paris", "valid_from": "2024-01-01T00:00:00Z"}]', 'c0');
call pg_temp.step(array['c', 'c0']);
call pg_temp.exec($$ select memory.close_fact(pg_temp.id('c'), pg_temp.lives_fact('c', 'Zoë lives in Paris'), '2024-06-01Z') $$);
call pg_temp.exec($$ select memory.close_fact(pg_temp.id('c0'), pg_temp.lives_fact('c0', 'Zoë lives in Paris'), '2024-06-01Z') $$);
call pg_temp.step(array['c', 'c0']);

select is(pg_temp.lives('a', '2024-03-01Z', now() - interval '90 minutes'), 'Zoë lives in 東京',
          'A, control: before the wipe, 東京 held in March (as believed just after the first write)');
select is(pg_temp.lives('b', '2024-03-01Z', now() - interval '90 minutes'), 'Zoë lives in 東京',
          'B, control: before the wipe, 東京 held from March (as believed just after the second write)');
insert into res values ('wa', memory.wipe(pg_temp.id('a'), p_subject => '東京')),
                       ('wb', memory.wipe(pg_temp.id('b'), p_subject => '東京')),
                       ('wc', memory.wipe(pg_temp.id('c'), p_subject => '東京'));
select is(pg_temp.lives('a', '2024-09-07Z', now() - interval '90 minutes'), 'Zoë lives in Zürich',
          'A: just after the first write, Zürich alone holds from its start (never Paris and Zürich at once)');
select is(pg_temp.lives('b', '2024-03-01Z', now() - interval '90 minutes'), 'Zoë lives in Paris',
          'B: just after the second write, Paris holds in March (its retraction came later)');
select is(pg_temp.lives('c', '2024-06-01Z', now() - interval '90 minutes'), 'Zoë lives in Paris',
          'C: just after the second write, Paris holds in June (the close came later)');
select is(pg_temp.lives('c', '2024-06-01Z', now() - interval '30 minutes'), null,
          'C, control: after the close, Paris ends in June');
select is(pg_temp.past('a'), pg_temp.past('a0'), 'A: every instant at every known_at reads as if 東京 had never been named');
select is(pg_temp.past('b'), pg_temp.past('b0'), 'B: every instant at every known_at reads as if 東京 had never been named');
select is(pg_temp.past('c'), pg_temp.past('c0'), 'C: every instant at every known_at reads as if 東京 had never been named');
select is(pg_temp.past_edges('a'), pg_temp.past_edges('a0'), 'A: and so do the edges');
select is(pg_temp.past_edges('b'), pg_temp.past_edges('b0'), 'B: and so do the edges');
select is(pg_temp.past_edges('c'), pg_temp.past_edges('c0'), 'C: and so do the edges');

select * from finish();
ROLLBACK;
