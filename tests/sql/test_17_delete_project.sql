-- 17 deleting a project: memory.delete_project leaves no row of the project
-- in any table that has a project_id (those without a foreign key to the
-- project included: postings, embeddings, jobs) but the audit log and the
-- counters, and leaves a project of the same org with the same content,
-- and other orgs, as they were.  Runs as chronomem_app; the counts are
-- read as the superuser (no row-level security hides a leftover).
--
-- Org A: projects p and q, each holding the same facts (entity objects:
-- edges), a retraction (a tombstone), two messages, an embedded fact, its
-- communities, an API key and a webhook endpoint.  Org B: project r.
BEGIN;
select plan(15);

-- Rows per table with a project_id column, for one project, read as the
-- superuser (this function is created before the role switch).
create function pg_temp.rows_of(p_project uuid) returns table (tbl text, n bigint)
  language plpgsql security definer as $$
declare t record;
begin
  for t in select c.table_schema, c.table_name
             from information_schema.columns c
             join information_schema.tables x using (table_schema, table_name)
            where c.column_name = 'project_id' and x.table_type = 'BASE TABLE'
              and c.table_schema in ('memory', 'memory_http', 'memory_worker', 'memory_internal')
            order by 1, 2 loop
    tbl := t.table_schema || '.' || t.table_name;
    execute format('select count(*) from %I.%I where project_id = $1', t.table_schema, t.table_name)
      into n using p_project;
    return next;
  end loop;
end $$;
create temp table before_rows (project text, tbl text, n bigint);
grant all on before_rows to public;

create procedure pg_temp.fill(p text) language plpgsql as $$
declare
  pid uuid := pg_temp.id(p);
  f uuid;
begin
  perform memory.declare_predicate(pid, 'works at', 'one');
  perform memory.assert_facts(pid, '[
    {"subject": "Ann", "predicate": "works at", "object": "Acme", "object_type": "entity", "content": "Ann works at Acme"},
    {"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity", "content": "Ann knows Ben"},
    {"subject": "Ben", "predicate": "likes", "object": "tea", "content": "Ben likes green tea"}]');
  select (r #>> '{results,0,fact_id}')::uuid into f
    from memory.assert_facts(pid, '[{"subject": "Ben", "predicate": "likes", "object": "coffee"}]') r;
  perform memory.retract_fact(pid, f, 'mistaken');
  perform memory.ingest(pid, 'chat', '[{"role": "user", "content": "Ann started at Acme"},
                                       {"role": "assistant", "content": "Noted, Acme"}]');
  select x.fact_id into f from memory.facts_at(pid) x order by x.fact_id limit 1;
  perform memory_worker.store_embeddings('fact', array[f], array[pg_temp.vec(1)]);
  perform memory.compute_communities(pid);
  perform memory_http.create_api_key(pid, 'agent', array['project:read']);
  perform memory.create_webhook(pid, 'https://example.com/hook');
end $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('delete project org A'); b uuid := memory.create_org('delete project org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  call pg_temp.fill('r');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  call pg_temp.fill('p');
  call pg_temp.fill('q');
end $$;
insert into before_rows select 'p', x.* from pg_temp.rows_of(pg_temp.id('p')) x;
insert into before_rows select 'q', x.* from pg_temp.rows_of(pg_temp.id('q')) x;
insert into before_rows select 'r', x.* from pg_temp.rows_of(pg_temp.id('r')) x;

-- Controls: p had rows where a leftover would hide (no foreign key to the
-- project) and where the cascade reaches; q holds as many as p.
select is_empty($$ select t from unnest(array['memory.facts', 'memory.edges', 'memory.episodes', 'memory.entities',
                    'memory.tombstones', 'memory.fact_events', 'memory.fact_embeddings', 'memory.jobs',
                    'memory.communities', 'memory.community_runs', 'memory.webhook_endpoints',
                    'memory.predicates', 'memory_internal.api_keys', 'memory_internal.fact_terms',
                    'memory_internal.episode_terms', 'memory_internal.entity_name_tokens',
                    'memory_internal.counters']) t
                  where not exists (select from before_rows b where b.project = 'p' and b.tbl = t and b.n > 0) $$,
                'before: p has rows in the tables a deletion must empty, those without a foreign key included');
select set_eq($$ select tbl, n from before_rows where project = 'p' and tbl <> 'memory.audit_log' $$,
              $$ select tbl, n from before_rows where project = 'q' and tbl <> 'memory.audit_log' $$,
              'q holds as many rows of each kind as p');

insert into pg_temp.res values ('deleted', memory.delete_project(pg_temp.id('p')));
select ok((pg_temp.r('deleted') ->> 'deleted')::boolean
          and (pg_temp.r('deleted') #>> '{wiped,scope}') = 'project'
          and (pg_temp.r('deleted') #>> '{wiped,facts}')::int = (select n from before_rows where project = 'p' and tbl = 'memory.facts')
          and (pg_temp.r('deleted') ->> 'api_keys')::int = 1 and (pg_temp.r('deleted') ->> 'webhook_endpoints')::int = 1
          and (pg_temp.r('deleted') ->> 'jobs')::int > 0,
          'the answer counts what went');
select is_empty($$ select tbl, n from pg_temp.rows_of(pg_temp.id('p'))
                  where n > 0 and tbl not in ('memory.audit_log', 'memory_internal.counters') $$,
                'after: no row of p in any table with a project_id but the audit log and the counters');
select is((select array_agg(x.tbl order by x.tbl) from pg_temp.rows_of(pg_temp.id('p')) x where x.n > 0),
          array['memory.audit_log', 'memory_internal.counters'],
          'the audit log and the counters keep p''s rows');
select set_eq($$ select a.action, a.resource from memory.audit_log a where a.project_id = pg_temp.id('p')
                  and a.action in ('wipe', 'project.delete') $$,
              $$ values ('wipe', 'project'), ('project.delete', 'project:' || pg_temp.id('p')) $$,
              'audited: the wipe and the deletion, with counts');
select is_empty($$ select from memory.audit_log a where a.project_id = pg_temp.id('p')
                  and (a.counts::text ilike '%ann%' or a.counts::text ilike '%acme%') $$,
                'the audit rows hold no content');
select set_eq($$ select tbl, n from pg_temp.rows_of(pg_temp.id('q')) where tbl <> 'memory.audit_log' $$,
              $$ select tbl, n from before_rows where project = 'q' and tbl <> 'memory.audit_log' $$,
              'q, same org and same content, keeps every row');
select ok(exists (select from memory.facts_at(pg_temp.id('q')) f join memory.entities s on s.entity_id = f.subject_id
                   where s.name = 'Ann'),
          'and q still answers about Ann');
select throws_ok($$ select memory.get_project(pg_temp.id('p')) $$, 'P0002', null, 'p is not found any more');
select throws_ok($$ select memory.delete_project(pg_temp.id('p')) $$, 'P0002', null,
                 'deleting it again: not found');
select throws_ok($$ select memory.assert_facts(pg_temp.id('p'), '[{"subject": "Ann", "predicate": "likes", "object": "tea"}]') $$,
                 'P0002', null, 'writing to it: not found');

-- Another org cannot delete a project of A's, nor see it.
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok($$ select memory.delete_project(pg_temp.id('q')) $$, 'P0002', null,
                 'org B deleting A''s project: not found');
select set_eq($$ select tbl, n from pg_temp.rows_of(pg_temp.id('q')) where tbl <> 'memory.audit_log' $$,
              $$ select tbl, n from before_rows where project = 'q' and tbl <> 'memory.audit_log' $$,
              'and q is untouched');
select set_eq($$ select tbl, n from pg_temp.rows_of(pg_temp.id('r')) $$,
              $$ select tbl, n from before_rows where project = 'r' $$,
              'B''s own project is untouched by A''s deletion');

select * from finish();
ROLLBACK;
