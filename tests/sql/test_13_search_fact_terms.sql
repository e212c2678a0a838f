-- 13 search, fact postings: memory_internal.fact_terms follows
-- assert_facts and the three wipes and stays within its org and project;
-- the fact full-text leg that reads it returns exactly what the query it
-- replaced (@@ over facts_at, kept below as the reference) returns, at
-- instants before and after supersessions and a retraction, also when the
-- rare word's postings belong to versions that do not hold (the budget
-- grows) and when a common word is in more facts than the budget; when the
-- rare words have fewer candidates than places, it returns the reference's
-- facts that share them, in its order.  The postings carry each lexeme's
-- positions (tf) and the vector's length (doc_len), from which the leg
-- ranks: its scores equal ts_rank_cd's on facts that repeat a word, differ
-- in length and tie.
-- Runs as chronomem_app.
--
-- Projects p, q (org A) and r (org B) hold the same facts, word for word:
--   oslo    Zoltan lives in Oslo   [2020, 2022)  "Zoltan lives by the fjord"
--   bergen  Zoltan lives in Bergen [2022, )      "Zoltan lives by the fjord" (closes oslo)
--   marm    Quentin likes marmalade [2020, )     "Quentin enjoys marmalade" (retracted in p)
--   chat    Quentin knows Ursula   [2020, )      "Quentin met Ursula at the fjord" (from session s1)
--   w1..w1200  Fan N likes widget M [2020, )     "Fan N likes widgets of kind M" (a word past the budget)
--   b1..b1300 (p only) Banjo club notes meeting N  "Banjo club meeting N" (a word in more facts than "widget")
--   k1..k7  Kim notes ...  [2020, )   texts with "quokka" once to 300 times, short and long, two of
--                                     the same shape (a tie), one with "koala" too
BEGIN;
select plan(41);

create procedure pg_temp.seed(p text) language plpgsql as $$
declare
  pid uuid := pg_temp.id(p);
  ep uuid;
begin
  perform memory.declare_predicate(pid, 'lives in', 'one');
  ep := (memory.ingest(pid, 's1', '[{"role": "user", "content": "I met Ursula at the fjord",
                                      "occurred_at": "2020-06-01T10:00:00Z"}]') #>> '{episode_ids,0}')::uuid;
  call pg_temp.fact(p, 'oslo', '{"subject": "Zoltan", "predicate": "lives in", "object": "Oslo", "object_type": "entity",
    "content": "Zoltan lives by the fjord", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'bergen', '{"subject": "Zoltan", "predicate": "lives in", "object": "Bergen", "object_type": "entity",
    "content": "Zoltan lives by the fjord", "valid_from": "2022-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'marm', '{"subject": "Quentin", "predicate": "likes", "object": "marmalade",
    "content": "Quentin enjoys marmalade", "valid_from": "2020-01-01T00:00:00Z"}');
  call pg_temp.fact(p, 'chat', jsonb_build_object('subject', 'Quentin', 'predicate', 'knows', 'object', 'Ursula',
    'object_type', 'entity', 'content', 'Quentin met Ursula at the fjord', 'valid_from', '2020-01-01T00:00:00Z',
    'source_episode_id', ep));
  perform memory.assert_facts(pid, (
    select jsonb_agg(jsonb_build_object('subject', 'Kim', 'predicate', 'notes', 'object', 'note ' || k,
                                        'content', c, 'valid_from', '2020-01-01T00:00:00Z'))
      from (values (1, 'Quokka quokka quokka'),
                   (2, 'A quokka saw another quokka by the river bank today'),
                   (3, 'The quokka, a small marsupial of Rottnest Island, was seen near the old lighthouse '
                       'early in the morning by several walkers and two rangers'),
                   (4, 'Quokka eats leaves'),
                   (5, 'Quokka eats grass'),
                   (6, repeat('quokka ', 300) || 'river'),
                   (7, 'A koala and a quokka met by the river')) x(k, c)));
  perform memory.assert_facts(pid, (
    select jsonb_agg(jsonb_build_object('subject', 'Fan ' || i % 10, 'predicate', 'likes', 'object', 'widget ' || i,
                                        'content', 'Fan ' || i % 10 || ' likes widgets of kind ' || i,
                                        'valid_from', '2020-01-01T00:00:00Z'))
      from generate_series(b, b + 599) i))
    from (values (1), (601)) x(b);
end $$;
-- The reference: the leg as it was before the postings (@@ over the facts
-- holding at the instant, ranked by ts_rank_cd normalisation 1, then id).
create function pg_temp.old_ft(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (fact_id uuid, score double precision)
  language sql stable
  as $$
    select f.fact_id, ts_rank_cd(f.content_tsv, memory_internal.question_tsquery(p_query), 1)::float8
      from memory.facts_at(p_project, p_at, p_known_at) f
     where f.content_tsv @@ memory_internal.question_tsquery(p_query)
     order by 2 desc, 1
     limit p_n
  $$;
create function pg_temp.leg(p_project text, p_query text, p_at timestamptz, p_n integer default 30)
  returns uuid[] language sql stable as $$
  select coalesce(array_agg(x.fact_id order by x.o), '{}')
    from memory_internal.search_fact_fulltext(pg_temp.id(p_project), p_query, p_at, now(), p_n)
         with ordinality x(fact_id, score, o) $$;
create function pg_temp.leg_scored(p_project text, p_query text, p_at timestamptz, p_n integer default 30)
  returns text[] language sql stable as $$
  select coalesce(array_agg(x.fact_id || ' ' || x.score order by x.o), '{}')
    from memory_internal.search_fact_fulltext(pg_temp.id(p_project), p_query, p_at, now(), p_n)
         with ordinality x(fact_id, score, o) $$;
create function pg_temp.ref_scored(p_project text, p_query text, p_at timestamptz, p_n integer default 30)
  returns text[] language sql stable as $$
  select coalesce(array_agg(x.fact_id || ' ' || x.score order by x.o), '{}')
    from pg_temp.old_ft(pg_temp.id(p_project), p_query, p_at, now(), p_n) with ordinality x(fact_id, score, o) $$;
create function pg_temp.ref(p_project text, p_query text, p_at timestamptz, p_n integer default 30)
  returns uuid[] language sql stable as $$
  select coalesce(array_agg(x.fact_id order by x.o), '{}')
    from pg_temp.old_ft(pg_temp.id(p_project), p_query, p_at, now(), p_n) with ordinality x(fact_id, score, o) $$;
-- The postings a project should have: every distinct lexeme of every stored version.
create function pg_temp.expected_terms(p_project text) returns bigint language sql stable as $$
  select count(*) from memory_internal.fact_versions(pg_temp.id(p_project)) v
   cross join lateral unnest(tsvector_to_array(v.content_tsv)) $$;
create function pg_temp.terms(p_project text) returns bigint language sql stable as $$
  select count(*) from memory_internal.fact_terms t where t.project_id = pg_temp.id(p_project) $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('fact terms org A'); b uuid := memory.create_org('fact terms org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'p'));
  call pg_temp.seed('r');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  call pg_temp.seed('p');
  call pg_temp.seed('q');
end $$;

-- Postings follow assert_facts.
select is(array(select t.lexeme from memory_internal.fact_terms t
                 where t.org_id = pg_temp.id('org_a') and t.fact_id = pg_temp.id('p.bergen') order by 1),
          array['fjord', 'live', 'zoltan'], 'a fact''s postings are the distinct lexemes of its content');
select is(pg_temp.terms('p'), pg_temp.expected_terms('p'), 'p: one posting per version and lexeme (superseded versions too)');
select cmp_ok(pg_temp.terms('p'), '>', 4800::bigint, 'fixture: p has the widget facts'' postings');
select is((select count(*) from memory_internal.fact_terms t
            where t.project_id = pg_temp.id('p')
              and not exists (select from memory_internal.fact_versions(pg_temp.id('p')) v where v.fact_id = t.fact_id)),
          0::bigint, 'every posting of p is of a fact of p');

-- Each posting's tf and doc_len are its lexeme's positions and its vector's length.
select is((select count(*) from memory_internal.fact_terms t
            join memory_internal.fact_versions(pg_temp.id('p')) v on v.fact_id = t.fact_id
            cross join lateral (select sum(coalesce(cardinality(u.positions), 1)) as len,
                                       max(coalesce(cardinality(u.positions), 1)) filter (where u.lexeme = t.lexeme) as tf
                                  from unnest(v.content_tsv) u) e
           where t.project_id = pg_temp.id('p') and (t.tf, t.doc_len) is distinct from (e.tf::integer, e.len::integer)),
          0::bigint, 'every posting of p holds its lexeme''s positions (tf) and its vector''s length (doc_len)');
select is((select array_agg(t.tf || '/' || t.doc_len order by t.fact_id) from memory_internal.fact_terms t
            where t.project_id = pg_temp.id('p') and t.lexeme = 'quokka'
              and t.fact_id in (select v.fact_id from memory_internal.fact_versions(pg_temp.id('p')) v
                                 where v.content in ('Quokka quokka quokka', 'Quokka eats leaves'))),
          (select array_agg(x order by v.fact_id) from memory_internal.fact_versions(pg_temp.id('p')) v
             cross join lateral (select case v.content when 'Quokka quokka quokka' then '3/3' else '1/3' end) y(x)
            where v.content in ('Quokka quokka quokka', 'Quokka eats leaves')),
          'control: a word said three times has tf 3 (and once, 1)');

-- The rank from the postings is ts_rank_cd's: ids and scores as the full scan's.
select is(pg_temp.leg_scored('p', 'quokka', '2023-01-01'), pg_temp.ref_scored('p', 'quokka', '2023-01-01'),
          'scores = reference: one word, said 1 to 300 times, in texts of 3 to 301 words, with a tie');
select is(pg_temp.leg_scored('p', 'Where did the quokka and the koala meet, by the river?', '2023-01-01'),
          pg_temp.ref_scored('p', 'Where did the quokka and the koala meet, by the river?', '2023-01-01'),
          'scores = reference: several words, the rarest (koala) picked, every word ranked');
select cmp_ok(cardinality(array(select distinct split_part(x, ' ', 2)
                                  from unnest(pg_temp.ref_scored('p', 'quokka river', '2023-01-01')) x)), '>=', 5,
              'control: the reference ranks these texts apart (at least 5 distinct scores)');

-- The leg returns what the full scan returns, at instants before and after the supersession.
select is(pg_temp.leg('p', 'Where does Zoltan live?', '2023-01-01'), pg_temp.ref('p', 'Where does Zoltan live?', '2023-01-01'),
          'leg = reference: a rare word held by a superseded and a current version (2023)');
select is(pg_temp.leg('p', 'Where does Zoltan live?', '2021-01-01'), pg_temp.ref('p', 'Where does Zoltan live?', '2021-01-01'),
          'leg = reference (2021)');
select is(pg_temp.leg('p', 'Who likes widgets and the fjord?', '2023-01-01', 3),
          pg_temp.ref('p', 'Who likes widgets and the fjord?', '2023-01-01', 3),
          'leg = reference: the rare word''s 3 candidates fill 3 places but a superseded one does not hold, so the budget grows past the common words');
select is(pg_temp.leg('p', 'Who likes widgets and the fjord?', '2023-01-01', 200),
          array(select r.id from unnest(pg_temp.ref('p', 'Who likes widgets and the fjord?', '2023-01-01', 2000))
                  with ordinality r(id, o)
                 where r.id in (pg_temp.id('p.bergen'), pg_temp.id('p.chat')) order by r.o),
          'fewer candidates than places: the list is the facts that share the rare word, in the reference''s order (no growth into words past the budget)');
select ok(not pg_temp.id('p.bergen') = any (pg_temp.ref('p', 'Who likes widgets and the fjord?', '2023-01-01', 200)),
          '... which the reference, blind to how rare a word is, ranks below 200 facts sharing only the common words');
select cmp_ok(cardinality(pg_temp.ref('p', 'Who likes widgets and the fjord?', '2023-01-01', 200)), '>',
              cardinality(pg_temp.leg('p', 'Who likes widgets and the fjord?', '2023-01-01', 200)),
              'control: the reference does fill the list with facts sharing only the common words');
select is(cardinality(pg_temp.leg('p', 'widgets', '2023-01-01', 200)), 200, 'a word in more facts than the budget still fills the list');
select is(pg_temp.leg('p', 'widgets', '2019-01-01'), '{}'::uuid[], 'control: nothing holds before 2020');
select ok(pg_temp.id('p.marm') = any (pg_temp.leg('p', 'marmalade and widgets', '2023-01-01', 5)),
          'the rare word''s fact is found beside a word in 1200 facts');

-- Every word past the budget: the rarest is picked, not the first by
-- spelling ("banjo", in 1300 facts, before "widget", in 1200).
do $$
begin
  perform memory.use_org(pg_temp.id('org_a'));
  perform memory.assert_facts(pg_temp.id('p'), (
    select jsonb_agg(jsonb_build_object('subject', 'Banjo club', 'predicate', 'notes', 'object', 'meeting ' || i,
                                        'content', 'Banjo club meeting ' || i, 'valid_from', '2020-01-01T00:00:00Z'))
      from generate_series(b, b + 649) i))
    from (values (1), (651)) x(b);
end $$;
select is(pg_temp.leg('p', 'banjo widgets', '2023-01-01'),
          array(select r.id from unnest(pg_temp.ref('p', 'banjo widgets', '2023-01-01', 5000)) with ordinality r(id, o)
                 where r.id in (select t.fact_id from memory_internal.fact_terms t
                                 where t.project_id = pg_temp.id('p') and t.lexeme = 'widget')
                 order by r.o limit 30),
          'every word past the budget: the candidates are the rarer word''s (widget), in the reference''s order');
select ok(exists (select from unnest(pg_temp.ref('p', 'banjo widgets', '2023-01-01')) r(id)
                   where r.id not in (select t.fact_id from memory_internal.fact_terms t
                                       where t.project_id = pg_temp.id('p') and t.lexeme = 'widget')),
          'control: the full scan ranks the commoner word''s (shorter) facts first, as the first word by spelling picked them');
select is(cardinality(pg_temp.leg('p', 'banjo widgets', '2023-01-01')), 30, 'control: the list is full');

-- Identical content: the superseded version only before the supersession.
select ok(not pg_temp.id('p.oslo') = any (pg_temp.leg('p', 'Zoltan fjord', '2023-01-01')),
          'superseded oslo (same text as bergen) is not found in 2023');
select ok(pg_temp.id('p.bergen') = any (pg_temp.leg('p', 'Zoltan fjord', '2023-01-01')), 'its successor bergen is (2023)');
select ok(pg_temp.id('p.oslo') = any (pg_temp.leg('p', 'Zoltan fjord', '2021-01-01')), 'control: oslo is found in 2021');
select ok(not pg_temp.id('p.bergen') = any (pg_temp.leg('p', 'Zoltan fjord', '2021-01-01')), 'bergen is not found in 2021');

-- The leg asks which candidates hold last, best first, until it has p_n;
-- a class of equal rank takes its score from its first holding member.
-- oslo and bergen are one class (same text), and whichever has the
-- smaller id does not hold at one of the two instants.
select is(pg_temp.leg_scored('p', 'Zoltan fjord', t), pg_temp.ref_scored('p', 'Zoltan fjord', t),
          'scores = reference for a class whose first member by id may not hold: ' || t::date)
  from unnest(array['2021-01-01', '2023-01-01']::timestamptz[]) t;
select is(pg_temp.leg('p', 'Where does Zoltan live?', t, 1), pg_temp.ref('p', 'Where does Zoltan live?', t, 1),
          'one place: the best holding candidate, skipping a tied one that does not hold: ' || t::date)
  from unnest(array['2021-01-01', '2023-01-01']::timestamptz[]) t;
select ok((select f.content_tsv from memory_internal.fact_versions(pg_temp.id('p')) f where f.fact_id = pg_temp.id('p.oslo'))
          = (select f.content_tsv from memory_internal.fact_versions(pg_temp.id('p')) f where f.fact_id = pg_temp.id('p.bergen'))
          and pg_temp.leg('p', 'Where does Zoltan live?', '2021-01-01', 1)
              <> pg_temp.leg('p', 'Where does Zoltan live?', '2023-01-01', 1),
          'control: oslo and bergen have one text (one class), and each instant''s best is the other one');
-- Another project of the org and another org hold the same texts: never found in p.
select is((select count(*) from unnest(pg_temp.leg('p', 'Zoltan fjord marmalade Ursula widgets', '2023-01-01', 200)) u
            where u not in (select v.fact_id from memory_internal.fact_versions(pg_temp.id('p')) v)),
          0::bigint, 'p''s leg returns only p''s facts (q and org B hold the same texts)');
select ok(pg_temp.id('q.bergen') = any (pg_temp.leg('q', 'Zoltan fjord', '2023-01-01')), 'control: q''s own bergen is found in q');

-- Through memory.search: the leg's list, in order.
select is(array(select (h ->> 'id')::uuid from jsonb_array_elements(
                  memory.search(pg_temp.id('p'), 'Zoltan fjord marmalade', null, '2023-01-01', now(), 10,
                                array['fact_fulltext']) -> 'results') h
                 order by (h -> 'ranks' ->> 'fact_fulltext')::int),
          pg_temp.ref('p', 'Zoltan fjord marmalade', '2023-01-01'), 'memory.search''s fact_fulltext leg ranks as the reference');

-- Retraction: gone at known_at now (facts_at decides); q's control stays.
select is(memory.retract_fact(pg_temp.id('p'), pg_temp.id('p.marm')) ->> 'status', 'retracted', 'fixture: p.marm retracted');
select ok(not pg_temp.id('p.marm') = any (pg_temp.leg('p', 'marmalade', '2023-01-01')), 'a retracted fact is not found');
select ok(pg_temp.id('q.marm') = any (pg_temp.leg('q', 'marmalade', '2023-01-01')), 'control: q''s marm is found');

-- Wipes: the postings go with the facts.
select is((memory.wipe(pg_temp.id('p'), p_session => 's1') ->> 'scope')
          || ' ' || (memory.wipe(pg_temp.id('p'), p_subject => 'Zoltan') ->> 'scope'), 'session subject',
          'fixture: p''s session s1 and subject Zoltan wiped');
select is(array(select t.lexeme from memory_internal.fact_terms t
                 where t.project_id = pg_temp.id('p') and t.lexeme in ('zoltan', 'ursula', 'fjord') order by 1),
          '{}'::text[], 'session and subject wipes remove their facts'' postings');
select is(memory.wipe(pg_temp.id('q')) ->> 'scope', 'project', 'fixture: q wiped');
select is(pg_temp.terms('q'), 0::bigint, 'a project wipe removes its postings');
select is(pg_temp.terms('p'), pg_temp.expected_terms('p'), 'p keeps the postings of its remaining facts');

select * from finish();
ROLLBACK;
