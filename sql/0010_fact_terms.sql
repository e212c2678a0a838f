-- 0010_fact_terms: an inverted index of fact versions in a table, for the
-- fact full-text leg (the sibling of memory_internal.episode_terms).
-- Under forced row-level security a qual with a non-leakproof operator
-- (@@) runs after the policy's and is never an index condition, so the
-- leg read every current fact of the project.  Btree equality on text and
-- uuid is leakproof and is an index condition under the policy: the
-- postings of a word are one index range, and counting them (up to a cap)
-- is an index-only scan.
--
-- One row per fact version and distinct lexeme of its content_tsv, written
-- by the statement that inserts the version and deleted by the statement
-- that deletes it (tg_facts__terms, functions/076_search_facts.sql; facts
-- are hard-deleted only by wipe).  Unlike episode_terms there is no
-- foreign key with a cascade: assert_facts is the throughput-critical
-- write, and the key would add a referential check (a row trigger) per
-- posting and a second index (to find a fact's postings for the cascade);
-- the delete trigger finds a deleted version's postings by this key from
-- its own content_tsv instead.  A version's content never changes after
-- insert, so its postings hold for its whole life; which versions hold at
-- an instant is facts_at's decision, made when the leg joins it.  Keyed
-- by project first, so postings never mix projects or orgs.  No term
-- frequency: the leg ranks with ts_rank_cd over the stored content_tsv.
create table memory_internal.fact_terms (
  org_id     uuid not null,
  project_id uuid not null,
  lexeme     text not null,
  fact_id    uuid not null,
  primary key (org_id, project_id, lexeme, fact_id)
);
comment on table memory_internal.fact_terms is
  'Postings of fact full text: one row per fact version and distinct lexeme of its content_tsv; kept by tg_facts__terms as versions are inserted and deleted. Serves the fact full-text leg''s candidates through btree (usable under forced RLS, unlike GIN with @@).';

alter table memory_internal.fact_terms enable row level security;
alter table memory_internal.fact_terms force row level security;
create policy tenant_isolation on memory_internal.fact_terms
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
revoke all on memory_internal.fact_terms from public;

-- Postings of the versions stored before this table.  The owner reads
-- across orgs here only, with forced row-level security lifted inside
-- this transaction.
alter table memory.facts no force row level security;
alter table memory_internal.fact_terms no force row level security;

insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id)
select f.org_id, f.project_id, u.lexeme, f.fact_id
  from memory.facts f
 cross join lateral unnest(tsvector_to_array(f.content_tsv)) u(lexeme)
 order by 1, 2, 3, 4;

alter table memory.facts force row level security;
alter table memory_internal.fact_terms force row level security;
