-- 0030_jobs_by_project: a project's jobs by key.  What reads them: a
-- project's backlog (memory.project_backlog: is its memory caught up with
-- what was written?), the communities sweep's "is one queued already?", and
-- delete_project's delete of the project's jobs, which read the whole queue
-- of every org (jobs_kind_status_idx leads with the kind).
create index jobs_project_idx on memory.jobs (org_id, project_id, status, kind);
