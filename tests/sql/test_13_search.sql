-- 13 search: memory.search (every leg at the instant asked, failing legs,
-- tenancy, fusion, determinism, arguments), memory.context and
-- memory.compute_communities.  Runs as chronomem_app.
--
-- Project p holds, with the SAME embedding (pg_temp.vec(1), also the query
-- embedding) on every fact, so each fact leg has every chance to return
-- every fact:
--   acme    Alice works at Acme   [2020, 2022)  "Alice works at the company"
--   globex  Alice works at Globex [2022, )      "Alice works at the company" (closes acme)
--   tea1    Bob likes Tea         [2020, 2021)  "Bob likes tea"
--   tea2    Bob likes Tea         [2021, )      "Bob loves tea" (same triple, same edge)
--   initech Carol works at Initech [2020, )     retracted (record time: see shift_back)
--   dave    Carol knows Dave      [2020, )      control for the retraction
--   hooli   Dan works at Hooli    [2020, 2022)  the only way from Dan to Paris
--   paris   Hooli located in Paris [2019, )
-- Projects q (same org) and r (another org) hold the same names, texts and
-- embeddings.  As in test_05, shift_back moves p's record-time columns one
-- hour back before the retraction, so known_at = now() - 30 min is "after
-- everything was recorded, before the retraction".
BEGIN;
select plan(84);

create temp table owned (k text not null, kind text not null, id uuid not null);
create temp table comm_snap (label text, members text);
grant all on owned, comm_snap to public;
create procedure pg_temp.seed(p text) language plpgsql as $$
declare
  pid uuid := pg_temp.id(p);
  eps uuid[];
begin
  perform memory.declare_predicate(pid, 'works at', 'one');
  select array_agg(x::uuid) into eps
    from jsonb_array_elements_text(memory.ingest(pid, 'chat', '[
      {"role": "user", "content": "I had lunch with Alice today", "occurred_at": "2021-03-01T10:00:00Z"},
      {"role": "assistant", "content": "Noted: lunch with Alice", "occurred_at": "2021-03-01T10:01:00Z"},
      {"role": "user", "content": "Bob brewed a pot of tea for Carol", "occurred_at": "2021-04-01T10:00:00Z"}]')
      -> 'episode_ids') x;
  perform memory_worker.store_embeddings('episode', eps, array[pg_temp.vec(11), pg_temp.vec(12), pg_temp.vec(13)]);
  call pg_temp.fact(p, 'acme', '{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
    "content": "Alice works at the company", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'globex', '{"subject": "Alice", "predicate": "works at", "object": "Globex", "object_type": "entity",
    "content": "Alice works at the company", "valid_from": "2022-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'tea1', '{"subject": "Bob", "predicate": "likes", "object": "Tea", "object_type": "entity",
    "content": "Bob likes tea", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'tea2', '{"subject": "Bob", "predicate": "likes", "object": "Tea", "object_type": "entity",
    "content": "Bob loves tea", "valid_from": "2021-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'initech', '{"subject": "Carol", "predicate": "works at", "object": "Initech", "object_type": "entity",
    "content": "Carol is employed by Initech", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'dave', '{"subject": "Carol", "predicate": "knows", "object": "Dave", "object_type": "entity",
    "content": "Carol is a friend of Dave", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'hooli', '{"subject": "Dan", "predicate": "works at", "object": "Hooli", "object_type": "entity",
    "content": "Dan works at Hooli", "valid_from": "2020-01-01T00:00:00Z", "valid_to": "2022-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'paris', '{"subject": "Hooli", "predicate": "located in", "object": "Paris", "object_type": "entity",
    "content": "Hooli has an office in Paris", "valid_from": "2019-01-01T00:00:00Z"}');
  perform memory_worker.store_embeddings('fact', array(select v.fact_id from memory_internal.fact_versions(pid) v),
                                  array(select pg_temp.vec(1) from memory_internal.fact_versions(pid) v));
  insert into pg_temp.owned
  select p, 'episode', e.episode_id from memory.episodes e where e.project_id = pid
  union all select p, 'entity', n.entity_id from memory.entities n where n.project_id = pid
  union all select p, 'fact', v.fact_id from memory_internal.fact_versions(pid) v;
end $$;
create function pg_temp.search(p_project text, p_query text, p_emb vector, p_at timestamptz,
                               p_known timestamptz default now(), p_k integer default 50,
                               p_legs text[] default null, p_fusion text default 'scores')
  returns jsonb language sql stable as $$
  select memory.search(pg_temp.id(p_project), p_query, p_emb, p_at, p_known, p_k, p_legs, p_fusion) $$;
create function pg_temp.hits(p_search jsonb) returns table (kind text, id uuid) language sql immutable as $$
  select x ->> 'kind', (x ->> 'id')::uuid from jsonb_array_elements(p_search -> 'results') x $$;
create function pg_temp.subjects(p_search jsonb) returns text language sql immutable as $$
  select string_agg(x ->> 'subject', ' ' order by (x ->> 'position')::int) from jsonb_array_elements(p_search -> 'results') x $$;
-- In which legs (each run alone, then all together) of a search of project
-- p with embedding vec(1) the item p.<key> is found.  A leg that did not run
-- (or failed) raises, so an empty answer cannot come from a skipped leg.
create function pg_temp.found_in(p_k text, p_query text, p_at timestamptz, p_known timestamptz default now())
  returns text[] language plpgsql stable as $$
declare
  leg text;
  r jsonb;
  found text[] := '{}';
begin
  foreach leg in array array['episode_vector', 'fact_vector', 'episode_fulltext', 'fact_fulltext',
                             'entity', 'graph', 'all'] loop
    r := pg_temp.search('p', p_query, pg_temp.vec(1), p_at, p_known, 50,
                        case when leg <> 'all' then array[leg] end);
    if (r -> 'degraded')::boolean or jsonb_array_length(r -> 'legs') <> (case when leg = 'all' then 6 else 1 end) then
      raise exception 'leg % did not run: %', leg, r;
    end if;
    if exists (select from pg_temp.hits(r) h where h.id = pg_temp.id('p.' || p_k)) then
      found := found || leg;
    end if;
  end loop;
  return found;
end $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('search org A'); b uuid := memory.create_org('search org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'p'));
  call pg_temp.seed('r');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q')),
                                 ('rrf', memory.create_project(a, 'rrf')), ('tie', memory.create_project(a, 'tie')), ('c', memory.create_project(a, 'c')),
                                 ('seeds', memory.create_project(a, 'seeds'));
  call pg_temp.seed('p');
  call pg_temp.seed('q');
end $$;
-- Record everything in p an hour ago, then retract Carol's job now.
reset role;
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
set local role chronomem_app;
call pg_temp.use('org_a');
insert into res select 'retract', memory.retract_fact(pg_temp.id('p'), pg_temp.id('p.initech'));

select is((select string_agg(v.fact_id::text || ' ' || v.valid_range::text, '; ' order by v.fact_seq)
             from memory_internal.fact_versions(pg_temp.id('p')) v
            where v.fact_id in (pg_temp.id('p.acme'), pg_temp.id('p.tea1'))),
          pg_temp.id('p.acme') || ' ["2020-01-01 00:00:00+00","2022-01-01 00:00:00+00"); '
          || pg_temp.id('p.tea1') || ' ["2020-01-01 00:00:00+00","2021-01-01 00:00:00+00")',
          'fixture: acme closed by globex in 2022, tea1 by tea2 in 2021 (same embeddings, acme/globex same text)');

-- Superseded facts: absent from every leg after their supersession, present
-- before it (positive control), and their successors present after it.
select is(pg_temp.found_in('acme', 'Alice works at the company', '2023-06-01Z'), '{}',
          'superseded acme (same text and embedding as globex) is in no leg in 2023');
select is(pg_temp.found_in('globex', 'Alice works at the company', '2023-06-01Z'),
          '{fact_vector,fact_fulltext,graph,all}', 'its successor globex is in every fact leg in 2023');
select is(pg_temp.found_in('acme', 'Alice works at the company', '2021-06-01Z'),
          '{fact_vector,fact_fulltext,graph,all}', 'acme is in every fact leg in 2021 (before its supersession)');
select is(pg_temp.found_in('tea1', 'Bob likes tea', '2023-06-01Z'), '{}',
          'superseded tea1 is in no leg in 2023, though the edge it shares with tea2 is walked');
select is(pg_temp.found_in('tea2', 'Bob likes tea', '2023-06-01Z'),
          '{fact_vector,fact_fulltext,graph,all}', 'its successor tea2 is in every fact leg in 2023');
select is(pg_temp.found_in('tea1', 'Bob likes tea', '2020-06-01Z'),
          '{fact_vector,fact_fulltext,graph,all}', 'tea1 is in every fact leg in 2020');
select is(pg_temp.found_in('tea2', 'Bob likes tea', '2020-06-01Z'), '{}', 'tea2 is in no leg in 2020, before it began');

-- Retracted fact: gone at known_at after the retraction, there before it.
select is(pg_temp.r('retract') ->> 'status', 'retracted', 'fixture: initech retracted');
select is(pg_temp.found_in('initech', 'Carol is employed by Initech', now()), '{}',
          'a retracted fact is in no leg at known_at now');
select is(pg_temp.found_in('initech', 'Carol is employed by Initech', now(), now() - interval '30 minutes'),
          '{fact_vector,fact_fulltext,graph,all}', 'it is in every fact leg at known_at before the retraction');
select is(pg_temp.found_in('dave', 'Carol is employed by Initech', now()),
          '{fact_vector,fact_fulltext,graph,all}', 'control: Carol''s other fact is in every fact leg at known_at now');
select is(pg_temp.found_in('initech', 'Carol is employed by Initech', now(), now() - interval '90 minutes'), '{}',
          'and in none at known_at before it was recorded');

-- NULL instants mean now, as in facts_at (read_instants): at NULL reads the
-- current world (superseded acme, same text and embedding as globex, in no
-- leg; globex in every fact leg), known_at NULL this transaction's writes
-- (the retraction above).
select is(pg_temp.found_in('acme', 'Alice works at the company', null, null), '{}',
          'at NULL is now: superseded acme is in no leg');
select is(pg_temp.found_in('globex', 'Alice works at the company', null, null),
          '{fact_vector,fact_fulltext,graph,all}', 'control: globex is in every fact leg at NULL');
select is(pg_temp.found_in('initech', 'Carol is employed by Initech', '2021-06-01Z', null), '{}',
          'known_at NULL sees this transaction''s retraction');
select is(pg_temp.found_in('initech', 'Carol is employed by Initech', null, now() - interval '30 minutes'),
          '{fact_vector,fact_fulltext,graph,all}', 'control: at NULL with known_at before the retraction finds it');
select is(array[(pg_temp.search('p', 'Alice', null, null, null) ->> 'at')::timestamptz,
                (pg_temp.search('p', 'Alice', null, null, null) ->> 'known_at')::timestamptz],
          array[now(), memory_internal.txn_instant()],
          'the answer names the instants it read: now and this transaction''s record-time instant');
select is(pg_temp.search('p', 'Alice works at the company', pg_temp.vec(1), null, null),
          pg_temp.search('p', 'Alice works at the company', pg_temp.vec(1), now(), memory_internal.txn_instant()),
          'search at NULL instants answers as at now');
select is(memory.context(pg_temp.id('p'), 'Where does Alice work?', pg_temp.vec(1), null, null),
          memory.context(pg_temp.id('p'), 'Where does Alice work?', pg_temp.vec(1), now(), memory_internal.txn_instant()),
          'context at NULL instants answers as at now');
select ok(memory.context(pg_temp.id('p'), 'Where does Alice work?', pg_temp.vec(1), null, null) ->> 'text'
            like format('Facts (as of %s):%%', to_char(now() at time zone 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')),
          'and its header names now');
select is((select array_agg(r.id order by r.pos) from memory.search_rows(pg_temp.id('p'), 'Alice works at the company',
                                                                         pg_temp.vec(1), null, null) r),
          (select array_agg(r.id order by r.pos) from memory.search_rows(pg_temp.id('p'), 'Alice works at the company',
                                                                         pg_temp.vec(1)) r),
          'search_rows: NULL instants and omitted ones are the same');

-- A failing leg: a query embedding of the wrong dimension fails both
-- vector legs; the text legs still answer, exactly as without an embedding.
insert into res values
  ('bad_dim', pg_temp.search('p', 'Alice works at the company', '[1,2,3]', now())),
  ('no_emb', pg_temp.search('p', 'Alice works at the company', null, now()));
select is(pg_temp.r('bad_dim') -> 'degraded', 'true', 'wrong dimension: degraded');
select is((select array_agg(f ->> 'leg' order by f ->> 'leg') from jsonb_array_elements(pg_temp.r('bad_dim') -> 'failed_legs') f),
          '{episode_vector,fact_vector}', 'failed_legs names the two vector legs');
select ok((select bool_and(f ->> 'sqlstate' ~ '^[0-9A-Z]{5}$' and f ->> 'error' like '%dimension%')
             from jsonb_array_elements(pg_temp.r('bad_dim') -> 'failed_legs') f),
          'each failed leg carries its error and SQLSTATE');
select is(pg_temp.r('bad_dim') -> 'legs', '["episode_fulltext", "fact_fulltext", "entity", "graph"]',
          'the other legs ran');
select is(pg_temp.r('bad_dim') -> 'results', pg_temp.r('no_emb') -> 'results',
          'and their results are the answer (the same as with no embedding)');
select cmp_ok(jsonb_array_length(pg_temp.r('bad_dim') -> 'results'), '>=', 3, 'which is not empty');
select throws_ok($$ select pg_temp.search('p', 'Alice', '[1,2,3]', now(), p_legs => array['fact_vector']) $$,
                 '38000', null, 'the only leg failing raises');
select throws_ok($$ select pg_temp.search('p', '', '[1,2,3]', now()) $$, '38000', null,
                 'every leg that runs failing raises (no searchable word, bad embedding)');
select is((select count(*)::int from pg_temp.hits(pg_temp.search('p', 'Alice', pg_temp.vec(1), now(), p_legs => array['fact_vector']))),
          4, 'control: the same leg with the right dimension returns the 4 facts holding now');

-- NULL embedding: vector legs skipped, not failed.
select is(pg_temp.r('no_emb') -> 'legs', '["episode_fulltext", "fact_fulltext", "entity", "graph"]',
          'NULL embedding: the vector legs are not run');
select is((pg_temp.r('no_emb') - 'results' - 'legs' - 'at' - 'known_at'), '{"degraded": false, "failed_legs": []}',
          'and are not reported as failed');

-- as_of threads into the graph walk: Paris is reachable from Dan only over
-- the Dan-Hooli edge, which closed in 2022.
select is((select count(*)::int from memory.facts_at(pg_temp.id('p'), '2023-06-01Z') f where f.fact_id = pg_temp.id('p.paris')),
          1, 'control: the Paris fact holds in 2023');
select ok(not exists (select from pg_temp.hits(pg_temp.search('p', 'Dan', null, '2023-06-01Z', p_legs => array['graph'])) h
                       where h.id = pg_temp.id('p.paris')), 'graph leg in 2023: the closed edge is not walked, Paris absent');
select is((select array_agg(h.id order by h.id) from pg_temp.hits(pg_temp.search('p', 'Dan', null, '2021-06-01Z', p_legs => array['graph'])) h),
          (select array_agg(x order by x) from unnest(array[pg_temp.id('p.hooli'), pg_temp.id('p.paris')]) x),
          'graph leg in 2021: the edge is walked, Dan''s job and Paris found');
select ok(not exists (select from pg_temp.hits(pg_temp.search('p', 'Dan', null, '2023-06-01Z', p_legs => array['entity', 'graph'])) h
                       where h.id = pg_temp.id('p.paris')), 'entity + graph legs in 2023: Paris absent');
select ok(exists (select from pg_temp.hits(pg_temp.search('p', 'Dan', null, '2021-06-01Z', p_legs => array['entity', 'graph'])) h
                   where h.id = pg_temp.id('p.paris')), 'entity + graph legs in 2021: Paris found');

-- The walk starts from the entity leg's first five, whether or not that
-- leg runs: "Brown" names no entity exactly, but shares a word with "Dan
-- Brown", so the graph alone walks from it as all legs do.  Control: a
-- question sharing no word with a name walks nothing.
do $$ begin
  call pg_temp.fact('seeds', 'brown', '{"subject": "Dan Brown", "predicate": "knows", "object": "Zed", "object_type": "entity"}');
end $$;
select is((select array_agg(x ->> 'id') from jsonb_array_elements(pg_temp.search('seeds', 'What does Brown know?', null, now(), p_legs => array['graph']) -> 'results') x),
          array[pg_temp.id('seeds.brown')::text],
          'graph alone: seeded by a name sharing a word with the question');
select is((select array_agg(x ->> 'id') from jsonb_array_elements(pg_temp.search('seeds', 'What does Brown know?', null, now()) -> 'results') x
            where x -> 'ranks' ? 'graph'),
          array[pg_temp.id('seeds.brown')::text],
          'all legs: the same walk');
select is(jsonb_array_length(pg_temp.search('seeds', 'What is new?', null, now(), p_legs => array['graph']) -> 'results'), 0,
          'control: a question sharing no word with a name walks nothing');

-- Tenancy: q (same org) and r (another org) hold the same names, texts and
-- embeddings; none of their rows ever comes back for p.
insert into res values ('p_all', pg_temp.search('p', 'Alice works at the company, Bob likes tea, Carol, Dan, Hooli',
                                                pg_temp.vec(1), now(), now(), 200)),
                       ('q_all', pg_temp.search('q', 'Alice works at the company, Bob likes tea, Carol, Dan, Hooli',
                                                pg_temp.vec(1), now(), now(), 200));
select is((select array_agg(distinct h.kind order by h.kind) from pg_temp.hits(pg_temp.r('p_all')) h),
          '{entity,episode,fact}', 'control: the search of p returns facts, episodes and entities');
select is_empty($$ select h.id from pg_temp.hits(pg_temp.r('p_all')) h
                   except select o.id from pg_temp.owned o where o.k = 'p' $$, 'every result of p is p''s own');
select is_empty($$ select h.id from pg_temp.hits(pg_temp.r('p_all')) h
                   intersect select o.id from pg_temp.owned o where o.k in ('q', 'r') $$,
                'nothing of project q or of org B''s project comes back');
select ok((select count(*) >= 10 and count(*) = count(o.id)
             from pg_temp.hits(pg_temp.r('q_all')) h left join pg_temp.owned o on o.id = h.id and o.k = 'q'),
          'control: the same search of q returns q''s own rows');
select throws_ok($$ select pg_temp.search('r', 'Alice', pg_temp.vec(1), now()) $$, 'P0002', null,
                 'org B''s project cannot be searched from org A');
call pg_temp.use('org_b');
insert into res values ('r_all', pg_temp.search('r', 'Alice works at the company, Bob likes tea, Carol, Dan, Hooli',
                                                pg_temp.vec(1), now(), now(), 200));
call pg_temp.use('org_a');
select ok((select count(*) >= 10 and count(*) = count(o.id)
             from pg_temp.hits(pg_temp.r('r_all')) h left join pg_temp.owned o on o.id = h.id and o.k = 'r'),
          'control: org B''s search of its project returns its own rows');

-- Determinism.
select is(pg_temp.search('p', 'Alice works at the company, Bob likes tea', pg_temp.vec(1), now()),
          pg_temp.search('p', 'Alice works at the company, Bob likes tea', pg_temp.vec(1), now()),
          'the same call twice gives the same answer');
-- Equal distances: project tie has 12 facts with one embedding.  Like the
-- full-text legs, the vector legs must break ties by id, not by heap order
-- (which an idempotent re-assertion, a no-op, changes).
do $$
declare b jsonb := (select jsonb_agg(jsonb_build_object('subject', 'S' || i, 'predicate', 'likes', 'object', 'thing ' || i))
                      from generate_series(1, 12) i);
begin
  perform memory.assert_facts(pg_temp.id('tie'), b);
  -- One at a time in descending id order, so the heap order is not the id order.
  perform memory_worker.store_embeddings('fact', array[f.fact_id], array[pg_temp.vec(1)])
     from memory.facts_at(pg_temp.id('tie')) f order by f.fact_id desc;
  insert into pg_temp.res values ('tie1', pg_temp.search('tie', 'zzz', pg_temp.vec(1), now(), p_legs => array['fact_vector']));
  perform memory.assert_facts(pg_temp.id('tie'), (select jsonb_agg(x) from jsonb_array_elements(b) with ordinality u(x, n)
                                                   where n % 2 = 0));
  insert into pg_temp.res values ('tie2', pg_temp.search('tie', 'zzz', pg_temp.vec(1), now(), p_legs => array['fact_vector']));
end $$;
select is((select array_agg((x ->> 'id')::uuid order by (x #>> '{ranks,fact_vector}')::int)
             from jsonb_array_elements(pg_temp.r('tie1') -> 'results') x),
          (select array_agg(f.fact_id order by f.fact_id) from memory.facts_at(pg_temp.id('tie')) f),
          'vector leg: equally distant facts are ranked by id');
select is(pg_temp.subjects(pg_temp.r('tie2')), pg_temp.subjects(pg_temp.r('tie1')),
          'an idempotent re-assertion (all skipped) does not change the answer');

-- Fusion: a fact first in two legs outranks an episode first in one.  Each
-- leg has a single hit, which its normalised scale scores 1.
do $$
declare pid uuid := pg_temp.id('rrf'); e uuid;
begin
  call pg_temp.fact('rrf', 'f', '{"subject": "Quinn", "predicate": "likes", "object": "zebra stripes"}');
  perform memory_worker.store_embeddings('fact', array[pg_temp.id('rrf.f')], array[pg_temp.vec(7)]);
  e := (memory.ingest(pid, 'chat', '[{"role": "user", "content": "nothing relevant here"}]') #>> '{episode_ids,0}')::uuid;
  insert into pg_temp.ids values ('rrf.e', e);
  perform memory_worker.store_embeddings('episode', array[e], array[pg_temp.vec(7)]);
end $$;
select is((select jsonb_agg(x - 'text' - 'subject' - 'predicate' - 'object' - 'valid_from' - 'valid_until' - 'confidence' - 'standing'
                              - 'role' - 'occurred_at' - 'session' - 'seq' order by (x ->> 'position')::int)
             from jsonb_array_elements(pg_temp.search('rrf', 'zebra', pg_temp.vec(7), now()) -> 'results') x),
          jsonb_build_array(
            jsonb_build_object('position', 1, 'kind', 'fact', 'id', pg_temp.id('rrf.f'), 'score', 2.0,
                               'ranks', '{"fact_vector": 1, "fact_fulltext": 1}'::jsonb),
            jsonb_build_object('position', 2, 'kind', 'episode', 'id', pg_temp.id('rrf.e'), 'score', 1.0,
                               'ranks', '{"episode_vector": 1}'::jsonb)),
          'fusion: found first by two legs (1 + 1) outranks found first by one (1)');
select is((select jsonb_agg(jsonb_build_array(x ->> 'kind', x -> 'score', x -> 'ranks') order by (x ->> 'position')::int)
             from jsonb_array_elements(pg_temp.search('rrf', 'zebra', pg_temp.vec(7), now(), p_fusion => 'rrf') -> 'results') x),
          jsonb_build_array(jsonb_build_array('fact', round(2.0 / 61, 6), '{"fact_vector": 1, "fact_fulltext": 1}'::jsonb),
                            jsonb_build_array('episode', round(1.0 / 61, 6), '{"episode_vector": 1}'::jsonb)),
          'p_fusion rrf: each hit scores the sum of 1/(60 + rank) over the legs that found it');

-- Arguments.
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_legs => array['graph', 'telepathy']) $$,
                 '22023', null, 'an unknown leg name is 22023');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_k => 0) $$, '22023', null, 'k = 0 is 22023');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_fusion => 'borda') $$,
                 '22023', 'unknown fusion ''borda''; fusions are scores, rrf', 'an unknown fusion is 22023, named');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_fusion => null) $$,
                 '22023', null, 'fusion NULL is 22023');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_k => 201) $$, '22023', null, 'k = 201 is 22023');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, 'infinity') $$, '22023',
                 'as_of and known_at must be finite', 'at infinity names no instant: 22023');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), '-infinity') $$, '22023',
                 'as_of and known_at must be finite', 'nor does known_at -infinity');
select throws_ok($$ select memory.context(pg_temp.id('p'), 'Alice', null, 'infinity') $$, '22023',
                 'as_of and known_at must be finite', 'context: the same');
select throws_ok($$ select pg_temp.search('p', 'Alice', null, now(), p_k => null) $$, '22023', null, 'k NULL is 22023');
select is((select count(*)::int from pg_temp.hits(pg_temp.search('p', 'Alice works at the company', pg_temp.vec(1), now(), p_k => 1))),
          1, 'control: k = 1 gives one result');
select lives_ok($$ select pg_temp.search('p', 'Alice', pg_temp.vec(1), now(), p_k => 200, p_legs => array['entity', 'graph']) $$,
                'control: k = 200 and a subset of legs are accepted');

-- memory.context.
insert into res values
  ('ctx', memory.context(pg_temp.id('p'), 'Alice works at the company, Bob likes tea', pg_temp.vec(1),
                         '2023-06-01 12:00Z', now(), 1500)),
  ('ctx_small', memory.context(pg_temp.id('p'), 'Alice works at the company, Bob likes tea', pg_temp.vec(1),
                               '2023-06-01 12:00Z', now(), 50));
select ok(pg_temp.r('ctx') ->> 'text' like 'Facts (as of 2023-06-01 12:00 UTC):' || E'\n' || '%',
          'context starts with the facts, naming the instant');
select ok(strpos(pg_temp.r('ctx') ->> 'text', E'\nConversation excerpts:\n') > 0
          and strpos(pg_temp.r('ctx') ->> 'text', E'\nConversation excerpts:\n')
              > strpos(pg_temp.r('ctx') ->> 'text', '- Alice works at the company (valid 2022-01-01 – now)'),
          'facts with their windows come before the conversation excerpts');
select is((select count(*)::int from regexp_split_to_table(pg_temp.r('ctx') ->> 'text', E'\n') l
            where l ~ '^- .* \(valid \d{4}-\d\d-\d\d – (\d{4}-\d\d-\d\d|now)\)$'),
          jsonb_array_length(pg_temp.r('ctx') -> 'facts'), 'every fact line has its window');
select ok(jsonb_array_length(pg_temp.r('ctx') -> 'facts') >= 4 and jsonb_array_length(pg_temp.r('ctx') -> 'episodes') >= 1,
          'the full budget holds facts and episodes');
select ok((pg_temp.r('ctx_small') ->> 'tokens')::int <= 50
          and array_length(string_to_array(pg_temp.r('ctx_small') ->> 'text', E'\n'), 1)
              < array_length(string_to_array(pg_temp.r('ctx') ->> 'text', E'\n'), 1)
          and pg_temp.r('ctx_small') ->> 'text' like 'Facts (as of%',
          'a budget of 50 tokens gives fewer lines, still facts first');
select is_empty($$ select b from generate_series(50, 300, 10) b
                    where memory_internal.estimate_tokens(memory.context(pg_temp.id('p'), 'Alice works at the company, Bob likes tea',
                            pg_temp.vec(1), '2023-06-01 12:00Z', now(), b) ->> 'text') > b $$,
                'the whole text (headers included) stays within every budget from 50 to 300 tokens');

-- Communities: Ann-Ben-Cat and Dee-Eve are two components; Dee-Fay's edge
-- closed in 2020 and links nothing.
call pg_temp.fact('c', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
call pg_temp.fact('c', 'bc', '{"subject": "Ben", "predicate": "knows", "object": "Cat", "object_type": "entity"}');
call pg_temp.fact('c', 'de', '{"subject": "Dee", "predicate": "knows", "object": "Eve", "object_type": "entity"}');
call pg_temp.fact('c', 'df', '{"subject": "Dee", "predicate": "knows", "object": "Fay", "object_type": "entity",
                               "valid_from": "2019-01-01T00:00:00Z", "valid_to": "2020-01-01T00:00:00Z"}');
create function pg_temp.communities() returns table (label text, members text) language sql stable as $$
  select c.label, string_agg(n.normalized_name, ',' order by n.normalized_name)
    from memory.communities c
    join memory.community_members m on m.org_id = c.org_id and m.community_id = c.community_id
    join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id
   where c.project_id = pg_temp.id('c') group by c.community_id, c.label $$;
insert into res values ('comm1', memory.compute_communities(pg_temp.id('c')));
select is(pg_temp.r('comm1') -> 'communities', '2', 'two components: two communities');
select set_eq('select members from pg_temp.communities()', $$ values ('ann,ben,cat'), ('dee,eve') $$,
              'each community is one connected component (Fay, linked only by a closed edge, in none)');
select is((select label from pg_temp.communities() where members = 'ann,ben,cat'), 'Ben',
          'labelled by the best-connected member');
insert into comm_snap select * from pg_temp.communities();
insert into res values ('comm2', memory.compute_communities(pg_temp.id('c')));
select bag_eq('select label, members from pg_temp.communities()', 'select label, members from pg_temp.comm_snap',
              'computing again gives the same communities, each stored once');

-- A graph on which synchronous rounds never settle: n1, n4, n5 and n6 trade
-- two labels every round.  Labels are entity ids, so the ids are set (as the
-- owner) to give the label order that does it (n3 < n0 < n7 < n6 < n4 < n5
-- < n1); found by simulating the rule.  The rounds after the tenth move one
-- colour at a time and end.
insert into pg_temp.ids values ('osc', memory.create_project(pg_temp.id('org_a'), 'osc'));
reset role;
insert into memory.entities (org_id, project_id, entity_id, name, normalized_name)
select pg_temp.id('org_a'), pg_temp.id('osc'), format('00000000-0000-4000-8000-%s', lpad(o::text, 12, '0'))::uuid,
       'n' || n, 'n' || n
  from unnest(array[3, 0, 7, 6, 4, 5, 1]) with ordinality u(n, o);
set local role chronomem_app;
call pg_temp.use('org_a');
insert into res select 'osc_facts', memory.assert_facts(pg_temp.id('osc'), (
  select jsonb_agg(jsonb_build_object('subject', 'n' || a, 'predicate', 'links', 'object', 'n' || b, 'object_type', 'entity'))
    from (values (0, 3), (0, 6), (1, 4), (1, 6), (3, 7), (4, 5), (4, 7), (5, 6)) e(a, b)));
insert into res values ('osc', memory.compute_communities(pg_temp.id('osc')));
select ok((pg_temp.r('osc') ->> 'converged')::boolean and (pg_temp.r('osc') ->> 'rounds')::int < 20
          and (pg_temp.r('osc_facts') ->> 'inserted')::int = 8,
          'label propagation settles where synchronous rounds trade labels forever');
select set_eq($$ select string_agg(n.name, ',' order by n.name) from memory.community_members m
                  join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id
                 where m.project_id = pg_temp.id('osc') group by m.community_id $$,
              $$ values ('n0,n3,n7'), ('n1,n4,n5,n6') $$,
              'into the two groups the rule gives (every entity in one)');

-- memory.context's last section: the communities holding an entity the
-- context names.  c's facts and entities are recorded an hour back (as p's),
-- its communities now.  c2 (same org) holds Ann-Ben-Cat too, and its own
-- community of them; cs is a star of eleven (Hub knows M01 .. M10).
reset role;
call pg_temp.shift_back(pg_temp.id('c'), '1 hour');
set local role chronomem_app;
call pg_temp.use('org_a');
insert into pg_temp.ids values ('c2', memory.create_project(pg_temp.id('org_a'), 'c2')),
                               ('cs', memory.create_project(pg_temp.id('org_a'), 'cs'));
call pg_temp.fact('c2', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity"}');
call pg_temp.fact('c2', 'bc', '{"subject": "Ben", "predicate": "knows", "object": "Cat", "object_type": "entity"}');
insert into res select 'cs_facts', memory.assert_facts(pg_temp.id('cs'), (
  select jsonb_agg(jsonb_build_object('subject', 'Hub', 'predicate', 'knows', 'object', format('M%s', to_char(i, 'FM00')),
                                      'object_type', 'entity'))
    from generate_series(1, 10) i));
insert into res values ('comm_c2', memory.compute_communities(pg_temp.id('c2'))),
                       ('comm_cs', memory.compute_communities(pg_temp.id('cs')));
create function pg_temp.groups(p_ctx jsonb) returns text language sql immutable as $$
  select string_agg(x ->> 'label' || ':' || (x ->> 'members') || ':' || (x ->> 'more'), '; ')
    from jsonb_array_elements(p_ctx -> 'communities') x $$;
create function pg_temp.entity_hit(p_project text, p_query text, p_at timestamptz, p_known timestamptz)
  returns boolean language sql stable as $$
  select exists (select from pg_temp.hits(pg_temp.search(p_project, p_query, null, p_at, p_known)) h
                  join memory.entities e on e.entity_id = h.id
                 where h.kind = 'entity' and e.project_id = pg_temp.id(p_project) and e.name = 'Ann') $$;
insert into res values
  ('ctx_ann', memory.context(pg_temp.id('c'), 'Tell me about Ann', null, now(), now(), 1500)),
  ('ctx_dee', memory.context(pg_temp.id('c'), 'Tell me about Dee', null, now(), now(), 1500)),
  ('ctx_ann_before', memory.context(pg_temp.id('c'), 'Tell me about Ann', null, now() - interval '1 day', now(), 1500)),
  ('ctx_ann_unknown', memory.context(pg_temp.id('c'), 'Tell me about Ann', null, now(), now() - interval '30 minutes', 1500)),
  ('ctx_m03', memory.context(pg_temp.id('cs'), 'Tell me about M03', null, now(), now(), 1500, 3));
select is(pg_temp.groups(pg_temp.r('ctx_ann')), 'Ben:["Ann", "Ben", "Cat"]:0',
          'context naming Ann: her community, every member named; Dee''s, of the same run, absent');
select is(pg_temp.groups(pg_temp.r('ctx_dee')), 'Dee:["Dee", "Eve"]:0', 'control: naming Dee gives Dee''s');
select is((select array_agg(c.project_id) from jsonb_array_elements(pg_temp.r('ctx_ann') -> 'communities') x
             join memory.communities c on c.community_id = (x ->> 'community_id')::uuid),
          array[pg_temp.id('c')], 'the community is c''s, not c2''s of the same names');
select ok(pg_temp.r('ctx_ann') ->> 'text' like 'Facts (as of %'
          and pg_temp.r('ctx_ann') ->> 'text' like E'%\nRelated groups (computed '
              || to_char(now() at time zone 'UTC', 'YYYY-MM-DD HH24:MI') || E' UTC):\n- Ben (3 members): Ann, Ben, Cat',
          'the text ends with the groups, after the facts, with the computation''s instant');
select ok(pg_temp.entity_hit('c', 'Tell me about Ann', now() - interval '1 day', now())
          and pg_temp.groups(pg_temp.r('ctx_ann_before')) is null
          and strpos(pg_temp.r('ctx_ann_before') ->> 'text', 'Related groups') = 0,
          'at an instant before the communities were computed: none (the question still matches Ann)');
select ok(pg_temp.entity_hit('c', 'Tell me about Ann', now(), now() - interval '30 minutes')
          and pg_temp.groups(pg_temp.r('ctx_ann_unknown')) is null,
          'as believed before they were computed: none (Ann was known then)');
select ok((select bool_and(x -> 'members' ? 'M03' and (x ->> 'more')::int = 11 - jsonb_array_length(x -> 'members')
                           and (x ->> 'more')::int > 0 and (x ->> 'size')::int = 11)
             from jsonb_array_elements(pg_temp.r('ctx_m03') -> 'communities') x)
          and jsonb_array_length(pg_temp.r('ctx_m03') -> 'communities') = 1
          and pg_temp.r('ctx_m03') ->> 'text' ~ E'\n- Hub \\(11 members\\): .*M03.* and [0-9]+ more$',
          'a community of more than eight: the members the context names, and how many more');
select is_empty($$ select b from generate_series(50, 300, 5) b
                    cross join lateral (select memory.context(pg_temp.id('cs'), 'Tell me about M03', null, now(), now(), b) x) c
                   where memory_internal.estimate_tokens(c.x ->> 'text') > b
                      or jsonb_array_length(c.x -> 'communities')
                         <> (select count(*) from regexp_split_to_table(c.x ->> 'text', E'\n') l where l like '- Hub (%') $$,
                'every budget from 50 to 300 tokens holds the text, and JSON and text list the same groups');
select ok(jsonb_array_length(memory.context(pg_temp.id('cs'), 'Tell me about M03', null, now(), now(), 50) -> 'communities') = 0
          and jsonb_array_length(memory.context(pg_temp.id('cs'), 'Tell me about M03', null, now(), now(), 1500) -> 'communities') = 1,
          'control: the star''s group fits the full budget, not the smallest');

select * from finish();
ROLLBACK;
