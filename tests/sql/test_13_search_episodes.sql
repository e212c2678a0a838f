-- 13 search, episode legs and fusion: the full-text leg ranks by BM25 with
-- the project's own statistics (never another project's or org's), the
-- counters behind them follow ingest and wipe, and the fusion passes a
-- share of an episode's score to its neighbours in the same session, at
-- the instant asked only; a question naming one participant prefers that
-- participant's turns, one naming a date the turns of that period; the
-- text the vector legs embed is the question without the participants it names.  Runs as
-- chronomem_app.
BEGIN;
select plan(33);

-- Ingest messages (one per content, a minute apart from p_start) into a
-- session; name each episode "<project>.<session>.<n>" (n from 1).
create function pg_temp.chat(p_project text, p_session text, p_contents text[],
                             p_start timestamptz default '2021-01-01T00:00:00Z') returns void language sql as $$
  insert into pg_temp.ids
  select p_project || '.' || p_session || '.' || x.n, x.id::uuid
    from jsonb_array_elements_text(memory.ingest(pg_temp.id(p_project), p_session,
           (select jsonb_agg(jsonb_build_object('role', 'user', 'content', c,
                                                'occurred_at', p_start + (i - 1) * interval '1 minute')
                             order by i)
              from unnest(p_contents) with ordinality u(c, i))) -> 'episode_ids')
         with ordinality x(id, n) $$;
-- The full-text leg alone: episode keys in rank order.
create function pg_temp.ft(p_project text, p_query text) returns text[] language sql stable as $$
  select array_agg(i.k order by x.ord)
    from memory_internal.search_episode_fulltext(pg_temp.id(p_project), p_query, now(), now(), 50)
         with ordinality x(episode_id, score, ord)
    join pg_temp.ids i on i.id = x.episode_id $$;
create function pg_temp.ft_scores(p_project text, p_query text) returns jsonb language sql stable as $$
  select jsonb_agg(jsonb_build_array(x.episode_id, round(x.score::numeric, 9)) order by x.episode_id)
    from memory_internal.search_episode_fulltext(pg_temp.id(p_project), p_query, now(), now(), 50) x $$;
-- memory.search: {episode key: score} of the episodes it returns.
create function pg_temp.found(p_project text, p_query text, p_at timestamptz default now(),
                              p_fusion text default 'scores')
  returns jsonb language sql stable as $$
  select coalesce(jsonb_object_agg(i.k, (x ->> 'score')::numeric), '{}')
    from jsonb_array_elements(memory.search(pg_temp.id(p_project), p_query, null, p_at, now(), 50,
                                            p_fusion => p_fusion)
                              -> 'results') x
    join pg_temp.ids i on i.id = (x ->> 'id')::uuid $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('bm25 org A'); b uuid := memory.create_org('bm25 org B');
begin
  insert into pg_temp.ids values ('a', a), ('b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q')),
                                 ('w', memory.create_project(a, 'w')), ('n', memory.create_project(a, 'n')),
                                 ('sp', memory.create_project(a, 'sp')), ('tp', memory.create_project(a, 'tp'));
end $$;

-- BM25: the one rare word outweighs many common ones.  In w, "park",
-- "friend" and "today" are in nearly every episode, "greyhound" in one.
do $$ begin perform pg_temp.chat('w', 's', array['We met a greyhound',
                                  'Today I went to the park with a friend, the park near my friend''s place']
                            || array(select 'Today my friend and I walked in the park, round ' || g
                                       from generate_series(1, 20) g)); end $$;
select is((pg_temp.ft('w', 'Did I go to the park today with a friend and meet a greyhound?'))[1], 'w.s.1',
          'BM25: the episode with the rare word ranks first');
select ok('w.s.2' = any (pg_temp.ft('w', 'Did I go to the park today with a friend and meet a greyhound?')),
          'control: the episode with only common words is found too');
select ok((select ts_rank_cd(e2.content_tsv, q, 1) > ts_rank_cd(e1.content_tsv, q, 1)
             from memory.episodes e1, memory.episodes e2,
                  memory_internal.question_tsquery('Did I go to the park today with a friend and meet a greyhound?') q
            where e1.episode_id = pg_temp.id('w.s.1') and e2.episode_id = pg_temp.id('w.s.2')),
          'control: cover density alone ranks the common-words episode above it');

-- Tenancy of the statistics.  In p "greyhound" is rare and "poodle"
-- common, so the greyhound episode ranks first.  q (same org) and r
-- (another org) then get 300 greyhound episodes each, the same text as
-- p's, and one poodle: table-wide statistics would make "greyhound" common
-- and "poodle" rare, and flip p's order.
do $$ begin perform pg_temp.chat('p', 's', array['A greyhound', 'A poodle', 'The poodle slept', 'Poodle again', 'One more poodle']); end $$;
insert into pg_temp.res values ('p before', pg_temp.ft_scores('p', 'greyhound poodle'));
select is((pg_temp.ft('p', 'greyhound poodle'))[1], 'p.s.1', 'p: its rare word (greyhound) ranks first');
do $$ begin
  perform pg_temp.chat('q', 's', array['A poodle']);
  perform pg_temp.chat('q', 'g' || n, array(select 'A greyhound' from generate_series(1, 100))) from generate_series(1, 3) n;
end $$;
do $$ begin perform memory.use_org(pg_temp.id('b')); end $$;
do $$ begin
  perform pg_temp.chat('r', 's', array['A poodle']);
  perform pg_temp.chat('r', 'g' || n, array(select 'A greyhound' from generate_series(1, 100))) from generate_series(1, 3) n;
end $$;
select is((pg_temp.ft('r', 'greyhound poodle'))[1], 'r.s.1',
          'control: in r, with 300 greyhounds, the poodle episode ranks first');
do $$ begin perform memory.use_org(pg_temp.id('a')); end $$;
select is((pg_temp.ft('q', 'greyhound poodle'))[1], 'q.s.1',
          'control: in q, with 300 greyhounds, the poodle episode ranks first');
select is(pg_temp.ft_scores('p', 'greyhound poodle'), pg_temp.r('p before'),
          'p''s ranking and scores are exactly as before q (same org) and r (other org) were filled');
select is((pg_temp.ft('p', 'greyhound poodle'))[1], 'p.s.1', 'p: greyhound still ranks first');

-- The counters behind N and the mean length follow ingest and wipe.
select is((select jsonb_object_agg(metric, value) from memory.counters(pg_temp.id('p'))
            where metric like 'episode%'),
          jsonb_build_object('episodes_ingested', 5,
                             'episode_tokens_ingested', (select sum(token_count) from memory.episodes
                                                          where project_id = pg_temp.id('p'))),
          'ingest counts the project''s episodes and their tokens');
do $$ begin perform pg_temp.chat('p', 'gone', array['A poodle', 'Another poodle']); end $$;
do $$ begin perform memory.wipe(pg_temp.id('p'), 'gone'); end $$;
select is((select jsonb_object_agg(metric, value) from memory.counters(pg_temp.id('p'))
            where metric in ('episodes_ingested', 'episodes_deleted')),
          '{"episodes_ingested": 7, "episodes_deleted": 2}'::jsonb,
          'wipe counts the episodes it deletes');
select is(pg_temp.ft_scores('p', 'greyhound poodle'), pg_temp.r('p before'),
          'after ingest and wipe of a session, p ranks as before');

-- Context: a hit shares 1/2, 1/4, 1/8 of its score with the turns 1, 2, 3
-- away in its session.  Session s of n: the one hit (zanzibar) is turn 3;
-- session t has turns with the same seq numbers; turn 7 of s lies 4 away.
do $$ begin perform pg_temp.chat('n', 's', array['Do you remember our trip?', 'Which one?', 'The zanzibar holiday',
                                  'It was lovely', 'Yes', 'We should go back', 'Maybe next year']); end $$;
do $$ begin perform pg_temp.chat('n', 't', array['Other talk', 'More talk', 'Still talking', 'And more']); end $$;
insert into pg_temp.res values ('n', pg_temp.found('n', 'zanzibar'));
select is(pg_temp.r('n'),
          '{"n.s.3": 1.0, "n.s.2": 0.5, "n.s.4": 0.5, "n.s.1": 0.25, "n.s.5": 0.25, "n.s.6": 0.125}'::jsonb,
          'neighbours in the session get 1/2, 1/4, 1/8 of the hit''s score; nothing farther or elsewhere');
select ok(not pg_temp.r('n') ?| array['n.t.2', 'n.t.3', 'n.t.4', 'n.s.7'],
          'turns of another session with the same seq numbers get no share');
-- Plain reciprocal rank fusion shares nothing: the hit alone, 1/(60 + 1).
select is(pg_temp.found('n', 'zanzibar', p_fusion => 'rrf'), '{"n.s.3": 0.016393}'::jsonb,
          'p_fusion rrf: the hit scores 1/61 and its neighbours get no share');
-- At an instant before turn 4 occurred, it is not shared with.
select is(pg_temp.found('n', 'zanzibar', timestamptz '2021-01-01T00:02:30Z'),
          '{"n.s.3": 1.0, "n.s.2": 0.5, "n.s.1": 0.25}'::jsonb,
          'a neighbour that had not occurred at the instant asked gets nothing');
select is((pg_temp.found('n', 'zanzibar', timestamptz '2021-01-01T00:03:30Z')) -> 'n.s.4', '0.5'::jsonb,
          'control: at an instant after it occurred, it does');

-- Speaker preference.  Project sp: the same words said by Ann, by Bob and
-- by a message naming no speaker, each in its own session (no context
-- shares between them), so the two legs score all three alike.
do $$ begin
  insert into pg_temp.ids
  select 'sp.' || x.who, (memory.ingest(pg_temp.id('sp'), 'with ' || x.who,
           jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'The zanzibar trip was lovely',
                                                'occurred_at', '2021-01-01T00:00:00Z',
                                                'metadata', x.meta))) -> 'episode_ids' ->> 0)::uuid
    from (values ('ann', '{"speaker": "Ann"}'::jsonb), ('bob', '{"speaker": "Bob"}'::jsonb),
                 ('nobody', '{}'::jsonb)) x(who, meta);
end $$;
select is(pg_temp.found('sp', 'What did Ann''s family think of zanzibar?'),
          '{"sp.ann": 1.0, "sp.bob": 0.5, "sp.nobody": 1.0}'::jsonb,
          'a question naming one participant: the other participant''s turn counts half (no speaker: unchanged)');
select is(pg_temp.found('sp', 'What did BOB say about zanzibar?'),
          '{"sp.ann": 0.5, "sp.bob": 1.0, "sp.nobody": 1.0}'::jsonb,
          'the name is matched as a normalized word of the question, whoever is named');
select is(pg_temp.found('sp', 'What did they say about zanzibar?'),
          '{"sp.ann": 1.0, "sp.bob": 1.0, "sp.nobody": 1.0}'::jsonb,
          'control: a question naming no participant scores all alike');
select is(pg_temp.found('sp', 'Did Ann and Bob enjoy zanzibar?'),
          '{"sp.ann": 1.0, "sp.bob": 1.0, "sp.nobody": 1.0}'::jsonb,
          'control: a question naming two participants prefers neither');
select is(pg_temp.found('sp', 'Did Annabel like zanzibar?'),
          '{"sp.ann": 1.0, "sp.bob": 1.0, "sp.nobody": 1.0}'::jsonb,
          'control: a name is a whole word (Annabel does not name Ann)');

-- Time preference.  The period a question names: a day, a month, a year.
select is(array[memory_internal.question_period('What did Gina find on 1 February, 2023?'),
                memory_internal.question_period('What was shown on October 13th, 2023?'),
                memory_internal.question_period('Logs of 2023-10-13, please'),
                memory_internal.question_period('What happened in Sept 2023?'),
                memory_internal.question_period('How often did we swim in 2023?')],
          array[tstzrange('2023-02-01Z', '2023-02-02Z'), tstzrange('2023-10-13Z', '2023-10-14Z'),
                tstzrange('2023-10-13Z', '2023-10-14Z'), tstzrange('2023-09-01Z', '2023-10-01Z'),
                tstzrange('2023-01-01Z', '2024-01-01Z')],
          'question_period: a day (either order, ordinals, ISO), a month, a year');
select is(array[memory_internal.question_period('May I ask about February?'),
                memory_internal.question_period('Is Feb 30, 2023 a day?'),
                memory_internal.question_period('Room 2023b or 12345'),
                memory_internal.question_period('')],
          array[null, null, null, null]::tstzrange[],
          'question_period: no year, an impossible day, digits that are no year: none');
-- Project tp: the same words on 3 May 2023 and on 10 June 2023, in two
-- sessions (no context shares between them).
do $$ begin
  insert into pg_temp.ids
  select 'tp.' || x.k, (memory.ingest(pg_temp.id('tp'), x.k,
           jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'The zanzibar trip was lovely',
                                                'occurred_at', x.at))) -> 'episode_ids' ->> 0)::uuid
    from (values ('may', '2023-05-03T15:00:00Z'), ('june', '2023-06-10T09:00:00Z')) x(k, at);
end $$;
select is(pg_temp.found('tp', 'What did we say about zanzibar on May 3, 2023?'),
          '{"tp.may": 1.0, "tp.june": 0.5}'::jsonb,
          'a question naming a day: a turn of another day counts half');
select is(pg_temp.found('tp', 'What did we say about zanzibar in June 2023?'),
          '{"tp.may": 0.5, "tp.june": 1.0}'::jsonb,
          'a question naming a month: a turn of another month counts half');
select is(pg_temp.found('tp', 'What did we say about zanzibar in 2023?'),
          '{"tp.may": 1.0, "tp.june": 1.0}'::jsonb,
          'control: both turns lie in the year named');
select is(pg_temp.found('tp', 'What did we say about zanzibar?'),
          '{"tp.may": 1.0, "tp.june": 1.0}'::jsonb,
          'control: a question naming no date scores both alike');
select is(pg_temp.found('tp', 'What did we say about zanzibar on 4 May, 2023?'),
          '{"tp.may": 0.5, "tp.june": 0.5}'::jsonb,
          'control: a day neither turn occurred on discounts both (the day is the whole window)');

-- The text the vector legs embed (memory.vector_query_text): the question
-- without the names of the participants it names (project sp: Ann, Bob).
select is(memory.vector_query_text(pg_temp.id('sp'), 'What did Ann''s family think of zanzibar?'),
          'What did family think of zanzibar?',
          'vector_query_text: a participant''s name (and its possessive) is left out');
select is(memory.vector_query_text(pg_temp.id('sp'), 'Did ann and BOB enjoy zanzibar?'),
          'Did and enjoy zanzibar?',
          'every participant named is left out, matched as a normalized word');
select is(array[memory.vector_query_text(pg_temp.id('sp'), 'Did Annabel like zanzibar?'),
                memory.vector_query_text(pg_temp.id('sp'), 'What did they say about zanzibar?'),
                memory.vector_query_text(pg_temp.id('sp'), 'Ann?')],
          array['Did Annabel like zanzibar?', 'What did they say about zanzibar?', 'Ann?'],
          'control: a word that only begins with a name, a question naming none, and one that is only a name stay as they are');
-- Carol speaks about zanzibar in project n, not in sp: a participant is one
-- of the project's own (the full-text leg finds her turn in n only).
do $$ begin
  insert into pg_temp.ids
  select 'n.carol', (memory.ingest(pg_temp.id('n'), 'carol', jsonb_build_array(jsonb_build_object(
           'role', 'user', 'content', 'Zanzibar with Ann was lovely', 'occurred_at', '2021-01-01T00:00:00Z',
           'metadata', '{"speaker": "Carol"}'::jsonb))) -> 'episode_ids' ->> 0)::uuid;
end $$;
select is(memory.vector_query_text(pg_temp.id('sp'), 'What did Carol think of zanzibar?'),
          'What did Carol think of zanzibar?',
          'another project''s participant is not one of this project''s (left in)');
select is(memory.vector_query_text(pg_temp.id('n'), 'What did Carol think of zanzibar?'),
          'What did think of zanzibar?',
          'control: in her own project she is left out');

select * from finish();
ROLLBACK;
