-- 13 search, episode postings: memory_internal.episode_terms follows
-- ingest and wipe and stays within its org and project; the full-text leg
-- that reads it ranks and scores exactly as the query it replaced (which
-- read the project's episodes with @@, kept below as the reference) when
-- the candidate bound does not bind, and still finds the rare word when a
-- common one is in thousands of episodes.  Runs as chronomem_app.
BEGIN;
select plan(47);

-- Ingest messages (at most 100, a minute apart) into a session; name each
-- episode "<project>.<session>.<n>".
create function pg_temp.chat(p_project text, p_session text, p_contents text[]) returns void language sql as $$
  insert into pg_temp.ids
  select p_project || '.' || p_session || '.' || x.n, x.id::uuid
    from jsonb_array_elements_text(memory.ingest(pg_temp.id(p_project), p_session,
           (select jsonb_agg(jsonb_build_object('role', 'user', 'content', c,
                             'occurred_at', timestamptz '2021-01-01T00:00:00Z' + (i - 1) * interval '1 minute')
                             order by i)
              from unnest(p_contents) with ordinality u(c, i))) -> 'episode_ids')
         with ordinality x(id, n) $$;
-- The reference: the leg as it was before the postings (@@ over the
-- project's episodes, df among the matches).
create function pg_temp.old_ft(
  p_project uuid, p_query text, p_at timestamptz, p_known_at timestamptz, p_n integer)
  returns table (episode_id uuid, score double precision)
  language sql stable
  as $$
    with q as (
      select memory_internal.question_tsquery(p_query) as tsq,
             array(select distinct l from unnest(tsvector_to_array(
                     to_tsvector('english'::regconfig, coalesce(p_query, '')))) l) as lexemes
    ), stats as (
      select coalesce(sum(c.value) filter (where c.metric = 'episodes_ingested'), 0)
               - coalesce(sum(c.value) filter (where c.metric = 'episodes_deleted'), 0) as docs,
             coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_ingested'), 0)
               - coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_deleted'), 0) as tokens
        from memory_internal.counters c
       where c.org_id = memory_internal.project_org(p_project) and c.project_id = p_project
         and c.metric in ('episodes_ingested', 'episodes_deleted',
                          'episode_tokens_ingested', 'episode_tokens_deleted')
    ), matched as materialized (
      select e.episode_id, e.content_tsv, greatest(e.token_count, 1)::float8 as dl
        from memory.episodes e, q
       where e.project_id = p_project and e.content_tsv @@ q.tsq
         and e.occurred_at <= p_at and e.created_at <= p_known_at
    ), tf as (
      select m.episode_id, m.dl, u.lexeme, coalesce(cardinality(u.positions), 1)::float8 as tf
        from matched m
       cross join q
       cross join lateral unnest(m.content_tsv) u
       where u.lexeme = any (q.lexemes)
    ), df as (
      select t.lexeme, count(*)::float8 as df from tf t group by t.lexeme
    ), coll as (
      -- Rows written with triggers off have no counters: never fewer
      -- documents than a word occurs in, nor a zero mean length.
      select greatest(s.docs::float8, (select coalesce(max(d.df), 1) from df d)) as n,
             coalesce(case when s.docs > 0 and s.tokens > 0 then s.tokens::float8 / s.docs end,
                      (select avg(m.dl) from matched m), 1) as avgdl
        from stats s
    )
    select t.episode_id,
           sum(ln(1 + (c.n - d.df + 0.5) / (d.df + 0.5))
               * t.tf * (1.2 + 1) / (t.tf + 1.2 * (1 - 0.75 + 0.75 * t.dl / c.avgdl))) as score
      from tf t join df d on d.lexeme = t.lexeme cross join coll c
     group by t.episode_id
     order by 2 desc, 1
     limit p_n
  $$;


-- [episode id, score] in rank order, from the leg and from the reference.
create function pg_temp.ranked(p_project text, p_query text) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(jsonb_build_array(x.episode_id, round(x.score::numeric, 9)) order by x.ord), '[]')
    from memory_internal.search_episode_fulltext(pg_temp.id(p_project), p_query, now(), now(), 5000)
         with ordinality x(episode_id, score, ord) $$;
create function pg_temp.ranked_ref(p_project text, p_query text) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(jsonb_build_array(x.episode_id, round(x.score::numeric, 9)) order by x.ord), '[]')
    from pg_temp.old_ft(pg_temp.id(p_project), p_query, now(), now(), 5000)
         with ordinality x(episode_id, score, ord) $$;
-- The leg at an instant, with a list length of the caller's; and what it
-- must be while the bound does not bind: the episodes visible then, in
-- the order and with the scores of the whole list at the present (the
-- statistics are the project's, at every instant), the first p_n.
create function pg_temp.ranked_at(p_project text, p_query text, p_at timestamptz, p_known_at timestamptz,
                                  p_n integer) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(jsonb_build_array(x.episode_id, round(x.score::numeric, 9)) order by x.ord), '[]')
    from memory_internal.search_episode_fulltext(pg_temp.id(p_project), p_query, p_at, p_known_at, p_n)
         with ordinality x(episode_id, score, ord) $$;
create function pg_temp.visible_of_present(p_project text, p_query text, p_at timestamptz, p_known_at timestamptz,
                                           p_n integer) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(y.x order by y.i), '[]')
    from (select a.x, a.i
            from jsonb_array_elements(pg_temp.ranked(p_project, p_query)) with ordinality a(x, i)
            join memory.episodes e on e.episode_id = (a.x ->> 0)::uuid
           where e.occurred_at <= p_at and e.created_at <= p_known_at
           order by a.i limit p_n) y $$;
-- The project's postings as (episode key, lexeme, tf), and what its
-- episodes' full-text vectors say they should be.
create function pg_temp.postings(p_project text) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(jsonb_build_array(i.k, t.lexeme, t.tf) order by i.k, t.lexeme), '[]')
    from memory_internal.episode_terms t join pg_temp.ids i on i.id = t.episode_id
   where t.project_id = pg_temp.id(p_project) $$;
create function pg_temp.expected_postings(p_project text) returns jsonb language sql stable as $$
  select coalesce(jsonb_agg(jsonb_build_array(i.k, u.lexeme, coalesce(cardinality(u.positions), 1))
                            order by i.k, u.lexeme), '[]')
    from memory.episodes e join pg_temp.ids i on i.id = e.episode_id
   cross join lateral unnest(e.content_tsv) u
   where e.project_id = pg_temp.id(p_project) $$;
-- The project's document frequencies {lexeme: df}, and what its postings
-- say they should be.
-- (As the leg reads them: folded counts plus pending deltas, over every
-- word either table or the postings hold; zeros left out.)
create function pg_temp.df(p_project text) returns jsonb language sql stable as $$
  select coalesce(jsonb_object_agg(x.lexeme, x.df), '{}')
    from memory_internal.episode_term_dfs(
           memory_internal.project_org(pg_temp.id(p_project)), pg_temp.id(p_project),
           array(select d.lexeme from memory_internal.episode_term_df d where d.project_id = pg_temp.id(p_project)
                 union
                 select u.lexeme from memory_internal.episode_term_df_pending p
                  cross join lateral unnest(p.lexemes) u(lexeme) where p.project_id = pg_temp.id(p_project)
                 union
                 select t.lexeme from memory_internal.episode_terms t where t.project_id = pg_temp.id(p_project))) x
   where x.df <> 0 $$;
-- Rows of the df tables (folded and pending) that name a word.
create function pg_temp.df_rows(p_project text, p_lexeme text) returns integer language sql stable as $$
  select ((select count(*) from memory_internal.episode_term_df d
            where d.project_id = pg_temp.id(p_project) and d.lexeme = p_lexeme)
        + (select count(*) from memory_internal.episode_term_df_pending p
            where p.project_id = pg_temp.id(p_project) and p_lexeme = any (p.lexemes)))::integer $$;
create function pg_temp.expected_df(p_project text) returns jsonb language sql stable as $$
  select coalesce(jsonb_object_agg(x.lexeme, x.df), '{}')
    from (select t.lexeme, count(*) as df from memory_internal.episode_terms t
           where t.project_id = pg_temp.id(p_project) group by 1) x $$;

-- The owner rewrites an episode's length (the product never does).
create function pg_temp.set_token_count(p_episode uuid, p_tokens integer) returns void
  language sql security definer
  as $$ update memory.episodes set token_count = p_tokens where episode_id = p_episode $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('terms org A'); b uuid := memory.create_org('terms org B');
begin
  insert into pg_temp.ids values ('a', a), ('b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('r', memory.create_project(b, 'r'));
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q')),
                                 ('big', memory.create_project(a, 'big'));
end $$;

-- A small corpus in p: chat about pets, trips and work, with repeated
-- words (tf > 1) and words shared by many turns.
do $$ begin
  perform pg_temp.chat('p', 's', array[
    'Caroline: We adopted a greyhound named Pixel, the greyhound sleeps all day.',
    'Melanie: Caroline, how is Pixel? Did you take him to the park?',
    'Caroline: Yes, the park near the lake. Pixel loves the lake and the park.',
    'Melanie: I went to Lisbon last week, the pastries in Lisbon were amazing.',
    'Caroline: Lisbon is on my list. My sister lives in Porto.',
    'Melanie: Work is stressful, my manager keeps moving the deadlines.',
    'Caroline: Deadlines again? Talk to your manager about the deadlines.',
    'Melanie: I started pottery classes on Tuesday.',
    'Caroline: Pottery sounds fun! I paint on Sundays.',
    'Melanie: Caroline, we should paint together at the lake one day.']);
  perform pg_temp.chat('p', 't', array[
    'Caroline: The greyhound rescue asked me to volunteer.',
    'Melanie: Volunteering at the rescue would suit you.',
    'Caroline: My sister thinks so too.']);
end $$;

-- Postings follow ingest.
select is(pg_temp.postings('p'), pg_temp.expected_postings('p'),
          'ingest writes one posting per episode and distinct lexeme, with its number of positions');
select ok((select count(*) > 60 from memory_internal.episode_terms t where t.project_id = pg_temp.id('p')),
          'control: the postings are there');
select is(pg_temp.df('p'), pg_temp.expected_df('p'),
          'document frequencies count the episodes holding each word');
select ok((select t.tf = 2 from memory_internal.episode_terms t
            where t.episode_id = pg_temp.id('p.s.1') and t.lexeme = 'greyhound'),
          'tf counts the word''s occurrences in the episode');

-- The leg ranks and scores exactly as the reference where the bound does
-- not bind (every question here holds far fewer postings than it).
select is(pg_temp.ranked('p', q), pg_temp.ranked_ref('p', q), 'same ranking and scores as the reference: ' || q)
  from unnest(array['Did Caroline adopt a greyhound?',
                    'What did Melanie say about Lisbon and the pastries?',
                    'Where does Caroline''s sister live?',
                    'Who talked to the manager about deadlines at work?',
                    'When did they paint at the lake near the park?',
                    'volunteer rescue greyhound Caroline Melanie park lake']) q;
-- The leg checks which candidates are visible at p_at / p_known_at last,
-- best first, until it has p_n (the filter does not change a score): at
-- an earlier instant, and with a short list whose best candidate at the
-- present is not visible yet, it answers with the visible candidates of
-- the present's list, in order.
select is(pg_temp.ranked_at('p', q, '2021-01-01T00:04:00Z', now(), n),
          pg_temp.visible_of_present('p', q, '2021-01-01T00:04:00Z', now(), n),
          format('at an earlier instant, %s best: the present''s ranking of the turns visible then: %s', n, q))
  from unnest(array['When did they paint at the lake?',
                    'volunteer rescue greyhound Caroline Melanie park lake']) q,
       unnest(array[1, 5000]) n;
select ok((select jsonb_array_length(y.a) = 1 and y.a -> 0 ->> 0 <> y.b -> 0 ->> 0
                  and y.a -> 0 ->> 0 = pg_temp.id('p.s.3')::text
             from (select pg_temp.ranked_at('p', 'When did they paint at the lake?', '2021-01-01T00:04:00Z', now(), 1) as a,
                          pg_temp.ranked_at('p', 'When did they paint at the lake?', now(), now(), 1) as b) y),
          'control: the present''s best (a painting turn) is not visible at the earlier instant, where the lake turn is best');
select ok(jsonb_array_length(pg_temp.ranked_at('p', 'volunteer rescue greyhound Caroline Melanie park lake',
                                               '2021-01-01T00:04:00Z', now(), 5000))
          between 3 and jsonb_array_length(pg_temp.ranked('p', 'volunteer rescue greyhound Caroline Melanie park lake')) - 3,
          'control: the earlier instant leaves out later turns that match, and keeps several that do');
select is(pg_temp.ranked_at('p', 'volunteer rescue greyhound Caroline Melanie park lake', now(),
                            now() - interval '1 second', 5000), '[]'::jsonb,
          'known_at before the episodes were recorded: nothing, though every candidate scores at the present');
select is(jsonb_array_length(pg_temp.ranked('p', 'Did Caroline adopt a greyhound?')) > 5, true,
          'control: the comparison is over many ranked episodes (every one with Caroline or greyhound)');
select is(pg_temp.ranked('p', 'the and of'), '[]'::jsonb, 'a question of stop words only finds nothing');

-- The leg takes each candidate's length from its postings: an episode
-- whose token count is rewritten (content unchanged) has its postings
-- follow, and scores as the reference (which reads the episode) says.
insert into pg_temp.res values ('p before length', pg_temp.ranked('p', 'Did Caroline adopt a greyhound?'));
do $$ begin perform pg_temp.set_token_count(pg_temp.id('p.s.1'), 400); end $$;
select ok((select count(*) > 1 and bool_and(t.dl = 400) from memory_internal.episode_terms t
            where t.episode_id = pg_temp.id('p.s.1')),
          'a rewritten token count moves the length of every posting of the episode');
select is(pg_temp.ranked('p', 'Did Caroline adopt a greyhound?'),
          pg_temp.ranked_ref('p', 'Did Caroline adopt a greyhound?'),
          'same ranking and scores as the reference after the length changed');
select isnt(pg_temp.ranked('p', 'Did Caroline adopt a greyhound?'), pg_temp.r('p before length'),
            'control: the new length changed the episode''s score');
do $$ begin
  perform pg_temp.set_token_count(pg_temp.id('p.s.1'),
                                  (select memory_internal.estimate_tokens(e.content) from memory.episodes e
                                    where e.episode_id = pg_temp.id('p.s.1')));
end $$;

-- Tenancy: q (same org) and r (another org) get the same texts many times
-- over; p's document frequencies, ranking and scores do not move.
insert into pg_temp.res values ('p greyhound', pg_temp.ranked('p', 'Did Caroline adopt a greyhound?'));
do $$ begin
  perform pg_temp.chat('q', 'g' || n, array(select 'Caroline: We adopted a greyhound named Pixel.'
                                               from generate_series(1, 100))) from generate_series(1, 3) n;
end $$;
do $$ begin perform memory.use_org(pg_temp.id('b')); end $$;
do $$ begin
  perform pg_temp.chat('r', 'g' || n, array(select 'Caroline: We adopted a greyhound named Pixel.'
                                               from generate_series(1, 100))) from generate_series(1, 3) n;
end $$;
select is((select count(*) from memory_internal.episode_terms t where t.lexeme = 'greyhound')::integer, 300,
          'org B sees its own 300 greyhound postings');
do $$ begin perform memory.use_org(pg_temp.id('a')); end $$;
select is((select count(*) from memory_internal.episode_terms t
            where t.lexeme = 'greyhound' and t.project_id = pg_temp.id('r'))::integer, 0,
          'org A sees none of org B''s postings');
select is(pg_temp.ranked('p', 'Did Caroline adopt a greyhound?'), pg_temp.r('p greyhound'),
          'p''s ranking and scores are as before 300 copies in q (same org) and r (other org)');
select ok((select bool_and(t.project_id = e.project_id and t.org_id = e.org_id)
             from memory_internal.episode_terms t join memory.episodes e on e.episode_id = t.episode_id),
          'every posting carries its episode''s org and project');

-- Wipe: a session's postings go with its episodes, the rest stay; a
-- subject wipe leaves episodes and postings; a project wipe takes all.
do $$ begin perform memory.wipe(pg_temp.id('p'), 't'); end $$;
select is(pg_temp.postings('p'), pg_temp.expected_postings('p'),
          'after a session wipe the postings are exactly those of the episodes left');
select is(pg_temp.df('p'), pg_temp.expected_df('p'),
          'after a session wipe the document frequencies count the episodes left');
select ok(not exists (select from memory_internal.episode_terms t
                       where t.episode_id in (pg_temp.id('p.t.1'), pg_temp.id('p.t.2'), pg_temp.id('p.t.3'))),
          'the wiped session''s postings are gone');
select is(pg_temp.df_rows('p', 'volunt'), 0,
          'a word only the wiped session held leaves no document-frequency row, folded or pending');
select ok(pg_temp.df_rows('p', 'greyhound') > 0, 'control: a word the rest still hold keeps its rows');
do $$ begin
  perform memory.upsert_entity(pg_temp.id('p'), 'Caroline', 'person', null);
  perform memory.wipe(pg_temp.id('p'), p_subject => 'Caroline');
end $$;
select is(jsonb_array_length(pg_temp.postings('p')), jsonb_array_length(pg_temp.expected_postings('p')),
          'a subject wipe leaves the episodes and their postings');
do $$ begin perform memory.wipe(pg_temp.id('q')); end $$;
select is((select count(*) from memory_internal.episode_terms t where t.project_id = pg_temp.id('q'))::integer, 0,
          'a project wipe deletes all its postings');
select is((select count(*) from memory_internal.episode_term_df d where d.project_id = pg_temp.id('q'))::integer
          + (select count(*) from memory_internal.episode_term_df_pending d where d.project_id = pg_temp.id('q'))::integer, 0,
          'a project wipe leaves no document frequency row, folded or pending (no trace of a wiped word)');
select ok(jsonb_array_length(pg_temp.postings('p')) > 60, 'control: the other project keeps its postings');
select ok((pg_temp.df('p') ->> 'greyhound')::integer = 1, 'control: and its document frequencies');

-- The bound: "caroline" is in 2,500 episodes of big, beyond the budget;
-- the one greyhound episode is still found, first, with the score the
-- reference gives it (summed over both words).
do $$ begin
  perform pg_temp.chat('big', 'c' || n, array(select 'Caroline: I walked to the park again, round ' || (n * 100 + g)
                                                 from generate_series(1, 100) g)) from generate_series(1, 25) n;
  perform pg_temp.chat('big', 'g', array['Caroline: We met a greyhound in the park']);
end $$;
select is(pg_temp.ranked('big', 'Did Caroline meet a greyhound?') -> 0,
          pg_temp.ranked_ref('big', 'Did Caroline meet a greyhound?') -> 0,
          'bound: the rare-word episode ranks first with the reference''s score');
select ok(jsonb_array_length(pg_temp.ranked_ref('big', 'Did Caroline meet a greyhound?')) > 2500,
          'control: the common word matches every episode of big');
select ok(jsonb_array_length(pg_temp.ranked('big', 'Did Caroline meet a greyhound?')) < 100,
          'the bound binds: the leg scored the rare word''s postings, not every episode with the common one');
-- 26 statements into big: pending deltas were folded on the way, and the
-- sum of both stays exact.
select is(pg_temp.df('big'), pg_temp.expected_df('big'),
          'document frequencies stay exact across folds of pending deltas');
select ok((select count(*) from memory_internal.episode_term_df_pending p where p.project_id = pg_temp.id('big')) < 16
          and (select sum(d.df) from memory_internal.episode_term_df d
                where d.project_id = pg_temp.id('big') and d.lexeme = 'carolin') >= 1600,
          'pending deltas were folded: under 16 pending rows, the folded count holds the first 16 statements'' caroline (1,600)');


-- The bound binding on the rarest word: both words of the question are in
-- over 2,500 episodes of big.  30 turns say "Caroline" 2-31 times; the
-- leg reads only caroline's 2,000 best postings, and its top 20 are the
-- reference's (which scores all 2,531 episodes), scores included.
do $$ begin
  perform pg_temp.chat('big', 'h', array(select 'Caroline: ' || repeat('Caroline and ', k) || 'the park'
                                           from generate_series(1, 30) k));
end $$;
insert into pg_temp.res values
  ('big leg', pg_temp.ranked('big', 'Caroline at the park?')),
  ('big ref', pg_temp.ranked_ref('big', 'Caroline at the park?'));
select is((select jsonb_agg(x order by i) from jsonb_array_elements(pg_temp.r('big leg')) with ordinality a(x, i) where i <= 20),
          (select jsonb_agg(x order by i) from jsonb_array_elements(pg_temp.r('big ref')) with ordinality a(x, i) where i <= 20),
          'bound binding on the rarest word: the top 20 and their scores are the reference''s');
select ok(jsonb_array_length(pg_temp.r('big ref')) > 2500,
          'control: the reference scores every one of the 2,531 episodes');
select is(jsonb_array_length(pg_temp.r('big leg')), 2000,
          'the bound binds: the leg scored the rarest word''s 2,000 best postings only');
select ok((select bool_and(t.dl = greatest(e.token_count, 1) and t.impact > 0)
             from memory_internal.episode_terms t join memory.episodes e on e.episode_id = t.episode_id
            where t.project_id = pg_temp.id('big')),
          'postings carry their episode''s length and a positive impact');
-- The scoring read (tf, dl of each candidate's postings) is index-only:
-- the impact index holds both (sql/0016).  The key stays the bounded
-- read's order.
select is((select array_agg(a.attname order by k.n)
             from pg_index i cross join lateral unnest(i.indkey) with ordinality k(attnum, n)
             join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
            where i.indexrelid = 'memory_internal.episode_terms_impact_idx'::regclass
              and k.n > i.indnkeyatts),
          array['tf', 'dl']::name[], 'the impact index includes tf and dl');
select is((select array_agg(a.attname order by k.n)
             from pg_index i cross join lateral unnest(i.indkey) with ordinality k(attnum, n)
             join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
            where i.indexrelid = 'memory_internal.episode_terms_impact_idx'::regclass
              and k.n <= i.indnkeyatts),
          array['org_id', 'project_id', 'lexeme', 'impact', 'episode_id']::name[],
          'control: its key is still (org, project, lexeme, impact, episode)');

select * from finish();
ROLLBACK;
