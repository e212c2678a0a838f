-- 0012_episode_term_impact: episode postings carry the document length and
-- the word's BM25 term weight without idf (its "impact"), and an index
-- serves a word's postings best first.  When even the rarest word of a
-- question is in thousands of episodes, the full-text leg reads the top of
-- that word's postings instead of all of them (functions/076).
--
-- impact = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), k1 1.2,
-- b 0.75, avgdl the project's mean length when the posting is written:
-- increasing in tf, decreasing in dl, so for one word the postings in
-- impact order are the episodes that word scores highest.
alter table memory_internal.episode_terms
  add column dl integer,
  add column impact real;

alter table memory.episodes no force row level security;
alter table memory_internal.episode_terms no force row level security;

-- The owner backfills across orgs here only, with each project's mean
-- length from its counters (the statement's own mean without them).
with m as (
  select c.org_id, c.project_id,
         sum(c.value) filter (where c.metric = 'episode_tokens_ingested')
           - coalesce(sum(c.value) filter (where c.metric = 'episode_tokens_deleted'), 0) as tokens,
         sum(c.value) filter (where c.metric = 'episodes_ingested')
           - coalesce(sum(c.value) filter (where c.metric = 'episodes_deleted'), 0) as docs
    from memory_internal.counters c
   where c.metric like 'episode%'
   group by 1, 2
), e as (
  select e.org_id, e.episode_id, e.project_id, greatest(e.token_count, 1) as dl
    from memory.episodes e
), a as (
  select e.org_id, e.project_id,
         coalesce(max(case when m.docs > 0 and m.tokens > 0 then m.tokens::float8 / m.docs end),
                  avg(e.dl)::float8) as avgdl
    from e left join m on m.org_id = e.org_id and m.project_id = e.project_id
   group by 1, 2
)
update memory_internal.episode_terms t
   set dl = e.dl,
       impact = (t.tf * 2.2 / (t.tf + 1.2 * (0.25 + 0.75 * e.dl / a.avgdl)))::real
  from e join a on a.org_id = e.org_id and a.project_id = e.project_id
 where t.org_id = e.org_id and t.episode_id = e.episode_id;

alter table memory.episodes force row level security;
alter table memory_internal.episode_terms force row level security;

alter table memory_internal.episode_terms
  alter column dl set not null,
  alter column impact set not null,
  add constraint episode_terms_dl_check check (dl >= 1),
  add constraint episode_terms_impact_check check (impact > 0);
comment on column memory_internal.episode_terms.dl is
  'The episode''s length (estimated tokens, at least 1) when the posting was written: BM25''s document length.';
comment on column memory_internal.episode_terms.impact is
  'The word''s BM25 term weight in this episode without idf (k1 1.2, b 0.75, the project''s mean length at write time): the order in which the full-text leg reads a common word''s postings.';

-- A word's postings, best first: the bounded candidate read is one index
-- range, stopped after the budget.
create index episode_terms_impact_idx
  on memory_internal.episode_terms (org_id, project_id, lexeme, impact desc, episode_id);

-- Document-frequency deltas not yet added to episode_term_df: one row per
-- inserting statement and project (its words and how many of its episodes
-- hold each), instead of one upsert per word.  Every 16th statement of a
-- project folds the pending rows into episode_term_df in one aggregated
-- upsert (a word common to many statements is written once); a search
-- adds the few pending rows to the folded counts, so df stays exact at
-- every snapshot.  A wipe folds first, so a wiped word leaves no trace.
create table memory_internal.episode_term_df_pending (
  org_id     uuid not null,
  project_id uuid not null,
  id         bigint generated always as identity,
  lexemes    text[] not null,
  deltas     bigint[] not null check (cardinality(deltas) = cardinality(lexemes)),
  primary key (org_id, project_id, id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory_internal.episode_term_df_pending is
  'Episode document-frequency deltas of recent inserting statements (one row per statement and project), folded into episode_term_df every 16 statements or before a delete; searches add them to the folded counts.';
alter table memory_internal.episode_term_df_pending enable row level security;
alter table memory_internal.episode_term_df_pending force row level security;
create policy tenant_isolation on memory_internal.episode_term_df_pending
  using (org_id = memory_internal.current_org()) with check (org_id = memory_internal.current_org());
revoke all on memory_internal.episode_term_df_pending from public;
grant select on memory_internal.episode_term_df_pending to chronomem_app, chronomem_analyst;
