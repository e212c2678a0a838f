-- 04 as-of reads: memory.facts_at(project, at, known_at) at instants before,
-- at and after each change.  Valid ranges are [lower, upper): lower bound
-- inclusive, upper bound exclusive.
--
-- known_at: inside one transaction now() is constant, so every row would be
-- recorded at the same instant.  To read "as believed earlier" this file
-- simulates earlier writes: after each step, pg_temp.shift_back moves every
-- record-time column of the project (recorded_at, range_changed_at,
-- invalid_at, fact_events.occurred_at, edges, tombstones) back by one hour,
-- as superuser with triggers off (fact_events is otherwise append-only).
-- Step 1 is thus recorded at now() - 2h, step 2 at now() - 1h, step 3 at
-- now().  Cross-transaction known_at is also covered by pytest.
BEGIN;
select plan(29);

create procedure pg_temp.put(p_facts jsonb) language sql
  as $$ select memory.assert_facts(pg_temp.id('p'), p_facts) $$;
create procedure pg_temp.exec(p_sql text) language plpgsql as $$ begin execute p_sql; end $$;
-- Where Alice works at world instant p_at, as believed at p_known.
create function pg_temp.works(p_at timestamptz, p_known timestamptz default now()) returns text
  language sql stable as $$
  select string_agg(f.object_key, ',' order by f.object_key)
    from memory.facts_at(pg_temp.id('p'), p_at, p_known) f where f.predicate = 'works at' $$;
create function pg_temp.holds(p_content text, p_at timestamptz) returns boolean
  language sql stable as $$
  select exists (select from memory.facts_at(pg_temp.id('p'), p_at) f where f.content = p_content) $$;

set local role chronomem_app;
do $$
declare o uuid := memory.create_org('as-of org');
begin
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
end $$;

-- Step 1 (recorded at now() - 2h): Alice works at Acme from 2020.
call pg_temp.put('[{"subject": "Alice", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}]');
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
-- Step 2 (now() - 1h): Alice works at Globex from 2022.
call pg_temp.put('[{"subject": "Alice", "predicate": "works at", "object": "Globex", "valid_from": "2022-01-01T00:00:00Z"}]');
call pg_temp.shift_back(pg_temp.id('p'), '1 hour');
-- Step 3 (now()): the Globex job ends at 2024; a future and a bounded fact.
insert into ids select 'globex', fact_id from memory.facts_at(pg_temp.id('p'), '2023-01-01Z') where object_key = 'globex';
call pg_temp.exec($$ select memory.close_fact(pg_temp.id('p'), pg_temp.id('globex'), '2024-01-01Z') $$);
call pg_temp.put('[{"subject": "Bob", "predicate": "likes", "object": "tea", "content": "future tea",
                    "valid_from": "2100-01-01T00:00:00Z"},
                   {"subject": "Cy", "predicate": "likes", "object": "jazz", "content": "one day of jazz",
                    "valid_from": "2020-03-01T00:00:00Z", "valid_to": "2020-03-02T00:00:00Z"}]');

-- known_at = now: each change's instant, and the instants just before.
select is(pg_temp.works('2019-12-31 23:59:59.999999Z'), null, 'before Acme starts: nothing');
select is(pg_temp.works('2020-01-01 00:00:00Z'), 'acme', 'at Acme''s start (lower bound inclusive): Acme');
select is(pg_temp.works('2021-06-01Z'), 'acme', 'inside Acme''s window: Acme');
select is(pg_temp.works('2021-12-31 23:59:59.999999Z'), 'acme', 'the last microsecond before Globex: Acme');
select is(pg_temp.works('2022-01-01 00:00:00Z'), 'globex', 'at Globex''s start: Globex only (Acme''s upper bound exclusive)');
select is(pg_temp.works('2023-12-31 23:59:59.999999Z'), 'globex', 'the last microsecond before the close: Globex');
select is(pg_temp.works('2024-01-01 00:00:00Z'), null, 'at the closing instant (upper bound exclusive): nothing');
select is(pg_temp.works(now()), null, 'now: nothing');
select is((select valid_range from memory.facts_at(pg_temp.id('p'), '2021-01-01Z') where object_key = 'acme'),
          '[2020-01-01 00:00:00+00,2022-01-01 00:00:00+00)'::tstzrange, 'facts_at returns the current window');
select set_eq($$ select fact_id from memory.facts_at(pg_temp.id('p')) $$,
              $$ select fact_id from memory.facts_at(pg_temp.id('p'), now(), now()) $$,
              'at and known_at default to now()');

select ok(not pg_temp.holds('future tea', now()), 'a fact starting in the future does not hold now');
select ok(not pg_temp.holds('future tea', '2099-12-31 23:59:59.999999Z'), '... nor the microsecond before it starts');
select ok(pg_temp.holds('future tea', '2100-01-01Z'), '... and holds from its start');
select ok(pg_temp.holds('one day of jazz', '2020-03-01Z'), 'a bounded fact holds at its lower bound');
select ok(pg_temp.holds('one day of jazz', '2020-03-01 23:59:59.999999Z'), '... and just before its upper bound');
select ok(not pg_temp.holds('one day of jazz', '2020-03-02Z'), '... not at its upper bound');
select ok(not pg_temp.holds('one day of jazz', '2020-02-29 23:59:59.999999Z'), '... nor before its lower bound');

-- Earlier known_at: what the store believed then.
select is(pg_temp.works('2021-01-01Z', now() - interval '3 hours'), null, 'known_at before anything was recorded: nothing');
select is(pg_temp.works('2021-01-01Z', now() - interval '2 hours'), 'acme', 'known_at = the recording instant (inclusive): Acme');
select is(pg_temp.works('2023-01-01Z', now() - interval '90 minutes'), 'acme',
          'before Globex was recorded, Acme was believed to hold in 2023');
select is((select valid_range from memory.facts_at(pg_temp.id('p'), '2023-01-01Z', now() - interval '90 minutes')),
          '[2020-01-01 00:00:00+00,)'::tstzrange, '... with the open window believed then');
select is(pg_temp.works('2023-01-01Z', now() - interval '1 hour'), 'globex',
          'known_at = the instant Globex was recorded: Globex, Acme already closed');
select is(pg_temp.works('2023-01-01Z', now() - interval '30 minutes'), 'globex', 'known_at between steps 2 and 3: Globex');
select is(pg_temp.works('2025-01-01Z', now() - interval '30 minutes'), 'globex',
          'before the close was recorded, Globex was believed to hold in 2025');
select is(pg_temp.works('2025-01-01Z', now()), null, 'after the close: nothing in 2025');
select is((select valid_range from memory.facts_at(pg_temp.id('p'), '2023-01-01Z', now() - interval '30 minutes')),
          '[2022-01-01 00:00:00+00,)'::tstzrange, 'the window believed before the close is open');
select is((select valid_range from memory.facts_at(pg_temp.id('p'), '2023-01-01Z')),
          '[2022-01-01 00:00:00+00,2024-01-01 00:00:00+00)'::tstzrange, 'the window believed now is closed');
select is(pg_temp.works('2021-01-01Z', now() - interval '90 minutes'), 'acme',
          'an instant no change touched reads the same at every known_at');
select is((select count(*)::int from memory.facts_at(pg_temp.id('p'), '2021-01-01Z', now() - interval '30 minutes')
            where predicate = 'works at'), 1, 'never two jobs at once, at any known_at');

select * from finish();
ROLLBACK;
