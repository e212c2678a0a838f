-- 21 erasure: memory.verify_erased(project, strings) finds a planted name in
-- the stores it lives in, only for the project asked, and nothing once the
-- project is wiped; the wipe's receipt names every content store of
-- memory_internal.data_stores(). Runs as the owner (verify_erased has no
-- grant), writing through chronomem_app.
--
-- Org A: projects p (the name) and q (the same name, left alone).
BEGIN;
select plan(11);

create function pg_temp.residue(p_project text) returns text language sql as $$
  select coalesce(string_agg(distinct v.store, ',' order by v.store), '')
    from memory.verify_erased(pg_temp.id(p_project), array['Wilhelmina']) v $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('erasure org A');
begin
  insert into pg_temp.ids values ('org_a', a);
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  perform memory.ingest(pg_temp.id('p'), 'chat', '[{"role": "user", "content": "Wilhelmina sails"}]');
  perform memory.ingest(pg_temp.id('q'), 'chat', '[{"role": "user", "content": "Wilhelmina sails"}]');
  perform memory.assert_facts(pg_temp.id('q'), '[{"subject": "Wilhelmina", "predicate": "owns", "object": "a boat"}]');
end $$;
reset role;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;

select is(pg_temp.residue('p'),
          'memory.episodes,memory_internal.episode_term_df_pending,memory_internal.episode_terms',
          'before: p''s episode, its postings and lexeme counts hold the name');
select is(pg_temp.residue('q'),
          'memory.entities,memory.episodes,memory.facts,memory_internal.entity_name_tokens,'
          'memory_internal.episode_term_df_pending,memory_internal.episode_terms,memory_internal.fact_terms',
          'control: q holds it in its own stores, facts and entity included');

set local role chronomem_app;
create temp table receipt as select memory.wipe(pg_temp.id('p')) as r;
reset role;
select is(pg_temp.residue('p'), '', 'after the wipe: nothing of p holds the name');
select isnt(pg_temp.residue('q'), '', 'control: q, not wiped, still does');
select is((select array_agg(k order by k) from receipt, jsonb_object_keys(r -> 'stores') k),
          (select array_agg(store order by store) from memory_internal.data_stores() where holds = 'content'),
          'the receipt names every content store');
select is((select (r #>> '{stores,memory.episodes,deleted}')::int from receipt), 1,
          'the receipt counts p''s one episode');
select throws_ok($$select * from memory.verify_erased(pg_temp.id('p'), array[]::text[])$$, '22023',
                 'verify_erased needs at least one non-empty string', 'no strings: an error, not an empty proof');

-- Retention: q keeps episodes a day; one made to look older goes with its
-- fact, as a wipe of scope expired, through the purge job's own call.
set local role chronomem_app;
select is(memory.set_retention(pg_temp.id('q'), '1 day') ->> 'retention_seconds', '86400', 'retention set');
select is(memory.purge_expired(pg_temp.id('q')), null, 'nothing older than a day: no wipe');
reset role;
update memory.episodes set created_at = created_at - interval '2 days' where project_id = pg_temp.id('q');
set local role chronomem_app;
select is(memory_worker.purge_expired_episodes(), jsonb_build_object(pg_temp.id('q')::text, '1'),
          'the purge job erases q''s old episode');
reset role;
select is(pg_temp.residue('q'), 'memory.entities,memory.facts,memory_internal.entity_name_tokens,memory_internal.fact_terms',
          'what remains of q: the fact asserted through the API, not drawn from the episode, and its entity');

select * from finish();
ROLLBACK;
