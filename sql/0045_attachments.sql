-- 0045_attachments: files sent with a message (plain text, Markdown, HTML,
-- PDF), stored whole, their text chunked into episodes of the session that
-- point back to the file (page and character offset).  A file dies with its
-- session or project (foreign keys) and with a subject its chunks mention
-- (memory_internal.wipe_content).

create table memory.attachments (
  org_id        uuid not null,
  project_id    uuid not null,
  session_id    uuid not null,
  attachment_id uuid not null default gen_random_uuid(),
  filename      text not null
    constraint attachments_filename_check check (length(filename) between 1 and 255),
  media_type    text not null
    constraint attachments_media_type_check
    check (media_type in ('text/plain', 'text/markdown', 'text/html', 'application/pdf')),
  size_bytes    integer not null,
  sha256        text not null constraint attachments_sha256_check check (sha256 ~ '^[0-9a-f]{64}$'),
  content       bytea not null,
  pages         integer not null constraint attachments_pages_check check (pages >= 1),
  created_at    timestamptz not null default now(),
  primary key (org_id, attachment_id),
  foreign key (org_id, session_id) references memory.sessions on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  -- The stored bytes are the size said (and at most 64 MiB, whatever the
  -- API's configured limit).
  constraint attachments_size_check
    check (size_bytes = octet_length(content) and size_bytes between 1 and 67108864)
);
comment on table memory.attachments is
  'A file sent with a message (memory.ingest_attachments): its bytes, name, media type, size, SHA-256 and page count. Its text is in the episodes memory.attachment_chunks lists. Erased with its session, its project, or a subject one of its chunks mentions or is the source of a fact about.';
comment on column memory.attachments.pages is 'Pages of a PDF; 1 for text, Markdown and HTML.';
create index attachments_session_idx on memory.attachments (org_id, session_id);
create index attachments_project_idx on memory.attachments (org_id, project_id, created_at);

-- Which episode holds which part of a file's text.
create table memory.attachment_chunks (
  org_id        uuid not null,
  project_id    uuid not null,
  attachment_id uuid not null,
  chunk_no      integer not null constraint attachment_chunks_chunk_no_check check (chunk_no >= 1),
  episode_id    uuid not null,
  page          integer not null constraint attachment_chunks_page_check check (page >= 1),
  char_offset   integer not null constraint attachment_chunks_offset_check check (char_offset >= 0),
  char_length   integer not null constraint attachment_chunks_length_check check (char_length >= 1),
  primary key (org_id, attachment_id, chunk_no),
  unique (org_id, episode_id),
  foreign key (org_id, attachment_id) references memory.attachments on delete cascade,
  foreign key (org_id, episode_id) references memory.episodes on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.attachment_chunks is
  'The episodes an attachment''s text was chunked into: chunk number, page (1-based) and the chunk''s character offset and length in that page''s extracted text.';

do $$
declare
  t text;
begin
  foreach t in array array['memory.attachments', 'memory.attachment_chunks'] loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
    execute format('grant select on %s to chronomem_app, chronomem_analyst', t);
  end loop;
end
$$;
