-- 0008_search_scale: what the search legs need at 100k+ facts.

-- Fact full-text leg: the English vector stored with the row, like
-- episodes.content_tsv.  The leg ranks every matching fact with
-- ts_rank_cd, which needs its vector: recomputing to_tsvector per row
-- dominated the leg.  The writer computes it once per insert (UPDATEs that
-- leave content alone do not recompute it).
--
-- The GIN expression index of 0003 goes: the app and analyst roles read
-- under forced row-level security, where a non-leakproof operator such as
-- @@ is evaluated after the policy and never as an index condition, so no
-- product query could use it; every fact write paid for it.
alter table memory.facts add column content_tsv tsvector
  generated always as (to_tsvector('english'::regconfig, content)) stored;
comment on column memory.facts.content_tsv is 'English full-text vector of content.';
drop index memory.facts_content_tsv_idx;
