-- 18 read surfaces: memory.list_facts, memory.readable_facts_at,
-- memory.graph_neighbors, memory.list_entities, memory.session_messages,
-- memory.search_rows, memory.fact_changes and memory.metric_totals: the normal answer, at /
-- known_at, paging, scoping to the project and the org, and bad input.
-- Runs as chronomem_app.
--
-- Org A, project p ("works at" and "lives in" cardinality one):
--   acme   Ann works at Acme    [2020-01-01, 2023-01-01)  (closed by globex)
--   globex Ann works at Globex  [2023-01-01, )
--   ab     Ann knows Ben        [2024-05-01, )
--   paris  Ann lives in Paris   [2020-01-01, )            retracted (see below)
--   bc     Ben knows Cat        [2020-01-01, )
--   cd     Cat knows Dan        [2020-01-01, )            (a chain Ann-Ben-Cat-Dan)
--   tea    Cat likes tea        [2020-01-01, )            (a literal: no edge)
--   Ann has the alias Annie.  Sessions "chat" (5 messages) and "notes" (1).
-- Org A, project q, and org B, project r (also named "p"): the same first
-- four facts (same names, predicates, contents), the same first two "chat"
-- messages, plus Ben knows Zed, a third "chat" message and a session
-- "q-only": every chance to leak into p's answers.
--
-- known_at: inside one transaction now() is constant.  As in
-- test_05_retraction_tombstones.sql, pg_temp.shift_back moves p's
-- record-time columns back one hour after the facts are written, and Paris
-- is retracted after that, at now(): known_at = now() - 30 min is "after
-- everything was recorded, before the retraction"; now() - 2 h is before
-- anything of p was recorded.
BEGIN;
select plan(98);

create procedure pg_temp.ingest(p_project text, p_session text, p_messages jsonb) language sql as $$
  insert into pg_temp.res values (p_project || '.' || p_session || '.' || (select count(*) from pg_temp.res),
                                  memory.ingest(pg_temp.id(p_project), p_session, p_messages)) $$;
-- The facts and messages every project has.
create procedure pg_temp.seed(p text) language plpgsql as $$
begin
  perform memory.declare_predicate(pg_temp.id(p), 'works at', 'one');
  perform memory.declare_predicate(pg_temp.id(p), 'lives in', 'one');
  call pg_temp.fact(p, 'acme', '{"subject": "Ann", "predicate": "works at", "object": "Acme", "object_type": "entity",
                                 "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'globex', '{"subject": "Ann", "predicate": "works at", "object": "Globex", "object_type": "entity",
                                   "valid_from": "2023-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity",
                               "valid_from": "2024-05-01T00:00:00Z"}');
  call pg_temp.fact(p, 'paris', '{"subject": "Ann", "predicate": "lives in", "object": "Paris", "object_type": "entity",
                                  "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.ingest(p, 'chat', '[{"role": "user", "content": "Ann told me she works at Acme", "occurred_at": "2020-02-01T00:00:00Z"},
                                   {"role": "assistant", "content": "Noted: Ann works at Acme", "occurred_at": "2020-02-01T00:01:00Z"}]');
end $$;
-- The other projects' extras.
create procedure pg_temp.seed_other(p text) language plpgsql as $$
begin
  call pg_temp.fact(p, 'bz', '{"subject": "Ben", "predicate": "knows", "object": "Zed", "object_type": "entity",
                               "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.ingest(p, 'chat', '[{"role": "user", "content": "Zed met Ben and Ann at Acme", "occurred_at": "2021-01-01T00:00:00Z"}]');
  call pg_temp.ingest(p, 'q-only', '[{"role": "user", "content": "Ann works at Acme", "occurred_at": "2021-01-01T00:00:00Z"}]');
end $$;

-- Ids by fixture name, in uuid order (the order of list_facts).
create function pg_temp.sorted(p_keys text[]) returns uuid[] language sql stable as $$
  select array(select pg_temp.id(k) from unnest(p_keys) k order by 1) $$;
-- The values of one key of a JSON array's elements, in order.
create function pg_temp.col(p_arr jsonb, p_key text) returns text[] language sql immutable as $$
  select array(select x ->> p_key from jsonb_array_elements(p_arr) with ordinality e(x, o) order by o) $$;
create function pg_temp.uuids(p_arr jsonb, p_key text) returns uuid[] language sql immutable as $$
  select array(select (x ->> p_key)::uuid from jsonb_array_elements(p_arr) with ordinality e(x, o) order by o) $$;
-- list_facts' fact ids.
create function pg_temp.lf(p_project text, p_at timestamptz default null, p_known timestamptz default null,
                           p_subject text default null, p_predicate text default null) returns uuid[]
  language sql stable as $$
  select pg_temp.uuids(memory.list_facts(pg_temp.id(p_project), p_at, p_known, p_subject, p_predicate) -> 'facts', 'fact_id') $$;
-- A graph as text: "Ann/0 Ben/1 | knows Ann-Ben 2024-05-01.." (nodes in the
-- order given, edges by their text).
create function pg_temp.graph(p_g jsonb) returns text language sql stable as $$
  select (select string_agg(format('%s/%s', x ->> 'name', x ->> 'depth'), ' ' order by o)
            from jsonb_array_elements(p_g -> 'nodes') with ordinality e(x, o))
         || ' | '
         || coalesce((select string_agg(y.edge, ', ' order by y.edge)
                        from (select format('%s %s-%s %s..%s', x ->> 'relation', s.name, t.name,
                                            (x ->> 'valid_from')::date, (x ->> 'valid_until')::date) as edge
                                from jsonb_array_elements(p_g -> 'edges') x
                                join memory.entities s on s.entity_id = (x ->> 'source_id')::uuid
                                join memory.entities t on t.entity_id = (x ->> 'target_id')::uuid) y), '') $$;
create function pg_temp.gn(p_entity text, p_depth integer default 1, p_at timestamptz default null,
                           p_known timestamptz default null, p_project text default 'p') returns text
  language sql stable as $$
  select pg_temp.graph(memory.graph_neighbors(pg_temp.id(p_project), p_entity, p_depth, p_at, p_known)) $$;
-- Every id project q owns (facts, entities, episodes).
create function pg_temp.owned(p_project text) returns uuid[] language sql stable as $$
  select array(select v.fact_id from memory_internal.fact_versions(pg_temp.id(p_project)) v
               union all select n.entity_id from memory.entities n where n.project_id = pg_temp.id(p_project)
               union all select e.episode_id from memory.episodes e where e.project_id = pg_temp.id(p_project)) $$;
-- metric_totals as one JSON object.
create function pg_temp.totals() returns jsonb language sql stable as $$
  select coalesce(jsonb_object_agg(t.metric, t.value), '{}') from memory.metric_totals() t $$;
-- What grew between two totals (metrics that did not change left out).
create function pg_temp.grown(p_before jsonb, p_after jsonb) returns jsonb language sql immutable as $$
  select coalesce(jsonb_object_agg(k, coalesce((p_after ->> k)::bigint, 0) - coalesce((p_before ->> k)::bigint, 0)), '{}')
    from (select jsonb_object_keys(p_before) union select jsonb_object_keys(p_after)) m(k)
   where coalesce((p_after ->> k)::bigint, 0) <> coalesce((p_before ->> k)::bigint, 0) $$;

set local role chronomem_app;
do $$
declare a uuid; b uuid;
begin
  b := memory.create_org('read surfaces org B');
  perform memory.use_org(b);
  insert into pg_temp.ids values ('org_b', b), ('r', memory.create_project(b, 'p'));
  call pg_temp.seed('r');
  call pg_temp.seed_other('r');
  a := memory.create_org('read surfaces org A');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('org', a), ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q')),
                                 ('m', memory.create_project(a, 'metrics'));
  call pg_temp.seed('q');
  call pg_temp.seed_other('q');
  call pg_temp.seed('p');
  call pg_temp.fact('p', 'bc', '{"subject": "Ben", "predicate": "knows", "object": "Cat", "object_type": "entity",
                                 "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact('p', 'cd', '{"subject": "Cat", "predicate": "knows", "object": "Dan", "object_type": "entity",
                                 "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact('p', 'tea', '{"subject": "Cat", "predicate": "likes", "object": "tea", "object_type": "literal",
                                  "valid_from": "2020-01-01T00:00:00Z"}');
  perform memory.add_alias(pg_temp.id('p'), 'Ann', 'Annie');
  call pg_temp.ingest('p', 'chat', '[{"role": "user", "content": "Ben introduced Ann to Cat", "occurred_at": "2021-01-01T00:00:00Z"},
                                     {"role": "user", "content": "Ann moved to Globex this year", "occurred_at": "2023-02-01T00:00:00Z"},
                                     {"role": "assistant", "content": "Noted: Ann works at Globex", "occurred_at": "2023-02-01T00:01:00Z"}]');
  call pg_temp.ingest('p', 'notes', '[{"role": "user", "content": "Cat likes tea", "occurred_at": "2020-03-01T00:00:00Z"}]');
  call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
  perform memory.retract_fact(pg_temp.id('p'), pg_temp.id('p.paris'), 'wrong Ann');
end $$;

-- A. list_facts: the normal answer, at and known_at.
select is(pg_temp.lf('p'), pg_temp.sorted(array['p.globex', 'p.ab', 'p.bc', 'p.cd', 'p.tea']),
          'list_facts now: the current facts (not the closed Acme, not the retracted Paris), by fact_id');
select is((select string_agg(format('%s|%s|%s|%s|%s|%s|%s', x ->> 'subject', x ->> 'predicate', x ->> 'object',
                                    x ->> 'content', (x ->> 'valid_from')::date, coalesce(x ->> 'valid_until', '-'),
                                    x ->> 'source'), '; ' order by x ->> 'content')
             from jsonb_array_elements(memory.list_facts(pg_temp.id('p'), p_subject => 'Ann') -> 'facts') x),
          'Ann|knows|Ben|Ann knows Ben|2024-05-01|-|api; Ann|works at|Globex|Ann works at Globex|2023-01-01|-|api',
          'list_facts rows carry subject, predicate, object names, content, window and source');
select is(pg_temp.lf('p', '2022-12-31 23:59:59.999999Z', p_predicate => 'works at'), array[pg_temp.id('p.acme')],
          'list_facts: Acme holds the microsecond before Globex supersedes it');
select is(pg_temp.lf('p', '2023-01-01Z', p_predicate => 'works at'), array[pg_temp.id('p.globex')],
          'list_facts: from 2023-01-01 (the supersession) Globex only, Acme gone');
select is(pg_temp.lf('p', '2024-04-01Z', p_subject => 'Ann'), array[pg_temp.id('p.globex')],
          'list_facts as of April 2024: Ann knows Ben (from May 2024) not yet');
select is(pg_temp.lf('p', '2021-06-01Z'), pg_temp.sorted(array['p.acme', 'p.bc', 'p.cd', 'p.tea']),
          'list_facts as of 2021, known now: Acme, no Paris (retracted)');
select is(pg_temp.lf('p', '2021-06-01Z', now() - interval '30 minutes'),
          pg_temp.sorted(array['p.acme', 'p.paris', 'p.bc', 'p.cd', 'p.tea']),
          'list_facts known_at before the retraction: the retracted Paris is listed');
select is(pg_temp.lf('p', '2021-06-01Z', now() - interval '2 hours'), '{}'::uuid[],
          'list_facts known_at before anything was recorded: nothing');
select is((select array[r ->> 'as_of', r ->> 'known_at']
             from memory.list_facts(pg_temp.id('p'), '2021-06-01Z', '2024-01-02Z') r),
          array['2021-06-01T00:00:00+00:00', '2024-01-02T00:00:00+00:00'],
          'list_facts names the instants it read at');
select is(pg_temp.lf('p', p_subject => ' ANNIE ', p_predicate => 'Works  At!'), array[pg_temp.id('p.globex')],
          'list_facts: subject by alias and predicate, both normalized');
select is(memory.list_facts(pg_temp.id('p'), p_subject => 'Nobody') - 'as_of' - 'known_at',
          '{"facts": [], "next_cursor": null}'::jsonb, 'list_facts: an unknown subject lists nothing (not an error)');

-- B. list_facts: paging and scoping.
insert into pg_temp.res values ('lf1', memory.list_facts(pg_temp.id('p'), p_limit => 2));
insert into pg_temp.res values ('lf2', memory.list_facts(pg_temp.id('p'), p_after => (pg_temp.r('lf1') ->> 'next_cursor')::uuid, p_limit => 2));
insert into pg_temp.res values ('lf3', memory.list_facts(pg_temp.id('p'), p_after => (pg_temp.r('lf2') ->> 'next_cursor')::uuid, p_limit => 2));
select is(pg_temp.uuids(pg_temp.r('lf1') -> 'facts', 'fact_id') || pg_temp.uuids(pg_temp.r('lf2') -> 'facts', 'fact_id')
          || pg_temp.uuids(pg_temp.r('lf3') -> 'facts', 'fact_id'), pg_temp.lf('p'),
          'list_facts pages of 2: every fact once, in order');
select is(array[jsonb_array_length(pg_temp.r('lf1') -> 'facts'), jsonb_array_length(pg_temp.r('lf2') -> 'facts'),
                jsonb_array_length(pg_temp.r('lf3') -> 'facts')]
          || array[((pg_temp.r('lf1') ->> 'next_cursor')::uuid = (pg_temp.lf('p'))[2])::int,
                   (pg_temp.r('lf3') -> 'next_cursor' = 'null')::int],
          array[2, 2, 1, 1, 1], 'list_facts: 2, 2, 1 rows; the cursor is the page''s last fact_id; the last page has a null next_cursor');
select ok(not (pg_temp.lf('p') && pg_temp.owned('q')) and not (pg_temp.lf('p', '2021-06-01Z') && pg_temp.owned('q')),
          'list_facts: none of project q''s facts (same org, same triples) is listed for p');
select is(pg_temp.lf('p', p_subject => 'Ann', p_predicate => 'works at'), array[pg_temp.id('p.globex')],
          'list_facts: another project''s Ann is not listed (p''s Globex fact only)');
select is(pg_temp.lf('q', p_subject => 'Ann', p_predicate => 'works at'), array[pg_temp.id('q.globex')],
          'control: the same query on q lists q''s Ann fact');
select is(pg_temp.lf('p', p_subject => 'Ben'), array[pg_temp.id('p.bc')],
          'list_facts: p''s Ben knows Cat only, not q''s Ben knows Zed');
select is(pg_temp.lf('q', p_subject => 'Ben'), array[pg_temp.id('q.bz')], 'control: q lists its own Ben knows Zed');

-- C. list_facts: bad input.
select throws_ok($$ select memory.list_facts(pg_temp.id('p'), p_limit => 0) $$, '22023',
                 'limit must be between 1 and 1000', 'list_facts: limit 0 is refused, naming limit');
select throws_ok($$ select memory.list_facts(pg_temp.id('p'), 'infinity') $$, '22023',
                 'as_of and known_at must be finite', 'list_facts: an infinite as_of is refused');
select throws_ok($$ select memory.graph_neighbors(pg_temp.id('p'), 'Ann', 1, now(), 'infinity') $$, '22023',
                 'as_of and known_at must be finite', 'graph_neighbors: an infinite known_at is refused');

-- D. readable_facts_at: names and windows, at and known_at.
select results_eq($$ select * from memory.readable_facts_at(pg_temp.id('p')) $$,
  $$ values (pg_temp.id('p.ab'), 'Ann', 'knows', 'Ben', 'Ann knows Ben', '2024-05-01Z'::timestamptz, null::timestamptz, 1::real),
            (pg_temp.id('p.globex'), 'Ann', 'works at', 'Globex', 'Ann works at Globex', '2023-01-01Z', null, 1),
            (pg_temp.id('p.bc'), 'Ben', 'knows', 'Cat', 'Ben knows Cat', '2020-01-01Z', null, 1),
            (pg_temp.id('p.cd'), 'Cat', 'knows', 'Dan', 'Cat knows Dan', '2020-01-01Z', null, 1),
            (pg_temp.id('p.tea'), 'Cat', 'likes', 'tea', 'Cat likes tea', '2020-01-01Z', null, 1) $$,
  'readable_facts_at now: the current facts by subject, predicate, start, with names');
select results_eq($$ select fact_id, object, valid_from, valid_until from memory.readable_facts_at(pg_temp.id('p'), '2021-06-01Z') $$,
  $$ values (pg_temp.id('p.acme'), 'Acme', '2020-01-01Z'::timestamptz, '2023-01-01Z'::timestamptz),
            (pg_temp.id('p.bc'), 'Cat', '2020-01-01Z', null), (pg_temp.id('p.cd'), 'Dan', '2020-01-01Z', null),
            (pg_temp.id('p.tea'), 'tea', '2020-01-01Z', null) $$,
  'readable_facts_at 2021: Acme with its window closed at the supersession, no retracted Paris');
select results_eq($$ select fact_id, predicate, object from memory.readable_facts_at(pg_temp.id('p'), '2021-06-01Z',
                                                                                       now() - interval '30 minutes') $$,
  $$ values (pg_temp.id('p.paris'), 'lives in', 'Paris'), (pg_temp.id('p.acme'), 'works at', 'Acme'),
            (pg_temp.id('p.bc'), 'knows', 'Cat'), (pg_temp.id('p.cd'), 'knows', 'Dan'),
            (pg_temp.id('p.tea'), 'likes', 'tea') $$,
  'readable_facts_at known_at before the retraction: Paris is read');
select is_empty($$ select from memory.readable_facts_at(pg_temp.id('p'), '2021-06-01Z', now() - interval '2 hours') $$,
                'readable_facts_at known_at before anything was recorded: nothing');
select is((select count(*)::int from memory.readable_facts_at(pg_temp.id('p')) f where f.fact_id = any (pg_temp.owned('q'))),
          0, 'readable_facts_at: none of q''s facts (same subject names and contents) is read for p');
select set_eq($$ select fact_id from memory.readable_facts_at(pg_temp.id('q')) $$,
              $$ select unnest(array[pg_temp.id('q.globex'), pg_temp.id('q.ab'), pg_temp.id('q.paris'), pg_temp.id('q.bz')]) $$,
              'control: readable_facts_at on q reads q''s facts');

-- E. graph_neighbors: depth, at and known_at.
select is(pg_temp.gn('Ann'),
          'Ann/0 Ben/1 Globex/1 | knows Ann-Ben 2024-05-01.., works at Ann-Globex 2023-01-01..',
          'graph_neighbors depth 1 now: Ben and Globex, with the edges and their windows');
select is(pg_temp.gn('Ann', 2),
          'Ann/0 Ben/1 Globex/1 Cat/2 | knows Ann-Ben 2024-05-01.., knows Ben-Cat 2020-01-01.., works at Ann-Globex 2023-01-01..',
          'depth 2 on the chain Ann-Ben-Cat: Cat at depth 2');
select is(pg_temp.gn('Ann', 3),
          'Ann/0 Ben/1 Globex/1 Cat/2 Dan/3 | knows Ann-Ben 2024-05-01.., knows Ben-Cat 2020-01-01.., '
          || 'knows Cat-Dan 2020-01-01.., works at Ann-Globex 2023-01-01..', 'depth 3: Dan at depth 3');
select is(pg_temp.gn('Ann', 1, '2024-04-01Z'), 'Ann/0 Globex/1 | works at Ann-Globex 2023-01-01..',
          'graph_neighbors as of April 2024: the Ann-Ben edge (valid from May 2024) is absent');
select is(pg_temp.gn('Ann', 1, '2021-06-01Z'), 'Ann/0 Acme/1 | works at Ann-Acme 2020-01-01..2023-01-01',
          'as of 2021: Acme, its edge closed at the supersession; no retracted Paris');
select is(pg_temp.gn('Ann', 1, '2021-06-01Z', now() - interval '30 minutes'),
          'Ann/0 Acme/1 Paris/1 | lives in Ann-Paris 2020-01-01.., works at Ann-Acme 2020-01-01..2023-01-01',
          'known_at before the retraction: the Paris edge is there');
select is(pg_temp.gn('Ann', 2, '2021-06-01Z', now() - interval '2 hours'), 'Ann/0 | ',
          'known_at before anything was recorded: the root alone');
select is((select array[g #>> '{entity,name}', g ->> 'depth', (g ->> 'as_of')::date::text]
             from memory.graph_neighbors(pg_temp.id('p'), ' annie ', 2, '2024-06-01Z') g),
          array['Ann', '2', '2024-06-01'], 'graph_neighbors finds the root by alias, normalized, and names it');
select is(pg_temp.gn('Cat', 1), 'Cat/0 Ben/1 Dan/1 | knows Ben-Cat 2020-01-01.., knows Cat-Dan 2020-01-01..',
          'graph_neighbors from Cat: edges walked in both directions (Ben-Cat in reverse); a literal (tea) is no node');

-- F. graph_neighbors: scoping and bad input.
select ok(not (pg_temp.uuids(memory.graph_neighbors(pg_temp.id('p'), 'Ann', 3) -> 'nodes', 'entity_id') && pg_temp.owned('q'))
          and not (pg_temp.uuids(memory.graph_neighbors(pg_temp.id('p'), 'Ann', 3) -> 'edges', 'edge_id')
                   && array(select e.edge_id from memory.edges e where e.project_id = pg_temp.id('q'))),
          'graph_neighbors: none of q''s entities or edges (same Ann, Ben, Acme) in p''s graph');
select is(pg_temp.gn('Ann', 2, p_project => 'q'),
          'Ann/0 Ben/1 Globex/1 Paris/1 Zed/2 | knows Ann-Ben 2024-05-01.., knows Ben-Zed 2020-01-01.., '
          || 'lives in Ann-Paris 2020-01-01.., works at Ann-Globex 2023-01-01..',
          'control: q''s graph from its Ann reaches its Zed (and its Paris, not retracted there)');
select throws_ok(format($$ select memory.graph_neighbors(%L, 'Zed') $$, pg_temp.id('p')), 'P0002',
                 format('entity "Zed" not found in project %s', pg_temp.id('p')),
                 'graph_neighbors: an entity only project q has is not found in p');
select throws_ok(format($$ select memory.graph_neighbors(%L, 'Nobody') $$, pg_temp.id('p')), 'P0002',
                 format('entity "Nobody" not found in project %s', pg_temp.id('p')),
                 'graph_neighbors: an unknown entity is not found, naming it');
select throws_ok($$ select memory.graph_neighbors(pg_temp.id('p'), 'Ann', 0) $$, '22023',
                 'depth must be between 1 and 3', 'graph_neighbors: depth 0 is refused');
select throws_ok($$ select memory.graph_neighbors(pg_temp.id('p'), 'Ann', 4) $$, '22023',
                 'depth must be between 1 and 3', 'graph_neighbors: depth 4 is refused');
-- The limit: at most that many nodes, the closest first, then by name, and
-- truncated says some were left out.
create function pg_temp.gn_limited(p_limit integer) returns text language sql stable as $$
  select pg_temp.graph(g) || ' | truncated ' || (g ->> 'truncated')
    from memory.graph_neighbors(pg_temp.id('p'), 'Ann', 3, p_limit => p_limit) g $$;
select is(pg_temp.gn_limited(3),
          'Ann/0 Ben/1 Globex/1 | knows Ann-Ben 2024-05-01.., works at Ann-Globex 2023-01-01.. | truncated true',
          'graph_neighbors limit 3 of 5: the root and the nearest by name, only edges between them, truncated');
select is(pg_temp.gn_limited(2),
          'Ann/0 Ben/1 | knows Ann-Ben 2024-05-01.. | truncated true',
          'limit 2: Ben before Globex (same depth, by name)');
select is(pg_temp.gn_limited(5),
          'Ann/0 Ben/1 Globex/1 Cat/2 Dan/3 | knows Ann-Ben 2024-05-01.., knows Ben-Cat 2020-01-01.., '
          || 'knows Cat-Dan 2020-01-01.., works at Ann-Globex 2023-01-01.. | truncated false',
          'control: a limit of exactly the five nodes keeps all and is not truncated');
select throws_ok($$ select memory.graph_neighbors(pg_temp.id('p'), 'Ann', 1, p_limit => 0) $$, '22023',
                 'limit must be between 1 and 1000', 'graph_neighbors: limit 0 is refused');

-- G. list_entities.
select is((select array_agg(x ->> 'name' || ':' || (x -> 'aliases')::text order by o)
             from jsonb_array_elements(memory.list_entities(pg_temp.id('p')) -> 'entities') with ordinality e(x, o)),
          array['Acme:[]', 'Ann:["Annie"]', 'Ben:[]', 'Cat:[]', 'Dan:[]', 'Globex:[]', 'Paris:[]'],
          'list_entities: p''s entities by normalized name with their aliases (a literal is none)');
insert into pg_temp.res values ('le1', memory.list_entities(pg_temp.id('p'), null, 3));
insert into pg_temp.res values ('le2', memory.list_entities(pg_temp.id('p'), pg_temp.r('le1') ->> 'next_cursor', 3));
insert into pg_temp.res values ('le3', memory.list_entities(pg_temp.id('p'), pg_temp.r('le2') ->> 'next_cursor', 3));
select is(array[pg_temp.col(pg_temp.r('le1') -> 'entities', 'name')::text, pg_temp.r('le1') ->> 'next_cursor',
                pg_temp.col(pg_temp.r('le2') -> 'entities', 'name')::text, pg_temp.r('le2') ->> 'next_cursor',
                pg_temp.col(pg_temp.r('le3') -> 'entities', 'name')::text, coalesce(pg_temp.r('le3') ->> 'next_cursor', 'null')],
          array['{Acme,Ann,Ben}', 'ben', '{Cat,Dan,Globex}', 'globex', '{Paris}', 'null'],
          'list_entities pages of 3: every entity once; the cursor is the last normalized name; the last page has none');
select is(memory.list_entities(pg_temp.id('p'), null, 7) -> 'next_cursor', 'null'::jsonb,
          'list_entities: a page exactly as long as what is left has no next_cursor');
select ok(not (pg_temp.uuids(memory.list_entities(pg_temp.id('p')) -> 'entities', 'entity_id') && pg_temp.owned('q'))
          and not ('Zed' = any (pg_temp.col(memory.list_entities(pg_temp.id('p')) -> 'entities', 'name'))),
          'list_entities: another project''s Ann, Ben, Acme... and Zed are not listed for p');
select is(pg_temp.col(memory.list_entities(pg_temp.id('q')) -> 'entities', 'name'),
          array['Acme', 'Ann', 'Ben', 'Globex', 'Paris', 'Zed'], 'control: q lists its own entities, Zed among them');
select throws_ok($$ select memory.list_entities(pg_temp.id('p'), null, 0) $$, '22023',
                 'limit must be between 1 and 1000', 'list_entities: limit 0 is refused');

-- H. session_messages.
select is((select array_agg(format('%s %s %s', x ->> 'seq', x ->> 'role', x ->> 'content') order by o)
             from jsonb_array_elements(memory.session_messages(pg_temp.id('p'), 'chat') -> 'messages') with ordinality e(x, o)),
          array['1 user Ann told me she works at Acme', '2 assistant Noted: Ann works at Acme', '3 user Ben introduced Ann to Cat',
                '4 user Ann moved to Globex this year', '5 assistant Noted: Ann works at Globex'],
          'session_messages: the session''s messages in order, across both ingests');
select is(pg_temp.uuids(memory.session_messages(pg_temp.id('p'), ' chat ') -> 'messages', 'episode_id'),
          array(select e.episode_id from memory.episodes e join memory.sessions s on s.org_id = e.org_id and s.session_id = e.session_id
                 where s.project_id = pg_temp.id('p') and s.external_id = 'chat' order by e.seq),
          'session_messages: the episodes of p''s "chat" (the name trimmed), none of q''s "chat"');
insert into pg_temp.res values ('sm1', memory.session_messages(pg_temp.id('p'), 'chat', 0, 2));
insert into pg_temp.res values ('sm2', memory.session_messages(pg_temp.id('p'), 'chat', (pg_temp.r('sm1') ->> 'next_cursor')::int, 2));
insert into pg_temp.res values ('sm3', memory.session_messages(pg_temp.id('p'), 'chat', (pg_temp.r('sm2') ->> 'next_cursor')::int, 2));
select is(array[pg_temp.col(pg_temp.r('sm1') -> 'messages', 'seq')::text, pg_temp.r('sm1') ->> 'next_cursor',
                pg_temp.col(pg_temp.r('sm2') -> 'messages', 'seq')::text, pg_temp.r('sm2') ->> 'next_cursor',
                pg_temp.col(pg_temp.r('sm3') -> 'messages', 'seq')::text, coalesce(pg_temp.r('sm3') ->> 'next_cursor', 'null')],
          array['{1,2}', '2', '{3,4}', '4', '{5}', 'null'],
          'session_messages pages of 2: every message once; the cursor is the last seq; the last page has none');
select is(memory.session_messages(pg_temp.id('p'), 'chat', 5) - 'session_id' - 'metadata',
          '{"session": "chat", "messages": [], "next_cursor": null}'::jsonb, 'session_messages after the last seq: no messages');
select is(pg_temp.col(memory.session_messages(pg_temp.id('q'), 'chat') -> 'messages', 'content'),
          array['Ann told me she works at Acme', 'Noted: Ann works at Acme', 'Zed met Ben and Ann at Acme'],
          'control: q''s "chat" has its own three messages');
select throws_ok(format($$ select memory.session_messages(%L, 'q-only') $$, pg_temp.id('p')), 'P0002',
                 format('session "q-only" not found in project %s', pg_temp.id('p')),
                 'session_messages: a session only q has is not found in p');
select is(memory.session_messages(pg_temp.id('q'), 'q-only') #>> '{messages,0,content}', 'Ann works at Acme',
          'control: q reads its "q-only" session');
select throws_ok($$ select memory.session_messages(pg_temp.id('p'), 'chat', 0, 0) $$, '22023',
                 'limit must be between 1 and 1000', 'session_messages: limit 0 is refused');

-- I. search_rows: the rows of memory.search, in its order.
select is((select array_agg(s.id order by s.pos) from memory.search_rows(pg_temp.id('p'), 'Ann works at Acme', null, now(), now(), 10,
                                                                          array['fact_fulltext', 'episode_fulltext', 'entity']) s),
          (select array_agg((x ->> 'id')::uuid order by o)
             from jsonb_array_elements(memory.search(pg_temp.id('p'), 'Ann works at Acme', null, now(), now(), 10,
                                                     array['fact_fulltext', 'episode_fulltext', 'entity']) -> 'results')
                  with ordinality e(x, o)),
          'search_rows: the same ids in the same order as search');
select is((select array_agg(s.id order by s.pos) from memory.search_rows(pg_temp.id('p'), 'Ann Acme tea', null, '2021-06-01Z',
                                                                          now() - interval '30 minutes', 5,
                                                                          array['fact_fulltext', 'episode_fulltext', 'entity'], 'rrf') s),
          (select array_agg((x ->> 'id')::uuid order by o)
             from jsonb_array_elements(memory.search(pg_temp.id('p'), 'Ann Acme tea', null, '2021-06-01Z',
                                                     now() - interval '30 minutes', 5,
                                                     array['fact_fulltext', 'episode_fulltext', 'entity'], 'rrf') -> 'results')
                  with ordinality e(x, o)),
          'search_rows: the same as search at another at / known_at, k and fusion');
select is((select min(s.pos) = 1 and max(s.pos) = count(*) and count(distinct s.pos) = count(*)
                  and count(distinct s.kind) = 3
             from memory.search_rows(pg_temp.id('p'), 'Ann works at Acme', p_legs => array['fact_fulltext', 'episode_fulltext', 'entity']) s),
          true, 'search_rows: positions 1..n, facts, episodes and entities all found');
select is((select format('%s|%s|%s|%s', s.kind, s.text, s.valid_from::date, s.valid_until::date)
             from memory.search_rows(pg_temp.id('p'), 'Ann works at Acme', null, '2021-06-01Z', now(), 10, array['fact_fulltext']) s
            where s.id = pg_temp.id('p.acme')),
          'fact|Ann works at Acme|2020-01-01|2023-01-01', 'search_rows as of 2021: the Acme fact with its text and window');
select is((select array[bool_or(s.id = pg_temp.id('p.acme')), bool_or(s.id = pg_temp.id('p.globex'))]
             from memory.search_rows(pg_temp.id('p'), 'Ann works at Acme', p_legs => array['fact_fulltext']) s),
          array[false, true], 'search_rows now: Globex found, the superseded Acme not');
select ok(not exists (select from memory.search_rows(pg_temp.id('p'), 'Zed met Ben and Ann at Acme', p_k => 50,
                                                      p_legs => array['fact_fulltext', 'episode_fulltext', 'entity']) s
                       where s.id = any (pg_temp.owned('q'))),
          'search_rows: none of q''s facts, episodes or entities (same texts and names) for p');
select ok(exists (select from memory.search_rows(pg_temp.id('q'), 'Zed met Ben and Ann at Acme', p_k => 50,
                                                  p_legs => array['fact_fulltext', 'episode_fulltext', 'entity']) s
                   where s.id = any (pg_temp.owned('q'))),
          'control: the same search on q finds q''s rows');
select throws_ok($$ select * from memory.search_rows(pg_temp.id('p'), 'Ann', p_k => 0) $$, '22023',
                 'k must be between 1 and 200', 'search_rows: k 0 is refused');
select throws_ok($$ select * from memory.search_rows(pg_temp.id('p'), 'Ann', p_legs => array['bogus']) $$, '22023',
                 'unknown search leg in {bogus}; legs are {episode_vector,fact_vector,episode_fulltext,fact_fulltext,entity,graph}',
                 'search_rows: an unknown leg is refused, naming it');

-- I2. fact_changes: p's events in record time.  Everything of p was
-- recorded an hour ago (shift_back); Paris was retracted now.  q wrote the
-- same four facts (same triples, contents) now, in this transaction: every
-- chance to show in p's answer.
select is((select array_agg(x ->> 'event_type' || ' ' || (x ->> 'subject') || ' ' || (x ->> 'predicate') || ' ' || (x ->> 'object')
                            order by x ->> 'event_type', x ->> 'object')
             from jsonb_array_elements(memory.fact_changes(pg_temp.id('p')) -> 'changes') x),
          array['asserted Ann works at Acme', 'asserted Ann knows Ben', 'asserted Ben knows Cat', 'asserted Cat knows Dan',
                'asserted Ann works at Globex', 'asserted Ann lives in Paris', 'asserted Cat likes tea',
                'retracted Ann lives in Paris', 'superseded Ann works at Acme'],
          'fact_changes: every event of p''s facts, with the triple');
select is((select count(*)::int from jsonb_array_elements(memory.fact_changes(pg_temp.id('p')) -> 'changes') x
            where (x ->> 'fact_id')::uuid = any (pg_temp.owned('q'))),
          0, 'none of q''s events (same triples, written now) is p''s');
select is(pg_temp.col(memory.fact_changes(pg_temp.id('q')) -> 'changes', 'event_type'),
          array['asserted', 'superseded', 'asserted', 'asserted', 'asserted', 'asserted'],
          'control: q''s own, oldest first (Acme''s closure logged just before Globex''s assertion)');
select is(pg_temp.col(memory.fact_changes(pg_temp.id('p')) -> 'changes', 'event_type')
            @> array['retracted'] and (memory.fact_changes(pg_temp.id('p')) -> 'changes' -> -1 ->> 'event_type') = 'retracted',
          true, 'oldest first: the retraction, an hour after the rest, is last');
select is(pg_temp.col(memory.fact_changes(pg_temp.id('p'), now() - interval '30 minutes') -> 'changes', 'event_type'),
          array['retracted'], 'since 30 minutes ago: only the retraction');
select is(cardinality(pg_temp.col(memory.fact_changes(pg_temp.id('p'), now() - interval '2 hours') -> 'changes', 'event_type')),
          9, 'control: since 2 hours ago, all nine');
select is(cardinality(pg_temp.col(memory.fact_changes(pg_temp.id('p'), null, now() - interval '30 minutes') -> 'changes', 'event_type')),
          8, 'until 30 minutes ago: all but the retraction');
select is(jsonb_array_length(memory.fact_changes(pg_temp.id('p'), null, now() - interval '2 hours') -> 'changes'),
          0, 'until 2 hours ago: nothing (before p was recorded)');
select is((memory.fact_changes(pg_temp.id('p'), now() - interval '30 minutes') ->> 'until')::timestamptz,
          memory_internal.txn_instant(), 'until defaults to now (this transaction''s record-time instant)');
-- Pages of 2 chained by next_cursor: the one-page answer, in order, each once.
create function pg_temp.paged(p_limit integer) returns jsonb language plpgsql stable as $$
declare r jsonb; acc jsonb := '[]'; c text; pages integer := 0;
begin
  loop
    r := memory.fact_changes(pg_temp.id('p'), null, null, c, p_limit);
    acc := acc || (r -> 'changes');
    pages := pages + 1;
    c := r ->> 'next_cursor';
    exit when c is null or pages > 20;
  end loop;
  return jsonb_build_object('events', acc, 'pages', pages);
end $$;
select is(pg_temp.paged(2) -> 'events', memory.fact_changes(pg_temp.id('p')) -> 'changes',
          'pages of 2 chained by next_cursor give the one-page answer, in order, each event once');
select is((pg_temp.paged(2) ->> 'pages')::int, 5, '... in 5 pages, the last without a cursor');
select is((pg_temp.paged(9) ->> 'pages')::int, 1, 'a page of exactly all nine has no cursor');
select throws_ok($$ select memory.fact_changes(pg_temp.id('p'), now(), now() - interval '1 hour') $$, '22023', null,
                 'fact_changes: since later than until is refused');
select throws_ok($$ select memory.fact_changes(pg_temp.id('p'), null, null, 'not a cursor') $$, '22023',
                 'cursor is not a next_cursor of this list', 'fact_changes: a bad cursor is refused');
select throws_ok($$ select memory.fact_changes(pg_temp.id('p'), null, 'infinity') $$, '22023',
                 'until must be finite', 'fact_changes: an infinite until is refused');
select throws_ok($$ select memory.fact_changes(pg_temp.id('p'), p_limit => 0) $$, '22023',
                 'limit must be between 1 and 1000', 'fact_changes: limit 0 is refused');

-- J. Another org's project is not found.
select throws_ok($$ select memory.list_facts(pg_temp.id('r')) $$, 'P0002', null, 'list_facts: another org''s project is not found');
select throws_ok($$ select memory.graph_neighbors(pg_temp.id('r'), 'Ann') $$, 'P0002', null,
                 'graph_neighbors: another org''s project is not found');
select throws_ok($$ select memory.list_entities(pg_temp.id('r')) $$, 'P0002', null, 'list_entities: another org''s project is not found');
select throws_ok($$ select memory.session_messages(pg_temp.id('r'), 'chat') $$, 'P0002', null,
                 'session_messages: another org''s project is not found');
select throws_ok($$ select * from memory.search_rows(pg_temp.id('r'), 'Ann', p_legs => array['entity']) $$, 'P0002', null,
                 'search_rows: another org''s project is not found');
select throws_ok($$ select from memory.readable_facts_at(pg_temp.id('r')) $$, 'P0002', null,
                 'readable_facts_at: another org''s project is not found');
select throws_ok($$ select memory.fact_changes(pg_temp.id('r')) $$, 'P0002', null,
                 'fact_changes: another org''s project is not found');
call pg_temp.use('org_b');
select is(array[(select count(*)::int from memory.readable_facts_at(pg_temp.id('r'))),
                jsonb_array_length(memory.list_facts(pg_temp.id('r')) -> 'facts'),
                jsonb_array_length(memory.list_entities(pg_temp.id('r')) -> 'entities'),
                jsonb_array_length(memory.session_messages(pg_temp.id('r'), 'chat') -> 'messages'),
                jsonb_array_length(memory.graph_neighbors(pg_temp.id('r'), 'Ann', 2) -> 'nodes'),
                jsonb_array_length(memory.fact_changes(pg_temp.id('r')) -> 'changes')],
          array[4, 4, 6, 3, 5, 6], 'control: scoped to org B, its project answers every read');
call pg_temp.use('org');

-- K. metric_totals: totals over every org grow by exactly what was written.
do $$ begin perform memory.declare_predicate(pg_temp.id('m'), 'works at', 'one'); end $$;
insert into pg_temp.res values ('t0', pg_temp.totals());
insert into pg_temp.res values ('m1', memory.assert_facts(pg_temp.id('m'), '[
  {"subject": "Ann", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"},
  {"subject": "Ann", "predicate": "likes", "object": "tea"}]'));
insert into pg_temp.res values ('m2', memory.assert_facts(pg_temp.id('m'), '[
  {"subject": "Ann", "predicate": "works at", "object": "Globex", "valid_from": "2023-01-01T00:00:00Z"},
  {"subject": "Ann", "predicate": "likes", "object": "tea"}]'));
select is(array[pg_temp.r('m1') ->> 'inserted', pg_temp.r('m2') ->> 'inserted', pg_temp.r('m2') ->> 'superseded',
                pg_temp.r('m2') ->> 'skipped'], array['2', '1', '1', '1'],
          'the metric batches: 3 facts inserted, 1 superseded, 1 skipped (a retry)');
select is(pg_temp.grown(pg_temp.r('t0'), pg_temp.totals()),
          '{"facts_inserted": 3, "facts_superseded": 1, "facts_skipped": 1}'::jsonb,
          'metric_totals: inserted +3, superseded +1, skipped +1, nothing else');
insert into pg_temp.res values ('t1', pg_temp.totals());
do $$ begin perform memory.retract_fact(pg_temp.id('m'), (pg_temp.r('m2') #>> '{results,0,fact_id}')::uuid); end $$;
select is(pg_temp.grown(pg_temp.r('t1'), pg_temp.totals()), '{"facts_retracted": 1}'::jsonb,
          'metric_totals: a retraction adds one to facts_retracted only');
insert into pg_temp.res values ('t2', pg_temp.totals());
call pg_temp.use('org_b');
do $$ begin perform memory.assert_facts(pg_temp.id('r'), '[{"subject": "Bea", "predicate": "likes", "object": "jazz"}]'); end $$;
call pg_temp.use('org');
select is(pg_temp.grown(pg_temp.r('t2'), pg_temp.totals()), '{"facts_inserted": 1}'::jsonb,
          'metric_totals counts every org: org B''s insert shows while scoped to org A');
select is((select array_agg(t.metric order by o) from memory.metric_totals() with ordinality t(metric, value, o)),
          (select array_agg(distinct t.metric order by t.metric) from memory.metric_totals() t),
          'metric_totals: one row per metric, ordered by name');

select * from finish();
ROLLBACK;
