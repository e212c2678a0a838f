-- 0014_search_covering_indexes: the text legs, the graph walk and the
-- fusion probe facts and episodes hundreds of rows per search (every
-- candidate of the rarer words, functions/076_*; every fact on a walked
-- edge, 077), and read only a few narrow columns.  The rows are wide:
-- each holds its 384-dimension embedding inline (about 1.5 kB of a 1.8-1.9
-- kB row, under the TOAST threshold), so each probe touched its own heap
-- page and the tables (about 200 MB each per 100k rows) do not stay in
-- shared buffers.  These indexes hold what those
-- probes read, so they are index-only scans over 10-20 MB each (while the
-- visibility map is current: autovacuum after writes).
--
-- No index holds content_tsv: a btree entry must fit in a third of a page
-- (2704 bytes), and the tsvector of a long fact (up to 8192 characters)
-- or episode (32768) does not: the insert would fail
-- (tests/py/test_long_content.py).
--
-- facts: what facts_at's predicate reads (recorded_at, the window and its
-- bookkeeping).  Keyed by project first: facts_at always names it, so the
-- same index also serves a whole-project read (facts_at_count) as an
-- index-only range.
create index facts_text_cover_idx on memory.facts (org_id, project_id, fact_id)
  include (recorded_at, invalid_at, range_changed_at, valid_from, valid_until, valid_range);
-- episodes: the full-text leg's filter columns, and the session position
-- the fusion's neighbour share starts from; then the neighbours
-- themselves, by session and position.
create index episodes_text_cover_idx on memory.episodes (org_id, episode_id)
  include (project_id, session_id, seq, occurred_at, created_at, token_count);
create index episodes_session_cover_idx on memory.episodes (org_id, session_id, seq)
  include (episode_id, project_id, occurred_at, created_at);
-- facts by edge: the graph walk reads the facts on each walked edge
-- (subject, predicate, object entity; hundreds per hop) through facts_at,
-- for their id and valid_from.
create index facts_edge_cover_idx on memory.facts (org_id, project_id, subject_id, predicate, object_entity_id)
  include (fact_id, recorded_at, invalid_at, range_changed_at, valid_from, valid_until, valid_range)
  where object_entity_id is not null;
