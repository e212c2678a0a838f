-- 0010_episode_terms: an inverted index of episodes in a table, for the
-- BM25 full-text leg.  Under forced row-level security a qual with a
-- non-leakproof operator (@@) runs after the policy's and is never an
-- index condition, so the GIN index on content_tsv cannot serve a search:
-- the leg read every episode of the project.  Btree equality on text and
-- uuid is leakproof and is an index condition under the policy, so the
-- postings live in a btree: document frequencies are index-only counts and
-- the postings of a rare word are one index range.
--
-- One row per distinct lexeme of an episode's content_tsv, written by the
-- statement that inserts the episode (tg_episodes__terms, functions/076),
-- deleted with it (cascade).  Keyed by project first, so counts never mix
-- projects or orgs.  The same shape would serve facts (a fact_terms table
-- with fact_id and the fact's validity, or a doc kind column here).
create table memory_internal.episode_terms (
  org_id     uuid not null,
  project_id uuid not null,
  lexeme     text not null,
  episode_id uuid not null,
  -- Occurrences in the episode (positions; 1 if the vector has none).
  tf         integer not null check (tf >= 1),
  primary key (org_id, project_id, lexeme, episode_id),
  foreign key (org_id, episode_id) references memory.episodes on delete cascade
);
comment on table memory_internal.episode_terms is
  'Postings of episode full text: one row per episode and distinct lexeme of its content_tsv, with the lexeme''s occurrences; kept by tg_episodes__terms, deleted with the episode. Serves BM25 document frequencies and candidates through btree (usable under forced RLS, unlike GIN with @@).';
-- The cascade from an episode (and a session or project wipe) finds its
-- postings here.
create index episode_terms_episode_idx on memory_internal.episode_terms (org_id, episode_id);

alter table memory_internal.episode_terms enable row level security;
alter table memory_internal.episode_terms force row level security;
create policy tenant_isolation on memory_internal.episode_terms
  using (org_id = memory_internal.current_org()) with check (org_id = memory_internal.current_org());
revoke all on memory_internal.episode_terms from public;
grant select on memory_internal.episode_terms to chronomem_app, chronomem_analyst;

-- Postings of the episodes stored before this table.  The owner reads
-- across orgs here only, with forced row-level security lifted inside
-- this transaction.
alter table memory.episodes no force row level security;
alter table memory_internal.episode_terms no force row level security;

insert into memory_internal.episode_terms (org_id, project_id, lexeme, episode_id, tf)
select e.org_id, e.project_id, u.lexeme, e.episode_id, coalesce(cardinality(u.positions), 1)
  from memory.episodes e
 cross join lateral unnest(e.content_tsv) u
 order by 1, 2, 3, 4;

alter table memory.episodes force row level security;
alter table memory_internal.episode_terms force row level security;
