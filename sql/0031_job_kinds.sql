-- 0031_job_kinds: the job kinds are defined once.  memory.jobs' check
-- constraint held its own copy of the list that memory_internal.job_kinds()
-- gives queue_stats, project_backlog and retry_dead_jobs; the constraint now
-- calls the function, which lives here (not in functions/) because the
-- table depends on it: a kind is added by a migration that replaces it.
-- The function is immutable, so the constraint's expression folds to a
-- constant when it is planned: a job insert pays no call.  (Removing a kind
-- would need its jobs gone first: a constraint is not re-checked when the
-- function changes.)
create or replace function memory_internal.job_kinds() returns text[]
  language sql immutable parallel safe
  as $$ select array['enrich', 'embed', 'deliver_webhook', 'reconcile_edges', 'communities', 'purge'] $$;
comment on function memory_internal.job_kinds() is
  'Every job kind, in the order queue_stats lists them: the one list, which memory.jobs'' check constraint (jobs_kind_check) calls.';

alter table memory.jobs
  drop constraint jobs_kind_check,
  add constraint jobs_kind_check check (kind = any (memory_internal.job_kinds()));
