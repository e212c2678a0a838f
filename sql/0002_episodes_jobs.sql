-- 0002_episodes_jobs: what ingest and the background jobs need.
-- Episodes become searchable (token count, full-text vector, embedding),
-- facts and entities get embeddings, ingest gets idempotency state, and
-- jobs live in a table written by triggers in the writing transaction.

-- The embedding dimension is fixed per installation: read from the
-- setting chronomem.embedding_dim at migrate time (default 384,
-- all-MiniLM-L6-v2), kept in the column types themselves, changed only by
-- `chronomem reembed`.
do $$
declare
  v_dim integer := coalesce(nullif(current_setting('chronomem.embedding_dim', true), '')::integer, 384);
begin
  if v_dim not between 1 and 16000 then
    raise exception 'chronomem.embedding_dim must be between 1 and 16000, not %', v_dim;
  end if;
  execute format('alter table memory.episodes add column embedding vector(%s)', v_dim);
  execute format('alter table memory.facts add column embedding vector(%s)', v_dim);
  execute format('alter table memory.entities add column embedding vector(%s)', v_dim);
end
$$;
comment on column memory.episodes.embedding is 'Embedding of content; NULL until the embed job ran.';
comment on column memory.facts.embedding is 'Embedding of content; NULL until the embed job ran.';
comment on column memory.entities.embedding is 'Embedding of name and summary; NULL until the embed job ran.';

alter table memory.sessions add column last_seq integer not null default 0 check (last_seq >= 0);
comment on column memory.sessions.last_seq is 'Sequence number of the session''s last episode; ingest allocates under the row lock.';

alter table memory.episodes add column token_count integer not null default 0 check (token_count >= 0);
alter table memory.episodes add column content_tsv tsvector
  generated always as (to_tsvector('english'::regconfig, content)) stored;
comment on column memory.episodes.token_count is 'Estimated tokens (about four characters each), for context budgets.';
comment on column memory.episodes.content_tsv is 'English full-text vector of content.';
create index episodes_tsv_idx on memory.episodes using gin (content_tsv);
create index episodes_embedding_idx on memory.episodes using hnsw (embedding vector_cosine_ops);
create index facts_embedding_idx on memory.facts using hnsw (embedding vector_cosine_ops);
create index entities_embedding_idx on memory.entities using hnsw (embedding vector_cosine_ops);

-- Ingest idempotency.  Rows die with their session (cascade), so a wipe
-- clears the state together with what it protected.
create table memory_internal.ingest_requests (
  org_id          uuid not null,
  project_id      uuid not null,
  session_id      uuid not null,
  request_id      bigint generated always as identity,
  idempotency_key text check (length(idempotency_key) between 1 and 200),
  body_hash       text not null,
  response        jsonb not null,
  created_at      timestamptz not null default now(),
  primary key (org_id, request_id),
  foreign key (org_id, session_id) references memory.sessions on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory_internal.ingest_requests is
  'What ingest answered, by idempotency key (per project) and by body hash (a session''s latest batch), so retries return the first answer.';
create unique index ingest_requests_key_idx on memory_internal.ingest_requests
  (org_id, project_id, idempotency_key) where idempotency_key is not null;
create index ingest_requests_session_idx on memory_internal.ingest_requests (org_id, session_id, request_id);

-- Non-triple statements from extraction: preferences and summaries.
create table memory.notes (
  org_id      uuid not null,
  project_id  uuid not null,
  note_id     uuid not null default gen_random_uuid(),
  episode_id  uuid,
  kind        text not null check (kind in ('preference', 'summary')),
  subject_id  uuid,
  content     text not null check (length(content) between 1 and 8192),
  created_at  timestamptz not null default now(),
  primary key (org_id, note_id),
  unique (org_id, project_id, episode_id, kind, content),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, episode_id) references memory.episodes on delete cascade,
  foreign key (org_id, subject_id) references memory.entities on delete cascade
);
comment on table memory.notes is
  'Preferences and summaries the extractor found that are not subject-predicate-object facts.';

-- Jobs.  Enqueued by triggers in the writing transaction (no lost job, no
-- job for a rolled-back write), claimed with FOR UPDATE SKIP LOCKED.
create table memory.jobs (
  org_id       uuid not null references memory.orgs on delete cascade,
  job_id       bigint generated always as identity,
  project_id   uuid,
  kind         text not null check (kind in
    ('enrich', 'embed', 'deliver_webhook', 'reconcile_edges', 'communities', 'purge')),
  payload      jsonb not null default '{}',
  status       text not null default 'queued'
               check (status in ('queued', 'running', 'waiting', 'done', 'dead')),
  attempts     integer not null default 0 check (attempts >= 0),
  max_attempts integer not null default 5 check (max_attempts >= 1),
  run_at       timestamptz not null default now(),
  locked_by    text,
  locked_until timestamptz,
  last_error   text,
  result       jsonb,
  created_at   timestamptz not null default now(),
  finished_at  timestamptz,
  primary key (org_id, job_id),
  check ((status = 'running') = (locked_until is not null))
);
comment on table memory.jobs is
  'The work queue: enrich (one LLM call per episode), embed, deliver_webhook and periodic jobs. queued -> running -> done, or back to queued with backoff, or dead after max_attempts; waiting = cannot run until configuration changes (e.g. no LLM endpoint).';
create index jobs_ready_idx on memory.jobs (run_at, job_id) where status = 'queued';
create index jobs_lease_idx on memory.jobs (locked_until) where status = 'running';
create index jobs_kind_status_idx on memory.jobs (kind, status);

create table memory.job_schedules (
  org_id      uuid not null references memory.orgs on delete cascade,
  kind        text not null check (kind in ('reconcile_edges', 'communities', 'purge')),
  every       interval not null check (every >= interval '1 second'),
  next_run_at timestamptz not null default now(),
  primary key (org_id, kind)
);
comment on table memory.job_schedules is 'Periodic jobs per org: memory.enqueue_due_jobs() turns due rows into jobs.';

do $$
declare
  t regclass;
begin
  foreach t in array array['memory_internal.ingest_requests', 'memory.notes', 'memory.jobs',
                           'memory.job_schedules']::regclass[]
  loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
  end loop;
end
$$;
-- Workers claim across orgs through security definer functions (owner);
-- everything else they do runs under the job's org scope.
create policy worker_queue on memory.jobs to chronomem_owner using (true) with check (true);
create policy worker_schedules on memory.job_schedules to chronomem_owner using (true) with check (true);

revoke all on memory_internal.ingest_requests from public;
grant select on memory.notes, memory.jobs, memory.job_schedules to chronomem_app, chronomem_analyst;
