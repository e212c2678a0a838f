-- 13 search, entity tokens: memory_internal.entity_name_tokens follows
-- entity and alias creation and the subject and project wipes, and stays
-- within its org and project; the entity leg that reads it
-- (memory_internal.search_entities) ranks as a full scan (kept below as
-- the reference) on names that share a word with the question, finds multi-word names as whole-word matches, and loses what
-- its comment says it loses.  Runs as chronomem_app.
--
-- Projects p, q (org A) and r (org B) hold the same entities, name for name:
--   Alice Smith, Alice Jones, Bob (alias "Bobby Tables"), New York City,
--   Acme Corporation (alias "Acme"), Mount Saint Helens Volcano Park,
--   Person 1 Smith .. Person 120 Smith (created by assert_facts).
BEGIN;
select plan(39);

create procedure pg_temp.seed(p text) language plpgsql as $$
declare
  pid uuid := pg_temp.id(p);
begin
  perform memory.upsert_entity(pid, n)
     from unnest(array['Alice Smith', 'Alice Jones', 'Bob', 'New York City', 'Acme Corporation',
                       'Mount Saint Helens Volcano Park']) n;
  perform memory.add_alias(pid, 'Bob', 'Bobby Tables');
  perform memory.add_alias(pid, 'Acme Corporation', 'Acme');
  -- One statement creating many entities: the write path's batches.
  perform memory.assert_facts(pid, (
    select jsonb_agg(jsonb_build_object('subject', 'Person ' || i || ' Smith', 'predicate', 'likes',
                                        'object', 'Bob', 'object_type', 'entity'))
      from generate_series(1, 120) i));
end $$;
-- The reference: the leg by a full scan (word_similarity over every name
-- and alias of the project, or a shared word that is not a stop word).
create function pg_temp.old_entities(p_project uuid, p_qnorm text, p_known_at timestamptz, p_n integer)
  returns table (entity_id uuid) language sql stable as $$
  select x.entity_id
    from (select n.entity_id,
                 max((strpos(' ' || p_qnorm || ' ', ' ' || m.name || ' ') > 0)::int) as exact,
                 max(word_similarity(m.name, p_qnorm)) as sim
            from (select n.org_id, n.entity_id, n.normalized_name as name
                    from memory.entities n where n.project_id = p_project
                  union all
                  select a.org_id, a.entity_id, a.normalized_alias
                    from memory.entity_aliases a where a.project_id = p_project) m
            join memory.entities n on n.org_id = m.org_id and n.entity_id = m.entity_id
           where n.created_at <= p_known_at
             and (m.name <% p_qnorm
                  or exists (select from regexp_split_to_table(m.name, ' ') w
                              where w = any (regexp_split_to_array(p_qnorm, ' '))
                                and to_tsvector('english', w) <> ''::tsvector))
           group by n.entity_id
           order by 2 desc, 3 desc, 1
           limit p_n) x $$;
create function pg_temp.leg(p_project text, p_query text, p_n integer default 30, p_known_at timestamptz default now())
  returns uuid[] language sql stable as $$
  select coalesce(array_agg(x.entity_id order by x.o), '{}')
    from memory_internal.search_entities(pg_temp.id(p_project), memory.normalize_text(p_query), p_known_at, p_n)
         with ordinality x(entity_id, exact, score, o) $$;
create function pg_temp.ref(p_project text, p_query text, p_n integer default 30) returns uuid[] language sql stable as $$
  select coalesce(array_agg(x.entity_id order by x.o), '{}')
    from pg_temp.old_entities(pg_temp.id(p_project), memory.normalize_text(p_query), now(), p_n)
         with ordinality x(entity_id, o) $$;
create function pg_temp.ent(p_project text, p_name text) returns uuid language sql stable as $$
  select memory_internal.find_entity(memory_internal.project_org(pg_temp.id(p_project)), pg_temp.id(p_project),
                                     memory.normalize_text(p_name)) $$;
-- The tokens a project should have: every distinct word of its names and aliases, per entity.
create function pg_temp.expected(p_project text) returns text[] language sql stable as $$
  select array(select distinct m.entity_id || ' ' || w
                 from (select n.entity_id, n.normalized_name as name from memory.entities n
                        where n.project_id = pg_temp.id(p_project)
                       union all
                       select a.entity_id, a.normalized_alias from memory.entity_aliases a
                        where a.project_id = pg_temp.id(p_project)) m
                cross join lateral unnest(string_to_array(m.name, ' ')) w
                order by 1) $$;
create function pg_temp.tokens(p_project text) returns text[] language sql stable as $$
  select array(select t.entity_id || ' ' || t.token from memory_internal.entity_name_tokens t
                where t.project_id = pg_temp.id(p_project) order by 1) $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('entity tokens org A'); b uuid := memory.create_org('entity tokens org B');
begin
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'p'));
  call pg_temp.seed('r');
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q'));
  call pg_temp.seed('p');
  call pg_temp.seed('q');
end $$;

-- Tokens follow entity and alias creation.
select is(array(select t.token from memory_internal.entity_name_tokens t
                 where t.project_id = pg_temp.id('p') and t.entity_id = pg_temp.ent('p', 'Bob') order by 1),
          array['bob', 'bobby', 'tables'], 'an entity''s tokens are the words of its name and its aliases');
select is(pg_temp.tokens('p'), pg_temp.expected('p'), 'p: one token per entity and distinct word of its names and aliases');
select cmp_ok(cardinality(pg_temp.tokens('p')), '>', 360, 'fixture: p has the 120 people created by one assert_facts');
-- Another project of the org and another org hold the same names: never in p.
select is((select count(*) from memory_internal.entity_name_tokens t
            where t.project_id = pg_temp.id('p')
              and not exists (select from memory.entities n where n.entity_id = t.entity_id
                                 and n.project_id = pg_temp.id('p'))),
          0::bigint, 'every token of p is of an entity of p');
select is(pg_temp.tokens('q'), pg_temp.expected('q'), 'control: q has its own tokens, the same words');

-- The leg ranks as the full scan on names that share a word with the question.
select is(pg_temp.leg('p', 'Where does Alice Smith live in New York City?'),
          pg_temp.ref('p', 'Where does Alice Smith live in New York City?'), 'leg = reference: two exact names and partial ones');
select is(pg_temp.leg('p', 'which person named smith likes acme', 200), pg_temp.ref('p', 'which person named smith likes acme', 200),
          'leg = reference: words shared by 122 names (up to 200 hits)');
select is(pg_temp.leg('p', 'Did Bobby visit Mount Saint Helens Volcano Park?'),
          pg_temp.ref('p', 'Did Bobby visit Mount Saint Helens Volcano Park?'), 'leg = reference: a 5-word name and an alias word');
select is(pg_temp.leg('p', 'person 7 smith', 5), pg_temp.ref('p', 'person 7 smith', 5), 'leg = reference: top 5 of near ties');
select cmp_ok(cardinality(pg_temp.leg('p', 'which person named smith likes acme', 200)), '>=', 10,
              'control: that list is not short (122 candidates share a word; the close ones pass the threshold)');
-- Exact tier: a multi-word name and a multi-word alias occurring in the question come first.
select is((select array_agg(x.entity_id order by x.entity_id) from memory_internal.search_entities(
             pg_temp.id('p'), memory.normalize_text('a trip to New York City with bobby tables'), now(), 30) x where x.exact),
          (select array_agg(e order by e) from unnest(array[pg_temp.ent('p', 'New York City'), pg_temp.ent('p', 'Bob')]) e),
          'exact tier: "new york city" and the alias "bobby tables" are whole-word matches');
select is((pg_temp.leg('p', 'a trip to New York City'))[1], pg_temp.ent('p', 'New York City'), 'the multi-word name ranks first');
select ok('new york city' = any (memory_internal.question_ngrams('a trip to new york city')),
          'the question''s runs of words include the 3-word name');
-- What is lost: a name sharing no whole word with the question (documented).
select ok(memory.upsert_entity(pg_temp.id('p'), 'Alices') is not null, 'fixture: p gets "Alices"');
select ok(pg_temp.ent('p', 'Alices') = any (pg_temp.ref('p', 'where is alice')),
          'the full scan found "alices" for "alice" (trigram similarity)');
select ok(not pg_temp.ent('p', 'Alices') = any (pg_temp.leg('p', 'where is alice')),
          'the token leg does not: no shared word (the documented loss)');
select ok(pg_temp.ent('p', 'Alices') = any (pg_temp.leg('p', 'where are the alices')), 'control: found by its own word');
-- A partial name: one content word of a two-word name finds it, though
-- its trigram similarity is below the threshold; a stop word finds nothing.
select ok(not 'alice jones' <% 'who is jones', 'fixture: "alice jones" is not trigram-similar to "who is jones"');
select is(pg_temp.leg('p', 'Who is Jones?'), array[pg_temp.ent('p', 'Alice Jones')],
          'a surname alone finds the one name that has it');
select ok(memory.upsert_entity(pg_temp.id('p'), 'The Office') is not null, 'fixture: p gets "The Office"');
select ok(not pg_temp.ent('p', 'The Office') = any (pg_temp.leg('p', 'what is the plan for the week')),
          'a shared stop word ("the") finds nothing');
select ok(pg_temp.ent('p', 'The Office') = any (pg_temp.leg('p', 'anything new at the office')),
          'control: its content word does');
-- Nor is a name that shares only stop words with the question a
-- candidate, however similar (a middle initial "a" made every "X A. Y"
-- a candidate of every question naming one, a thousand trigram
-- comparisons on the benchmark's 100k load).
select ok(memory.upsert_entity(pg_temp.id('p'), 'The Offices') is not null, 'fixture: p gets "The Offices"');
select ok('the offices' <% 'anything new at the office'
          and pg_temp.ent('p', 'The Offices') = any (pg_temp.ref('p', 'anything new at the office')),
          'the full scan finds "the offices" for "at the office" (trigram similarity; the only shared word is "the")');
select ok(not pg_temp.ent('p', 'The Offices') = any (pg_temp.leg('p', 'anything new at the office')),
          'the token leg does not: it shares no content word (the documented loss)');
select ok(pg_temp.ent('p', 'The Offices') = any (pg_temp.leg('p', 'where are the offices')),
          'control: found by its own content word');
-- A word most names share: past the budget (greatest(10 * p_n, 300)
-- names), it brings no candidates, unless it is the question's rarest.
select is((memory.assert_facts(pg_temp.id('p'), (
            select jsonb_agg(jsonb_build_object('subject', 'Member ' || i, 'predicate', 'likes',
                                                'object', 'Acme', 'object_type', 'entity'))
              from generate_series(1, 320) i)) ->> 'inserted')::integer, 320,
          'fixture: p gets 320 members, "member" in each name');
select ok((select count(*) from unnest(pg_temp.leg('p', 'what did member 12 say about acme', 50)) u
            join memory.entities n on n.entity_id = u
           where n.normalized_name like 'member %') > 10,
          'for 50 hits (a budget of 500 names) the leg scores every member for "member 12" (all share the word)');
select is((select array_agg(n.normalized_name order by x.o > 2, n.normalized_name)
             from unnest(pg_temp.leg('p', 'what did member 12 say about acme')) with ordinality x(u, o)
             join memory.entities n on n.entity_id = x.u),
          array['acme corporation', 'member 12', 'person 12 smith'],
          'the leg: the names that are runs of the question (Acme by its alias, member 12; tied), then one with a rarer word ("12"), no other member');
select is((select count(*) from unnest(pg_temp.leg('p', 'which member?')) u
            join memory.entities n on n.entity_id = u
           where n.normalized_name like 'member %')::integer, 30,
          'control: the question''s rarest word brings its names, however many');
select is(pg_temp.leg('p', 'what did member 12 say about acme', 50),
          pg_temp.ref('p', 'what did member 12 say about acme', 50),
          'control: within the budget (up to 500 names for 50 hits) the leg ranks as the full scan');

-- known_at: entities created later are not found.
select is(pg_temp.leg('p', 'Alice Smith', 30, '2000-01-01'), '{}'::uuid[], 'nothing was known in 2000');
-- Other projects: the same names, never found in p.
select is((select count(*) from unnest(pg_temp.leg('p', 'Alice Smith Bob Acme New York City person', 200)) u
            where u not in (select n.entity_id from memory.entities n where n.project_id = pg_temp.id('p'))),
          0::bigint, 'p''s leg returns only p''s entities (q and org B have the same names)');
select ok(pg_temp.ent('q', 'Alice Smith') = any (pg_temp.leg('q', 'Alice Smith')), 'control: q''s Alice Smith is found in q');

-- Wipes: the tokens go with the entities.
select is(memory.wipe(pg_temp.id('p'), p_subject => 'Bob') ->> 'scope', 'subject', 'fixture: subject Bob wiped in p');
select is(array(select t.token from memory_internal.entity_name_tokens t
                 where t.project_id = pg_temp.id('p') and t.token in ('bob', 'bobby', 'tables') order by 1),
          '{}'::text[], 'a subject wipe removes the entity''s name and alias tokens');
select is(pg_temp.tokens('p'), pg_temp.expected('p'), 'p keeps the tokens of its remaining entities');
select is(memory.wipe(pg_temp.id('q')) ->> 'scope', 'project', 'fixture: q wiped');
select is(pg_temp.tokens('q'), '{}'::text[], 'a project wipe removes its tokens');
select * from finish();
ROLLBACK;
