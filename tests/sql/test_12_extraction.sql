-- 12 extraction: what the model is shown for an episode
-- (extraction_context) and how its answer is applied (apply_extraction:
-- each section in its own savepoint, facts through assert_facts at the
-- episode's instant, contradictions closed at that instant, idempotent).
-- Runs as chronomem_app.
--
-- Session "chat" of project p (all on 2024-03-01, UTC):
--   seq 1 10:00 user       Hi, I am Erin.
--   seq 2 10:01 assistant  Nice to meet you. How is Dana?
--   seq 3 10:02 user       Dana is fine.
--   seq 4 10:03 assistant  Anything else?
--   seq 5 10:05 user       Alice told Bobby she is moving to Globex; Caz agrees.   <- 'ep'
--   seq 6 10:06 user       Bob called.                                            <- 'ep_bob'
-- Facts (API, from 2020): Alice and Bob both work at Acme (same predicate,
-- object and content shape), Carol (alias Caz) likes tea, Dana likes jazz,
-- Erin likes chess; Alice lives in Paris from 2025; Alice likes rain
-- (retracted).  Project q and org B each have an Alice fact of their own.
BEGIN;
select plan(49);
-- Windows and instants are compared as text: read them in UTC.
set local timezone = 'UTC';

-- Assert one fact through the API and keep its id.
create procedure pg_temp.named_fact(p_k text, p_project text, p_fact jsonb) language sql as $$
  insert into pg_temp.ids select p_k, (memory.assert_facts(pg_temp.id(p_project), jsonb_build_array(p_fact))
                                       #>> '{results,0,fact_id}')::uuid $$;
create procedure pg_temp.apply(p_k text, p_episode text, p_payload jsonb) language sql as $$
  insert into pg_temp.res values (p_k, memory_worker.apply_extraction(pg_temp.id(p_episode), p_payload)) $$;
create function pg_temp.ctx(p_episode text, p_turns integer default 6) returns jsonb language sql stable as $$
  select memory_worker.extraction_context(pg_temp.id(p_episode), p_turns) $$;
create function pg_temp.known(p_episode text, p_turns integer default 6) returns text language sql stable as $$
  select string_agg(distinct x ->> 'subject', ' ' order by x ->> 'subject')
    from jsonb_array_elements(pg_temp.ctx(p_episode, p_turns) -> 'known_facts') x $$;
create function pg_temp.fv(p_k text) returns memory.facts language sql stable as $$
  select v.* from memory_internal.fact_versions(pg_temp.id('p')) v where v.fact_id = pg_temp.id(p_k) $$;
-- What an apply may change in project p, in one line.
create function pg_temp.state() returns text language sql stable as $$
  select format('facts=%s events=%s notes=%s entities=%s aliases=%s jobs=%s',
    (select string_agg(v.fact_id || v.valid_range::text || coalesce(v.invalid_at::text, ''), ',' order by v.fact_id)
       from memory_internal.fact_versions(pg_temp.id('p')) v),
    (select count(*) from memory.fact_events where project_id = pg_temp.id('p')),
    (select string_agg(n.kind || ':' || n.content || ':' || coalesce(n.subject_id::text, '-'), ',' order by n.content)
       from memory.notes n where n.project_id = pg_temp.id('p')),
    (select string_agg(e.name || ':' || coalesce(e.entity_type, '-') || ':' || coalesce(e.summary, '-'), ',' order by e.name)
       from memory.entities e where e.project_id = pg_temp.id('p')),
    (select count(*) from memory.entity_aliases where project_id = pg_temp.id('p')),
    (select count(*) from memory.jobs where project_id = pg_temp.id('p'))) $$;

set local role chronomem_app;
do $$
declare o uuid; b uuid; r jsonb;
begin
  b := memory.create_org('extraction org B');
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('org_b', b), ('p_b', memory.create_project(b, 'p'));
  call pg_temp.named_fact('b_fact', 'p_b', '{"subject": "Alice", "predicate": "works at", "object": "Umbrella", "valid_from": "2020-01-01T00:00:00Z"}');
  r := memory.ingest(pg_temp.id('p_b'), 'chat', '[{"role": "user", "content": "Alice is here", "occurred_at": "2024-03-01T10:00:00Z"}]');
  insert into pg_temp.ids values ('ep_b', (r #>> '{episode_ids,0}')::uuid);

  o := memory.create_org('extraction org A');
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p')), ('q', memory.create_project(o, 'q'));
  perform memory.declare_predicate(pg_temp.id('p'), 'works at', 'one');
  call pg_temp.named_fact('alice_acme', 'p', '{"subject": "Alice", "predicate": "works at", "object": "Acme", "object_type": "entity",
                                         "content": "Alice works at Acme", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.named_fact('bob_acme', 'p', '{"subject": "Bob", "predicate": "works at", "object": "Acme", "object_type": "entity",
                                       "content": "Bob works at Acme", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.named_fact('carol_tea', 'p', '{"subject": "Carol", "predicate": "likes", "object": "tea", "valid_from": "2020-01-01T00:00:00Z"}');
  perform memory.add_alias(pg_temp.id('p'), 'Carol', 'Caz');
  call pg_temp.named_fact('dana_jazz', 'p', '{"subject": "Dana", "predicate": "likes", "object": "jazz", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.named_fact('erin_chess', 'p', '{"subject": "Erin", "predicate": "likes", "object": "chess", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.named_fact('alice_paris', 'p', '{"subject": "Alice", "predicate": "lives in", "object": "Paris", "valid_from": "2025-01-01T00:00:00Z"}');
  call pg_temp.named_fact('alice_rain', 'p', '{"subject": "Alice", "predicate": "likes", "object": "rain", "valid_from": "2020-01-01T00:00:00Z"}');
  perform memory.retract_fact(pg_temp.id('p'), pg_temp.id('alice_rain'));
  call pg_temp.named_fact('q_fact', 'q', '{"subject": "Alice", "predicate": "works at", "object": "Initech", "valid_from": "2020-01-01T00:00:00Z"}');

  r := memory.ingest(pg_temp.id('p'), 'chat', '[
    {"role": "user", "content": "Hi, I am Erin.", "occurred_at": "2024-03-01T10:00:00Z"},
    {"role": "assistant", "content": "Nice to meet you. How is Dana?", "occurred_at": "2024-03-01T10:01:00Z"},
    {"role": "user", "content": "Dana is fine.", "occurred_at": "2024-03-01T10:02:00Z"},
    {"role": "assistant", "content": "Anything else?", "occurred_at": "2024-03-01T10:03:00Z"},
    {"role": "user", "content": "Alice told Bobby she is moving to Globex; Caz agrees.", "occurred_at": "2024-03-01T10:05:00Z"},
    {"role": "user", "content": "Bob called.", "occurred_at": "2024-03-01T10:06:00Z"}]');
  insert into pg_temp.ids values ('ep', (r #>> '{episode_ids,4}')::uuid), ('ep_bob', (r #>> '{episode_ids,5}')::uuid);
  perform memory.ingest(pg_temp.id('p'), 'other', '[{"role": "user", "content": "Frank was here.", "occurred_at": "2024-03-01T10:04:00Z"}]');
end $$;

-- A. extraction_context.
select is((pg_temp.ctx('ep') -> 'episode') - 'occurred_at',
          jsonb_build_object('episode_id', pg_temp.id('ep'), 'role', 'user',
                             'content', 'Alice told Bobby she is moving to Globex; Caz agrees.'),
          'the episode: id, role, content');
select is((pg_temp.ctx('ep') #>> '{episode,occurred_at}')::timestamptz, '2024-03-01T10:05:00Z'::timestamptz,
          '... and its occurred_at');
select is(jsonb_path_query_array(pg_temp.ctx('ep', 2), '$.recent_turns[*].content'),
          '["Dana is fine.", "Anything else?"]'::jsonb, 'p_turns = 2: the two previous turns, oldest first');
select is(jsonb_path_query_array(pg_temp.ctx('ep'), '$.recent_turns[*].role') || jsonb_path_query_array(pg_temp.ctx('ep'), '$.recent_turns[*].content'),
          '["user", "assistant", "user", "assistant", "Hi, I am Erin.", "Nice to meet you. How is Dana?", "Dana is fine.", "Anything else?"]'::jsonb,
          'default (6): every previous turn of the session, in order (not the other session''s)');
select is(pg_temp.ctx('ep', 0) -> 'recent_turns', '[]'::jsonb, 'p_turns = 0: no turns');
select is(jsonb_path_query_array(pg_temp.ctx('ep', 2), '$.known_facts[*].fact_id'),
          jsonb_build_array(pg_temp.id('alice_acme'), pg_temp.id('carol_tea'), pg_temp.id('dana_jazz')),
          'known_facts: the facts holding at the episode''s instant about Alice (named), Carol (alias Caz) and Dana (named in a turn)');
select is(pg_temp.ctx('ep', 2) #> '{known_facts,0}',
          jsonb_build_object('fact_id', pg_temp.id('alice_acme'), 'subject', 'Alice', 'predicate', 'works at',
                             'object', 'Acme', 'content', 'Alice works at Acme',
                             'valid_from', to_jsonb('2020-01-01T00:00:00Z'::timestamptz), 'valid_until', null),
          'a known fact carries its id, triple, content and window');
select ok(pg_temp.id('bob_acme') in (select fact_id from memory.facts_at(pg_temp.id('p'), '2024-03-01T10:05:00Z')),
          'Bob''s fact holds at the episode''s instant too (it would be eligible)');
select ok(not jsonb_path_exists(pg_temp.ctx('ep'), '$.known_facts[*] ? (@.fact_id == $id)',
                                jsonb_build_object('id', pg_temp.id('bob_acme'))),
          'but Bob is not named ("Bobby" is another word): his fact is not shown');
select is(jsonb_path_query_array(pg_temp.ctx('ep_bob', 0), '$.known_facts[*].fact_id'),
          jsonb_build_array(pg_temp.id('bob_acme')), 'positive control: an episode naming Bob is shown his fact');
select is(pg_temp.known('ep', 0) || ' / ' || pg_temp.known('ep', 2) || ' / ' || pg_temp.known('ep', 6),
          'Alice Carol / Alice Carol Dana / Alice Carol Dana Erin', 'the turns in scope name entities too');
select is(pg_temp.ctx('ep') -> 'predicates', '[{"predicate": "works at", "cardinality": "one"}]'::jsonb,
          'the declared predicates, with their cardinality');
select throws_ok($$ select pg_temp.ctx('ep_b') $$, 'P0002', null, 'another org''s episode: not found');

-- B. apply_extraction.
insert into res values ('payload', jsonb_build_object(
  'entities', '[{"name": "Alice", "type": "person", "summary": "Engineer at Acme", "aliases": ["Ali"]},
                {"name": "Globex", "type": "company"},
                {"name": 456, "type": "number"}, {"name": "Initech", "aliases": "IT"}]'::jsonb,
  'facts', '[{"subject": "Alice", "predicate": "plans to join", "object": "Globex", "confidence": 0.9, "reasoning": "she said so"},
             {"subject": "Alice", "predicate": "met", "object": "Bobby", "valid_from": "2024-02-01T00:00:00Z", "confidence": 0.8},
             {"subject": "Alice", "predicate": "likes", "object": "snow", "confidence": 0.5},
             {"subject": "Alice", "predicate": "likes", "object": "hail", "confidence": 0.2},
             {"subject": "Alice", "predicate": "visited", "object": "Rome", "valid_from": "2024-01-02T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"},
             {"subject": "Alice", "predicate": "visited", "object": "Oslo", "valid_to": "2024-03-01T09:00:00Z"},
             {"subject": 123, "predicate": "likes", "object": "numbers"},
             {"subject": "Alice", "predicate": "likes", "object": "tea", "confidence": "high", "why": "guess"}]'::jsonb,
  'contradictions', jsonb_build_array(
    jsonb_build_object('fact_id', pg_temp.id('alice_acme'), 'reason', 'Alice is moving to Globex'),
    jsonb_build_object('fact_id', 'not-a-uuid'),
    jsonb_build_object('fact_id', pg_temp.id('q_fact')),
    jsonb_build_object('fact_id', pg_temp.id('b_fact')),
    jsonb_build_object('fact_id', pg_temp.id('alice_rain')),
    jsonb_build_object('fact_id', gen_random_uuid()),
    '{}'::jsonb),
  'notes', '[{"kind": "preference", "subject": "Alice", "content": "  Alice prefers remote work  "},
             {"kind": "summary", "content": "Alice is leaving Acme for Globex."}]'::jsonb));
call pg_temp.apply('a1', 'ep', pg_temp.r('payload'));
select is(pg_temp.r('a1') -> 'failed_sections', '[]'::jsonb, 'no section failed');
select is((select string_agg(e.name || ' ' || e.entity_type || ' ' || coalesce(e.summary, '-'), ', ' order by e.name)
             from memory.entities e where e.project_id = pg_temp.id('p') and e.name in ('Alice', 'Globex')),
          'Alice person Engineer at Acme, Globex company -', 'entities upserted with type and summary');
select is((pg_temp.r('a1') -> 'entities')::text
          || ' ' || (select count(*) from memory.entities e
                      where e.project_id = pg_temp.id('p') and e.normalized_name in ('456', 'initech')),
          '{"upserted": 2, "skipped_malformed": 2} 0',
          'entities of wrong JSON types (name 456, aliases a string) are skipped and counted, not stored');
select is(memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'ali'),
          memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'alice'), 'the alias Ali resolves to Alice');
select is((pg_temp.r('a1') -> 'facts') - 'superseded_pairs',
          '{"inserted": 3, "superseded": 0, "skipped": 0, "refused": 0, "invalid": 0,
            "dropped_low_confidence": 1, "dropped_born_dead": 2, "dropped_malformed": 2,
            "malformed": [{"index": 6, "error": {"field": "subject", "message": "subject must be a string, not number"}},
                          {"index": 7, "error": {"field": "confidence", "message": "confidence must be a number, not string"}}],
            "ignored_keys": ["reasoning", "why"], "errors": []}'::jsonb,
          'facts: 3 inserted, 1 below the floor and 2 born dead dropped and counted, 2 of wrong types dropped and named, unknown keys left out and listed');
select is((select count(*)::int from memory.entities e where e.project_id = pg_temp.id('p') and e.normalized_name = '123')
          + (select count(*)::int from memory_internal.fact_versions(pg_temp.id('p'))
              where source_episode_id = pg_temp.id('ep') and object_key in ('numbers', 'tea')), 0,
          'the facts of wrong types store nothing (no entity "123")');
select is((select string_agg(v.predicate || ' ' || coalesce(v.object_literal, 'entity') || ' ' || v.valid_from || ' ' || v.source
                             || ' ' || v.actor || ' ' || v.confidence, ', ' order by v.predicate)
             from memory_internal.fact_versions(pg_temp.id('p')) v where v.source_episode_id = pg_temp.id('ep')),
          'likes snow 2024-03-01 10:05:00+00 extraction extraction 0.5, '
          || 'met Bobby 2024-02-01 00:00:00+00 extraction extraction 0.8, '
          || 'plans to join entity 2024-03-01 10:05:00+00 extraction extraction 0.9',
          'stored with source extraction, the episode as source, valid_from the episode''s instant unless given (confidence = floor kept)');
select is((select count(*)::int from memory_internal.fact_versions(pg_temp.id('p')) where object_key in ('hail', 'rome', 'oslo')), 0,
          'the dropped facts are not stored');
select is(pg_temp.r('a1') -> 'contradictions', '{"closed": 1, "unknown_ids": 6}'::jsonb,
          'contradictions: one closed; a malformed, foreign-project, foreign-org, retracted, unknown or missing id counts as unknown');
select is((pg_temp.fv('alice_acme')).valid_range::text || ' ' || (pg_temp.fv('alice_acme')).asserted_until,
          '["2020-01-01 00:00:00+00","2024-03-01 10:05:00+00") 2024-03-01 10:05:00+00',
          'the contradicted fact is closed at the episode''s instant');
select is((select e.event_type || ' ' || e.reason || ' ' || e.actor || ' ' || e.new_range::text from memory.fact_events e
            where e.fact_id = pg_temp.id('alice_acme') order by e.event_id desc limit 1),
          'contradicted Alice is moving to Globex extraction ["2020-01-01 00:00:00+00","2024-03-01 10:05:00+00")',
          'with a contradicted event carrying the reason');
select is((select v.valid_range::text || ' ' || (select count(*) from memory.fact_events e where e.fact_id = v.fact_id)
             from memory_internal.fact_versions(pg_temp.id('q')) v where v.fact_id = pg_temp.id('q_fact')),
          '["2020-01-01 00:00:00+00",) 1', 'the fact of another project named as contradicted is untouched');
select is((pg_temp.fv('bob_acme')).valid_range::text || ' ' || (pg_temp.fv('alice_paris')).valid_range::text,
          '["2020-01-01 00:00:00+00",) ["2025-01-01 00:00:00+00",)', 'facts not named are untouched');
select is((select string_agg(n.kind || ' ' || coalesce(s.name, '-') || ' ' || n.content || ' ' || (n.episode_id = pg_temp.id('ep')), ', '
                             order by n.kind)
             from memory.notes n left join memory.entities s on s.org_id = n.org_id and s.entity_id = n.subject_id
            where n.project_id = pg_temp.id('p')),
          'preference Alice Alice prefers remote work true, summary - Alice is leaving Acme for Globex. true',
          'notes stored with their kind, subject and episode, content trimmed');
do $$ begin perform memory.use_org(pg_temp.id('org_b'), true); end $$;
select is((select v.valid_range::text || ' ' || (select count(*) from memory.fact_events e where e.fact_id = v.fact_id)
             from memory_internal.fact_versions(pg_temp.id('p_b')) v where v.fact_id = pg_temp.id('b_fact')),
          '["2020-01-01 00:00:00+00",) 1', 'org B''s fact named as contradicted is untouched');
select throws_ok($$ select memory_worker.apply_extraction(pg_temp.id('ep'), '{}') $$, 'P0002', null,
                 'scoped to B, A''s episode: not found');
do $$ begin perform memory.use_org(pg_temp.id('org'), true); end $$;

-- C. Re-applying the same answer changes nothing.
insert into snap values ('before_reapply', pg_temp.state());
call pg_temp.apply('a2', 'ep', pg_temp.r('payload'));
select is(pg_temp.state(), (select v from snap where k = 'before_reapply'),
          're-applying the same payload: same facts and windows, no new event, note, entity, alias or job');
select is(jsonb_build_object('failed', pg_temp.r('a2') -> 'failed_sections',
                             'facts', (pg_temp.r('a2') -> 'facts') - 'superseded_pairs' - 'errors' - 'dropped_low_confidence' - 'dropped_born_dead'
                                      - 'dropped_malformed' - 'malformed' - 'ignored_keys',
                             'contradictions', pg_temp.r('a2') -> 'contradictions', 'notes', pg_temp.r('a2') -> 'notes'),
          '{"failed": [], "facts": {"inserted": 0, "superseded": 0, "skipped": 3, "refused": 0, "invalid": 0},
            "contradictions": {"closed": 0, "unknown_ids": 7}, "notes": {"inserted": 0}}'::jsonb,
          '... and reports the facts skipped, nothing closed (the fact closed by the first apply is no longer offered: unknown), no note inserted');

-- D. A malformed section is rolled back whole; the other sections stand.
call pg_temp.apply('bad_entities', 'ep_bob', '{
  "entities": [{"name": "Zed", "type": "person"}, {"name": "!!!"}],
  "facts": [{"subject": "Yan", "predicate": "likes", "object": "tea"}],
  "notes": [{"kind": "summary", "content": "Bob called about Zed."}]}');
select is(pg_temp.r('bad_entities') -> 'failed_sections', '["entities"]'::jsonb,
          'an entity with an empty name: the entities section fails');
select matches(pg_temp.r('bad_entities') #>> '{entities,error}', 'empty after normalization', '... and its error is reported');
select is(memory_internal.find_entity(pg_temp.id('org'), pg_temp.id('p'), 'zed'), null,
          '... rolled back whole: Zed, listed before the bad entity, is not created');
select is((select count(*)::int from memory.facts_at(pg_temp.id('p'), '2024-03-01T10:06:00Z') f
            where f.source_episode_id = pg_temp.id('ep_bob'))
          || ' ' || (select count(*)::int from memory.notes where episode_id = pg_temp.id('ep_bob')),
          '1 1', 'the facts and notes sections stand');

call pg_temp.apply('bad_facts', 'ep_bob', '{
  "facts": [{"subject": "Zoe", "predicate": "likes", "object": "tea", "confidence": 0.9},
            {"subject": "Zoe", "predicate": "likes", "object": "coffee", "confidence": 7}],
  "notes": [{"kind": "summary", "content": "Zoe likes drinks."}]}');
select is(pg_temp.r('bad_facts') -> 'failed_sections', '["facts"]'::jsonb,
          'a fact with confidence 7: the facts section fails');
select is((select count(*)::int from memory_internal.fact_versions(pg_temp.id('p')) v
             join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id where s.name = 'Zoe'), 0,
          '... rolled back whole: the valid fact listed with it is not stored');
select is((select count(*)::int from memory.notes where content = 'Zoe likes drinks.'), 1, 'the notes section stands');

call pg_temp.apply('bad_notes', 'ep_bob', '{
  "facts": [{"subject": "Uma", "predicate": "likes", "object": "tea"}],
  "notes": [{"kind": "summary", "content": "A fine note."}, {"kind": "opinion", "content": "Not a kind."}]}');
select is(pg_temp.r('bad_notes') -> 'failed_sections', '["notes"]'::jsonb, 'a note of an unknown kind: the notes section fails');
select is((select count(*)::int from memory.notes where content in ('A fine note.', 'Not a kind.'))
          || ' ' || (select count(*)::int from memory_internal.fact_versions(pg_temp.id('p')) where content = 'Uma likes tea'),
          '0 1', '... rolled back whole (the good note is not stored), while the facts section stands');

-- E. Payload shape: raised before anything is applied.
select throws_ok($$ call pg_temp.apply('x', 'ep', '[{"subject": "a"}]') $$, '22023', 'extraction payload must be a JSON object',
                 'a payload that is not an object: 22023');
select throws_ok($$ call pg_temp.apply('x', 'ep', '{"notes": [], "facts": {"subject": "Alice"}}') $$, '22023',
                 'extraction payload: facts must be an array', 'a section that is not an array: 22023 naming it');
select throws_ok($$ call pg_temp.apply('x', 'ep', '{"entities": [{"name": "Vic"}], "contradictions": "none"}') $$, '22023',
                 'extraction payload: contradictions must be an array', '... whichever section it is');
call pg_temp.apply('empty', 'ep', '{}');
select is(pg_temp.r('empty') - 'episode_id',
          '{"entities": {"upserted": 0, "skipped_malformed": 0}, "facts": {"inserted": 0, "superseded": 0, "skipped": 0, "refused": 0, "invalid": 0,
            "superseded_pairs": [], "dropped_low_confidence": 0, "dropped_born_dead": 0, "dropped_malformed": 0,
            "malformed": [], "ignored_keys": [], "errors": []},
            "contradictions": {"closed": 0, "unknown_ids": 0}, "notes": {"inserted": 0},
            "classification": {"labels": 0}, "fields": {"stored": 0}, "rejected": {}, "failed_sections": []}'::jsonb,
          'positive control: an empty object (sections absent) applies nothing and fails nothing');

-- F. Only facts the context offered may be contradicted.  Bob's fact holds
-- at ep's instant but ep does not name Bob (test A): naming it is unknown.
select ok(not pg_temp.id('bob_acme') = any (array(select memory_internal.extraction_fact_ids(pg_temp.id('ep'), 6))),
          'Bob''s fact is not among the facts offered for ep');
call pg_temp.apply('not_offered', 'ep', jsonb_build_object('contradictions',
  jsonb_build_array(jsonb_build_object('fact_id', pg_temp.id('bob_acme')))));
select is(pg_temp.r('not_offered') -> 'contradictions', '{"closed": 0, "unknown_ids": 1}'::jsonb,
          'a current fact of the project that ep''s context did not offer: unknown, not closed');
select is((pg_temp.fv('bob_acme')).valid_range::text, '["2020-01-01 00:00:00+00",)', '... and Bob''s fact stays open');
-- Positive control: ep_bob names Bob, so its context offers the fact and the
-- same contradiction closes it.
call pg_temp.apply('offered', 'ep_bob', jsonb_build_object('contradictions',
  jsonb_build_array(jsonb_build_object('fact_id', pg_temp.id('bob_acme')))));
select is(pg_temp.r('offered') -> 'contradictions', '{"closed": 1, "unknown_ids": 0}'::jsonb,
          'positive control: from ep_bob, whose context offers it, the fact is closed');
select is(jsonb_path_query_array(pg_temp.ctx('ep_bob', 0), '$.known_facts[*].fact_id'), '[]'::jsonb,
          '... and is no longer offered once closed');

select * from finish();
ROLLBACK;
