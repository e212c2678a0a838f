-- 13 search, episode vector leg within a named period: when the question
-- names a day (month, year), the leg also ranks that period's turns on their
-- own, so a turn of that day that the project's nearest turns crowd out of
-- the leg is still scored; turns of other days are not added, nor turns
-- that had not occurred (or were not known) at the instant asked.  A period
-- of more than 2000 episodes is searched through the HNSW index.  Runs as
-- chronomem_app.
BEGIN;
select plan(19);

-- One turn in its own session (no context shares between these turns),
-- named p_k, with an embedding.
create function pg_temp.turn(p_project text, p_k text, p_at timestamptz, p_embedding vector) returns void
  language plpgsql as $$
declare e uuid;
begin
  e := (memory.ingest(pg_temp.id(p_project), p_k, jsonb_build_array(jsonb_build_object(
          'role', 'user', 'content', 'We talked about ' || p_k, 'occurred_at', p_at))) -> 'episode_ids' ->> 0)::uuid;
  insert into pg_temp.ids values (p_k, e);
  perform memory_worker.store_embeddings('episode', array[e], array[p_embedding]);
end $$;
-- memory.search's vector leg alone (k 10: the leg ranks 30), query vec(1):
-- the episode keys it returns, in order, each with its vector-leg rank.
create function pg_temp.found(p_query text) returns jsonb language sql as $$
  select coalesce(jsonb_agg(jsonb_build_array(i.k, x -> 'ranks' -> 'episode_vector')
                            order by (x ->> 'position')::integer), '[]')
    from jsonb_array_elements(memory.search(pg_temp.id('vp'), p_query, pg_temp.vec(1), p_k => 10,
                                            p_legs => array['episode_vector']) -> 'results') x
    join pg_temp.ids i on i.id = (x ->> 'id')::uuid $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('period vector org');
begin
  perform memory.use_org(a);
  insert into pg_temp.ids values ('vp', memory.create_project(a, 'vp')), ('wide', memory.create_project(a, 'wide'));
end $$;

-- Project vp: 40 turns on 10 June 2023 with the query's own embedding (the
-- leg's 30 nearest come from them); on 3 May 2023 the target, whose
-- embedding is the query's plus another (similarity above 0, below
-- theirs), and a turn pointing away from the query (the leg's weakest);
-- on 5 June 2023 a turn with the target's embedding, and another away.
do $$ begin
  perform pg_temp.turn('vp', 'near' || g, timestamptz '2023-06-10T10:00:00Z' + g * interval '1 minute', pg_temp.vec(1))
     from generate_series(1, 40) g;
  perform pg_temp.turn('vp', 'target', '2023-05-03T10:00:00Z', pg_temp.vec(1) + pg_temp.vec(2));
  perform pg_temp.turn('vp', 'away', '2023-05-03T11:00:00Z',
                       (select array_agg(-x order by o) from unnest(pg_temp.vec(1)::real[]) with ordinality u(x, o))::vector);
  perform pg_temp.turn('vp', 'other day', '2023-06-05T10:00:00Z', pg_temp.vec(1) + pg_temp.vec(2));
  perform pg_temp.turn('vp', 'away too', '2023-06-05T11:00:00Z',
                       (select array_agg(-x order by o) from unnest(pg_temp.vec(1)::real[]) with ordinality u(x, o))::vector);
end $$;

select is((pg_temp.found('What did we talk about on 3 May 2023?')) -> 0, '["target", 31]'::jsonb,
          'a question naming a day: its turn, crowded out of the project''s nearest 30, is in the leg and first');
select ok(not pg_temp.found('What did we talk about on 3 May 2023?') @> '[["other day"]]',
          'a turn of another day with the same embedding is not added');
select ok(not pg_temp.found('What did we talk about?') @> '[["target"]]',
          'control: without a date the target is crowded out of the leg');
select ok(not pg_temp.found('What did we talk about on 4 May 2023?') @> '[["target"]]',
          'control: nor is it added for another day');
select is((pg_temp.found('What did we talk about on 5 June 2023?')) -> 0, '["other day", 31]'::jsonb,
          'control: its own day brings the other turn in');
select is((pg_temp.found('What did we talk about in May 2023?')) -> 0, '["target", 31]'::jsonb,
          'a month named: the same');

-- The function itself: the period's turns, best first; the instant asked.
select is((select array_agg(i.k order by x.ord)
             from memory_internal.search_episode_vector_within(pg_temp.id('vp'), pg_temp.vec(1),
                    tstzrange('2023-05-03Z', '2023-05-04Z'), now(), now(), 10) with ordinality x(episode_id, score, ord)
             join pg_temp.ids i on i.id = x.episode_id),
          array['target', 'away'], 'search_episode_vector_within: the day''s turns, nearest first');
select is((select count(*)::integer
             from memory_internal.search_episode_vector_within(pg_temp.id('vp'), pg_temp.vec(1),
                    tstzrange('2023-05-03Z', '2023-05-04Z'), '2023-05-03T10:30:00Z', now(), 10)),
          1, 'a turn that had not occurred at the instant asked is left out');
select is((select count(*)::integer
             from memory_internal.search_episode_vector_within(pg_temp.id('vp'), pg_temp.vec(1),
                    tstzrange('2023-05-03Z', '2023-05-04Z'), now(), now() - interval '1 day', 10)),
          0, 'so is one not yet known at known_at');

-- A period holding more than 2000 episodes goes through the HNSW index:
-- project wide has 2050 turns on one day (21 sessions), one of them with
-- the query's embedding, the others spread over 30 other directions.
do $$
declare e uuid[];
begin
  for s in 1 .. 21 loop
    e := array(select jsonb_array_elements_text(memory.ingest(pg_temp.id('wide'), 'w' || s,
           (select jsonb_agg(jsonb_build_object('role', 'user', 'content', 'turn ' || g,
                                                'occurred_at', timestamptz '2023-07-01T00:00:00Z' + (s * 100 + g) * interval '1 second')
                             order by g)
              from generate_series(1, case when s = 21 then 50 else 100 end) g)) -> 'episode_ids')::uuid);
    perform memory_worker.store_embeddings('episode', e,
              array(select case when s = 7 and o = 5 then pg_temp.vec(1) else pg_temp.vec(10 + (o::integer % 30)) end
                      from unnest(e) with ordinality u(id, o) order by o));
    if s = 7 then insert into pg_temp.ids values ('wide target', e[5]); end if;
  end loop;
end $$;
select is((select count(*)::integer from memory.episodes where project_id = pg_temp.id('wide')), 2050,
          'fixture: 2050 turns in the day');
set local hnsw.iterative_scan = 'relaxed_order';
select is((select x.episode_id
             from memory_internal.search_episode_vector_within(pg_temp.id('wide'), pg_temp.vec(1),
                    tstzrange('2023-07-01Z', '2023-07-02Z'), now(), now(), 5) with ordinality x(episode_id, score, ord)
            where x.ord = 1),
          pg_temp.id('wide target'), 'a period of more than 2000 turns: its nearest turn comes first (HNSW)');
select is((select count(*)::integer
             from memory_internal.search_episode_vector_within(pg_temp.id('wide'), pg_temp.vec(1),
                    tstzrange('2023-07-02Z', '2023-07-03Z'), now(), now(), 5)),
          0, 'control: a day without turns gives none');

-- How many rows a period may hold and still be ranked exactly: the filtered
-- HNSW walk visits about p_n / share of the index, so the budget grows with
-- the index (sqrt(5 * p_n * rows)), never below 2000.
select is(memory_internal.vector_exact_budget(30, 10000), 2000,
          'a small index: the budget is 2000 (what a 2050-turn day above relies on)');
select is(memory_internal.vector_exact_budget(30, 1000000), 12248,
          'a million rows: a month of 8,500 turns is ranked exactly');
select ok(memory_internal.vector_exact_budget(30, 4000000) > memory_internal.vector_exact_budget(30, 1000000),
          'a bigger index: a bigger budget');
select is(memory_internal.vector_exact_budget(30, -1), 2000,
          'a never-analyzed table (reltuples -1): the floor');

-- How wide memory.search walks the HNSW graph for p_n hits: 8 per hit,
-- between 100 and 500 (tests/py/test_search_plan.py shows what it finds).
select is(memory_internal.vector_ef_search(30), 240, 'k = 10 asks 30 hits: a walk 240 wide');
select is(memory_internal.vector_ef_search(5), 100, 'few hits: at least 100');
select is(memory_internal.vector_ef_search(600), 500, 'k = 200 asks 600 hits: at most 500');

select * from finish();
ROLLBACK;
