-- 0013_write_path: one foreign key of memory.facts where there were two.
--
-- Every inserted fact paid a per-row referential check against its
-- project's row in memory.projects: the same row for every fact of a
-- batch, and of every concurrent writer of the project (each check takes
-- a FOR KEY SHARE lock on it).  That check is implied once the subject's
-- reference carries the project:
--
--   facts (org_id, project_id, subject_id) -> entities (org_id, project_id, entity_id)
--
-- holds only if an entity row with the fact's org and project exists, and
-- every entity row has its project (entities' own foreign key (org_id,
-- project_id) -> projects).  So the new key guards everything the two it
-- replaces guarded -- the subject exists in the fact's org (was (org_id,
-- subject_id) -> entities) and the project exists (was (org_id,
-- project_id) -> projects) -- and one thing more: the subject belongs to
-- the fact's own project, which the write path always gave it.
--
-- ON DELETE CASCADE keeps what deleting a project or an org does: its
-- entities cascade from the project and its facts from them (before, from
-- the project directly).  The product deletes entities only in memory.wipe,
-- after the facts that name them; an owner deleting an entity by hand now
-- deletes the facts it is the subject of instead of being refused (facts
-- naming it as object still refuse it, as edges do).
--
-- The object's key (org_id, object_entity_id) and the episode's stay as
-- they were: NULL for most facts, they cost no check then.
alter table memory.entities
  add constraint entities_project_entity_key unique (org_id, project_id, entity_id);

alter table memory.facts
  drop constraint facts_org_id_project_id_fkey,
  drop constraint facts_org_id_subject_id_fkey,
  add constraint facts_subject_fkey foreign key (org_id, project_id, subject_id)
    references memory.entities (org_id, project_id, entity_id) on delete cascade;

-- Room on each page for an updated version of its rows.  A re-asserted
-- fact only bumps support_count and last_seen_at, columns no index covers:
-- with free space on its page that update is HOT (no new entry in any of
-- the table's indexes, no exclusion check); on a full page it was a new
-- entry in every one.  Applies to pages written from now on.
alter table memory.facts set (fillfactor = 90);
