-- 0016_episode_term_impact_cover: the episode full-text leg reads each
-- candidate's postings of the question's words for their tf and length
-- (functions/076, search_episode_fulltext's tfs), through the impact index
-- (its generic plan's choice), then a heap row per posting: ~1,400 heap
-- pages for 1,640 postings of "Which city does Grace Hoffmann live in?" on
-- the 100k benchmark load, two thirds of the leg.  With tf and dl in the
-- index those reads are index-only (while the visibility map is current:
-- autovacuum after writes).  wt-latency3 measured the same INCLUDE on the
-- primary key without effect: the leg's plan does not use that key.
-- Rebuilt in place (same name, same key): a few seconds and an exclusive
-- lock on episode_terms per ~500k postings.
drop index memory_internal.episode_terms_impact_idx;
create index episode_terms_impact_idx
  on memory_internal.episode_terms (org_id, project_id, lexeme, impact desc, episode_id)
  include (tf, dl);
comment on index memory_internal.episode_terms_impact_idx is
  'A word''s postings best first (the bounded candidate read), with tf and dl so the scoring read of the full-text leg is index-only.';
