-- 10 ingest: messages become episodes at once, in sessions created on first
-- use; retries are recognised (by idempotency key, or as a resend of the
-- session's latest batch) and that state dies with what it protects (wipe);
-- bad input is refused naming the message, and stores nothing.  Runs as
-- chronomem_app.  memory_internal.ingest_requests is not readable by the
-- app role: pg_temp.stored() counts it as superuser (security definer).
BEGIN;
select plan(52);

create procedure pg_temp.ingest(p_k text, p_session text, p_messages jsonb, p_key text default null,
                                p_project text default 'p', p_session_metadata jsonb default null)
  language sql as $$
  insert into pg_temp.res values (p_k, memory.ingest(pg_temp.id(p_project), p_session, p_messages, p_key,
                                                     p_session_metadata))
  on conflict (k) do update set r = excluded.r $$;
create procedure pg_temp.wipe(p_project text, p_session text default null) language plpgsql as $$
begin perform memory.wipe(pg_temp.id(p_project), p_session); end $$;
-- Everything ingest writes for a project, counted as superuser (RLS and the
-- revoked ingest_requests table do not hide anything from it).
create function pg_temp.stored(p_project text default 'p') returns text
  language sql stable security definer as $$
  select format('sessions=%s episodes=%s requests=%s jobs=%s',
    (select count(*) from memory.sessions where project_id = pg_temp.id(p_project)),
    (select count(*) from memory.episodes where project_id = pg_temp.id(p_project)),
    (select count(*) from memory_internal.ingest_requests where project_id = pg_temp.id(p_project)),
    (select count(*) from memory.jobs where project_id = pg_temp.id(p_project))) $$;
-- 'SQLSTATE message [detail]' of what a statement raises, or 'no error'.
-- pg_temp.try keeps what the statement did when it succeeds; error_of
-- always rolls it back (a bug that stores bad input is reported once).
create function pg_temp.try(p_sql text) returns text language plpgsql as $$
declare v_state text; v_msg text; v_detail text;
begin
  execute p_sql;
  return 'no error';
exception when others then
  get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_detail = pg_exception_detail;
  return v_state || ' ' || v_msg || coalesce(' [' || nullif(v_detail, '') || ']', '');
end $$;
create function pg_temp.error_of(p_sql text) returns text language plpgsql as $$
declare v_state text; v_msg text; v_detail text;
begin
  execute p_sql;
  raise exception 'no error' using errcode = 'ZX000';
exception when others then
  get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text, v_detail = pg_exception_detail;
  if v_state = 'ZX000' then return 'no error'; end if;
  return v_state || ' ' || v_msg || coalesce(' [' || nullif(v_detail, '') || ']', '');
end $$;
-- Episodes of a session (by external id, in project p unless named), in order.
create function pg_temp.eps(p_session text, p_project text default 'p') returns setof memory.episodes
  language sql stable as $$
  select e.* from memory.episodes e join memory.sessions s on s.org_id = e.org_id and s.session_id = e.session_id
   where s.project_id = pg_temp.id(p_project) and s.external_id = p_session order by e.seq $$;
create function pg_temp.msgs(p_n integer) returns jsonb language sql immutable as $$
  select jsonb_agg(jsonb_build_object('role', 'user', 'content', 'm' || i) order by i) from generate_series(1, p_n) i $$;
create function pg_temp.ids_of(p_k text) returns uuid[] language sql stable as $$
  select array(select x::uuid from jsonb_array_elements_text(pg_temp.r(p_k) -> 'episode_ids') x) $$;

set local role chronomem_app;
do $$
declare o uuid; b uuid;
begin
  b := memory.create_org('ingest org B');
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('org_b', b), ('p_b', memory.create_project(b, 'p'));
  o := memory.create_org('ingest org A');
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p')),
                                 ('q', memory.create_project(o, 'q')), ('w', memory.create_project(o, 'w'));
end $$;

-- A. Each message is an episode at once.
call pg_temp.ingest('a1', 'chat', '[
  {"role": "user", "content": "I drink coffee every morning", "occurred_at": "2024-03-01T10:00:00Z"},
  {"role": "assistant", "content": "Noted.", "occurred_at": "2024-03-01 10:00:05", "metadata": {"model": "m1", "n": 2}},
  {"role": "tool", "content": "{\"ok\": true}"}]', p_session_metadata => '{"channel": "web"}');
select is(pg_temp.r('a1') - 'episode_ids',
          jsonb_build_object('session_id', (select session_id from memory.sessions
                                             where project_id = pg_temp.id('p') and external_id = 'chat'),
                             'replayed', false),
          'ingest answers with the session it created and replayed = false');
select is((select array_agg(e.episode_id order by e.seq) from pg_temp.eps('chat') e), pg_temp.ids_of('a1'),
          'episode_ids are the stored episodes, in message order');
select is((select string_agg(e.seq || ' ' || e.role || ' ' || e.content || ' ' || e.metadata::text, ' | ' order by e.seq)
             from pg_temp.eps('chat') e),
          '1 user I drink coffee every morning {} | 2 assistant Noted. {"n": 2, "model": "m1"} | 3 tool {"ok": true} {}',
          'seq 1..n, role, content and metadata (default {}) as sent');
select is((select array_agg(e.occurred_at order by e.seq) from pg_temp.eps('chat') e),
          array['2024-03-01T10:00:00Z', '2024-03-01T10:00:05Z', now()]::timestamptz[],
          'occurred_at from the client (zone-less = UTC), else the transaction''s now');
select is((select array_agg(e.token_count order by e.seq) from pg_temp.eps('chat') e), array[7, 2, 3],
          'token_count is the estimate (about four characters a token), never 0');
select is((select array_agg(e.seq order by e.seq) from pg_temp.eps('chat') e
            where e.content_tsv @@ to_tsquery('english', 'coffee & mornings')), array[1],
          'content_tsv is the English full-text vector of the content');
select is((select metadata from memory.sessions where project_id = pg_temp.id('p') and external_id = 'chat'),
          '{"channel": "web"}'::jsonb, 'the session is created on first use with its metadata');

call pg_temp.ingest('a2', ' chat ', '[{"role": "user", "content": "and tea at night"}, {"role": "system", "content": "s"}]');
select is((select array_agg(e.seq order by e.seq) from pg_temp.eps('chat') e), array[1, 2, 3, 4, 5],
          'a second call continues the session''s sequence (external id trimmed: the same session)');
select is((pg_temp.r('a2') ->> 'session_id')::uuid, (pg_temp.r('a1') ->> 'session_id')::uuid,
          'and answers with the same session');
call pg_temp.ingest('a3', 'chat-2', '[{"role": "user", "content": "hello"}]');
call pg_temp.ingest('a4', 'chat', '[{"role": "user", "content": "hello"}]', p_project => 'q');
select is((select count(distinct session_id)::int || ' ' || min(seq) || ' ' || max(seq)
             from memory.episodes where episode_id = any (pg_temp.ids_of('a3') || pg_temp.ids_of('a4'))),
          '2 1 1', 'another external id, or the same external id in another project, is another session starting at 1');
select isnt((pg_temp.r('a4') ->> 'session_id')::uuid, (pg_temp.r('a1') ->> 'session_id')::uuid,
            'project q''s "chat" is not project p''s "chat"');

-- B. Idempotency key: the same body is answered with the first answer.
call pg_temp.ingest('k1', 'keyed', '[{"role": "user", "content": "book the flight"}]', 'key-1');
insert into snap values ('k1', pg_temp.stored());
call pg_temp.ingest('k1_again', 'keyed', '[{"role": "user", "content": "book the flight"}]', 'key-1');
select is(pg_temp.r('k1_again'), pg_temp.r('k1') || '{"replayed": true}', 'same key, same body: the first answer, replayed');
select is(pg_temp.stored(), (select v from snap where k = 'k1'), '... and nothing new is stored (no episode, request or job)');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'keyed', '[{"role": "user", "content": "book the hotel"}]', 'key-1') $$),
          '23505 idempotency key "key-1" was already used with a different body [Idempotency-Key]',
          'same key, another body: unique_violation naming the key');
select is(pg_temp.stored(), (select v from snap where k = 'k1'), '... and nothing is stored');
call pg_temp.ingest('k1_q', 'keyed', '[{"role": "user", "content": "book the flight"}]', 'key-1', 'q');
select is(pg_temp.r('k1_q') ->> 'replayed', 'false', 'keys are per project: the same key and body in project q is new');
select is(pg_temp.try($$ call pg_temp.ingest('x', 'keyed-elsewhere', '[{"role": "user", "content": "book the flight"}]', 'key-1') $$),
          '23505 idempotency key "key-1" was already used with a different body [Idempotency-Key]',
          'same key and messages for another session is another request: not answered with the first session''s episodes');
select is(pg_temp.stored(), (select v from snap where k = 'k1'),
          '... and stores nothing (no empty session "keyed-elsewhere" is created)');

-- C. No key: a resend of the session's latest batch is a retry; the same
-- body after another batch is a new message.
call pg_temp.ingest('y1', 'yes', '[{"role": "user", "content": "yes"}]');
insert into snap values ('y1', pg_temp.stored());
call pg_temp.ingest('y1_again', 'yes', '[{"role": "user", "content": "yes"}]');
select is(pg_temp.r('y1_again'), pg_temp.r('y1') || '{"replayed": true}', 'resending the latest batch: the first answer, replayed');
select is(pg_temp.stored(), (select v from snap where k = 'y1'), '... and nothing new is stored');
call pg_temp.ingest('y2', 'yes', '[{"role": "assistant", "content": "Shall I also book a hotel?"}]');
call pg_temp.ingest('y3', 'yes', '[{"role": "user", "content": "yes"}]');
select is(pg_temp.r('y3') ->> 'replayed', 'false', 'the same body after another batch is stored again');
select is((select string_agg(e.seq || ' ' || e.content, ', ' order by e.seq) from pg_temp.eps('yes') e),
          '1 yes, 2 Shall I also book a hotel?, 3 yes', '"yes" twice with an assistant turn between: two episodes');
call pg_temp.ingest('y4', 'yes-2', '[{"role": "user", "content": "yes"}]');
select is(pg_temp.r('y4') ->> 'replayed', 'false', 'the latest batch of another session is not a retry in this one');

-- D. Wipe clears the retry state with what it protected.
call pg_temp.ingest('w1', 'doomed', '[{"role": "user", "content": "yes"}]', 'key-w');
call pg_temp.ingest('w2', 'doomed-2', '[{"role": "user", "content": "yes"}]');
call pg_temp.ingest('w1_again', 'doomed', '[{"role": "user", "content": "yes"}]', 'key-w');
call pg_temp.ingest('w2_again', 'doomed-2', '[{"role": "user", "content": "yes"}]');
select is((pg_temp.r('w1_again') ->> 'replayed') || ' ' || (pg_temp.r('w2_again') ->> 'replayed'), 'true true',
          'before the wipe, the keyed and the keyless resend are replays (control)');
call pg_temp.wipe('p', 'doomed');
call pg_temp.wipe('p', 'doomed-2');
call pg_temp.ingest('w1_after', 'doomed', '[{"role": "user", "content": "yes"}]', 'key-w');
call pg_temp.ingest('w2_after', 'doomed-2', '[{"role": "user", "content": "yes"}]');
select is((pg_temp.r('w1_after') ->> 'replayed') || ' ' || (select string_agg(seq || ' ' || content, ',') from pg_temp.eps('doomed')),
          'false 1 yes', 'after a session wipe, the same key and body is accepted as new (a new session from seq 1)');
select is((pg_temp.r('w2_after') ->> 'replayed') || ' ' || (select string_agg(seq || ' ' || content, ',') from pg_temp.eps('doomed-2')),
          'false 1 yes', 'after a session wipe, the same body without a key is accepted as new');
select ok(not (pg_temp.ids_of('w1_after') && pg_temp.ids_of('w1')), 'with new episode ids');

call pg_temp.ingest('pw1', 'chat', '[{"role": "user", "content": "yes"}]', 'key-pw', 'w');
call pg_temp.ingest('pw2', 'chat-2', '[{"role": "user", "content": "yes"}]', null, 'w');
call pg_temp.ingest('pw2_again', 'chat-2', '[{"role": "user", "content": "yes"}]', null, 'w');
select is(pg_temp.r('pw2_again') ->> 'replayed', 'true', 'before the project wipe the resend is a replay (control)');
call pg_temp.wipe('w');
select matches(pg_temp.stored('w'), '^sessions=0 episodes=0 requests=0 ',
               'a project wipe removes sessions, episodes and the retry state');
call pg_temp.ingest('pw1_after', 'chat', '[{"role": "user", "content": "yes"}]', 'key-pw', 'w');
call pg_temp.ingest('pw2_after', 'chat-2', '[{"role": "user", "content": "yes"}]', null, 'w');
select is((pg_temp.r('pw1_after') ->> 'replayed') || ' ' || (pg_temp.r('pw2_after') ->> 'replayed'), 'false false',
          'after a project wipe the same key, and the same keyless body, are accepted as new');

-- E. Bad input: the first bad message is named, and nothing is stored.
insert into snap values ('bad', pg_temp.stored());
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[]') $$),
          '22023 messages must not be empty', 'an empty array: 22023');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', pg_temp.msgs(101)) $$),
          '54000 at most 100 messages per call, got 101', 'more than 100 messages: 54000');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '{"role": "user", "content": "hi"}') $$),
          '22023 messages must be a JSON array', 'messages not an array: 22023');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad',
            '[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}, {"role": "user", "content": ""}]') $$),
          '22023 message 1: role must be one of user, assistant, system, tool [messages[1]]',
          'an unknown role: 22023 naming message 1 (the first bad one)');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a"}, {"role": "user", "content": "   "}]') $$),
          '22023 message 1: content must be a non-empty string [messages[1]]', 'blank content: 22023 naming message 1');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a"}, {"role": "user", "content": "\n\t "}]') $$),
          '22023 message 1: content must be a non-empty string [messages[1]]',
          'content of only newlines, tabs and spaces is blank too');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, "c"]') $$),
          '22023 message 2: must be a JSON object [messages[2]]', 'a non-object element: 22023 naming message 2');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a", "occurred_at": "2024-13-45T99:00:00Z"}]') $$)
          || ' / ' || pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a", "occurred_at": "infinity"}]') $$)
          || ' / ' || pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a", "occurred_at": 1709287200}]') $$),
          '22023 message 0: occurred_at must be an ISO 8601 timestamp [messages[0]] / '
          || '22023 message 0: occurred_at must be an ISO 8601 timestamp [messages[0]] / '
          || '22023 message 0: occurred_at must be an ISO 8601 timestamp [messages[0]]',
          'a bad occurred_at (no such date, infinity, a number): 22023');
select is((select string_agg(pg_temp.error_of(format($q$ call pg_temp.ingest('x', 'bad', %L) $q$,
                   jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'a', 'occurred_at', t))::text)),
                   ' / ' order by n)
             from unnest(array['2024-01-01 BC', '9999-12-31T23:59:59-14:00', '0001-01-01T00:00:00+14:00',
                               '2024-01-01 allballs', '2024-01-01 5:00 pm']) with ordinality u(t, n)),
          rtrim(repeat('22023 message 0: occurred_at must be an ISO 8601 timestamp [messages[0]] / ', 5), ' / '),
          'occurred_at BC, past year 9999 or before year 1 in UTC, or with text after it: 22023');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a"}, {"role": "user", "content": "b", "ocurred_at": "2024-01-01"}]') $$)
          || ' / ' || pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a", "metadata": null, "occurred_at": null}, {"role": "user", "content": 5}]') $$),
          '22023 message 1: unknown key "ocurred_at" (a message has role, content, occurred_at, metadata) [messages[1]] / '
          || '22023 message 1: content must be a non-empty string [messages[1]]',
          'an unknown key names the key (JSON null for the optional fields is accepted)');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', 'bad', '[{"role": "user", "content": "a", "metadata": ["x"]}]') $$),
          '22023 message 0: metadata must be a JSON object [messages[0]]', 'metadata not an object: 22023');
select is(pg_temp.error_of($$ call pg_temp.ingest('x', '', '[{"role": "user", "content": "a"}]') $$)
          || ' / ' || pg_temp.error_of($$ call pg_temp.ingest('x', '   ', '[{"role": "user", "content": "a"}]') $$),
          '22023 session must be a non-empty string of at most 200 characters / '
          || '22023 session must be a non-empty string of at most 200 characters',
          'session '''' or blank: 22023');
select is(pg_temp.stored(), (select v from snap where k = 'bad'), 'none of the bad calls stored anything');
call pg_temp.ingest('edges', 'edges', '[{"role": "user", "content": "first", "occurred_at": "0001-01-01T00:00:00Z"},
                                       {"role": "user", "content": "last", "occurred_at": "9999-12-31T23:59:59Z"}]');
select is((select array_agg(e.occurred_at order by e.seq) from pg_temp.eps('edges') e),
          array['0001-01-01T00:00:00Z', '9999-12-31T23:59:59Z']::timestamptz[],
          'positive control: the first instant of year 1 and the last of year 9999 are accepted');
call pg_temp.ingest('hundred', 'bad', pg_temp.msgs(100));
select is((select count(*)::int || ' ' || max(seq) from pg_temp.eps('bad')), '100 100',
          'positive control: exactly 100 good messages are accepted');

-- F. Another org's project: not found.
select throws_ok($$ call pg_temp.ingest('x', 'chat', '[{"role": "user", "content": "hi"}]', null, 'p_b') $$, 'P0002', null,
                 'ingest into another org''s project: not found');
do $$ begin perform memory.use_org(pg_temp.id('org_b'), true); end $$;
select is(pg_temp.stored('p_b'), 'sessions=0 episodes=0 requests=0 jobs=0', 'org B''s project got nothing');
call pg_temp.ingest('b1', 'chat', '[{"role": "user", "content": "hi"}]', null, 'p_b');
select is(pg_temp.stored('p_b'), 'sessions=1 episodes=1 requests=1 jobs=2', 'positive control: scoped to B, ingest works');

-- G. list_sessions: by external id, each with its last message; paged.  p_b
-- also has a session named 'chat'.
insert into pg_temp.ids values ('ls', memory.create_project(pg_temp.id('org_b'), 'sessions'));
call pg_temp.ingest('ls_b', 'b', '[{"role": "user", "content": "one", "occurred_at": "2024-01-01T00:00:00Z"},
                                   {"role": "user", "content": "two", "occurred_at": "2024-01-02T00:00:00Z"}]', null, 'ls');
call pg_temp.ingest('ls_chat', 'chat', '[{"role": "user", "content": "one", "occurred_at": "2024-02-01T00:00:00Z"}]', null, 'ls');
call pg_temp.ingest('ls_c', 'c', '[{"role": "user", "content": "x", "occurred_at": "2024-03-01T00:00:00Z"},
                                   {"role": "user", "content": "y", "occurred_at": "2024-03-02T00:00:00Z"},
                                   {"role": "user", "content": "z", "occurred_at": "2024-03-03T00:00:00Z"}]', null, 'ls');
select is((select string_agg(format('%s %s %s', x ->> 'session', x ->> 'last_seq', (x ->> 'last_message_at')::date), ', ')
             from jsonb_array_elements(memory.list_sessions(pg_temp.id('ls')) -> 'sessions') x),
          'b 2 2024-01-02, c 3 2024-03-03, chat 1 2024-02-01',
          'list_sessions: by id, each with its last message''s number and time');
select ok(not exists (select from jsonb_array_elements(memory.list_sessions(pg_temp.id('ls')) -> 'sessions') x
                       where (x ->> 'session_id')::uuid in (select session_id from memory.sessions where project_id = pg_temp.id('p_b'))),
          'another project''s session of the same name is not listed');
insert into pg_temp.res values ('ls_page1', memory.list_sessions(pg_temp.id('ls'), null, 2));
select is((pg_temp.r('ls_page1') ->> 'next_cursor')
          || ' ' || (select string_agg(x ->> 'session', ',') from jsonb_array_elements(
                        memory.list_sessions(pg_temp.id('ls'), pg_temp.r('ls_page1') ->> 'next_cursor', 2) -> 'sessions') x)
          || ' ' || coalesce(memory.list_sessions(pg_temp.id('ls'), pg_temp.r('ls_page1') ->> 'next_cursor', 2) ->> 'next_cursor', 'end'),
          'c chat end', 'pages of 2: the cursor is the last id; the last page has none');
select throws_ok($$ select memory.list_sessions(pg_temp.id('p')) $$, 'P0002', null,
                 'another org''s project: not found');

select * from finish();
ROLLBACK;
