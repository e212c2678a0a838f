-- 24 conflicts: cardinality 'unknown' (the default) opens one conflict per
-- disagreeing subject and predicate; the inbox lists and shows it; keep_both,
-- supersede and retract settle it with their effect on facts_at at several
-- at / known_at instants; a declaration settles a predicate's conflicts;
-- reviews give a bitemporal standing; protect_confirmed holds an extraction
-- claim back; the contradictions policy; learned cardinality and its undo;
-- wipes take conflicts with them; webhooks; another org sees nothing.
BEGIN;
select plan(101);

-- The objects of a subject's predicate that hold at an instant, as believed at known_at.
create function pg_temp.objs(p_project text, p_subject text, p_predicate text,
                             p_at timestamptz default null, p_known timestamptz default null)
  returns text language sql stable as $$
  select coalesce(string_agg(f.object, ',' order by f.object), '')
    from memory.readable_facts_at(pg_temp.id(p_project), p_at, p_known) f
   where f.subject = p_subject and f.predicate = p_predicate $$;
create function pg_temp.open_conflicts(p_project text, p_subject text default null)
  returns bigint language sql stable as $$
  select count(*) from memory.list_conflicts(pg_temp.id(p_project)) c
   where p_subject is null or c.subject = p_subject $$;
create function pg_temp.conflict_of(p_project text, p_subject text, p_predicate text)
  returns uuid language sql stable as $$
  select c.conflict_id from memory.list_conflicts(pg_temp.id(p_project), 'all', p_predicate) c
   where c.subject = p_subject order by c.opened_at desc limit 1 $$;
create function pg_temp.member(p_conflict uuid, p_object text) returns uuid language sql stable as $$
  select (m ->> 'member_id')::uuid
    from jsonb_array_elements((select memory.get_conflict(c.project_id, p_conflict)
                                 from memory.conflicts c where c.conflict_id = p_conflict) -> 'members') m
   where m ->> 'object' = p_object limit 1 $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('conflict org A'); b uuid := memory.create_org('conflict org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  perform memory.declare_predicate(pg_temp.id('p'), 'likes', 'many');
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
  perform memory.create_webhook(pg_temp.id('p'), 'https://hooks.example.com/c', array['*']);
end $$;

-- A. Unknown cardinality: both facts stand, one conflict per set.
call pg_temp.fact('p', 'ann_oslo', '{"subject": "Ann", "predicate": "lives in", "object": "Oslo", "valid_from": "2020-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('p'), 0::bigint, 'one object: no conflict');
insert into res values ('a2', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Ann", "predicate": "lives in", "object": "Rome", "valid_from": "2021-01-01T00:00:00Z"}]'));
select is(pg_temp.r('a2') ->> 'inserted', '1', 'the second object is stored');
select is(pg_temp.objs('p', 'Ann', 'lives in'), 'Oslo,Rome', 'unknown cardinality: both stand (nothing superseded)');
select is(pg_temp.open_conflicts('p', 'Ann'), 1::bigint, 'one open conflict for Ann''s lives in');
select is(jsonb_array_length(pg_temp.r('a2') -> 'conflicts'), 1, 'the write reports the conflict it opened');
insert into ids values ('c_ann', pg_temp.conflict_of('p', 'Ann', 'lives in'));
select is((pg_temp.r('a2') ->> 'conflicts')::jsonb ->> 0, pg_temp.id('c_ann')::text, '... by its id');
call pg_temp.fact('p', 'ann_bern', '{"subject": "Ann", "predicate": "lives in", "object": "Bern", "valid_from": "2022-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('p', 'Ann'), 1::bigint, 'a third object joins the same conflict (one row per set)');
select is((select c.members from memory.list_conflicts(pg_temp.id('p')) c where c.conflict_id = pg_temp.id('c_ann')),
          3, 'the conflict has the three facts');
select is((select c.cause from memory.list_conflicts(pg_temp.id('p')) c where c.conflict_id = pg_temp.id('c_ann')),
          'unknown_cardinality', 'its cause');
select is((select array_agg(e ->> 'event_type' order by o)
             from jsonb_array_elements(memory.get_conflict(pg_temp.id('p'), pg_temp.id('c_ann')) -> 'events')
                  with ordinality x(e, o)),
          array['opened', 'member_added'], 'its events: opened, then a member added');
-- Positive controls: no conflict where there is no disagreement.
call pg_temp.fact('p', 'bo_tea', '{"subject": "Bo", "predicate": "likes", "object": "tea"}');
call pg_temp.fact('p', 'bo_gin', '{"subject": "Bo", "predicate": "likes", "object": "gin"}');
call pg_temp.fact('p', 'bo_acme', '{"subject": "Bo", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'bo_umb', '{"subject": "Bo", "predicate": "works at", "object": "Umbrella", "valid_from": "2021-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'cy_1', '{"subject": "Cy", "predicate": "drives", "object": "a Volvo", "valid_from": "2018-01-01T00:00:00Z", "valid_to": "2019-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'cy_2', '{"subject": "Cy", "predicate": "drives", "object": "a Saab", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'cy_3', '{"subject": "Cy", "predicate": "drives", "object": "a Saab", "valid_from": "2020-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('p', 'Bo'), 0::bigint, 'declared many and declared one open no conflict');
select is(pg_temp.objs('p', 'Bo', 'works at'), 'Umbrella', '(one: the newer superseded)');
select is(pg_temp.open_conflicts('p', 'Cy'), 0::bigint, 'objects that follow one another, and a retry, open no conflict');

-- B. The inbox across orgs: another org's conflict id is not found, like a random one.
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok(format('select memory.get_conflict(%L, %L)', pg_temp.id('p'), pg_temp.id('c_ann')),
                 'P0002', null, 'another org: the project is not found');
select is((select count(*) from memory.conflicts), 0::bigint, 'another org reads no conflict rows');
call pg_temp.use('org_a');
select throws_ok(format('select memory.get_conflict(%L, %L)', pg_temp.id('q'), pg_temp.id('c_ann')),
                 'P0002', null, 'another project''s conflict id: not found');
select throws_ok(format('select memory.get_conflict(%L, %L)', pg_temp.id('p'), gen_random_uuid()),
                 'P0002', null, '... as a random id is');
select is(memory.get_conflict(pg_temp.id('p'), pg_temp.id('c_ann')) ->> 'subject', 'Ann', 'positive control: found in its project');
select throws_ok(format('select * from memory.list_conflicts(%L, %L)', pg_temp.id('p'), 'shut'), '22023', null,
                 'an unknown status is refused');

-- C. Resolutions, with the record time of the facts an hour back so that
-- known_at can ask about before them.
call pg_temp.fact('p', 'di_x', '{"subject": "Di", "predicate": "plays", "object": "chess", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'di_y', '{"subject": "Di", "predicate": "plays", "object": "go", "valid_from": "2020-06-01T00:00:00Z"}');
call pg_temp.fact('p', 'ed_x', '{"subject": "Ed", "predicate": "plays", "object": "chess", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'ed_y', '{"subject": "Ed", "predicate": "plays", "object": "go", "valid_from": "2020-06-01T00:00:00Z"}');
call pg_temp.fact('p', 'fa_x', '{"subject": "Fa", "predicate": "plays", "object": "chess", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'fa_y', '{"subject": "Fa", "predicate": "plays", "object": "go", "valid_from": "2020-06-01T00:00:00Z"}');
call pg_temp.fact('p', 'fa_z', '{"subject": "Fa", "predicate": "plays", "object": "polo", "valid_from": "2020-06-01T00:00:00Z"}');
reset role;
call pg_temp.shift_back(pg_temp.id('p'), interval '1 hour');
set local role chronomem_app;
call pg_temp.use('org_a');
insert into ids values ('c_di', pg_temp.conflict_of('p', 'Di', 'plays')), ('c_ed', pg_temp.conflict_of('p', 'Ed', 'plays')),
                       ('c_fa', pg_temp.conflict_of('p', 'Fa', 'plays'));

-- keep_both: both hold, and Di's later objects of it open no conflict.
select throws_ok(format('select memory.resolve_conflict(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('c_di'), 'merge'),
                 '22023', null, 'an unknown resolution is refused');
insert into res values ('kb', memory.resolve_conflict(pg_temp.id('p'), pg_temp.id('c_di'), 'keep_both', p_reason => 'she plays both'));
select is(pg_temp.r('kb') ->> 'resolution', 'kept', 'keep_both: resolved as kept');
select is(pg_temp.objs('p', 'Di', 'plays'), 'chess,go', '... both still hold');
call pg_temp.fact('p', 'di_z', '{"subject": "Di", "predicate": "plays", "object": "polo", "valid_from": "2021-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('p', 'Di'), 0::bigint, '... and a third object of Di''s opens no conflict (many for Di)');
call pg_temp.fact('p', 'ed_z', '{"subject": "Ed", "predicate": "plays", "object": "polo", "valid_from": "2021-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('p', 'Ed'), 1::bigint, 'control: Ed''s conflict is still open (only Di is many)');
select throws_ok(format('select memory.resolve_conflict(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('c_di'), 'keep_both'),
                 '55000', null, 'a resolved conflict cannot be resolved again');

-- supersede: go wins from 2020-09-01; chess ends there.
select throws_ok(format('select memory.resolve_conflict(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('c_ed'), 'supersede'),
                 '22023', null, 'supersede needs the member that wins');
select throws_ok(format('select memory.resolve_conflict(%L, %L, %L, %L)', pg_temp.id('p'), pg_temp.id('c_ed'), 'supersede',
                        pg_temp.member(pg_temp.id('c_fa'), 'go')),
                 '22023', null, 'a member of another conflict is refused');
insert into res values ('ss', memory.resolve_conflict(pg_temp.id('p'), pg_temp.id('c_ed'), 'supersede',
  pg_temp.member(pg_temp.id('c_ed'), 'go'), '2020-09-01T00:00:00Z'));
select is(pg_temp.r('ss') ->> 'resolution', 'superseded', 'supersede: resolved as superseded');
select is(jsonb_array_length(pg_temp.r('ss') -> 'closed'), 2, '... closing the two others (chess, polo)');
select is(pg_temp.objs('p', 'Ed', 'plays', '2020-03-01T00:00:00Z'), 'chess', 'Ed at 2020-03: chess (go not started)');
select is(pg_temp.objs('p', 'Ed', 'plays', '2020-07-01T00:00:00Z'), 'chess,go', 'Ed at 2020-07: both (go wins only from 2020-09)');
select is(pg_temp.objs('p', 'Ed', 'plays', '2021-06-01T00:00:00Z'), 'go', 'Ed at 2021-06: go alone (polo, begun after, held at no instant)');
select is(pg_temp.objs('p', 'Ed', 'plays', '2021-06-01T00:00:00Z', now() - interval '30 minutes'), 'chess,go',
          'Ed at 2021-06 as believed half an hour ago, before the resolution: chess and go');

-- retract: with three members one retraction leaves it open, the second settles it.
insert into res values ('r1', memory.resolve_conflict(pg_temp.id('p'), pg_temp.id('c_fa'), 'retract',
  pg_temp.member(pg_temp.id('c_fa'), 'polo'), p_reason => 'misheard'));
select is(pg_temp.r('r1') ->> 'status', 'open', 'retracting one of three objects leaves the conflict open');
select is(pg_temp.objs('p', 'Fa', 'plays'), 'chess,go', '... polo is retracted');
select is(pg_temp.objs('p', 'Fa', 'plays', null, now() - interval '30 minutes'), 'chess,go,polo',
          '... and held as believed before the retraction');
insert into res values ('r2', memory.resolve_conflict(pg_temp.id('p'), pg_temp.id('c_fa'), 'retract',
  pg_temp.member(pg_temp.id('c_fa'), 'chess')));
select is(pg_temp.r('r2') ->> 'resolution', 'retracted', 'the second retraction settles it');
select is(pg_temp.objs('p', 'Fa', 'plays'), 'go', '... go alone holds');
select is((select array_agg(e ->> 'event_type' order by o)
             from jsonb_array_elements(memory.get_conflict(pg_temp.id('p'), pg_temp.id('c_fa')) -> 'events')
                  with ordinality x(e, o)),
          array['opened', 'member_added', 'member_retracted', 'resolved'], 'its events, in order');
select ok((select count(*) from memory.audit_log where action = 'resolve_conflict') >= 4, 'every resolution is audited');

-- D. A declaration settles a predicate's conflicts.
call pg_temp.fact('p', 'gu_1', '{"subject": "Gus", "predicate": "owns", "object": "a bike", "valid_from": "2019-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'gu_2', '{"subject": "Gus", "predicate": "owns", "object": "a car", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'ho_1', '{"subject": "Hal", "predicate": "speaks", "object": "Danish", "valid_from": "2019-01-01T00:00:00Z"}');
call pg_temp.fact('p', 'ho_2', '{"subject": "Hal", "predicate": "speaks", "object": "Dutch", "valid_from": "2020-01-01T00:00:00Z"}');
insert into ids values ('c_gus', pg_temp.conflict_of('p', 'Gus', 'owns')), ('c_hal', pg_temp.conflict_of('p', 'Hal', 'speaks'));
select is(memory.declare_predicate(pg_temp.id('p'), 'owns', 'one'), 'one', 'unknown -> one with an open conflict: accepted');
select is(pg_temp.objs('p', 'Gus', 'owns'), 'a car', '... the newer object superseded the older by world time');
select is(pg_temp.objs('p', 'Gus', 'owns', '2019-06-01T00:00:00Z'), 'a bike', '... which held before it');
select is((select c.resolution from memory.list_conflicts(pg_temp.id('p'), 'all', 'owns') c where c.conflict_id = pg_temp.id('c_gus')),
          'declared_one', '... and the conflict resolved as declared_one');
select is(memory.declare_predicate(pg_temp.id('p'), 'speaks', 'many'), 'many', 'unknown -> many');
select is(pg_temp.objs('p', 'Hal', 'speaks'), 'Danish,Dutch', '... both hold');
select is((select c.resolution from memory.list_conflicts(pg_temp.id('p'), 'all', 'speaks') c where c.conflict_id = pg_temp.id('c_hal')),
          'declared_many', '... resolved as declared_many');
select throws_ok(format('select memory.declare_predicate(%L, %L, %L)', pg_temp.id('p'), 'speaks', 'one'), '23P01', null,
                 'many -> one is still refused while a subject holds two objects at once');
select is(memory.declare_predicate(pg_temp.id('p'), 'speaks', 'unknown'), 'unknown', 'many -> unknown: the declaration goes');
select is(pg_temp.open_conflicts('p', 'Hal'), 1::bigint, '... and the disagreement that stands opens a conflict again');
select is((select array_agg(c.old_cardinality || '>' || c.new_cardinality order by c.change_id)
             from memory.predicate_changes(pg_temp.id('p')) c where c.predicate = 'speaks'),
          array['unknown>many', 'many>unknown'], 'every change of a cardinality is logged');

-- E. Reviews: a bitemporal standing; rejected is retracted.
select is(memory_internal.fact_standing(pg_temp.id('org_a'), pg_temp.id('p.bo_tea')), 'unreviewed', 'a fact starts unreviewed');
select is(memory.review_fact(pg_temp.id('p'), pg_temp.id('p.bo_tea'), 'confirmed', 'checked') ->> 'previous', 'unreviewed',
          'review: confirmed (the answer names the previous standing)');
select is(memory_internal.fact_standing(pg_temp.id('org_a'), pg_temp.id('p.bo_tea')), 'confirmed', '... now confirmed');
select is(memory_internal.fact_standing(pg_temp.id('org_a'), pg_temp.id('p.bo_tea'), now() - interval '1 second'), 'unreviewed',
          '... and unreviewed as believed before the review');
select throws_ok(format('select memory.review_fact(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('p.bo_tea'), 'approved'),
                 '22023', null, 'an unknown standing is refused');
select is(memory.review_fact(pg_temp.id('p'), pg_temp.id('p.bo_gin'), 'rejected') ->> 'standing', 'rejected', 'review: rejected');
select is(pg_temp.objs('p', 'Bo', 'likes'), 'tea', '... a rejected fact is retracted: no read returns it');
select throws_ok(format('select memory.review_fact(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('p.bo_gin'), 'confirmed'),
                 '22023', null, '... and keeps its standing');

-- F. protect_confirmed: an extraction claim against a confirmed fact is held.
select is(memory.conflict_policy(pg_temp.id('p')) ->> 'protect_confirmed', 'false', 'the policy: nothing protected by default');
select is(memory.set_conflict_policy(pg_temp.id('p'), p_protect_confirmed => true) ->> 'protect_confirmed', 'true',
          'policy: protect confirmed facts');
select lives_ok(format('select memory.review_fact(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('p.bo_umb'), 'confirmed'),
                'Bo works at Umbrella is confirmed');
insert into res values ('h1', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Bo", "predicate": "works at", "object": "Initech", "valid_from": "2022-01-01T00:00:00Z"}]', 'extraction'));
select is(pg_temp.r('h1') #>> '{results,0,status}', 'conflict', 'extraction''s claim is held in a conflict');
select is(pg_temp.objs('p', 'Bo', 'works at'), 'Umbrella', '... and the confirmed fact is not superseded');
insert into ids values ('c_bo', (pg_temp.r('h1') #>> '{results,0,conflict_id}')::uuid);
select is((select c.cause from memory.list_conflicts(pg_temp.id('p')) c where c.conflict_id = pg_temp.id('c_bo')),
          'confirmed_fact', '... cause confirmed_fact');
insert into res values ('h2', memory.assert_facts(pg_temp.id('p'),
  '[{"subject": "Bo", "predicate": "works at", "object": "Initech", "valid_from": "2022-01-01T00:00:00Z"}]', 'extraction'));
select is((select count(*) from memory.conflict_members m where m.conflict_id = pg_temp.id('c_bo') and m.fact_id is null),
          1::bigint, 'a retry of the claim is held once');
select throws_ok(format('select memory.resolve_conflict(%L, %L, %L)', pg_temp.id('p'), pg_temp.id('c_bo'), 'keep_both'),
                 '22023', null, 'keep_both is refused for a cardinality-one claim');
insert into res values ('hw', memory.resolve_conflict(pg_temp.id('p'), pg_temp.id('c_bo'), 'supersede',
  (select m.member_id from memory.conflict_members m where m.conflict_id = pg_temp.id('c_bo') and m.fact_id is null)));
select is(pg_temp.objs('p', 'Bo', 'works at'), 'Initech', 'the held claim wins: stored, it supersedes');
select is(pg_temp.objs('p', 'Bo', 'works at', '2021-06-01T00:00:00Z'), 'Umbrella', '... from its own start');
call pg_temp.fact('p', 'bo_api', '{"subject": "Bo", "predicate": "works at", "object": "Hooli", "valid_from": "2023-01-01T00:00:00Z"}');
select is(pg_temp.objs('p', 'Bo', 'works at'), 'Hooli', 'control: a claim from the API supersedes as always');

-- G. Learned cardinality, and its undo.
do $$
begin
  for i in 1 .. 5 loop
    perform memory.assert_facts(pg_temp.id('q'), jsonb_build_array(
      jsonb_build_object('subject', 'S' || i, 'predicate', 'rides', 'object', 'horse ' || i,
                         'valid_from', '2019-01-01T00:00:00Z', 'valid_to', '2020-01-01T00:00:00Z'),
      jsonb_build_object('subject', 'S' || i, 'predicate', 'rides', 'object', 'pony ' || i,
                         'valid_from', '2020-01-01T00:00:00Z')));
  end loop;
end $$;
select is((select s.suggestion from memory.suggest_cardinality(pg_temp.id('q')) s where s.predicate = 'rides'), 'one',
          'five subjects whose objects followed one another: one is suggested');
select is((select s.sequential_subjects from memory.suggest_cardinality(pg_temp.id('q')) s where s.predicate = 'rides'), 5,
          '... with its evidence');
call pg_temp.fact('q', 't1', '{"subject": "T", "predicate": "rides", "object": "a mule", "valid_from": "2019-01-01T00:00:00Z"}');
call pg_temp.fact('q', 't2', '{"subject": "T", "predicate": "rides", "object": "a camel", "valid_from": "2020-01-01T00:00:00Z"}');
select lives_ok(format('select memory.set_conflict_policy(%L, p_learn_cardinality => true)', pg_temp.id('q')), 'q learns cardinality');
select lives_ok(format('select memory.resolve_conflict(%L, %L, %L, %L)', pg_temp.id('q'), pg_temp.conflict_of('q', 'T', 'rides'),
                       'supersede', pg_temp.member(pg_temp.conflict_of('q', 'T', 'rides'), 'a camel')),
                'a resolution of a rides conflict');
select is((select d.cardinality from memory.predicates_of(pg_temp.id('q')) d where d.predicate = 'rides'), 'one',
          '... applies the suggestion: rides is declared one');
select is((select c.cause from memory.predicate_changes(pg_temp.id('q')) c where c.predicate = 'rides' limit 1), 'learned',
          '... logged as learned, with evidence');
select lives_ok(format('select memory.undo_predicate_change(%L, %s)', pg_temp.id('q'),
                       (select c.change_id from memory.predicate_changes(pg_temp.id('q')) c limit 1)),
                'an operator undoes it');
select is((select count(*) from memory.predicates_of(pg_temp.id('q')) d where d.predicate = 'rides'), 0::bigint,
          '... rides is undeclared again');

-- H. Wipes take conflicts with them; webhooks were queued.
select ok((select count(*) from memory.jobs j where j.kind = 'deliver_webhook'
             and j.payload ->> 'body' like '%conflict.detected%') >= 1, 'conflict.detected was queued for the endpoint');
select ok((select count(*) from memory.jobs j where j.kind = 'deliver_webhook'
             and j.payload ->> 'body' like '%conflict.resolved%') >= 1, '... and conflict.resolved');
select lives_ok(format('select memory.wipe(%L, p_subject => %L)', pg_temp.id('p'), 'Hal'), 'wipe the subject Hal');
select is((select count(*) from memory.conflicts c where c.project_id = pg_temp.id('p')
             and c.conflict_id in (pg_temp.id('c_hal'))), 0::bigint, '... its conflicts are gone');
select ok((select count(*) from memory.conflicts c where c.conflict_id = pg_temp.id('c_ann')) = 1,
          'control: Ann''s conflict stays');

-- I. Retrieval: confirmed ranks above unreviewed at equal relevance; a
-- rejected fact never appears, given the same text and embedding.
create function pg_temp.hits(p_legs text[]) returns text[] language sql stable as $$
  select array_agg(h ->> 'subject' order by (h ->> 'position')::integer)
    from jsonb_array_elements(memory.search(pg_temp.id('q'), 'blue lamp hall', pg_temp.vec(3), null, null, 10, p_legs)
                              -> 'results') h
   where h ->> 'kind' = 'fact' $$;
do $$
begin
  perform memory.assert_facts(pg_temp.id('q'), '[
    {"subject": "Lamp A", "predicate": "stands in", "object": "hall", "content": "the blue lamp stands in the hall"},
    {"subject": "Lamp B", "predicate": "stands in", "object": "hall", "content": "the blue lamp stands in the hall"},
    {"subject": "Lamp C", "predicate": "stands in", "object": "hall", "content": "the blue lamp stands in the hall"}]');
  perform memory_worker.store_embeddings('fact',
    array(select v.fact_id from memory_internal.fact_versions(pg_temp.id('q')) v where v.predicate = 'stands in'
           order by v.fact_id),
    array[pg_temp.vec(3), pg_temp.vec(3), pg_temp.vec(3)]);
end $$;
select is(cardinality(pg_temp.hits(array['fact_fulltext', 'fact_vector'])), 3, 'positive control: all three lamps are found');
insert into ids select 'lamp.' || right(f.subject, 1), f.fact_id from memory.readable_facts_at(pg_temp.id('q')) f
 where f.predicate = 'stands in';
-- The lamp that comes last among equals (by id) is confirmed.
insert into ids select 'lamp.last', i.id from ids i where i.k like 'lamp._' order by i.id desc limit 1;
select lives_ok(format('select memory.review_fact(%L, %L, %L)', pg_temp.id('q'), pg_temp.id('lamp.last'), 'confirmed'),
                'confirm the lamp an id tie-break would put last');
select is((pg_temp.hits(array['fact_fulltext', 'fact_vector']))[1],
          (select f.subject from memory.readable_facts_at(pg_temp.id('q')) f where f.fact_id = pg_temp.id('lamp.last')),
          'the confirmed lamp ranks first at equal relevance');
select is((select (h ->> 'standing') from jsonb_array_elements(memory.search(pg_temp.id('q'), 'blue lamp hall', null, null, null, 10,
                                                              array['fact_fulltext']) -> 'results') h
            where (h ->> 'id')::uuid = pg_temp.id('lamp.last')), 'confirmed', 'a fact hit carries its standing');
insert into ids select 'lamp.reject', i.id from ids i where i.k like 'lamp._' and i.id <> pg_temp.id('lamp.last') order by i.id limit 1;
select lives_ok(format('select memory.review_fact(%L, %L, %L)', pg_temp.id('q'), pg_temp.id('lamp.reject'), 'rejected'),
                'reject another lamp');
select is(cardinality(pg_temp.hits(array['fact_fulltext', 'fact_vector'])), 2, 'the rejected lamp never appears (same text and embedding)');
select ok(not (select f.subject from memory.readable_facts_at(pg_temp.id('q')) f where f.fact_id = pg_temp.id('lamp.last'))
               is null, 'control: the confirmed one is still there');

-- J. The contradictions policy: the model's contradiction opens a conflict
-- instead of closing the fact.
do $$
declare v_ep uuid;
begin
  perform memory.ingest(pg_temp.id('q'), 'chat-k', '[{"role": "user", "content": "Kai no longer surfs", "occurred_at": "2024-05-01T00:00:00Z"}]');
  select e.episode_id into v_ep from memory.episodes e where e.project_id = pg_temp.id('q') order by e.seq desc limit 1;
  insert into pg_temp.ids values ('ep_k', v_ep);
end $$;
call pg_temp.fact('q', 'kai', '{"subject": "Kai", "predicate": "does", "object": "surfing", "valid_from": "2020-01-01T00:00:00Z"}');
select is(memory.set_conflict_policy(pg_temp.id('q'), 'conflict') ->> 'contradictions', 'conflict', 'q: contradictions open conflicts');
insert into res values ('ex', memory_worker.apply_extraction(pg_temp.id('ep_k'),
  jsonb_build_object('contradictions', jsonb_build_array(jsonb_build_object('fact_id', pg_temp.id('q.kai'))))));
select is(pg_temp.r('ex') #>> '{contradictions,conflicts}', '1', 'the contradiction opened a conflict');
select is(pg_temp.objs('q', 'Kai', 'does'), 'surfing', '... and closed nothing');
select is((select c.cause from memory.list_conflicts(pg_temp.id('q')) c where c.subject = 'Kai'), 'contradiction', '... cause contradiction');

-- K. A merge that gives one subject two objects of an unknown predicate opens a conflict.
call pg_temp.fact('q', 'lu1', '{"subject": "Lu", "predicate": "has pet", "object": "a cat", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('q', 'lu2', '{"subject": "Lou", "predicate": "has pet", "object": "a dog", "valid_from": "2020-01-01T00:00:00Z"}');
select is(pg_temp.open_conflicts('q', 'Lu'), 0::bigint, 'two subjects, one object each: no conflict');
select lives_ok(format('select memory.merge_entities(%L, %L, %L)', pg_temp.id('q'), 'Lu', 'Lou'), 'merge Lou into Lu');
select is(pg_temp.open_conflicts('q', 'Lu'), 1::bigint, 'the merged subject''s two objects open a conflict');

-- L. A session wipe takes the conflicts its facts made, as if never opened;
-- a conflict still held by two other facts stays.
do $$
declare v_ep uuid;
begin
  perform memory.ingest(pg_temp.id('q'), 'chat-m', '[{"role": "user", "content": "Mo moved to Lima"}]');
  select e.episode_id into v_ep from memory.episodes e
    join memory.sessions s on s.org_id = e.org_id and s.session_id = e.session_id
   where s.external_id = 'chat-m';
  insert into pg_temp.ids values ('ep_m', v_ep);
end $$;
call pg_temp.fact('q', 'mo1', '{"subject": "Mo", "predicate": "lives in", "object": "Quito", "valid_from": "2020-01-01T00:00:00Z"}');
do $$ begin
  perform memory.assert_facts(pg_temp.id('q'), '[{"subject": "Mo", "predicate": "lives in", "object": "Lima", "valid_from": "2021-01-01T00:00:00Z"}]',
                              p_source_episode => pg_temp.id('ep_m'));
  perform memory.assert_facts(pg_temp.id('q'), '[{"subject": "Ny", "predicate": "lives in", "object": "Oslo", "valid_from": "2021-01-01T00:00:00Z"},
                                                 {"subject": "Ny", "predicate": "lives in", "object": "Bonn", "valid_from": "2021-01-01T00:00:00Z"}]');
  perform memory.assert_facts(pg_temp.id('q'), '[{"subject": "Ny", "predicate": "lives in", "object": "Lima", "valid_from": "2021-01-01T00:00:00Z"}]',
                              p_source_episode => pg_temp.id('ep_m'));
end $$;
select is(pg_temp.open_conflicts('q', 'Mo') + pg_temp.open_conflicts('q', 'Ny'), 2::bigint, 'Mo and Ny each have a conflict');
select lives_ok(format('select memory.wipe(%L, %L)', pg_temp.id('q'), 'chat-m'), 'wipe the session chat-m');
select is(pg_temp.open_conflicts('q', 'Mo'), 0::bigint, 'Mo''s conflict (one fact left) is gone, as if never opened');
select is((select c.members from memory.list_conflicts(pg_temp.id('q')) c where c.subject = 'Ny'), 2,
          'control: Ny''s conflict stays, with its two other facts');

select * from finish();
ROLLBACK;
