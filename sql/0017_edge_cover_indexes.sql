-- 0017_edge_cover_indexes: the graph leg of memory.search reads the edges
-- at its frontier (edges_at: validity and record time) by source and by
-- target.  Both indexes now hold what that read needs, so each is an
-- index-only range scan (while the visibility map is current: autovacuum
-- after writes) instead of a heap row per edge: a hub at the frontier (a
-- city, a company) has over a thousand edges, most of them no longer
-- current, and each was a heap fetch (benchmarks/README.md, session 5).
-- Same keys as before, so every other reader keeps its plan; rebuilt in
-- place (an exclusive lock on edges for the build: a second per ~100k
-- edges).
drop index memory.edges_key_idx;
create index edges_key_idx on memory.edges (org_id, project_id, source_id, target_id, relation)
  include (valid_range, recorded_at, expired_at);
comment on index memory.edges_key_idx is
  'Edges by (project, source, target, relation), with their validity and record time: the graph walk''s read by source is index-only.';
drop index memory.edges_target_idx;
create index edges_target_idx on memory.edges (org_id, target_id)
  include (project_id, source_id, relation, valid_range, recorded_at, expired_at);
comment on index memory.edges_target_idx is
  'Edges by target, with project, source, relation, validity and record time: the graph walk''s read by target is index-only.';
