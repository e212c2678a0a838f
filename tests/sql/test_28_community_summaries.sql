-- 28 community summaries: a computation queues one summarize_communities
-- job when a community has no summary for its members;
-- memory_worker.community_summary_inputs lists those communities with their
-- members and current facts; memory_worker.store_community_summaries stores
-- a summary only for the members it was written for (redacted, cut to
-- 1,000 characters); a computation that finds the same members keeps the
-- summary and asks for none; memory.context and memory.list_communities
-- show it; a wipe of a fact it was written from clears it.
-- Runs as chronomem_app, in one transaction.
--
-- Org A, project g: Ann knows Ben, Ben works at Acme (one community);
-- Cat knows Dan (another); Eve likes tea (no edge).
BEGIN;
select plan(28);

create function pg_temp.community(p_member text) returns memory.communities language sql stable as $$
  select c.* from memory.communities c
    join memory.community_members m on m.org_id = c.org_id and m.community_id = c.community_id
    join memory.entities e on e.org_id = m.org_id and e.entity_id = m.entity_id
   where c.project_id = pg_temp.id('g') and e.name = p_member $$;
create function pg_temp.jobs() returns bigint language sql stable as $$
  select count(*) from memory.jobs j
   where j.project_id = pg_temp.id('g') and j.kind = 'summarize_communities' and j.status = 'queued' $$;
create function pg_temp.item(p_member text, p_summary text, p_digest bigint default null)
  returns jsonb language sql stable as $$
  select jsonb_build_object('community_id', c.community_id,
                            'members_digest', coalesce(p_digest, c.members_digest),
                            'summary', p_summary, 'fact_ids', '[]'::jsonb)
    from pg_temp.community(p_member) c $$;
create procedure pg_temp.store(p_k text, p_items jsonb) language sql as $$
  insert into pg_temp.res values (p_k, memory_worker.store_community_summaries(pg_temp.id('g'), p_items, 'scripted')) $$;

-- The worker's part: the queued summarize job done (the owner writes it).
create procedure pg_temp.jobs_done() language plpgsql security definer as $$
begin
  update memory.jobs set status = 'done', finished_at = now()
   where project_id = pg_temp.id('g') and kind = 'summarize_communities';
end $$;
grant execute on procedure pg_temp.jobs_done() to public;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('community summaries org A');
begin
  insert into pg_temp.ids values ('org_a', a);
  perform memory.use_org(a);
  insert into pg_temp.ids values ('g', memory.create_project(a, 'g'));
  call pg_temp.fact('g', 'ab', '{"subject": "Ann", "predicate": "knows", "object": "Ben", "object_type": "entity", "content": "Ann knows Ben."}');
  call pg_temp.fact('g', 'acme', '{"subject": "Ben", "predicate": "works_at", "object": "Acme", "object_type": "entity", "content": "Ben works at Acme."}');
  call pg_temp.fact('g', 'cd', '{"subject": "Cat", "predicate": "knows", "object": "Dan", "object_type": "entity", "content": "Cat knows Dan."}');
  call pg_temp.fact('g', 'tea', '{"subject": "Eve", "predicate": "likes", "object": "tea"}');
end $$;

-- A. The first computation queues one job; the inputs show both communities.
select is(pg_temp.jobs(), 0::bigint, 'no summarize job before any computation');
select lives_ok($$select memory.compute_communities(pg_temp.id('g'))$$, 'communities computed');
select is(pg_temp.jobs(), 1::bigint, 'the computation queued one summarize_communities job');
select lives_ok($$select memory.compute_communities(pg_temp.id('g'))$$, 'computed again');
select is(pg_temp.jobs(), 1::bigint, 'one job per project: the queued one is not doubled');
insert into pg_temp.res values ('in', memory_worker.community_summary_inputs(pg_temp.id('g')));
select is(jsonb_array_length(pg_temp.r('in')), 2, 'two communities are due a summary');
select is(pg_temp.r('in') -> 0 ->> 'label', 'Ben', 'the largest first, with its label');
select is((select string_agg(x ->> 'name', ',' order by x ->> 'name') from jsonb_array_elements(pg_temp.r('in') -> 0 -> 'members') x),
          'Acme,Ann,Ben', 'with its members'' names');
select is((select string_agg(x ->> 'content', ' ' order by x ->> 'content') from jsonb_array_elements(pg_temp.r('in') -> 0 -> 'facts') x),
          'Ann knows Ben. Ben works at Acme.', 'and the current facts about them');
select is((pg_temp.r('in') -> 0 ->> 'members_digest')::bigint, (pg_temp.community('Ann')).members_digest,
          'and the members'' digest the summary is checked against');
select throws_ok($$select memory_worker.community_summary_inputs(pg_temp.id('g'), 0)$$, '22023',
                 'communities must be between 1 and 200', 'a batch of none is refused');

-- B. Stored for the members it was written for; the rest skipped with a reason.
call pg_temp.store('s1', jsonb_build_array(
  pg_temp.item('Ann', '  Ann and Ben know each other; Ben works at Acme.  '),
  pg_temp.item('Cat', 'Stale.', 12345),
  pg_temp.item('Dan', ''),
  jsonb_build_object('community_id', gen_random_uuid(), 'members_digest', 1, 'summary', 'Gone.'),
  jsonb_build_object('community_id', 'not a uuid', 'members_digest', 1, 'summary', 'Bad.')));
select is((pg_temp.r('s1') ->> 'stored')::int, 1, 'one summary stored');
select is((select string_agg(x ->> 'reason', ',') from jsonb_array_elements(pg_temp.r('s1') -> 'skipped') x),
          'members_changed,empty,community_gone,malformed', 'the others skipped, each with its reason');
select is((pg_temp.community('Ann')).summary, 'Ann and Ben know each other; Ben works at Acme.',
          'the summary is stored trimmed');
select is((pg_temp.community('Cat')).summary, null, 'a summary for other members is not stored');
select throws_ok($$select memory_worker.store_community_summaries(pg_temp.id('g'), '{}')$$, '22023',
                 'summaries must be a JSON array', 'a non-array is refused');

-- C. Listed and in the context.
select is((select x ->> 'summary' from jsonb_array_elements(memory.list_communities(pg_temp.id('g')) -> 'communities') x
            where x ->> 'label' = 'Ben'), 'Ann and Ben know each other; Ben works at Acme.',
          'list_communities shows the summary');
insert into pg_temp.res values ('ctx', memory.context(pg_temp.id('g'), 'Where does Ben work?'));
select is((select x ->> 'summary' from jsonb_array_elements(pg_temp.r('ctx') -> 'communities') x
            where x ->> 'label' = 'Ben'), 'Ann and Ben know each other; Ben works at Acme.',
          'the context''s community carries its summary');
select ok(strpos(pg_temp.r('ctx') ->> 'text', 'Summary: Ann and Ben know each other') > 0,
          'and its text shows it under the community');
select is(memory_internal.context_summary(pg_temp.id('g'), (pg_temp.community('Ann')).community_id,
                                          now() - interval '1 day', now(), true) ->> 'summary', null,
          'a context as of an instant before the summary was written shows none');

-- D. A computation that finds the same members keeps the summary; a changed
-- community loses it and is due again.
call pg_temp.jobs_done();
call pg_temp.fact('g', 'bacme', '{"subject": "Ann", "predicate": "works_at", "object": "Acme", "object_type": "entity"}');
select lives_ok($$select memory.refresh_communities(pg_temp.id('g'))$$, 'an edge within the community: computed again');
select is((pg_temp.community('Ann')).summary, 'Ann and Ben know each other; Ben works at Acme.',
          'the same members: the summary is kept');
select is(pg_temp.jobs(), 1::bigint, 'Cat and Dan still have none: a job is queued');
call pg_temp.jobs_done();
call pg_temp.store('s2', jsonb_build_array(pg_temp.item('Cat', 'Cat knows Dan. Mail cat@example.com.')));
select is((pg_temp.community('Cat')).summary, 'Cat knows Dan. Mail cat@example.com.', 'stored');
call pg_temp.fact('g', 'de', '{"subject": "Dan", "predicate": "knows", "object": "Eve", "object_type": "entity"}');
select lives_ok($$select memory.refresh_communities(pg_temp.id('g'))$$, 'Eve joins Cat and Dan');
select is((pg_temp.community('Cat')).summary, null, 'new members: the summary is due again');

-- E. Redacted by the project's policy; cut to 1,000 characters.
select lives_ok($$select memory.set_redaction_rule(pg_temp.id('g'), 'email', 'mask')$$, 'an email rule');
call pg_temp.store('s3', jsonb_build_array(pg_temp.item('Cat', 'Cat knows Dan and Eve. Mail cat@example.com. ' || repeat('x', 1200))));
select ok(strpos((pg_temp.community('Cat')).summary, 'cat@example.com') = 0
          and length((pg_temp.community('Cat')).summary) = 1000,
          'the stored summary is redacted and cut to 1,000 characters');

select * from finish();
ROLLBACK;
