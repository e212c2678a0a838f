-- 0027_edges_target_order: the relation as the last key column of
-- edges_target_idx (it was an included column), so that a read of one
-- target's edges in relation order can only be served in that order by
-- this index.
--
-- The graph leg (search_graph_level) reads the edges at each frontier
-- entity by source and by target, one generic plan per session.  Planned
-- while memory.edges looked empty (a new install's tables analyzed before
-- its first writes), both reads took edges_pkey with the org alone as the
-- condition and tested source or target on every edge of the org, for each
-- entity of the frontier, until the next ANALYZE; under some orders of the
-- test suite the same plan appeared on a 12-entity project.  Each read now
-- asks for an order only its index gives (sorts off): by source, the rest
-- of edges_key_idx's key; by target, this index's relation.  sync_edges'
-- probes order by record time, which this index cannot give, so they keep
-- edges_key_idx (sql/0019); edges_floor's probe by source and relation,
-- which PostgreSQL 18 could serve from this index by skipping over the
-- targets, orders by the rest of edges_key_idx's key (functions/040).
-- Same leading columns and the same covered
-- columns; rebuilt in place (an exclusive lock on edges for the build,
-- about a second per 100k edges).
drop index memory.edges_target_idx;
create index edges_target_idx on memory.edges (org_id, target_id, relation)
  include (project_id, source_id, valid_range, recorded_at, expired_at);
comment on index memory.edges_target_idx is
  'Edges by target in relation order, with project, source, validity and record time: the graph walk''s index-only read by target.';
