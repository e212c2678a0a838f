-- 0015_fact_term_frequencies: fact postings carry what the fact full-text
-- leg's rank reads, so it ranks its candidates from the postings instead
-- of each candidate's wide heap row.  The leg ranks with ts_rank_cd
-- (normalisation 1) over an OR of the question's lexemes: every
-- occurrence of a question word is a cover of its own, worth the weight of
-- its class (D, 0.1, for to_tsvector's output), and the sum is divided by
-- ln(1 + the vector's length), so for a fact's content_tsv the rank
-- depends only on how many positions the question's words hold there (the
-- sum of tf over them) and on that length (functions/076_search_facts.sql).
--
-- The primary key carries both (INCLUDE), so the leg's reads of the
-- postings stay index-only: the counts, the candidates, and each
-- candidate's tf and length.
--
-- tf: the lexeme's positions in content_tsv (1 if it has none), as
-- episode_terms counts them; doc_len: the vector's length as ts_rank_cd
-- counts it (the sum over its lexemes of the same).
-- The postings are rebuilt from the facts (an UPDATE of every row would
-- leave the table twice its size until vacuumed): emptied, refilled in
-- key order with both columns, then the key is built once.
alter table memory_internal.fact_terms drop constraint fact_terms_pkey;
truncate memory_internal.fact_terms;
alter table memory_internal.fact_terms
  add column tf integer not null check (tf >= 1),
  add column doc_len integer not null;
alter table memory_internal.fact_terms
  add constraint fact_terms_doc_len_check check (doc_len >= tf);

alter table memory.facts no force row level security;
alter table memory_internal.fact_terms no force row level security;

-- The owner refills across orgs here only (as tg_facts__terms, through
-- memory_internal.fact_term_postings, writes them for new versions).
insert into memory_internal.fact_terms (org_id, project_id, lexeme, fact_id, tf, doc_len)
select f.org_id, f.project_id, u.lexeme, f.fact_id, coalesce(cardinality(u.positions), 1),
       sum(coalesce(cardinality(u.positions), 1)) over (partition by f.org_id, f.fact_id)
  from memory.facts f
 cross join lateral unnest(f.content_tsv) u
 order by 1, 2, 3, 4;

alter table memory.facts force row level security;
alter table memory_internal.fact_terms force row level security;

alter table memory_internal.fact_terms
  add constraint fact_terms_pkey primary key (org_id, project_id, lexeme, fact_id) include (tf, doc_len);
comment on column memory_internal.fact_terms.tf is
  'The lexeme''s positions in the version''s content_tsv (1 if it has none): its occurrences, each a cover of its own for the fact full-text leg''s ts_rank_cd.';
comment on column memory_internal.fact_terms.doc_len is
  'The length of the version''s content_tsv as ts_rank_cd counts it (the sum of tf over its lexemes): the normalisation of the fact full-text leg''s rank.';
