-- 0009_episode_terms: an inverted index of episodes in a table, for the
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

-- The GIN index on content_tsv served no query: under forced row-level
-- security @@ is never an index condition (the old leg read the project
-- through the btree on (org_id, project_id, occurred_at)), and the leg
-- now reads the postings.  Dropped: it only cost every ingest.
drop index memory.episodes_tsv_idx;

-- Document frequencies, kept by the same triggers: counting a common
-- word's postings (a speaker's name in half a project's episodes) costs
-- milliseconds per word on every search; this is one index probe.
-- Sharded like the counters so concurrent ingests into one project rarely
-- wait on each other's rows; df = the sum over shards.  Rows whose sum
-- falls to zero are deleted with the last episode holding the word (a
-- wiped word leaves no trace).
create table memory_internal.episode_term_df (
  org_id     uuid not null,
  project_id uuid not null,
  lexeme     text not null,
  shard      smallint not null,
  df         bigint not null,
  primary key (org_id, project_id, lexeme, shard),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory_internal.episode_term_df is
  'How many episodes of the project hold each lexeme (sum over shards): BM25 document frequencies, kept with episode_terms by tg_episodes__terms.';

do $$
declare
  t regclass;
begin
  foreach t in array array['memory_internal.episode_terms', 'memory_internal.episode_term_df']::regclass[]
  loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
  end loop;
end
$$;
revoke all on memory_internal.episode_terms, memory_internal.episode_term_df from public;
grant select on memory_internal.episode_terms, memory_internal.episode_term_df to chronomem_app, chronomem_analyst;

-- Postings of the episodes stored before this table.  The owner reads
-- across orgs here only, with forced row-level security lifted inside
-- this transaction.
alter table memory.episodes no force row level security;
alter table memory_internal.episode_terms no force row level security;
alter table memory_internal.episode_term_df no force row level security;

insert into memory_internal.episode_terms (org_id, project_id, lexeme, episode_id, tf)
select e.org_id, e.project_id, u.lexeme, e.episode_id, coalesce(cardinality(u.positions), 1)
  from memory.episodes e
 cross join lateral unnest(e.content_tsv) u
 order by 1, 2, 3, 4;

insert into memory_internal.episode_term_df (org_id, project_id, lexeme, shard, df)
select t.org_id, t.project_id, t.lexeme, 0, count(*)
  from memory_internal.episode_terms t
 group by 1, 2, 3
 order by 1, 2, 3;

alter table memory.episodes force row level security;
alter table memory_internal.episode_terms force row level security;
alter table memory_internal.episode_term_df force row level security;
