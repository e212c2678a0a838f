-- 0007_search_scale: what the search legs need to stay fast at 100k+ facts.

-- Fact full-text leg: the English vector stored with the row, like
-- episodes.content_tsv.  The leg ranks its candidates with ts_rank_cd, which
-- needs the vector of every candidate: recomputing to_tsvector per row
-- dominated the leg.  The writer computes it once per insert, as the
-- expression index it replaces did (UPDATEs that leave content alone do not
-- recompute it).  The index covers every row, not only the current ones:
-- facts_at also returns rows retracted after known_at, so a partial index on
-- invalid_at is null could never serve the leg.
alter table memory.facts add column content_tsv tsvector
  generated always as (to_tsvector('english'::regconfig, content)) stored;
comment on column memory.facts.content_tsv is 'English full-text vector of content.';
drop index memory.facts_content_tsv_idx;
create index facts_content_tsv_idx on memory.facts using gin (content_tsv);
