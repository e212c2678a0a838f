-- 20 embedding inputs: memory_worker.embedding_inputs(project, kind, ids) gives the
-- embed job the text of each id of the project (an episode's content, a
-- fact version's content, an entity's name and summary) and nothing of
-- another project's or org's rows, whose ids it is given alongside (the
-- same text, so only the project decides); memory.embedding_dim() and
-- memory.embedding_model() describe the installation's embedding columns.
-- Runs as chronomem_app.
--
-- Org A: projects p and q, each with the same episode, fact and entity.
-- Org B: project r, the same again.
BEGIN;
select plan(12);

create procedure pg_temp.content(p_project text) language plpgsql as $$
declare r jsonb;
begin
  r := memory.ingest(pg_temp.id(p_project), 'chat', '[{"role": "user", "content": "Zoltan moved to Oslo"}]');
  insert into pg_temp.ids values (p_project || '.episode', (r #>> '{episode_ids,0}')::uuid);
  r := memory.assert_facts(pg_temp.id(p_project),
         '[{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo", "content": "Zoltan lives in Oslo"}]');
  insert into pg_temp.ids values (p_project || '.fact', (r #>> '{results,0,fact_id}')::uuid);
  insert into pg_temp.ids values (p_project || '.entity',
    memory.upsert_entity(pg_temp.id(p_project), 'Zoltan', 'person', 'a sailor'));
end $$;
-- The inputs of a kind for one project, given the ids of that kind in all
-- three projects, as 'key: text' sorted.
create function pg_temp.inputs(p_project text, p_kind text) returns text language sql stable as $$
  select coalesce(string_agg(i.k || ': ' || x.input, ' | ' order by i.k), '')
    from memory_worker.embedding_inputs(pg_temp.id(p_project), p_kind,
           array[pg_temp.id('p.' || p_kind), pg_temp.id('q.' || p_kind), pg_temp.id('r.' || p_kind)]) x
    join pg_temp.ids i on i.id = x.id $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('embedding inputs org A'); b uuid := memory.create_org('embedding inputs org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  call pg_temp.content('r');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  call pg_temp.content('p');
  call pg_temp.content('q');
end $$;

select is(pg_temp.inputs('p', 'episode'), 'p.episode: Zoltan moved to Oslo',
          'episode: the project''s own content, not q''s or org B''s of the same text');
select is(pg_temp.inputs('q', 'episode'), 'q.episode: Zoltan moved to Oslo',
          'control: q''s episode for q');
select is(pg_temp.inputs('p', 'fact'), 'p.fact: Zoltan lives in Oslo',
          'fact: the project''s own version''s content only');
select is(pg_temp.inputs('q', 'fact'), 'q.fact: Zoltan lives in Oslo', 'control: q''s version for q');
select is(pg_temp.inputs('p', 'entity'), 'p.entity: Zoltan: a sailor',
          'entity: name and summary, the project''s own only');
select is(pg_temp.inputs('q', 'entity'), 'q.entity: Zoltan: a sailor', 'control: q''s entity for q');
select is((select count(*) from memory_worker.embedding_inputs(pg_temp.id('p'), 'webpage',
             array[pg_temp.id('p.episode'), pg_temp.id('p.fact'), pg_temp.id('p.entity')])), 0::bigint,
          'an unknown kind gives nothing, even for the project''s own ids');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select is(pg_temp.inputs('r', 'fact'), 'r.fact: Zoltan lives in Oslo', 'control: org B''s version in org B''s scope');
select is(pg_temp.inputs('p', 'fact'), '', 'org A''s project gives nothing in org B''s scope');
-- A retracted version is still a version: its stored embedding serves reads
-- at earlier instants.
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
select is(memory.retract_fact(pg_temp.id('p'), pg_temp.id('p.fact'), 'test') ->> 'status', 'retracted',
          'fixture: p''s fact retracted');
select is(pg_temp.inputs('p', 'fact'), 'p.fact: Zoltan lives in Oslo',
          'a retracted version still has its input (it is read at earlier instants)');

select is(memory.embedding_dim(),
          (select atttypmod from pg_attribute
            where attrelid = 'memory.fact_embeddings'::regclass and attname = 'embedding'),
          'embedding_dim: the dimension of the embedding columns');

select * from finish();
ROLLBACK;
