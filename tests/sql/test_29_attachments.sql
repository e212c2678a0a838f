-- 29 attachments: files sent with a message are stored whole and their text
-- chunked into episodes of the session (memory_internal.chunk_text), each
-- linked to its file, page and offset; reads by id; a bad file stores
-- nothing; wipes take the files.  Runs as chronomem_app.
BEGIN;
select plan(28);

create function pg_temp.error_of(p_sql text) returns text language plpgsql as $$
declare v_state text; v_msg text;
begin
  execute p_sql;
  raise exception 'no error' using errcode = 'ZX000';
exception when others then
  get stacked diagnostics v_state = returned_sqlstate, v_msg = message_text;
  if v_state = 'ZX000' then return 'no error'; end if;
  return v_state || ' ' || v_msg;
end $$;
-- Everything an ingest writes for a project, counted as superuser.
create function pg_temp.stored(p_project text default 'p') returns text
  language sql stable security definer as $$
  select format('sessions=%s episodes=%s attachments=%s chunks=%s',
    (select count(*) from memory.sessions where project_id = pg_temp.id(p_project)),
    (select count(*) from memory.episodes where project_id = pg_temp.id(p_project)),
    (select count(*) from memory.attachments where project_id = pg_temp.id(p_project)),
    (select count(*) from memory.attachment_chunks where project_id = pg_temp.id(p_project))) $$;
create procedure pg_temp.attach(p_k text, p_session text, p_files jsonb, p_contents bytea[],
                                p_project text default 'p')
  language sql as $$
  insert into pg_temp.res values (p_k, memory.ingest_attachments(pg_temp.id(p_project), p_session,
    '[{"role": "user", "content": "here is the file"}]', p_files, p_contents))
  on conflict (k) do update set r = excluded.r $$;

-- A. The chunking rule (as superuser: memory_internal is not the app's).
select is((select array_agg(c.char_offset || ':' || c.content order by c.char_offset)
             from memory_internal.chunk_text(E'one two\n\nthree four\n\n\nfive', 100) c),
          array[E'0:one two\n\nthree four\n\n\nfive'],
          'paragraphs are joined while the chunk fits');
select is((select array_agg(c.char_offset || ':' || c.content order by c.char_offset)
             from memory_internal.chunk_text(E'  aaaaaaaaaaaaaaaaaaaa\n \nbbbbbbbbbbbbbbbb\n\ncccc', 24) c),
          array['2:aaaaaaaaaaaaaaaaaaaa', E'25:bbbbbbbbbbbbbbbb\n\ncccc'],
          'a chunk ends before the paragraph that would pass the size; offsets skip whitespace');
select is((select array_agg(length(c.content) <= 20 order by c.char_offset)
             from memory_internal.chunk_text(repeat('word ', 20), 20) c),
          array[true, true, true, true, true],
          'a long paragraph is cut into pieces of at most the size, at whitespace');
select is((select string_agg(c.content, ' ' order by c.char_offset)
             from memory_internal.chunk_text(repeat('word ', 20), 20) c),
          rtrim(repeat('word ', 20)), 'the pieces together are the paragraph');
select is((select count(*) from memory_internal.chunk_text(E' \n\n \t', 20)), 0::bigint,
          'blank text makes no chunk');
select is(memory_internal.attachment_chunk_chars(), 2000, 'chunks of at most 2000 characters');
select ok(memory_internal.attachment_max_chunks() >= 1000, 'a call may make at least 1000 chunks');

set local role chronomem_app;
do $$
declare o uuid; b uuid;
begin
  b := memory.create_org('attachments org B');
  perform memory.use_org(b, true);
  insert into pg_temp.ids values ('p_b', memory.create_project(b, 'p'));
  o := memory.create_org('attachments org A');
  perform memory.use_org(o, true);
  insert into pg_temp.ids values ('org', o), ('p', memory.create_project(o, 'p'));
end $$;

-- B. A two-page file becomes chunks per page after the message.
call pg_temp.attach('a', 'chat', '[{"filename": "notes.pdf", "media_type": "application/pdf",
   "pages": ["Alpha page one.\n\nSecond paragraph.", "Zanzibar is on page two."]}]',
  array['%PDF-1.4 fake bytes'::bytea]);
select is(jsonb_array_length(pg_temp.r('a') -> 'attachments'), 1, 'one attachment in the answer');
select is((select string_agg(e.seq || ' ' || e.role || ' ' || e.content, ' | ' order by e.seq)
             from memory.episodes e where e.project_id = pg_temp.id('p')),
          E'1 user here is the file | 2 user Alpha page one.\n\nSecond paragraph. | 3 user Zanzibar is on page two.',
          'the message, then one chunk per page, in the session');
insert into pg_temp.ids values ('att', (pg_temp.r('a') -> 'attachments' -> 0 ->> 'attachment_id')::uuid);
select is((select jsonb_agg(c - 'episode_id') from jsonb_array_elements(
             memory.get_attachment(pg_temp.id('p'), pg_temp.id('att')) -> 'chunks') c),
          '[{"chunk": 1, "page": 1, "offset": 0, "length": 34}, {"chunk": 2, "page": 2, "offset": 0, "length": 24}]',
          'get_attachment lists the chunks with page, offset and length');
select is(memory.get_attachment(pg_temp.id('p'), pg_temp.id('att'))
            - 'chunks' - 'attachment_id' - 'session_id' - 'created_at',
          jsonb_build_object('session', 'chat', 'filename', 'notes.pdf', 'media_type', 'application/pdf',
                             'size_bytes', 19, 'sha256', encode(sha256('%PDF-1.4 fake bytes'::bytea), 'hex'),
                             'pages', 2),
          'get_attachment: name, type, size, digest, pages, session');
select is((select content from memory.attachment_content(pg_temp.id('p'), pg_temp.id('att'))),
          '%PDF-1.4 fake bytes'::bytea, 'attachment_content gives the bytes back');
select is((select e.metadata -> 'attachments' -> 0 ->> 'filename' from memory.episodes e
            where e.project_id = pg_temp.id('p') and e.seq = 1), 'notes.pdf',
          'the message names the files sent with it');
select is(memory_internal.episode_attachment(pg_temp.id('org'),
            (pg_temp.r('a') -> 'attachments' -> 0 -> 'episode_ids' ->> 1)::uuid) - 'attachment_id',
          '{"filename": "notes.pdf", "page": 2, "offset": 0, "chunk": 2}',
          'episode_attachment names the file, page and offset of a chunk');
select is((select count(*) from memory.jobs j where j.project_id = pg_temp.id('p') and j.kind = 'enrich'),
          3::bigint, 'chunks are enriched like messages');
select is((select r -> 'results' -> 0 -> 'attachment' ->> 'page'
             from memory.search(pg_temp.id('p'), 'Zanzibar', null::vector) r), '2',
          'a search hit on a chunk carries its attachment and page');

-- C. Bad files store nothing and name the file.
select is(pg_temp.error_of($$call pg_temp.attach('x', 'chat2', '[{"filename": "e.txt", "media_type": "text/plain", "pages": ["x"]}]', array[''::bytea])$$),
          '22023 file "e.txt": the file is empty', 'an empty file is refused by name');
select is(pg_temp.error_of($$call pg_temp.attach('x', 'chat2', '[{"filename": "a.doc", "media_type": "application/msword", "pages": ["x"]}]', array['x'::bytea])$$),
          '22023 file "a.doc": media type must be one of text/plain, text/markdown, text/html, application/pdf',
          'an unknown media type is refused by name');
select is(pg_temp.error_of($$call pg_temp.attach('x', 'chat2', '[{"filename": "b.txt", "media_type": "text/plain", "pages": ["  "]}]', array['  '::bytea])$$),
          '22023 file "b.txt": no text could be extracted from the file', 'a file without text is refused');
select is(pg_temp.stored(), 'sessions=1 episodes=3 attachments=1 chunks=2', 'and nothing of them is stored');
select is(pg_temp.error_of($$select memory.get_attachment(pg_temp.id('p_b'), pg_temp.id('att'))$$),
          'P0002 project ' || pg_temp.id('p_b') || ' not found',
          'another org''s project does not see it');

-- D. Wipes.
call pg_temp.attach('s2', 'other', '[{"filename": "keep.md", "media_type": "text/markdown", "pages": ["# Keep\n\nthis"]}]',
  array['# Keep'::bytea]);
select lives_ok($$select memory.wipe(pg_temp.id('p'), 'chat')$$, 'a session wipe');
select is(pg_temp.stored(), 'sessions=1 episodes=2 attachments=1 chunks=1',
          'takes the session''s files and chunks; another session''s stay');
select lives_ok($$select memory.wipe(pg_temp.id('p'))$$, 'a project wipe');
select is(pg_temp.stored(), 'sessions=0 episodes=0 attachments=0 chunks=0', 'takes every file');

-- E. Retention: a file goes with its chunks when they expire.
do $$ begin
  perform memory.create_project(pg_temp.id('org'), 'r');
end $$;
insert into pg_temp.ids select 'r', project_id from memory.projects where name = 'r'
   and org_id = pg_temp.id('org');
call pg_temp.attach('r1', 'old', '[{"filename": "old.txt", "media_type": "text/plain", "pages": ["old words"]}]',
  array['old words'::bytea], 'r');
select is(memory.set_retention(pg_temp.id('r'), '1 day') ->> 'retention_seconds', '86400', 'retention set');
call pg_temp.shift_back(pg_temp.id('r'), interval '2 days');
select lives_ok($$select memory.purge_expired(pg_temp.id('r'))$$, 'the purge of expired episodes');
select is(pg_temp.stored('r'), 'sessions=1 episodes=0 attachments=0 chunks=0',
          'takes the files of the expired episodes; the session stays');

select * from finish();
ROLLBACK;
