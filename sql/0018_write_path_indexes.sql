-- 0018_write_path_indexes: two indexes every write maintains, changed to
-- fit what reads them.
--
-- edges_current_idx (GiST on org, project and validity, current edges
-- only) had no reader left: edges_at cannot use it (its record-time test
-- does not imply expired_at is null), sync_edges reads each key by
-- edges_key_idx or edges_target_idx, and reconcile_edges' scan of a
-- project's current edges is a range of edges_key_idx.  Each edge insert
-- paid a GiST insertion for it (about a sixth of an edge's insert).
drop index memory.edges_current_idx;

-- The job trigger's wake-up test (tg_jobs__notify: is a ready job of this
-- kind already waiting?) read jobs_ready_idx in run_at order and filtered
-- the kind, so a backlog of another kind (embeddings while the embedder is
-- down) was read through on every write that queued a job.  With run_at in
-- the kind index it is one probe.  Same keys first, so the other readers
-- of (kind, status) keep their plans.
drop index memory.jobs_kind_status_idx;
create index jobs_kind_status_idx on memory.jobs (kind, status, run_at);
comment on index memory.jobs_kind_status_idx is
  'Jobs by kind and status, oldest first: the job trigger asks whether a ready job of a kind already waits.';
