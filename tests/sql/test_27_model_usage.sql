-- 27 model usage: memory_worker.record_model_call stores a call and adds to
-- the day's totals; memory.model_usage reads them per job kind and model;
-- memory.set_model_budget / memory.model_budget; a reached budget pauses the
-- project's model jobs (enrich, summarize_communities; not its embed jobs)
-- in claim_jobs (another project's are still handed
-- out) and project_backlog says so; raising the budget or a new period
-- ends the pause; a call of the previous period does not count; bad input
-- raises 22023; another org sees nothing and records nothing.
BEGIN;
select plan(52);

create temp table claimed (tag text not null, org_id uuid, job_id bigint, kind text, project_id uuid);
grant all on claimed to public;
-- An enrich job of a project, queued now (as superuser: tests place jobs directly).
create function pg_temp.enrich_job(p_project text, p_kind text default 'enrich') returns bigint
  language sql security definer as $$
  insert into memory.jobs (org_id, project_id, kind, payload)
  select p.org_id, p.project_id, p_kind, '{}' from memory.projects p where p.project_id = pg_temp.id(p_project)
  returning job_id $$;
create procedure pg_temp.claim(p_tag text) language sql as $$
  insert into pg_temp.claimed
  select p_tag, c.org_id, c.job_id, c.kind, c.project_id
    from memory_worker.claim_jobs('usage-test', array['enrich', 'summarize_communities', 'embed'], 1000) c $$;
create function pg_temp.got(p_tag text, p_id bigint) returns boolean language sql stable as $$
  select exists (select from pg_temp.claimed c where c.tag = p_tag and c.job_id = p_id) $$;
create procedure pg_temp.call(p_project text, p_kind text, p_model text, p_in integer, p_out integer,
                              p_ms double precision, p_outcome text default 'ok', p_op text default 'chat')
  language sql as $$
  select memory_worker.record_model_call(pg_temp.id(p_project), p_kind, null, null, p_model, p_op,
                                         p_in, p_out, p_ms, p_outcome) $$;
-- A call placed at an earlier instant (superuser: the internal implementation).
create procedure pg_temp.call_at(p_project text, p_in integer, p_at timestamptz)
  language sql security definer as $$
  select memory_internal.record_model_call_at(pg_temp.id(p_project), 'enrich', null, null, 'm', 'chat',
                                              p_in, 0, 1, 'ok', p_at) $$;
-- Move a project's pause into the previous period.
create procedure pg_temp.age_pause(p_project text) language sql security definer as $$
  update memory.model_budgets set paused_period_start = paused_period_start - interval '1 day'
   where project_id = pg_temp.id(p_project) $$;
create function pg_temp.usage(p_project text, p_since timestamptz default null, p_until timestamptz default null)
  returns text language sql stable as $$
  select coalesce(string_agg(u.job_kind || ' ' || u.model || ' ' || u.operation || ' ' || u.calls || ' '
                             || u.tokens_in || '/' || u.tokens_out || ' ' || u.latency_ms_total || ' '
                             || u.errors, ', ' order by u.job_kind, u.model), '')
    from memory.model_usage(pg_temp.id(p_project), p_since, p_until) u $$;
create function pg_temp.paused(p_project text) returns boolean language sql stable as $$
  select (memory.model_budget(pg_temp.id(p_project)) ->> 'paused')::boolean $$;

select has_table('memory', 'model_calls', 'memory.model_calls exists');
select has_table('memory', 'model_usage_periods', 'memory.model_usage_periods exists');
select has_table('memory', 'model_budgets', 'memory.model_budgets exists');
select has_function('memory_worker', 'record_model_call',
  array['uuid', 'text', 'bigint', 'uuid', 'text', 'text', 'integer', 'integer', 'double precision', 'text'],
  'memory_worker.record_model_call(project, job_kind, job_id, episode, model, operation, tokens_in, tokens_out, latency_ms, outcome)');
select has_function('memory', 'model_usage', array['uuid', 'timestamp with time zone', 'timestamp with time zone'],
  'memory.model_usage(project, since, until)');
select has_function('memory', 'model_budget', array['uuid'], 'memory.model_budget(project)');
select has_function('memory', 'set_model_budget', array['uuid', 'bigint', 'text'],
  'memory.set_model_budget(project, tokens, period)');

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('usage org A'); b uuid := memory.create_org('usage org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('pb', memory.create_project(b, 'pb'));
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
end $$;

-- A. Recording and reading.
call pg_temp.call('p', 'enrich', 'gpt-x', 100, 20, 50);
call pg_temp.call('p', 'enrich', 'gpt-x', 200, 30, 150, 'parse_failure');
call pg_temp.call('p', 'embed', 'emb-1', 40, 0, 10, 'ok', 'embeddings');
select is(pg_temp.usage('p'), 'embed emb-1 embeddings 1 40/0 10 0, enrich gpt-x chat 2 300/50 200 1',
          'model_usage: per job kind and model, calls, tokens, latency total and errors');
select is((select u.latency_ms_avg from memory.model_usage(pg_temp.id('p')) u where u.job_kind = 'enrich'),
          100::double precision, 'average latency');
select ok((select u.latency_ms_p95 from memory.model_usage(pg_temp.id('p')) u where u.job_kind = 'enrich')
          between 140 and 150, '95th percentile latency');
select is(pg_temp.usage('q'), '', 'another project of the org: no calls');
select is(pg_temp.usage('p', now() + interval '1 hour'), '', 'since after the calls: none');
select is(pg_temp.usage('p', null, now() - interval '1 hour'), '', 'until before the calls: none');
select is((select sum(u.tokens_in + u.tokens_out) from memory.model_usage_periods u
            where u.project_id = pg_temp.id('p'))::bigint, 390::bigint,
          'the day''s totals hold every token');
select is((select sum(c.value) from memory.counters(pg_temp.id('p')) c
            where c.metric in ('model_tokens_in:enrich', 'model_tokens_out:enrich')), 350::numeric,
          'the counters /metrics reads (memory.metric_totals) hold the tokens per job kind');
select is((select sum(c.value) from memory.counters(pg_temp.id('p')) c
            where c.metric = 'model_calls:enrich:parse_failure'), 1::numeric, 'and the calls per outcome');
call pg_temp.call('p', 'enrich', 'gpt-x', null, null, 5);
select is((select count(*) from memory.model_calls c where c.project_id = pg_temp.id('p')
            and c.tokens_in = 0 and c.tokens_out = 0), 1::bigint, 'usage not reported: counted as 0 tokens');

-- B. The budget.
select is(memory.model_budget(pg_temp.id('p')) ->> 'tokens', null, 'no budget at first');
select is(pg_temp.paused('p'), false, 'no budget: not paused');
select is(memory.set_model_budget(pg_temp.id('p'), 1000, 'month') ->> 'used', '390',
          'set_model_budget returns the budget, with the month''s tokens used');
select is(pg_temp.paused('p'), false, 'under the budget: not paused');
select is(memory.model_budget(pg_temp.id('p')) ->> 'period', 'month', 'the period');
do $$ begin insert into pg_temp.jid values ('p1', pg_temp.enrich_job('p')), ('q1', pg_temp.enrich_job('q')),
  ('p_sum', pg_temp.enrich_job('p', 'summarize_communities')), ('p_emb', pg_temp.enrich_job('p', 'embed')); end $$;
call pg_temp.call('p', 'enrich', 'gpt-x', 600, 10, 5);
select is(pg_temp.paused('p'), true, 'the call that reaches the budget pauses the project');
select is(memory.project_backlog(pg_temp.id('p')) #>> '{kinds,enrich,paused}', 'budget',
          'project_backlog says why enrich waits');
select is(memory.project_backlog(pg_temp.id('p')) #>> '{kinds,summarize_communities,paused}', 'budget',
          'and why its community summaries wait');
select is(memory.project_backlog(pg_temp.id('q')) #>> '{kinds,enrich,paused}', null,
          'control: the other project''s enrich is not paused');
call pg_temp.claim('over');
select ok(not pg_temp.got('over', (select id from pg_temp.jid where k = 'p1')),
          'claim_jobs hands out no enrich job of the paused project');
select ok(not pg_temp.got('over', (select id from pg_temp.jid where k = 'p_sum')),
          'nor its summarize_communities job (a model call too)');
select ok(pg_temp.got('over', (select id from pg_temp.jid where k = 'p_emb')),
          'control: its embed job is handed out (search needs embeddings; their tokens still count)');
select ok(pg_temp.got('over', (select id from pg_temp.jid where k = 'q1')),
          'control: it does hand out the other project''s');
select is((select j.status from memory.jobs j where j.job_id = (select id from pg_temp.jid where k = 'p1')),
          'queued', 'the paused job stays queued');
select is((memory.set_model_budget(pg_temp.id('p'), 5000, 'month') ->> 'paused')::boolean, false,
          'raising the budget ends the pause');
call pg_temp.claim('raised');
select ok(pg_temp.got('raised', (select id from pg_temp.jid where k = 'p1')),
          'then the waiting job is handed out with no other step');
select is((memory.set_model_budget(pg_temp.id('p'), 100, 'day') ->> 'paused')::boolean, true,
          'a budget set below what the period used pauses at once');
select is((memory.set_model_budget(pg_temp.id('p'), null) ->> 'paused')::boolean, false,
          'removing the budget ends the pause');
select is(memory.model_budget(pg_temp.id('p')) ->> 'tokens', null, 'and the budget is gone');
select is((select string_agg(a.action || ' ' || coalesce(a.counts ->> 'tokens', '-') || ' '
                             || coalesce(a.counts ->> 'period', '-'), ', ' order by a.audit_id)
             from memory.audit_log a where a.project_id = pg_temp.id('p') and a.action like 'model\_budget.%'),
          'model_budget.set 1000 month, model_budget.set 5000 month, model_budget.set 100 day, model_budget.remove - -',
          'every change of the budget is audited, with its tokens and period');
select is((select count(*) from memory.audit_log a where a.project_id = pg_temp.id('q')
            and a.action like 'model\_budget.%'), 0::bigint, 'control: none for the project without a change');

-- C. Periods: a call of yesterday does not count for today's budget; a
-- pause of an earlier period has ended.
do $$ begin perform memory.set_model_budget(pg_temp.id('q'), 50, 'day'); end $$;
call pg_temp.call_at('q', 500, memory_internal.model_period_start('day', now()) - interval '1 hour');
select is(memory.model_budget(pg_temp.id('q')) ->> 'used', '0', 'yesterday''s call does not count today');
select is(pg_temp.paused('q'), false, 'and does not pause');
select is(pg_temp.usage('q'), 'enrich m chat 1 500/0 1 0', 'model_usage still lists it');
call pg_temp.call('q', 'enrich', 'm', 60, 0, 1);
select is(pg_temp.paused('q'), true, 'today''s call over the budget pauses');
call pg_temp.age_pause('q');
select is(pg_temp.paused('q'), false, 'a pause of the previous period has ended when the period rolls');

-- D. Bad input.
select throws_ok($$ select memory.set_model_budget(pg_temp.id('p'), -1, 'day') $$, '22023',
                 'tokens must be >= 0 (or null: no budget), got -1', 'negative tokens: 22023 naming tokens');
select throws_like($$ select memory.set_model_budget(pg_temp.id('p'), 10, 'week') $$, 'period must be%',
                   'a bad period: names period');
select throws_like($$ call pg_temp.call('p', 'enrich', 'm', -5, 0, 1) $$, 'tokens_in and tokens_out must not be negative%',
                   'negative tokens in a call');
select throws_like($$ call pg_temp.call('p', 'nope', 'm', 1, 0, 1) $$, 'job_kind must be%', 'an unknown job kind');
select throws_like($$ call pg_temp.call('p', 'enrich', 'm', 1, 0, 1, 'ok', 'images') $$, 'operation must be%',
                   'an unknown operation');
select throws_like($$ call pg_temp.call('p', 'enrich', 'm', 1, 0, 1, 'great') $$, 'outcome must be%',
                   'an unknown outcome');

-- E. Another org.
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok($$ select * from memory.model_usage(pg_temp.id('p')) $$, 'P0002', null,
                 'another org cannot read the project''s usage');
select throws_ok($$ call pg_temp.call('p', 'enrich', 'm', 1, 0, 1) $$, 'P0002', null,
                 'nor record a call for it');
select is((select count(*) from memory.model_calls), 0::bigint, 'and sees none of its calls');

select * from finish();
ROLLBACK;
