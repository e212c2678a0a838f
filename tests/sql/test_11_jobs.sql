-- 11 jobs: the queue lives in memory.jobs, is filled by triggers in the
-- writing transaction (nothing for a rolled-back write), and is worked
-- through claim_jobs / complete_job / fail_job / park_job.  Runs as
-- chronomem_app.
--
-- The queue is shared by every org of the test database (claim_jobs,
-- resume_waiting_jobs, enqueue_due_jobs and queue_stats work across orgs,
-- and other test files may have committed jobs), so claims use a large limit
-- and every assertion looks only at this file's jobs; queue_stats is checked
-- by difference.  Leases and backoff are moved into the past with
-- pg_temp.set_job, which runs as superuser (security definer).
BEGIN;
select plan(84);

create temp table claimed (tag text not null, org_id uuid, job_id bigint, kind text, status text,
                           attempts integer, locked_by text, locked_until timestamptz);
create temp table stats (kind text primary key, queued bigint, running bigint, waiting bigint, dead bigint, done bigint);
grant all on claimed, stats to public;
create procedure pg_temp.ingest(p_k text, p_session text, p_messages jsonb, p_project text default 'p')
  language sql as $$
  insert into pg_temp.res values (p_k, memory.ingest(pg_temp.id(p_project), p_session, p_messages)) $$;
create procedure pg_temp.put(p_k text, p_facts jsonb) language sql as $$
  insert into pg_temp.res values (p_k, memory.assert_facts(pg_temp.id('p'), p_facts)) $$;
-- This file's orgs' jobs, whatever the current org scope (superuser).
create function pg_temp.job(p_id bigint) returns memory.jobs language sql stable security definer as $$
  select * from memory.jobs where job_id = p_id $$;
create function pg_temp.ours() returns setof memory.jobs language sql stable security definer as $$
  select * from memory.jobs where org_id in (pg_temp.id('org'), pg_temp.id('org_b')) $$;
-- Update one job (or, with a NULL id, the jobs p_set's own WHERE names).
create procedure pg_temp.set_job(p_id bigint, p_set text) language plpgsql security definer as $$
begin
  if p_id is null then execute format('update memory.jobs set %s', p_set);
  else execute format('update memory.jobs set %s where job_id = $1', p_set) using p_id;
  end if;
end $$;
create procedure pg_temp.claim(p_tag text, p_worker text, p_kinds text[], p_lease interval default '5 minutes')
  language sql as $$
  insert into pg_temp.claimed
  select p_tag, c.org_id, c.job_id, c.kind, c.status, c.attempts, c.locked_by, c.locked_until
    from memory_worker.claim_jobs(p_worker, p_kinds, 1000, p_lease) c $$;
-- A ready job of an org, due at 2000-01-01 + p_second seconds: older than any
-- other test's, so claims of its kind take these first.
create function pg_temp.old_job(p_org text, p_second integer) returns bigint language sql security definer as $$
  insert into memory.jobs (org_id, kind, run_at)
  values (pg_temp.id(p_org), 'reconcile_edges', timestamptz '2000-01-01 00:00:00+00' + p_second * interval '1 second')
  returning job_id $$;
create function pg_temp.got(p_tag text, p_id bigint) returns boolean language sql stable as $$
  select exists (select from pg_temp.claimed c where c.tag = p_tag and c.job_id = p_id) $$;
-- 'status attempts locked_by' of a job.
create function pg_temp.st(p_id bigint) returns text language sql stable as $$
  select j.status || ' ' || j.attempts || ' ' || coalesce(j.locked_by, '-') from pg_temp.job(p_id) j $$;
create function pg_temp.embed_ids(p_kind text) returns uuid[] language sql stable as $$
  select coalesce(array_agg(x::uuid order by x::uuid), '{}') from pg_temp.ours() j, jsonb_array_elements_text(j.payload -> 'ids') x
   where j.kind = 'embed' and j.payload ->> 'kind' = p_kind and j.project_id = pg_temp.id('p') $$;
create function pg_temp.n_jobs(p_kind text, p_payload_kind text default null) returns int language sql stable as $$
  select count(*)::int from pg_temp.ours() j
   where j.project_id = pg_temp.id('p') and j.kind = p_kind
     and (p_payload_kind is null or j.payload ->> 'kind' = p_payload_kind) $$;

set local role chronomem_app;
do $$
declare o uuid; b uuid;
begin
  b := memory.create_org('jobs org B');
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('org_b', b), ('p_b', memory.create_project(b, 'p'));
  o := memory.create_org('jobs org A');
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
end $$;

-- A. Triggers enqueue in the writing transaction.
call pg_temp.ingest('i1', 'chat', '[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                                    {"role": "user", "content": "three"}]');
select is((select jsonb_agg(j.payload -> 'episode_id' order by j.job_id) from pg_temp.ours() j where j.kind = 'enrich'),
          pg_temp.r('i1') -> 'episode_ids', 'one enrich job per episode, in message order');
select is((select jsonb_agg(j.payload) from pg_temp.ours() j where j.kind = 'embed'),
          jsonb_build_array(jsonb_build_object('kind', 'episode', 'ids', pg_temp.r('i1') -> 'episode_ids')),
          'one embed job for the ingest call, with every episode id');
select is((select string_agg(distinct j.status || ' ' || j.attempts || ' ' || (j.org_id = pg_temp.id('org'))
                                      || ' ' || (j.project_id = pg_temp.id('p')) || ' ' || (j.created_at = now()), ','
                             ) from pg_temp.ours() j),
          'queued 0 true true true', 'queued, not yet attempted, in the org and project, in this transaction');
call pg_temp.ingest('i2', 'chat', '[{"role": "user", "content": "four"}]');
select is(pg_temp.n_jobs('enrich') || ' ' || pg_temp.n_jobs('embed'), '4 2', 'a second ingest call: one more enrich and one more embed job');
call pg_temp.ingest('i2_again', 'chat', '[{"role": "user", "content": "four"}]');
select is(pg_temp.n_jobs('enrich') || ' ' || pg_temp.n_jobs('embed'), '4 2', 'a replayed ingest enqueues nothing');

call pg_temp.put('f1', '[{"subject": "Alice", "predicate": "likes", "object": "tea"},
                         {"subject": "Alice", "predicate": "drinks", "object": "coffee"}]');
select is(pg_temp.n_jobs('embed', 'fact') || ' ' || pg_temp.embed_ids('fact')::text,
          '1 ' || (select array_agg((x ->> 'fact_id')::uuid order by (x ->> 'fact_id')::uuid)
                     from jsonb_array_elements(pg_temp.r('f1') -> 'results') x)::text,
          'one assert_facts statement: one fact embed job with the ids it inserted');
select is(pg_temp.embed_ids('entity'), (select array_agg(entity_id order by entity_id) from memory.entities
                                          where project_id = pg_temp.id('p')),
          'the entity assert_facts created gets an entity embed job');
call pg_temp.put('f1_again', '[{"subject": "Alice", "predicate": "likes", "object": "tea"},
                               {"subject": "Alice", "predicate": "drinks", "object": "coffee"}]');
select is(pg_temp.n_jobs('embed', 'fact') || ' ' || pg_temp.n_jobs('embed', 'entity') || ' ' || (pg_temp.r('f1_again') ->> 'skipped'),
          '1 1 2', 'a batch that only skips enqueues nothing');
call pg_temp.put('f2', '[{"subject": "Bob", "predicate": "lives in", "object": "Oslo", "valid_from": "2020-01-01T00:00:00Z"},
                         {"subject": "Bob", "predicate": "lives in", "object": "Oslo", "valid_from": "2010-01-01T00:00:00Z"},
                         {"subject": "Bob", "predicate": "lives in", "object": "Oslo", "valid_from": "2015-01-01T00:00:00Z"}]');
select is(pg_temp.embed_ids('fact'),
          (select array_agg(fact_id order by fact_id) from memory_internal.fact_versions(pg_temp.id('p'))),
          'a batch applied in several rounds: every stored fact is in exactly one fact embed job');
do $$ begin perform memory.upsert_entity(pg_temp.id('p'), 'Carol', 'person', 'a friend'); end $$;
select is(pg_temp.embed_ids('entity'), (select array_agg(entity_id order by entity_id) from memory.entities
                                          where project_id = pg_temp.id('p')),
          'upsert_entity creating Carol enqueues her entity embed job');
insert into snap values ('entity_jobs', pg_temp.n_jobs('embed', 'entity'));
do $$ begin perform memory.upsert_entity(pg_temp.id('p'), 'carol', 'person', 'a friend'); end $$;
select is(pg_temp.n_jobs('embed', 'entity')::text, (select v from snap where k = 'entity_jobs'),
          'upserting Carol again unchanged enqueues nothing');
-- The entity embed jobs ran (as a worker would have, superuser here); then
-- Carol's summary, part of the embedded text, changes.
call pg_temp.set_job(null, 'status = ''done'', finished_at = now() where project_id = pg_temp.id(''p'') and kind = ''embed''');
do $$ begin perform memory.upsert_entity(pg_temp.id('p'), 'Carol', null, 'a colleague from Oslo'); end $$;
select is(pg_temp.n_jobs('embed', 'entity'), (select v::int + 1 from snap where k = 'entity_jobs'),
          'a new summary of an embedded entity enqueues its embed job again (the old vector is stale)');

-- B. A rolled-back write leaves no job.
insert into snap values ('before_rollback', (select count(*) from pg_temp.ours()));
call pg_temp.ingest('kept', 'kept', '[{"role": "user", "content": "kept"}]');
savepoint before_rollback;
call pg_temp.ingest('rolled', 'rolled', '[{"role": "user", "content": "rolled back"}, {"role": "user", "content": "too"}]');
call pg_temp.put('rolled_facts', '[{"subject": "Dave", "predicate": "likes", "object": "rain"}]');
rollback to savepoint before_rollback;
select is((select count(*) from pg_temp.ours()) - (select v::bigint from snap where k = 'before_rollback'), 2::bigint,
          'after rolling back an ingest and a fact batch, only the kept ingest''s two jobs remain');
select is((select count(*)::int from pg_temp.ours() j where j.kind = 'enrich'
              and j.payload ->> 'episode_id' = pg_temp.r('kept') #>> '{episode_ids,0}'), 1,
          'positive control: the kept episode has its enrich job');
select is_empty($$ select j.job_id from pg_temp.ours() j
                    where j.kind = 'enrich' and not exists (select from memory.episodes e
                                                             where e.episode_id = (j.payload ->> 'episode_id')::uuid)
                    union all
                   select j.job_id from pg_temp.ours() j, jsonb_array_elements_text(j.payload -> 'ids') x
                    where j.kind = 'embed' and not exists (select from memory.episodes e where e.episode_id = x::uuid)
                      and not exists (select from memory.facts f where f.fact_id = x::uuid)
                      and not exists (select from memory.entities n where n.entity_id = x::uuid) $$,
                'no job names a row that does not exist');

-- C. Claiming: leases, across orgs, never twice.
do $$ begin perform memory.use_org(pg_temp.id('org_b'), true); end $$;
call pg_temp.ingest('b1', 'chat', '[{"role": "user", "content": "org B speaks"}]', 'p_b');
do $$ begin perform memory.use_org(pg_temp.id('org'), true); end $$;
insert into jid select 'e' || row_number() over (order by j.job_id), j.job_id from pg_temp.ours() j
 where j.kind = 'enrich' and j.org_id = pg_temp.id('org');
insert into jid select 'b_enrich', j.job_id from pg_temp.ours() j where j.kind = 'enrich' and j.org_id = pg_temp.id('org_b');
select is((select count(*)::int from memory.jobs where org_id = pg_temp.id('org_b')), 0,
          'RLS: scoped to A, the app role reads none of B''s jobs');
select is((select count(*)::int from memory.jobs), (select count(*)::int from pg_temp.ours() where org_id = pg_temp.id('org')),
          'positive control: it reads all of A''s jobs and nothing else');
call pg_temp.claim('c1', 'w1', array['enrich']);
select is((select array_agg(c.job_id order by c.job_id) from pg_temp.claimed c
            where c.tag = 'c1' and c.org_id in (pg_temp.id('org'), pg_temp.id('org_b'))),
          (select array_agg(id order by id) from jid),
          'claim_jobs claims every ready job of the kind, B''s too: it is the worker''s entry point across orgs');
select is((select string_agg(distinct c.kind || ' ' || c.status || ' ' || c.attempts || ' ' || c.locked_by
                                      || ' ' || (c.locked_until between now() + interval '5 minutes' and clock_timestamp() + interval '5 minutes'), ',')
             from pg_temp.claimed c where c.tag = 'c1' and c.job_id in (select id from jid)),
          'enrich running 1 w1 true', 'claimed jobs are running, attempts 1, locked by the worker for the lease');
insert into snap values ('queued_embed', (select count(*) from pg_temp.ours() j
                                           where j.org_id = pg_temp.id('org') and j.kind = 'embed' and j.status = 'queued'));
call pg_temp.claim('c2', 'w2', array['enrich', 'embed']);
select is((select count(*)::int from pg_temp.claimed c where c.tag = 'c2' and c.job_id in (select id from jid)), 0,
          'a second claim gets none of the leased jobs');
select is((select count(*)::int from pg_temp.claimed c where c.tag = 'c2' and c.org_id = pg_temp.id('org') and c.kind = 'embed'),
          (select v::int from snap where k = 'queued_embed'),
          'positive control: the second claim gets the queued embed jobs nobody held');
select matches(pg_get_functiondef('memory_worker.claim_jobs(text, text[], integer, interval)'::regprocedure),
               'for update skip locked', 'claim_jobs locks its candidates FOR UPDATE SKIP LOCKED');

-- D. Completing: only the lease holder.
insert into snap values ('complete_e1_w2', memory_worker.complete_job(pg_temp.id('org'), pg_temp.j('e1'), 'w2', '{"x": 1}'));
select is((select v from snap where k = 'complete_e1_w2'), 'false', 'complete_job by another worker: false');
select is(pg_temp.st(pg_temp.j('e1')) || ' ' || coalesce((pg_temp.job(pg_temp.j('e1'))).result::text, 'no result'),
          'running 1 w1 no result', '... and the job is unchanged');
insert into snap values ('complete_e1', memory_worker.complete_job(pg_temp.id('org'), pg_temp.j('e1'), 'w1', '{"facts": 2}'));
select is((select v from snap where k = 'complete_e1'), 'true', 'complete_job by the holder: true');
select is((select j.status || ' ' || j.result::text || ' ' || coalesce(j.locked_by, '-') || ' ' || (j.locked_until is null)
                  || ' ' || (j.finished_at is not null) from pg_temp.job(pg_temp.j('e1')) j),
          'done {"facts": 2} - true true', 'done, with its result, lease released, finished_at set');
select is(memory_worker.complete_job(pg_temp.id('org'), pg_temp.j('e1'), 'w1'), false, 'completing it again: false');

-- E. Failing: backoff, then dead after max_attempts; not retryable: dead at once.
call pg_temp.set_job(pg_temp.j('e2'), 'max_attempts = 3');
insert into snap values ('fail_e2_w2', coalesce(memory_worker.fail_job(pg_temp.id('org'), pg_temp.j('e2'), 'w2', 'not mine'), 'NULL'));
select is((select v from snap where k = 'fail_e2_w2'), 'NULL', 'fail_job by another worker: NULL');
select is(pg_temp.st(pg_temp.j('e2')), 'running 1 w1', '... and the job is unchanged');
insert into snap values ('fail_e2', memory_worker.fail_job(pg_temp.id('org'), pg_temp.j('e2'), 'w1', 'model timeout'));
select is((select v from snap where k = 'fail_e2'), 'queued', 'a failed attempt is queued again');
select is((select j.status || ' ' || j.attempts || ' ' || j.last_error || ' ' || (j.locked_until is null)
                  || ' ' || (j.run_at between now() + interval '2 seconds' and clock_timestamp() + interval '2 seconds')
             from pg_temp.job(pg_temp.j('e2')) j),
          'queued 1 model timeout true true', 'with its error, lease released, run_at 2^1 seconds ahead');
call pg_temp.claim('c3', 'w1', array['enrich']);
select ok(not pg_temp.got('c3', pg_temp.j('e2')), 'not claimable before its backoff ends');
call pg_temp.set_job(pg_temp.j('e2'), 'run_at = now() - interval ''1 second''');
call pg_temp.claim('c4', 'w1', array['enrich']);
select is(pg_temp.got('c4', pg_temp.j('e2')) || ' ' || pg_temp.st(pg_temp.j('e2')), 'true running 2 w1',
          'claimable once due: attempt 2');
insert into snap values ('fail_e2_2', memory_worker.fail_job(pg_temp.id('org'), pg_temp.j('e2'), 'w1', 'model timeout again'));
select is((select v from snap where k = 'fail_e2_2') || ' '
          || ((pg_temp.job(pg_temp.j('e2'))).run_at between now() + interval '4 seconds' and clock_timestamp() + interval '4 seconds'),
          'queued true', 'the second failure backs off 2^2 seconds');
call pg_temp.set_job(pg_temp.j('e2'), 'run_at = now() - interval ''1 second''');
call pg_temp.claim('c5', 'w1', array['enrich']);
insert into snap values ('fail_e2_3', memory_worker.fail_job(pg_temp.id('org'), pg_temp.j('e2'), 'w1', 'gave up'));
select is((select v from snap where k = 'fail_e2_3'), 'dead', 'the failure of attempt max_attempts: dead');
select is((select j.status || ' ' || j.attempts || ' ' || j.last_error || ' ' || (j.finished_at is not null)
             from pg_temp.job(pg_temp.j('e2')) j), 'dead 3 gave up true', 'a dead job keeps its last error');
call pg_temp.set_job(pg_temp.j('e2'), 'run_at = now() - interval ''1 second''');
call pg_temp.claim('c6', 'w1', array['enrich']);
select ok(not pg_temp.got('c6', pg_temp.j('e2')), 'a dead job is never claimed again');
insert into snap values ('fail_e3', memory_worker.fail_job(pg_temp.id('org'), pg_temp.j('e3'), 'w1', 'bad payload', false));
select is((select v from snap where k = 'fail_e3') || ' ' || pg_temp.st(pg_temp.j('e3')),
          'dead dead 1 -', 'not retryable: dead at the first failure');

-- F. Leases expire: a dead worker's job is claimable again; its late
-- completion is refused.
call pg_temp.set_job(pg_temp.j('e4'), 'locked_until = now() - interval ''1 second''');
call pg_temp.claim('c7', 'w2', array['enrich']);
select is(pg_temp.got('c7', pg_temp.j('e4')) || ' ' || pg_temp.st(pg_temp.j('e4')), 'true running 2 w2',
          'a running job whose lease expired is claimed again (attempt 2, new holder)');
insert into snap values ('complete_e4', memory_worker.complete_job(pg_temp.id('org'), pg_temp.j('e4'), 'w1'));
select is((select v from snap where k = 'complete_e4') || ' ' || pg_temp.st(pg_temp.j('e4')),
          'false running 2 w2', 'the old holder''s completion is refused (lease lost)');
insert into snap values ('extend_e4_w1', memory_worker.extend_lease(pg_temp.id('org'), pg_temp.j('e4'), 'w1', interval '1 hour'));
select is((select v from snap where k = 'extend_e4_w1') || ' ' || pg_temp.st(pg_temp.j('e4'))
          || ' ' || ((pg_temp.job(pg_temp.j('e4'))).locked_until < now() + interval '10 minutes'),
          'false running 2 w2 true', 'the old holder cannot renew the lease it lost, and nothing changes');
insert into snap values ('extend_e4_w2', memory_worker.extend_lease(pg_temp.id('org'), pg_temp.j('e4'), 'w2', interval '1 hour'));
select is((select v from snap where k = 'extend_e4_w2') || ' ' || pg_temp.st(pg_temp.j('e4')) || ' '
          || ((pg_temp.job(pg_temp.j('e4'))).locked_until between now() + interval '1 hour' and clock_timestamp() + interval '1 hour'),
          'true running 2 w2 true', 'positive control: the holder renews its lease to now + the lease (the heartbeat)');
select throws_ok($$ select memory_worker.extend_lease(pg_temp.id('org'), pg_temp.j('e4'), 'w2', interval '0 seconds') $$,
                 '22023', 'lease must be between 1 second and 1 day, got 00:00:00', 'a lease of nothing is refused, naming the value');
call pg_temp.set_job(pg_temp.j('b_enrich'), 'max_attempts = 1, locked_until = now() - interval ''1 second''');
call pg_temp.claim('c8', 'w2', array['enrich']);
select ok(not pg_temp.got('c8', pg_temp.j('b_enrich')), 'a lease that expired on the last attempt is not retried');
select is((pg_temp.job(pg_temp.j('b_enrich'))).status, 'dead',
          '... and the job is dead-lettered, not left running forever');

-- G. Parking: waiting with the reason, the attempt not counted; resumed.
insert into snap values ('park_e4', memory_worker.park_job(pg_temp.id('org'), pg_temp.j('e4'), 'w2', 'no LLM endpoint configured'));
select is((select v from snap where k = 'park_e4'), 'true', 'park_job: true');
select is((select j.status || ' ' || j.attempts || ' ' || j.last_error || ' ' || (j.locked_until is null)
             from pg_temp.job(pg_temp.j('e4')) j), 'waiting 1 no LLM endpoint configured true',
          'waiting, with the reason, the parked attempt not counted');
call pg_temp.claim('c9', 'w1', array['enrich']);
select ok(not pg_temp.got('c9', pg_temp.j('e4')), 'a waiting job is not claimed');
do $$ begin perform memory_worker.resume_waiting_jobs(array['embed']); end $$;
select is(pg_temp.st(pg_temp.j('e4')), 'waiting 1 -', 'resuming other kinds leaves it waiting');
insert into snap values ('resume', memory_worker.resume_waiting_jobs(array['enrich']));
select cmp_ok((select v::int from snap where k = 'resume'), '>=', 1, 'resume_waiting_jobs counts what it requeued');
select is((select j.status || ' ' || coalesce(j.last_error, '-') || ' ' || (j.run_at <= clock_timestamp())
             from pg_temp.job(pg_temp.j('e4')) j), 'queued - true', 'the job is queued again, due now');

-- H. Schedules: create_org made three per org; due ones become jobs.
select is((select string_agg(kind || ' ' || every, ', ' order by kind) from memory.job_schedules),
          'communities 00:05:00, purge 1 day, reconcile_edges 01:00:00',
          'create_org scheduled reconcile_edges, communities and purge (RLS: only A''s schedules are visible)');
insert into snap values ('due', memory_worker.enqueue_due_jobs());
select cmp_ok((select v::int from snap where k = 'due'), '>=', 6,
              'enqueue_due_jobs turns due schedules into jobs (both orgs'' at least)');
select is((select string_agg(j.kind || ' ' || coalesce(j.project_id::text, 'no project'), ', ' order by j.org_id = pg_temp.id('org'), j.kind)
             from pg_temp.ours() j where j.kind in ('reconcile_edges', 'communities', 'purge')),
          'communities no project, purge no project, reconcile_edges no project, '
          || 'communities no project, purge no project, reconcile_edges no project',
          'one job per due schedule of each org');
select is((select bool_and(next_run_at between now() + every and clock_timestamp() + every) from memory.job_schedules),
          true, 'and next_run_at advanced by the schedule''s period');
do $$ begin perform memory_worker.enqueue_due_jobs(); end $$;
select is((select count(*)::int from pg_temp.ours() j where j.kind in ('reconcile_edges', 'communities', 'purge')), 6,
          'called again at once: no new job for schedules not due');

-- H2. purge_done_jobs: done jobs older than the age given, and those of the
-- periodic kinds (one communities job per org every 5 minutes) older than a
-- day; never a job not done, never another org's.
reset role;
insert into memory.jobs (org_id, kind, payload, status, finished_at)
values (pg_temp.id('org'), 'communities', '{"t": "periodic 2 days"}', 'done', now() - interval '2 days'),
       (pg_temp.id('org'), 'communities', '{"t": "periodic 2 hours"}', 'done', now() - interval '2 hours'),
       (pg_temp.id('org'), 'embed', '{"t": "embed 2 days"}', 'done', now() - interval '2 days'),
       (pg_temp.id('org'), 'embed', '{"t": "embed 8 days"}', 'done', now() - interval '8 days'),
       (pg_temp.id('org'), 'communities', '{"t": "periodic queued"}', 'queued', null),
       (pg_temp.id('org_b'), 'communities', '{"t": "other org 2 days"}', 'done', now() - interval '2 days');
-- The kinds are job_kinds()'s, which the table's check calls: every one is
-- stored (then deleted), a kind it does not list is refused.
select lives_ok($$ insert into memory.jobs (org_id, kind, payload, status, finished_at)
                   select pg_temp.id('org'), k, '{"kind check": true}', 'done', now()
                     from unnest(memory_internal.job_kinds()) k $$,
                'memory.jobs stores a job of each of job_kinds()''s kinds');
delete from memory.jobs j where j.payload ? 'kind check';
select throws_ok($$ insert into memory.jobs (org_id, kind) values (pg_temp.id('org'), 'emails') $$,
                 '23514', null, 'and refuses a kind job_kinds() does not list');
set local role chronomem_app;
insert into snap values ('purged', memory_worker.purge_done_jobs());
select is((select string_agg(j.payload ->> 't', ', ' order by j.payload ->> 't') from pg_temp.ours() j
            where j.payload ? 't'),
          'embed 2 days, other org 2 days, periodic 2 hours, periodic queued',
          'purge_done_jobs: periodic kinds after a day, others after 7 days, nothing queued, nothing of another org');
select cmp_ok((select v::int from snap where k = 'purged'), '>=', 2, 'and counts what it deleted');

-- I. queue_stats (by difference: the queue is shared) and privileges.
insert into stats select kind, queued, running, waiting, dead, done from memory.queue_stats();
call pg_temp.ingest('i3', 'stats', '[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]');
select is((select string_agg(s.kind || ' ' || (s.queued - t.queued) || ' ' || (s.running - t.running)
                             || ' ' || (s.dead - t.dead), ', ' order by s.kind)
             from memory.queue_stats() s join stats t on t.kind = s.kind),
          'communities 0 0 0, deliver_webhook 0 0 0, embed 1 0 0, enrich 2 0 0, purge 0 0 0, reconcile_edges 0 0 0, summarize_communities 0 0 0',
          'queue_stats: one row per kind; an ingest of two messages adds 2 queued enrich and 1 queued embed');
select cmp_ok((select dead from memory.queue_stats() where kind = 'enrich'), '>=', 2::bigint,
              'queue_stats counts the dead enrich jobs');

-- J. Dead letters queued again (retry_dead_jobs): e2 and e3 (org A, enrich,
-- project p) and b_enrich (org B) are dead.  Scoped to org A, a kind or a
-- project filter that names none of them leaves them dead; then A's are
-- queued with their attempts reset, B's stays dead; unscoped (an operator),
-- B's too.
select is(memory.retry_dead_jobs('embed'), 0, 'retry_dead_jobs(embed): no dead embed job of org A');
select is(memory.retry_dead_jobs('enrich', pg_temp.id('p_b')), 0,
          'retry_dead_jobs of org B''s project, scoped to org A: none');
select is(pg_temp.st(pg_temp.j('e2')) || ', ' || pg_temp.st(pg_temp.j('e3')), 'dead 3 -, dead 1 -',
          '... both left them dead');
insert into snap values ('retried', memory.retry_dead_jobs('enrich', pg_temp.id('p')));
select is((select v from snap where k = 'retried'), '2', 'retry_dead_jobs(enrich, p): org A''s two dead enrich jobs');
select is((select j.status || ' ' || j.attempts || ' ' || j.last_error || ' ' || (j.finished_at is null)
                  || ' ' || (j.run_at <= clock_timestamp())
             from pg_temp.job(pg_temp.j('e2')) j),
          'queued 0 gave up true true', 'queued, attempts reset, due now, its last error kept');
select is((pg_temp.job(pg_temp.j('b_enrich'))).status, 'dead', 'org B''s dead job is not org A''s to retry');
call pg_temp.claim('c10', 'w3', array['enrich']);
select ok(pg_temp.got('c10', pg_temp.j('e2')) and pg_temp.got('c10', pg_temp.j('e3')),
          'the retried jobs are claimed again');
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select cmp_ok(memory.retry_dead_jobs(p_kind => 'enrich'), '>=', 1, 'unscoped (an operator): every org''s');
select is((pg_temp.job(pg_temp.j('b_enrich'))).status, 'queued', '... org B''s too');
select throws_ok($$ select memory.retry_dead_jobs('emails') $$, '22023',
                 'unknown job kind ''emails''; kinds are enrich, embed, deliver_webhook, reconcile_edges, communities, purge, summarize_communities',
                 'an unknown kind is refused, naming the kinds');
do $$ begin perform memory.use_org(pg_temp.id('org'), true); end $$;

-- K. A project's backlog (project_backlog): its jobs not done, per kind;
-- caught_up while no enrich or embed job of it is queued, running or
-- waiting.  Project p (same org, same kinds) has jobs of every status: none
-- of them may count for bk.
do $$ begin insert into pg_temp.ids values ('bk', memory.create_project(pg_temp.id('org'), 'backlog')); end $$;
create function pg_temp.backlog(p_project text) returns text language sql stable as $$
  select (b ->> 'caught_up') || ' | ' || string_agg(
           k || ' ' || (v ->> 'queued') || '/' || (v ->> 'running') || '/' || (v ->> 'waiting') || '/'
           || (v ->> 'dead') || ' ' || (v ->> 'oldest_queued_at' is not null), ', ' order by k)
    from memory.project_backlog(pg_temp.id(p_project)) b, jsonb_each(b -> 'kinds') e(k, v)
   group by b $$;
select is(pg_temp.backlog('bk'),
          'true | communities 0/0/0/0 false, deliver_webhook 0/0/0/0 false, embed 0/0/0/0 false, enrich 0/0/0/0 false, summarize_communities 0/0/0/0 false',
          'backlog of a new project: caught up, nothing open (none of project p''s jobs)');
select ok(pg_temp.backlog('p') like 'false |%', 'control: project p, with queued jobs, is not caught up');
call pg_temp.ingest('bk1', 'chat', '[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]', 'bk');
select is(pg_temp.backlog('bk'),
          'false | communities 0/0/0/0 false, deliver_webhook 0/0/0/0 false, embed 1/0/0/0 true, enrich 2/0/0/0 true, summarize_communities 0/0/0/0 false',
          'after an ingest of two messages: two enrich and one embed queued, not caught up');
call pg_temp.set_job(null, format('status = ''dead'', finished_at = now() where project_id = %L and kind = ''enrich''', pg_temp.id('bk')));
call pg_temp.set_job(null, format('status = ''waiting'' where project_id = %L and kind = ''embed''', pg_temp.id('bk')));
select is(pg_temp.backlog('bk'),
          'false | communities 0/0/0/0 false, deliver_webhook 0/0/0/0 false, embed 0/0/1/0 false, enrich 0/0/0/2 false, summarize_communities 0/0/0/0 false',
          'dead enrich jobs and a waiting embed job: the waiting one holds it up');
call pg_temp.set_job(null, format('status = ''done'', finished_at = now() where project_id = %L and kind = ''embed''', pg_temp.id('bk')));
select is(pg_temp.backlog('bk'),
          'true | communities 0/0/0/0 false, deliver_webhook 0/0/0/0 false, embed 0/0/0/0 false, enrich 0/0/0/2 false, summarize_communities 0/0/0/0 false',
          'done and dead only: caught up (dead jobs wait for an operator, not for time)');
select throws_ok(format($$ select memory.project_backlog(%L) $$, pg_temp.id('p_b')), 'P0002', null,
                 'another org''s project: not found');
do $$ begin perform memory.use_org(pg_temp.id('org_b'), true); end $$;
select ok(memory.project_backlog(pg_temp.id('p_b')) ? 'caught_up', 'control: in its org''s scope it answers');
do $$ begin perform memory.use_org(pg_temp.id('org'), true); end $$;

-- I. Claims follow the queue's order across orgs (claim_jobs claims org by org)
-- and never take more than their limit.
create temp table old_jobs (n integer primary key, job_id bigint not null);
insert into old_jobs select g, pg_temp.old_job(case when g % 2 = 1 then 'org' else 'org_b' end, g)
  from generate_series(1, 6) g;  -- A B A B A B, oldest first
select is(array(select c.job_id from memory_worker.claim_jobs('order', array['reconcile_edges'], 1) c),
          array(select o.job_id from old_jobs o where o.n = 1),
          'a claim of one takes the oldest ready job (A''s) and no other');
select is(array(select c.job_id from memory_worker.claim_jobs('order', array['reconcile_edges'], 3) c
                 order by c.job_id),
          array(select o.job_id from old_jobs o where o.n between 2 and 4 order by o.job_id),
          'a claim of three takes the next three, B A B, though org A has more ready after them');
select is((select string_agg(j.status, ' ' order by o.n) from old_jobs o join lateral pg_temp.job(o.job_id) j on true),
          'running running running running queued queued',
          'exactly four leased; the two youngest still queued');

set local role chronomem_analyst;
select throws_ok($$ select * from memory_worker.claim_jobs('analyst', array['enrich']) $$, '42501', null,
                 'the analyst cannot call claim_jobs');
select throws_ok($$ select * from memory.queue_stats() $$, '42501', null, 'the analyst cannot call queue_stats');

select * from finish();
ROLLBACK;
