-- 0026_fact_embeddings: fact versions' embeddings move out of memory.facts
-- into a table of their own, with the HNSW index.
--
-- A version's window is closed by an UPDATE of memory.facts (supersession,
-- retraction, expiry, merge and split), and that UPDATE changes indexed
-- columns, so it is never HOT: every index of the table gets an entry for
-- the new row version, the HNSW index included, and an HNSW insertion is a
-- graph search.  Superseding 100 embedded facts took 278 ms against 44 for
-- the same facts unembedded (`python -m benchmarks closes`, session 15, a
-- ratio of 0.17).  A version's embedding never changes when its window
-- does: here it is written once, when the embed job stores it, and the
-- window's updates leave it alone.  memory.facts' rows also lose about
-- 1.5 kB each (384 dimensions), which reads of them no longer step over.
--
-- Keyed by the version's primary key, whose foreign key cascades a wiped
-- version's embedding away in the wipe's statement.  project_id is the
-- version's own, copied by memory.store_embeddings (the only writer), so
-- the vector leg can drop another project's candidates before it probes
-- them.  The foreign key does not name the project on purpose: its check
-- is a query each session plans once, and planned on a new install's
-- near-empty table, (org, project, fact) tied with every index led by
-- (org, project) and took facts_range_changed_idx, which then read the
-- project's every version per embedding stored
-- (tests/py/test_referential_plans.py); the primary key, the table's
-- oldest index, wins such ties.

do $$
declare
  v_dim integer;
begin
  select a.atttypmod into strict v_dim from pg_attribute a
   where a.attrelid = 'memory.facts'::regclass and a.attname = 'embedding' and not a.attisdropped;
  execute format($t$
    create table memory.fact_embeddings (
      org_id     uuid not null,
      project_id uuid not null,
      fact_id    uuid not null,
      embedding  vector(%s) not null,
      primary key (org_id, fact_id),
      foreign key (org_id, fact_id) references memory.facts on delete cascade
    )$t$, v_dim);
end
$$;
comment on table memory.fact_embeddings is
  'Embedding of each fact version''s content, written by the embed job (memory.store_embeddings); a version without a row here has none yet. Which versions hold at an instant is memory.facts_at''s to say: join it by (org_id, fact_id).';
comment on column memory.fact_embeddings.project_id is 'The version''s project, copied from it when stored.';
comment on column memory.fact_embeddings.embedding is 'Embedding of the version''s content.';

alter table memory.fact_embeddings enable row level security;
alter table memory.fact_embeddings force row level security;
create policy tenant_isolation on memory.fact_embeddings
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
revoke all on memory.fact_embeddings from public;
grant select on memory.fact_embeddings to chronomem_app, chronomem_analyst;

-- The stored vectors move, the owner reading across orgs here only, with
-- forced row-level security lifted inside this transaction.  Sorted by the
-- primary key; the HNSW index is built after, over the whole table.
alter table memory.facts no force row level security;
alter table memory.fact_embeddings no force row level security;

insert into memory.fact_embeddings (org_id, project_id, fact_id, embedding)
select f.org_id, f.project_id, f.fact_id, f.embedding
  from memory.facts f
 where f.embedding is not null
 order by f.org_id, f.fact_id;

alter table memory.facts force row level security;
alter table memory.fact_embeddings force row level security;

create index fact_embeddings_embedding_idx on memory.fact_embeddings
  using hnsw (embedding vector_cosine_ops);

-- Drops facts_embedding_idx with it.
alter table memory.facts drop column embedding;
