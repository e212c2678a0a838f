-- 0038_project_retention: an optional retention period per project.  The
-- periodic purge job erases the episodes stored longer ago than it, and the
-- facts drawn from them, through the one wipe (memory.purge_expired).
alter table memory.projects
  add column retention interval
    constraint projects_retention_check check (retention is null or retention >= interval '1 hour');
comment on column memory.projects.retention is
  'How long episodes are kept after they are stored (NULL: for ever); the periodic purge job erases older ones and the facts drawn from them (memory.purge_expired). At least an hour.';
