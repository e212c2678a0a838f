-- 0019_edges_key_order: record time as the last key column of
-- edges_key_idx (it was an included column), so that a read of one
-- edge key in record-time order can only be served in that order by this
-- index.
--
-- sync_edges probes each key of a batch by the whole key.  On a new
-- install a session's generic plans are made at its first write, on an
-- empty memory.edges with no statistics: then edges_target_idx (org,
-- target) costs the same as this index, and the plans kept it while the
-- hubs grew, every probe reading all the edges into its target (625 per
-- probe after 80 batches of entity-object facts: 35 ms of a 74 ms batch),
-- until autovacuum's first ANALYZE.  The probes now order by recorded_at;
-- on equal costs the index that gives that order wins.  Same leading
-- columns and the same covered columns, so every other reader keeps its
-- plan; rebuilt in place (an exclusive lock on edges for the build, about
-- a second per 100k edges).
drop index memory.edges_key_idx;
create index edges_key_idx on memory.edges (org_id, project_id, source_id, target_id, relation,
                                            recorded_at)
  include (valid_range, expired_at);
comment on index memory.edges_key_idx is
  'Edges by (project, source, target, relation) in record-time order, with their validity and expiry: sync_edges'' probe of an edge key, and the graph walk''s index-only read by source.';
