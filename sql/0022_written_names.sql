-- 0022_written_names: the names a fact was written with, so that an alias
-- (or a merge) found wrong can be split off again (memory.split_entity).
-- A name resolves to its entity by the entity's own name or an alias, and
-- the fact keeps only the entity: which name the writer used was lost, and
-- with it any way to tell the facts about "Mel" from those about "Melanie"
-- once the two were one entity.  Versions stored before this migration have
-- NULL here and count as written with their entity's own name (they stay
-- with it when an alias is split off).
alter table memory.facts
  add column subject_written text,
  add column object_written text;
comment on column memory.facts.subject_written is
  'The subject''s name as written (normalized), which may be an alias of its entity; a merge sets it to the absorbed entity''s name where unknown. NULL: the entity''s own name (versions before migration 0022). memory.split_entity moves the versions written with an alias.';
comment on column memory.facts.object_written is
  'For an entity object: its name as written (normalized; a plain name adopted later, or the absorbed entity''s name after a merge), which may be an alias. NULL: the entity''s own name, or a literal object.';
