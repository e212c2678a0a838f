-- 0021_auto_objects: a fact's object written as a plain name (object_type
-- 'auto', the default) is an entity when the project has one by that name
-- or alias, else a literal.  Until now the choice was made once, at write
-- time, so the same claims ended in different states depending on whether
-- the entity (or the alias) came before or after them: no edge when the
-- fact came first, and under an alias two identities for one claim (both
-- current under a 'many' predicate, and a retry not recognised as one).
-- object_auto marks the literal objects that were such a name, so that an
-- entity or alias created later takes them over
-- (memory_internal.adopt_auto_objects); an explicit literal never changes.
-- Versions stored before this migration are taken as explicit literals:
-- which of them were written as 'auto' was not recorded.
alter table memory.facts
  add column object_auto boolean not null default false,
  add constraint facts_object_auto_check check (not object_auto or object_entity_id is null);
comment on column memory.facts.object_auto is
  'The object was written as a plain name (object_type auto) that named no entity then; an entity or alias of that name created later takes the fact over (memory_internal.adopt_auto_objects).';

-- Adoption's lookup: a project's auto-literal versions by object key.
create index facts_auto_object_idx on memory.facts (org_id, project_id, object_key)
  where object_auto;
