-- Attachments: a file sent with a message is stored whole (memory.attachments)
-- and its text, extracted by the API (pypdf per page for PDF, HTML as text,
-- Markdown and plain text as they are), is chunked here into episodes of the
-- message's session: one chunking rule, in one place, each chunk pointing back
-- to its file, page and character offset (memory.attachment_chunks).  The
-- chunks are episodes like any other: the episode triggers queue their enrich
-- and embed jobs, search finds them, a redaction policy applies to them.

-- A page's text in chunks: paragraphs (separated by a blank line) joined
-- while the chunk stays within p_max characters; a longer paragraph is cut
-- into pieces of p_max (at the last whitespace when there is one).  Offsets
-- are 0-based character positions in the page's text; a chunk's content is
-- exactly that span (paragraph breaks inside it kept), leading and trailing
-- whitespace of each paragraph left out.
create or replace function memory_internal.chunk_text(p_text text, p_max integer)
  returns table (char_offset integer, content text)
  language plpgsql immutable parallel safe
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  c_break constant text := '\n[[:blank:]\r]*\n';
  v_len integer := length(p_text);
  v_pos integer := 1;
  v_sep integer;
  v_next integer;
  v_para text;
  v_ps integer;
  v_pe integer;
  v_cur_start integer;
  v_cur_end integer;
  v_cut integer;
begin
  if p_max is null or p_max < 16 then
    raise exception 'chunk size must be at least 16 characters' using errcode = 'invalid_parameter_value';
  end if;
  if p_text is null then
    return;
  end if;
  while v_pos <= v_len loop
    v_sep := regexp_instr(p_text, c_break, v_pos);
    if v_sep = 0 then
      v_next := v_len + 1;
      v_sep := v_len + 1;
    else
      v_next := regexp_instr(p_text, c_break, v_pos, 1, 1);
    end if;
    -- The paragraph [v_ps, v_pe) without its surrounding whitespace.
    v_para := substr(p_text, v_pos, v_sep - v_pos);
    v_ps := v_pos + length(v_para) - length(ltrim(v_para, E' \t\r\n'));
    v_pe := v_pos + length(rtrim(v_para, E' \t\r\n'));
    v_pos := v_next;
    continue when v_pe <= v_ps;
    if v_cur_start is not null and v_pe - v_cur_start <= p_max then
      v_cur_end := v_pe;
      continue;
    end if;
    if v_cur_start is not null then
      char_offset := v_cur_start - 1;
      content := substr(p_text, v_cur_start, v_cur_end - v_cur_start);
      return next;
      v_cur_start := null;
    end if;
    -- A paragraph longer than a chunk: pieces of p_max.
    while v_pe - v_ps > p_max loop
      v_cut := v_ps + p_max;
      -- The last whitespace in the second half of the piece, if any.
      v_para := substr(p_text, v_ps + p_max / 2, p_max - p_max / 2);
      if v_para ~ '[[:space:]]' then
        v_cut := v_ps + p_max / 2 + length(v_para)
                 - length(substring(v_para from '[[:space:]][^[:space:]]*$'));
      end if;
      char_offset := v_ps - 1;
      content := rtrim(substr(p_text, v_ps, v_cut - v_ps), E' \t\r\n');
      if content <> '' then
        return next;
      end if;
      v_ps := v_cut;
      while v_ps < v_pe and substr(p_text, v_ps, 1) ~ '[[:space:]]' loop
        v_ps := v_ps + 1;
      end loop;
    end loop;
    if v_pe > v_ps then
      v_cur_start := v_ps;
      v_cur_end := v_pe;
    end if;
  end loop;
  if v_cur_start is not null then
    char_offset := v_cur_start - 1;
    content := substr(p_text, v_cur_start, v_cur_end - v_cur_start);
    return next;
  end if;
end
$$;
comment on function memory_internal.chunk_text(text, integer) is
  'The one chunking rule for attachment text: paragraphs (split at blank lines) joined while a chunk stays within p_max characters, a longer paragraph cut into pieces of at most p_max (at whitespace when there is some); each chunk with its 0-based character offset in p_text.';

-- The chunk size and the most chunks one call stores.
create or replace function memory_internal.attachment_chunk_chars() returns integer
  language sql immutable parallel safe
  as $$ select 2000 $$;
comment on function memory_internal.attachment_chunk_chars() is
  'The most characters of an attachment chunk (one episode).';

create or replace function memory_internal.attachment_max_chunks() returns integer
  language sql immutable parallel safe
  as $$ select 2000 $$;
comment on function memory_internal.attachment_max_chunks() is
  'The most chunks (episodes) the attachments of one memory.ingest_attachments call may make.';

create or replace function memory.ingest_attachments(
  p_project uuid,
  p_session text,
  p_messages jsonb,
  p_files jsonb,
  p_contents bytea[],
  p_idempotency_key text default null,
  p_session_metadata jsonb default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  c_max_files constant integer := 20;
  c_media constant text[] := array['text/plain', 'text/markdown', 'text/html', 'application/pdf'];
  v_org uuid := memory_internal.project_org(p_project);
  v_n integer;
  v_bad record;
  v_descr jsonb;
  v_last jsonb;
  v_result jsonb;
  v_session uuid;
  v_last_seq integer;
  v_policy jsonb;
  v_chunks jsonb;
  v_kept jsonb;
  v_redacted jsonb;
  v_dropped integer[];
  v_changed integer;
  v_total integer;
  v_files jsonb := '[]';
  v_attachment uuid;
  v_ids jsonb;
  v_role text;
  v_at timestamptz;
  f record;
begin
  if p_files is null or jsonb_typeof(p_files) <> 'array' or jsonb_array_length(p_files) = 0 then
    raise exception 'files must be a non-empty JSON array' using errcode = 'invalid_parameter_value',
      detail = 'files';
  end if;
  v_n := jsonb_array_length(p_files);
  if v_n > c_max_files then
    raise exception 'at most % files per call, got %', c_max_files, v_n
      using errcode = 'program_limit_exceeded', detail = 'files';
  end if;
  if coalesce(cardinality(p_contents), 0) <> v_n then
    raise exception 'contents must hold one value per file (% files, % contents)',
      v_n, coalesce(cardinality(p_contents), 0) using errcode = 'invalid_parameter_value',
      detail = 'files';
  end if;
  -- Every file checked before anything is stored, the first problem named
  -- with its file.
  select x.idx, x.filename, x.problem into v_bad
    from (
      select (t.ord - 1)::integer as idx, coalesce(t.e ->> 'filename', format('files[%s]', t.ord - 1)) as filename,
             case
               when jsonb_typeof(t.e) <> 'object' then 'must be a JSON object'
               when jsonb_typeof(t.e -> 'filename') is distinct from 'string'
                    or length(t.e ->> 'filename') not between 1 and 255
                 then 'filename must be 1 to 255 characters'
               when jsonb_typeof(t.e -> 'media_type') is distinct from 'string'
                    or not (t.e ->> 'media_type') = any (c_media)
                 then 'media type must be one of text/plain, text/markdown, text/html, application/pdf'
               when p_contents[t.ord] is null or octet_length(p_contents[t.ord]) = 0
                 then 'the file is empty'
               when jsonb_typeof(t.e -> 'pages') is distinct from 'array'
                    or jsonb_array_length(t.e -> 'pages') = 0
                    or exists (select from jsonb_array_elements(t.e -> 'pages') p
                                where jsonb_typeof(p) <> 'string')
                 then 'pages must be a non-empty array of strings (the text of each page)'
               when (t.e ->> 'media_type') <> 'application/pdf' and jsonb_array_length(t.e -> 'pages') <> 1
                 then 'only a PDF has more than one page'
               when not exists (select from jsonb_array_elements_text(t.e -> 'pages') p
                                 where p ~ '[^[:space:]]')
                 then 'no text could be extracted from the file'
             end as problem
        from jsonb_array_elements(p_files) with ordinality t(e, ord)) x
   where x.problem is not null
   order by x.idx
   limit 1;
  if v_bad.idx is not null then
    raise exception 'file "%": %', v_bad.filename, v_bad.problem
      using errcode = 'invalid_parameter_value', detail = format('files[%s]', v_bad.idx);
  end if;
  if p_messages is null or jsonb_typeof(p_messages) <> 'array' or jsonb_array_length(p_messages) = 0 then
    raise exception 'messages must be a non-empty JSON array' using errcode = 'invalid_parameter_value';
  end if;
  v_last := p_messages -> -1;
  if jsonb_typeof(v_last) = 'object' and v_last ? 'metadata'
     and jsonb_typeof(v_last -> 'metadata') = 'object' and (v_last -> 'metadata') ? 'attachments' then
    raise exception 'message %: metadata key "attachments" is reserved for the files sent with it',
      jsonb_array_length(p_messages) - 1
      using errcode = 'invalid_parameter_value',
            detail = format('messages[%s]', jsonb_array_length(p_messages) - 1);
  end if;

  -- The files, chunked, before anything is stored.
  select coalesce(jsonb_agg(jsonb_build_object(
           'file', c.file, 'page', c.page, 'offset', c.char_offset, 'length', length(c.content),
           'content', c.content)
           order by c.file, c.page, c.char_offset), '[]'), count(*)
    into v_chunks, v_total
    from (select (t.ord - 1)::integer as file, p.page::integer, k.char_offset, k.content
            from jsonb_array_elements(p_files) with ordinality t(e, ord)
           cross join lateral jsonb_array_elements_text(t.e -> 'pages') with ordinality p(txt, page)
           cross join lateral memory_internal.chunk_text(
                 p.txt, memory_internal.attachment_chunk_chars()) k) c;
  if v_total > memory_internal.attachment_max_chunks() then
    raise exception 'the files make % chunks, at most % per call', v_total,
      memory_internal.attachment_max_chunks()
      using errcode = 'program_limit_exceeded', detail = 'files';
  end if;

  -- The last message says which files came with it (name, type, size,
  -- digest): its body, and so its idempotency, covers the files.
  select jsonb_agg(jsonb_build_object(
           'filename', t.e ->> 'filename', 'media_type', t.e ->> 'media_type',
           'size_bytes', octet_length(p_contents[t.ord]),
           'sha256', encode(sha256(p_contents[t.ord]), 'hex')) order by t.ord)
    into v_descr
    from jsonb_array_elements(p_files) with ordinality t(e, ord);
  if jsonb_typeof(v_last) = 'object' then
    p_messages := jsonb_set(p_messages, '{-1}',
      v_last || jsonb_build_object('metadata',
        (case when jsonb_typeof(v_last -> 'metadata') = 'object' then v_last -> 'metadata' else '{}' end)
        || jsonb_build_object('attachments', v_descr)));
  end if;

  -- The message as memory.ingest stores it (checks, redaction, the
  -- session, idempotency); a retry gets the first answer, files included.
  v_result := memory.ingest(p_project, p_session, p_messages, p_idempotency_key, p_session_metadata);
  if (v_result ->> 'replayed')::boolean then
    return v_result;
  end if;
  v_session := (v_result ->> 'session_id')::uuid;
  v_role := p_messages -> -1 ->> 'role';
  v_at := coalesce(memory_internal.try_timestamptz(p_messages -> -1 ->> 'occurred_at'), now());

  -- The chunks under the project's redaction policy, like messages: a
  -- refuse rule refuses the call.  A file whose text the policy would
  -- change (mask, hash, drop) is refused too: its stored bytes would keep
  -- what the policy removes.
  v_policy := memory_internal.redaction_policy(v_org, p_project);
  v_kept := v_chunks;
  if v_policy is not null then
    select r.messages, r.dropped into v_redacted, v_dropped
      from memory_internal.redact_messages(v_org, p_project, v_policy,
             (select jsonb_agg(jsonb_build_object('role', v_role, 'content', c ->> 'content')
                                order by o)
                from jsonb_array_elements(v_chunks) with ordinality x(c, o))) r;
    select min(y.file) into v_changed
      from (select (z.c ->> 'file')::integer as file, z.o, z.c ->> 'content' as original
              from jsonb_array_elements(v_chunks) with ordinality z(c, o)) y
      left join (select z.o, row_number() over (order by z.o) as kept_no
                   from jsonb_array_elements(v_chunks) with ordinality z(c, o)
                  where not (z.o - 1)::integer = any (coalesce(v_dropped, '{}'))) k on k.o = y.o
     where k.o is null
        or v_redacted -> (k.kept_no - 1)::integer ->> 'content' is distinct from y.original;
    if v_changed is not null then
      raise exception 'file "%": the project''s redaction policy changes its text, and the stored file would keep what the policy removes',
        p_files -> v_changed ->> 'filename'
        using errcode = 'check_violation', detail = format('files[%s]', v_changed);
    end if;
  end if;

  select s.last_seq into v_last_seq from memory.sessions s
   where s.org_id = v_org and s.session_id = v_session for update;

  for f in select (t.ord - 1)::integer as idx, t.e, p_contents[t.ord] as content
             from jsonb_array_elements(p_files) with ordinality t(e, ord) order by t.ord loop
    insert into memory.attachments
      (org_id, project_id, session_id, filename, media_type, size_bytes, sha256, content, pages)
    values (v_org, p_project, v_session, f.e ->> 'filename', f.e ->> 'media_type',
            octet_length(f.content), encode(sha256(f.content), 'hex'), f.content,
            jsonb_array_length(f.e -> 'pages'))
    returning attachment_id into v_attachment;

    with mine as (
      select c, row_number() over (order by o) as chunk_no
        from jsonb_array_elements(v_kept) with ordinality x(c, o)
       where (c ->> 'file')::integer = f.idx),
    inserted as (
      insert into memory.episodes
        (org_id, project_id, session_id, seq, role, content, metadata, occurred_at, token_count,
         redactions)
      select v_org, p_project, v_session, v_last_seq + m.chunk_no::integer, v_role,
             m.c ->> 'content', '{}', v_at, memory_internal.estimate_tokens(m.c ->> 'content'),
             null
        from mine m
       order by m.chunk_no
      returning episode_id, seq),
    linked as (
      insert into memory.attachment_chunks
        (org_id, project_id, attachment_id, chunk_no, episode_id, page, char_offset, char_length)
      select v_org, p_project, v_attachment, m.chunk_no::integer, i.episode_id,
             (m.c ->> 'page')::integer, (m.c ->> 'offset')::integer,
             (m.c ->> 'length')::integer
        from mine m join inserted i on i.seq = v_last_seq + m.chunk_no::integer
      returning episode_id, chunk_no)
    select coalesce(jsonb_agg(l.episode_id order by l.chunk_no), '[]') into v_ids from linked l;
    v_last_seq := v_last_seq + jsonb_array_length(v_ids);

    v_files := v_files || jsonb_build_object(
      'attachment_id', v_attachment, 'filename', f.e ->> 'filename',
      'media_type', f.e ->> 'media_type', 'size_bytes', octet_length(f.content),
      'sha256', encode(sha256(f.content), 'hex'), 'pages', jsonb_array_length(f.e -> 'pages'),
      'episode_ids', v_ids);
  end loop;

  update memory.sessions set last_seq = v_last_seq where org_id = v_org and session_id = v_session;

  v_result := v_result || jsonb_build_object('attachments', v_files);
  -- A retry replays the whole answer, the files' too.
  update memory_internal.ingest_requests r set response = v_result - 'replayed' || '{"replayed": false}'
   where r.org_id = v_org and r.session_id = v_session
     and r.request_id = (select max(r2.request_id) from memory_internal.ingest_requests r2
                          where r2.org_id = v_org and r2.session_id = v_session);
  return v_result;
end
$$;
comment on function memory.ingest_attachments(uuid, text, jsonb, jsonb, bytea[], text, jsonb) is
  'Store messages as memory.ingest does together with files sent with the last one: p_files = [{filename, media_type (text/plain, text/markdown, text/html, application/pdf), pages: [the text of each page, extracted by the caller]}], p_contents their bytes in the same order. Each file is stored whole (memory.attachments) and its text chunked (memory_internal.chunk_text) into episodes of the session after the messages, each linked to its file, page and character offset (memory.attachment_chunks); the redaction policy applies to the chunks like to messages, and a file whose text it would change is refused (check_violation: its bytes would keep what the policy removes). The last message''s metadata.attachments names the files (name, type, size, SHA-256), so idempotency covers them. One transaction: a bad file (named in the error) stores nothing. Returns memory.ingest''s answer plus attachments: [{attachment_id, filename, media_type, size_bytes, sha256, pages, episode_ids}].';

-- Where an episode came from when it is a chunk of an attachment: the
-- file, page and offset, for search hits and reads.
create or replace function memory_internal.episode_attachment(p_org uuid, p_episode uuid)
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select jsonb_build_object('attachment_id', c.attachment_id, 'filename', a.filename,
                            'page', c.page, 'offset', c.char_offset, 'chunk', c.chunk_no)
    from memory.attachment_chunks c
    join memory.attachments a on a.org_id = c.org_id and a.attachment_id = c.attachment_id
   where c.org_id = p_org and c.episode_id = p_episode
$$;
comment on function memory_internal.episode_attachment(uuid, uuid) is
  'The attachment an episode is a chunk of ({attachment_id, filename, page, offset, chunk}), or NULL for a message.';

create or replace function memory.get_attachment(p_project uuid, p_attachment uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_doc jsonb;
begin
  if p_attachment is null then
    raise exception 'attachment must not be null' using errcode = 'null_value_not_allowed',
      detail = 'attachment_id';
  end if;
  select jsonb_build_object(
           'attachment_id', a.attachment_id, 'session_id', a.session_id, 'session', s.external_id,
           'filename', a.filename, 'media_type', a.media_type, 'size_bytes', a.size_bytes,
           'sha256', a.sha256, 'pages', a.pages, 'created_at', a.created_at,
           'chunks', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'chunk', c.chunk_no, 'episode_id', c.episode_id, 'page', c.page,
                      'offset', c.char_offset, 'length', c.char_length) order by c.chunk_no)
               from memory.attachment_chunks c
              where c.org_id = a.org_id and c.attachment_id = a.attachment_id), '[]'))
    into v_doc
    from memory.attachments a
    join memory.sessions s on s.org_id = a.org_id and s.session_id = a.session_id
   where a.org_id = v_org and a.project_id = p_project and a.attachment_id = p_attachment;
  if v_doc is null then
    raise exception 'attachment % not found in project %', p_attachment, p_project
      using errcode = 'no_data_found';
  end if;
  return v_doc;
end
$$;
comment on function memory.get_attachment(uuid, uuid) is
  'An attachment''s metadata (name, media type, size, SHA-256, pages, session) and its chunks: episode id, page, offset and length of each. P0002 when the project has no such attachment.';

create or replace function memory.attachment_content(p_project uuid, p_attachment uuid)
  returns table (filename text, media_type text, content bytea)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_attachment is null then
    raise exception 'attachment must not be null' using errcode = 'null_value_not_allowed',
      detail = 'attachment_id';
  end if;
  return query
    select a.filename, a.media_type, a.content from memory.attachments a
     where a.org_id = v_org and a.project_id = p_project and a.attachment_id = p_attachment;
  if not found then
    raise exception 'attachment % not found in project %', p_attachment, p_project
      using errcode = 'no_data_found';
  end if;
end
$$;
comment on function memory.attachment_content(uuid, uuid) is
  'An attachment''s bytes as stored, with its name and media type. P0002 when the project has no such attachment.';

-- For a subject wipe: the attachments a chunk of which is the source of one
-- of the wiped facts or names the subject (a name or alias as whole words,
-- as memory.export_subject finds mentions).  The file's bytes hold the
-- subject too, so such an attachment goes whole, every chunk with it.
create or replace function memory_internal.subject_attachments(
  p_org uuid, p_project uuid, p_entity uuid, p_facts uuid[])
  returns uuid[]
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  with names as (
    select memory_internal.entity_names(p_org, p_entity) as names),
  sources as (
    select array(select distinct v.source_episode_id
                   from memory_internal.fact_versions(p_project) v
                  where v.org_id = p_org and v.fact_id = any (p_facts)
                    and v.source_episode_id is not null) as ids)
  select coalesce(array_agg(distinct c.attachment_id), '{}')
    from memory.attachment_chunks c
    join memory.episodes e on e.org_id = c.org_id and e.episode_id = c.episode_id
   cross join names n
   cross join sources s
   where c.org_id = p_org and c.project_id = p_project
     and (e.episode_id = any (s.ids)
          or exists (select from unnest(n.names) x
                      where strpos(' ' || memory.normalize_text(e.content) || ' ', ' ' || x || ' ') > 0))
$$;
comment on function memory_internal.subject_attachments(uuid, uuid, uuid, uuid[]) is
  'For memory.wipe''s subject scope: the attachments one chunk of which is the source of one of p_facts or names the entity (a name or alias as whole words, as memory.export_subject compares).';
