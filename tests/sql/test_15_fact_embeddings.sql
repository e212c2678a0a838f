-- 15 fact embeddings: memory.fact_embeddings (sql/0026) holds one row per
-- embedded fact version, written by memory_worker.store_embeddings under the
-- version's own project and org; closing a version's window (supersession,
-- retraction) leaves that row as it was; a wipe deletes it with its version;
-- nobody writes it but store_embeddings.
-- Runs as chronomem_app (the owner-only checks as the superuser first).
--
-- Org A: project p (Zoltan lives in Oslo, then Bergen; Quentin likes tea;
-- Ada likes chess) and project q (the same Oslo fact).  Org B: project r
-- (the same Oslo fact).
BEGIN;
select plan(31);

-- Where the row is: any rewrite of it (HOT or not) moves it.
create function pg_temp.emb_ctid(p_fact text) returns text language sql stable as $$
  select e.ctid::text from memory.fact_embeddings e where e.fact_id = pg_temp.id(p_fact) $$;
create function pg_temp.embedded(p_project text) returns bigint language sql stable as $$
  select count(*) from memory.fact_embeddings e where e.project_id = pg_temp.id(p_project) $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('fact embeddings org A'); b uuid := memory.create_org('fact embeddings org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  call pg_temp.fact('r', 'oslo', '{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo",
    "valid_from": "2020-01-01T00:00:00Z"}');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  perform memory.declare_predicate(pg_temp.id('p'), 'lives in', 'one');
  call pg_temp.fact('p', 'oslo', '{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo",
    "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact('p', 'tea', '{"subject": "Quentin", "predicate": "likes", "object": "tea",
    "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact('p', 'chess', '{"subject": "Ada", "predicate": "likes", "object": "chess",
    "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact('q', 'oslo', '{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo",
    "valid_from": "2020-01-01T00:00:00Z"}');
end $$;

-- store_embeddings: the org's versions only, under their own project.
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('r.oslo'), pg_temp.id('p.oslo')],
                                  array[pg_temp.vec(1), pg_temp.vec(1)]),
          1, 'org A stores one of two ids: org B''s version is not its to embed');
select is(memory_worker.store_embeddings('fact', array[gen_random_uuid()], array[pg_temp.vec(1)]), 0,
          'an id of no version stores nothing and is no error');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.tea'), pg_temp.id('p.chess'), pg_temp.id('q.oslo')],
                                  array[pg_temp.vec(2), pg_temp.vec(3), pg_temp.vec(1)]),
          3, 'versions of two projects in one call');
select is((select array_agg(e.project_id = pg_temp.id(split_part(i.k, '.', 1)) order by i.k)
             from pg_temp.ids i join memory.fact_embeddings e on e.fact_id = i.id
            where i.k in ('p.oslo', 'p.tea', 'p.chess', 'q.oslo')),
          array[true, true, true, true], 'each embedding is stored under its version''s project');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.tea'), pg_temp.id('p.tea')],
                                  array[pg_temp.vec(5), pg_temp.vec(6)]),
          1, 'an id given twice is stored once');
select is((select e.embedding from memory.fact_embeddings e where e.fact_id = pg_temp.id('p.tea')),
          pg_temp.vec(6), 'the last vector given for it wins');
select throws_ok(
  format('select memory_worker.store_embeddings(''fact'', array[%L::uuid], array[''[1,2,3]''::vector])', pg_temp.id('p.chess')),
  '22000', 'expected 384 dimensions, not 3', 'a vector of the wrong dimension is an error');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.chess')], array[null::vector]), 1,
          'a NULL vector clears');
select is((select count(*) from memory.fact_embeddings e where e.fact_id = pg_temp.id('p.chess')), 0::bigint,
          'the cleared version has no embedding');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.chess')], array[pg_temp.vec(3)]), 1,
          'control: and gets one again');

-- Tenancy: org B sees its own embedding only.
do $$ begin
  perform memory.use_org(pg_temp.id('org_b'));
  insert into pg_temp.snap values ('b_sees',
    (select string_agg(e.fact_id::text, ',') from memory.fact_embeddings e));
  perform memory_worker.store_embeddings('fact', array[pg_temp.id('r.oslo')], array[pg_temp.vec(1)]);
  insert into pg_temp.snap values ('b_after',
    (select string_agg(e.fact_id::text, ',') from memory.fact_embeddings e));
  perform memory.use_org(pg_temp.id('org_a'));
end $$;
select is((select v from pg_temp.snap where k = 'b_sees'), null, 'org B sees none of org A''s embeddings');
select is((select v from pg_temp.snap where k = 'b_after'), pg_temp.id('r.oslo')::text,
          'control: org B sees the one it stored');

-- Closing a window leaves the embedding as it was: superseding p.oslo by
-- Bergen, and retracting p.tea, rewrite their facts rows, not these.
insert into pg_temp.snap values ('oslo_ctid', pg_temp.emb_ctid('p.oslo')), ('tea_ctid', pg_temp.emb_ctid('p.tea'));
call pg_temp.fact('p', 'bergen', '{"subject": "Zoltan", "predicate": "lives in", "object": "Bergen",
  "valid_from": "2022-01-01T00:00:00Z"}');
select is((select upper(f.valid_range) from memory_internal.fact_versions(pg_temp.id('p')) f
            where f.fact_id = pg_temp.id('p.oslo')), '2022-01-01T00:00:00Z'::timestamptz,
          'fixture: Bergen closed Oslo''s window');
select is(memory.retract_fact(pg_temp.id('p'), pg_temp.id('p.tea'), 'test') ->> 'status', 'retracted',
          'fixture: tea retracted');
select is(pg_temp.emb_ctid('p.oslo'), (select v from pg_temp.snap where k = 'oslo_ctid'),
          'a superseded version''s embedding row is not rewritten');
select is(pg_temp.emb_ctid('p.tea'), (select v from pg_temp.snap where k = 'tea_ctid'),
          'a retracted version''s embedding row is not rewritten');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.bergen')], array[pg_temp.vec(1)]), 1,
          'Bergen gets the same embedding as Oslo');
select isnt(pg_temp.emb_ctid('p.bergen'), null, 'control: a stored row has a place');
select is(memory_worker.store_embeddings('fact', array[pg_temp.id('p.oslo')], array[pg_temp.vec(1)]), 1,
          'fixture: Oslo''s stored again');
select isnt(pg_temp.emb_ctid('p.oslo'), (select v from pg_temp.snap where k = 'oslo_ctid'),
            'control: storing it again does rewrite it');
-- The vector leg: the same embedding, and only the instant decides.
select is((select array_agg(x.fact_id order by x.distance, x.fact_id)
             from memory_internal.search_fact_vector(pg_temp.id('p'), pg_temp.vec(1), '2021-01-01', now(), 5) x
            where x.distance < 0.001),
          array[pg_temp.id('p.oslo')], 'at an instant Oslo held, the leg finds Oslo, not Bergen');
select is((select array_agg(x.fact_id order by x.distance, x.fact_id)
             from memory_internal.search_fact_vector(pg_temp.id('p'), pg_temp.vec(1), '2023-01-01', now(), 5) x
            where x.distance < 0.001),
          array[pg_temp.id('p.bergen')], 'after the supersession, Bergen, not Oslo');

-- Nobody writes the table but store_embeddings.
select throws_ok(
  format('insert into memory.fact_embeddings values (%L, %L, %L, %L)', pg_temp.id('org_a'), pg_temp.id('p'),
         pg_temp.id('p.bergen'), pg_temp.vec(1)),
  '42501', null, 'the app role cannot insert an embedding itself');
-- Wipes take the embeddings with their versions (the versions' delete
-- trigger: the table has no foreign key, sql/0028).
select is(pg_temp.embedded('q'), 1::bigint, 'fixture: q''s version has its embedding');
select is(memory.wipe(pg_temp.id('q')) ->> 'scope', 'project', 'fixture: q wiped');
select is(pg_temp.embedded('q'), 0::bigint, 'a project wipe takes its versions'' embeddings');

select is(memory.wipe(pg_temp.id('p'), p_subject => 'Zoltan') ->> 'scope', 'subject', 'fixture: Zoltan wiped in p');
select is((select array_agg(i.k order by i.k) from pg_temp.ids i join memory.fact_embeddings e on e.fact_id = i.id
            where i.k like '_.%'),
          array['p.chess', 'p.tea'], 'the subject''s versions'' embeddings are gone; the rest stay');
select is(memory.wipe(pg_temp.id('p')) ->> 'scope', 'project', 'fixture: p wiped');
select is(pg_temp.embedded('p') || '/' || (select count(*) from memory.fact_embeddings), '0/0',
          'a project wipe leaves none of p''s');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select is((select count(*) from memory.fact_embeddings), 1::bigint, 'control: org B''s embedding stays');

select * from finish();
ROLLBACK;
