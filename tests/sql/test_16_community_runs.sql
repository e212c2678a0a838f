-- 16 community runs: memory.refresh_communities (what the periodic job
-- calls for each project) computes a project's communities again exactly
-- when its current edges changed since the last run recorded in
-- memory.community_runs, whatever changed them (a new edge, a superseded or
-- retracted one, a wipe), and not when a write left the graph as it was.
-- Runs as chronomem_app, in one transaction (every edge written here is
-- recorded at the transaction's instant, which edges_at reads as known).
--
-- Org A: project g (Ann knows Ben, Ben works at Acme, Cat likes tea),
-- project e (no edges).  Org B: project h (the same facts).
BEGIN;
select plan(40);

-- Refresh a project and keep the answer under a name.
create procedure pg_temp.refresh(p_project text, p_k text) language sql as $$
  insert into pg_temp.res values (p_k, memory.refresh_communities(pg_temp.id(p_project))) $$;
create function pg_temp.computed(p_k text) returns boolean language sql stable
  as $$ select (pg_temp.r(p_k) ->> 'computed')::boolean $$;
-- The stored communities of a project: their ids (a recomputation makes new
-- ones) and their members by name.
create function pg_temp.community_ids(p_project text) returns text language sql stable as $$
  select coalesce(string_agg(c.community_id::text, ',' order by c.community_id), '')
    from memory.communities c where c.project_id = pg_temp.id(p_project) $$;
create function pg_temp.groups(p_project text) returns text language sql stable as $$
  select coalesce(string_agg(g, ' | ' order by g), '')
    from (select string_agg(n.name, ',' order by n.name) as g
            from memory.community_members m
            join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id
           where m.project_id = pg_temp.id(p_project) group by m.community_id) x $$;
create function pg_temp.run(p_project text) returns memory.community_runs language sql stable
  as $$ select r from memory.community_runs r where r.project_id = pg_temp.id(p_project) $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('community runs org A'); b uuid := memory.create_org('community runs org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('h', memory.create_project(b, 'h'));
  call pg_temp.fact('h', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('g', memory.create_project(a, 'g')), ('e', memory.create_project(a, 'e'));
  perform memory.declare_predicate(pg_temp.id('g'), 'works at', 'one');
  call pg_temp.fact('g', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
  call pg_temp.fact('g', 'acme', '{"subject": "Ben", "predicate": "works at", "object": "Acme", "object_type": "entity"}');
  call pg_temp.fact('g', 'tea', '{"subject": "Cat", "predicate": "likes", "object": "tea"}');
  call pg_temp.fact('e', 'tea', '{"subject": "Cat", "predicate": "likes", "object": "tea"}');
end $$;

-- A. Never computed: none listed, computed_at null; the first refresh computes.
select is(memory.list_communities(pg_temp.id('g')), '{"computed_at": null, "communities": [], "next_cursor": null}',
          'before any run: no communities, computed_at null');
call pg_temp.refresh('g', 'first');
select ok(pg_temp.computed('first'), 'the first refresh computes');
select is(pg_temp.groups('g'), 'Acme,Ann,Ben', 'Ann, Ben and Acme are one community (Cat likes a literal: no edge)');
select is((select (r.edges, r.communities, r.members, r.converged)::text from pg_temp.run('g') r),
          '(2,1,3,t)', 'the run records the edges read and what it found');
select is((memory.list_communities(pg_temp.id('g')) ->> 'computed_at')::timestamptz, (pg_temp.run('g')).computed_at,
          'list_communities names the run''s time');
insert into pg_temp.snap values ('g1', pg_temp.community_ids('g'));

-- B. Nothing changed: skipped, the stored communities are the same rows.
call pg_temp.refresh('g', 'same');
select ok(not pg_temp.computed('same') and pg_temp.r('same') ->> 'communities' = '1'
          and (pg_temp.r('same') ->> 'computed_at')::timestamptz = (pg_temp.run('g')).computed_at,
          'an unchanged graph is not computed again; the answer names the last run');
select is(pg_temp.community_ids('g'), (select v from pg_temp.snap where k = 'g1'), 'the same community rows stay');
-- Control: compute_communities itself always computes (new rows, same groups).
insert into pg_temp.res values ('forced', memory.compute_communities(pg_temp.id('g')));
select ok((pg_temp.r('forced') ->> 'computed')::boolean
          and pg_temp.community_ids('g') <> (select v from pg_temp.snap where k = 'g1')
          and pg_temp.groups('g') = 'Acme,Ann,Ben',
          'compute_communities computes whether or not the graph changed');
insert into pg_temp.snap values ('g2', pg_temp.community_ids('g'));

-- C. Writes that leave the current edges as they were: a literal fact, an
-- identical re-assertion (skipped), the same edge asserted again with new
-- content (the edge keeps its row).
call pg_temp.fact('g', 'coffee', '{"subject": "Ann", "predicate": "likes", "object": "coffee"}');
call pg_temp.fact('g', 'ab_again', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
call pg_temp.fact('g', 'ab_content', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity",
                                       "content": "Ann has known Ben since school"}');
call pg_temp.refresh('g', 'unchanged');
select ok(not pg_temp.computed('unchanged') and pg_temp.community_ids('g') = (select v from pg_temp.snap where k = 'g2'),
          'a literal fact, a re-assertion and new content on the same edge: not computed again');

-- D. A new edge: computed, the new member in the group.
call pg_temp.fact('g', 'bc', '{"subject": "Ben", "predicate": "knows", "object": "Cat", "object_type": "entity"}');
call pg_temp.refresh('g', 'new_edge');
select ok(pg_temp.computed('new_edge'), 'a new edge: computed again');
select is(pg_temp.groups('g'), 'Acme,Ann,Ben,Cat', 'Cat joined the group');
call pg_temp.refresh('g', 'new_edge_again');
select ok(not pg_temp.computed('new_edge_again'), 'and the refresh after it skips again');

-- E. One edge for another, the count the same: Ben leaves Acme for Globex
-- (cardinality one: the Acme edge closes, a Globex edge opens).
insert into pg_temp.snap values ('edges_before', (pg_temp.run('g')).edges);
call pg_temp.fact('g', 'globex', '{"subject": "Ben", "predicate": "works at", "object": "Globex", "object_type": "entity"}');
select is((select count(*) from memory.edges_at(pg_temp.id('g')))::text,
          (select v from pg_temp.snap where k = 'edges_before'), 'as many current edges as before');
call pg_temp.refresh('g', 'swapped');
select ok(pg_temp.computed('swapped'), 'one edge replaced by another, the count unchanged: computed again');
select is(pg_temp.groups('g'), 'Ann,Ben,Cat,Globex', 'Globex in the group, Acme out');

-- F. A retraction expires its edge: computed, Cat out.
do $$ begin perform memory.retract_fact(pg_temp.id('g'), pg_temp.id('g.bc'), 'mistaken'); end $$;
call pg_temp.refresh('g', 'retracted');
select ok(pg_temp.computed('retracted') and pg_temp.groups('g') = 'Ann,Ben,Globex',
          'a retraction: computed again, Cat out');

-- G. A subject wipe deletes edges: computed, Ann's community made anew
-- without her (and her name is no label).
call pg_temp.fact('g', 'ad', '{"subject": "Ann", "predicate": "knows", "object": "Dan", "object_type": "entity"}');
call pg_temp.refresh('g', 'before_wipe');
do $$ begin perform memory.wipe(pg_temp.id('g'), p_subject => 'Ann'); end $$;
call pg_temp.refresh('g', 'wiped');
select ok(pg_temp.computed('before_wipe') and pg_temp.computed('wiped'), 'a subject wipe: computed again');
select is(pg_temp.groups('g'), 'Ben,Globex', 'Ann and Dan (linked only through her) are in no group');
select is_empty($$ select from memory.communities c where c.project_id = pg_temp.id('g') and c.label in ('Ann', 'Dan') $$,
                'no label names the wiped subject');

-- H. A project without edges: computed once (no communities), then skipped.
call pg_temp.refresh('e', 'empty1');
call pg_temp.refresh('e', 'empty2');
select ok(pg_temp.computed('empty1') and not pg_temp.computed('empty2')
          and (select (r.edges, r.communities) = (0, 0) from pg_temp.run('e') r),
          'no edges: one run of nothing, then skipped');
select isnt((memory.list_communities(pg_temp.id('e')) ->> 'computed_at'), null,
            'listed as computed, with no communities');

-- I. A project wipe deletes the run with the communities.
do $$ begin perform memory.wipe(pg_temp.id('e')); end $$;
select is(memory.list_communities(pg_temp.id('e')), '{"computed_at": null, "communities": [], "next_cursor": null}',
          'after a project wipe: never computed');
select isnt(pg_temp.run('g'), null, 'control: the other project''s run stays');

-- J. Tenancy: org B sees its own run only; A's project is not found there.
select is((select array_agg(r.project_id) from memory.community_runs r), array[pg_temp.id('g')],
          'org A sees its own run (g''s; e''s went with its wipe)');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select is_empty('select from memory.community_runs', 'org B sees no run of org A''s');
select throws_ok($$ select memory.refresh_communities(pg_temp.id('g')) $$, 'P0002', null,
                 'refreshing another org''s project: not found');
call pg_temp.refresh('h', 'other_org');
select ok(pg_temp.computed('other_org') and pg_temp.groups('h') = 'Ann,Ben',
          'control: org B refreshes its own project');

-- K. Bad input.
select throws_ok($$ select memory.compute_communities(pg_temp.id('h'), 0) $$, '22023',
                 'max_rounds must be at least 1, not 0', 'max_rounds below 1 is refused, naming it');

-- L. list_communities pages: five cliques (every member linked to every
-- other: one community each whatever the ids), sizes 4, 3, 3, 2, 2.
insert into pg_temp.ids values ('pg', memory.create_project(pg_temp.id('org_b'), 'pages'));
insert into pg_temp.res select 'pg_facts', memory.assert_facts(pg_temp.id('pg'), (
  select jsonb_agg(jsonb_build_object('subject', g || ' ' || a, 'predicate', 'knows',
                                      'object', g || ' ' || b, 'object_type', 'entity'))
    from (values ('k4', 4), ('t1', 3), ('t2', 3), ('p1', 2), ('p2', 2)) c(g, n)
   cross join lateral generate_series(1, n) a cross join lateral generate_series(1, n) b
   where a < b));
do $$ begin perform memory.refresh_communities(pg_temp.id('pg')); end $$;
create function pg_temp.page(p_after text, p_limit integer) returns jsonb language sql as $$
  select memory.list_communities(pg_temp.id('pg'), p_after, p_limit) $$;
insert into pg_temp.res values ('page1', pg_temp.page(null, 2));
insert into pg_temp.res values ('page2', pg_temp.page(pg_temp.r('page1') ->> 'next_cursor', 2));
insert into pg_temp.res values ('page3', pg_temp.page(pg_temp.r('page2') ->> 'next_cursor', 2));
select is((select array_agg(x ->> 'label' order by p, o)
             from unnest(array['page1', 'page2', 'page3']) with ordinality q(k, p)
            cross join lateral jsonb_array_elements(pg_temp.r(q.k) -> 'communities') with ordinality e(x, o)),
          array['k4 1', 't1 1', 't2 1', 'p1 1', 'p2 1'],
          'pages of 2: every community once, largest first, then by label');
select ok(pg_temp.r('page3') -> 'next_cursor' = 'null' and pg_temp.r('page2') ->> 'next_cursor' is not null
          and jsonb_array_length(pg_temp.r('page3') -> 'communities') = 1,
          'the last page has no next_cursor, the others have one');
insert into pg_temp.res values ('capped', memory.list_communities(pg_temp.id('pg'), null, 1000, 2) #> '{communities,0}');
select is((select array_agg(m ->> 'name' order by o) from jsonb_array_elements(pg_temp.r('capped') -> 'members') with ordinality e(m, o))
          || array[pg_temp.r('capped') ->> 'label', pg_temp.r('capped') ->> 'size', pg_temp.r('capped') ->> 'more'],
          array['k4 1', 'k4 2', 'k4 1', '4', '2'], 'members: the first two by name, and how many more');
select throws_ok($$ select pg_temp.page('not a cursor', 2) $$, '22023', 'cursor is not a next_cursor of this list',
                 'a bad cursor is refused, naming it');
select throws_ok($$ select pg_temp.page(null, 0) $$, '22023', 'limit must be between 1 and 1000',
                 'a bad limit is refused, naming it');

-- The periodic job's sweep (memory_worker.queue_community_refreshes): a job of its
-- own for each project of the org in scope whose current edges changed
-- since its last run, none for an unchanged one, none while one is queued,
-- none for another org's project (org A's have changed edges too).
do $$
declare c uuid := memory.create_org('community runs org C');
begin
  insert into pg_temp.ids values ('org_c', c);
  perform memory.use_org(c);
  insert into pg_temp.ids values ('q1', memory.create_project(c, 'q1')), ('q2', memory.create_project(c, 'q2'));
  call pg_temp.fact('q1', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
  call pg_temp.fact('q2', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
  perform memory.refresh_communities(pg_temp.id('q2'));
end $$;
create function pg_temp.queued_communities() returns text language sql stable as $$
  select coalesce(string_agg(p.name || ' ' || j.payload::text, ', ' order by p.name), '')
    from memory.jobs j join memory.projects p on p.org_id = j.org_id and p.project_id = j.project_id
   where j.kind = 'communities' and j.status = 'queued' $$;
insert into pg_temp.res values ('sweep1', memory_worker.queue_community_refreshes());
select is(pg_temp.r('sweep1'),
          jsonb_build_object('queued', jsonb_build_array(pg_temp.id('q1')), 'pending', 0, 'unchanged', 1),
          'sweep: the project never computed is queued, the computed one is unchanged');
select is(pg_temp.queued_communities(), 'q1 {"max_rounds": 20}',
          'sweep: one job, for that project only (no other org''s), with its max_rounds');
insert into pg_temp.res values ('sweep2', memory_worker.queue_community_refreshes(5));
select is(pg_temp.r('sweep2'), '{"queued": [], "pending": 1, "unchanged": 1}'::jsonb,
          'sweep: a project with a job queued is not queued again');
call pg_temp.fact('q2', 'bc', '{"subject": "Ben", "predicate": "knows", "object": "Cy", "object_type": "entity"}');
insert into pg_temp.res values ('sweep3', memory_worker.queue_community_refreshes(5));
select is(pg_temp.r('sweep3'),
          jsonb_build_object('queued', jsonb_build_array(pg_temp.id('q2')), 'pending', 1, 'unchanged', 0),
          'sweep: a new edge queues the project that was unchanged');
select is(pg_temp.queued_communities(), 'q1 {"max_rounds": 20}, q2 {"max_rounds": 5}',
          'sweep: the job carries the max_rounds it was queued with');
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
insert into pg_temp.res values ('sweep_a', memory_worker.queue_community_refreshes());
select ok(jsonb_array_length(pg_temp.r('sweep_a') -> 'queued') > 0
          and not pg_temp.r('sweep_a') -> 'queued' ? pg_temp.id('q1')::text
          and not pg_temp.r('sweep_a') -> 'queued' ? pg_temp.id('q2')::text,
          'control: org A''s sweep queues A''s changed projects, none of org C''s');
select throws_ok($$ select memory_worker.queue_community_refreshes(0) $$, '22023',
                 'max_rounds must be at least 1, not 0', 'sweep: max_rounds below 1 is refused');

select * from finish();
ROLLBACK;
