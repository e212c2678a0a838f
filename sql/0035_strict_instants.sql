-- 0035_strict_instants: One definition of an instant; default-ignorable code points dropped by normalisation.
--
-- 1. Instants a client gives lie in years 1..9999 UTC.  Every path that
--    takes one as text refuses the rest (memory_internal.try_timestamptz),
--    and these constraints say the same of what is stored, so that every
--    read can write any row back as ISO 8601.  The client-given instants
--    are facts' valid_from and asserted_until (valid_to), valid_range's
--    bounds (valid_from and another fact's valid_from or asserted_until)
--    and episodes' occurred_at; record times come from the server clock.
--    'infinity' stays allowed where it means an open end.
--
--    Rows stored before this revision may lie outside (the old check read
--    the first ten characters: '2024-01-01 BC' was stored as 2024 BC).  No
--    value this migration could put in their place is the one the client
--    meant, and a fact's window feeds supersession and history, so such
--    rows are not rewritten.  The constraints are added NOT VALID (checked
--    for every new and updated row) and validated when no stored row
--    breaks them; otherwise the migration succeeds, names each project
--    and how many rows in a WARNING, and leaves the constraint not
--    validated: the operator wipes those subjects or projects
--    (memory.wipe) and then runs ALTER TABLE ... VALIDATE CONSTRAINT.
alter table memory.facts
  add constraint facts_valid_from_years_check
    check (valid_from >= '0001-01-01 00:00:00+00' and valid_from < '10000-01-01 00:00:00+00') not valid,
  add constraint facts_asserted_until_years_check
    check (asserted_until = 'infinity' or asserted_until < '10000-01-01 00:00:00+00') not valid,
  add constraint facts_valid_range_years_check
    check (isempty(valid_range) or upper_inf(valid_range) or upper(valid_range) = 'infinity'
           or upper(valid_range) < '10000-01-01 00:00:00+00') not valid;
alter table memory.episodes
  add constraint episodes_occurred_at_years_check
    check (occurred_at >= '0001-01-01 00:00:00+00' and occurred_at < '10000-01-01 00:00:00+00') not valid;

-- The owner reads every org's rows here only, with forced row-level
-- security lifted inside this transaction; rows are written under their
-- own org's scope (chronomem.org_id), so triggers' writes pass the policies.
alter table memory.facts no force row level security;
alter table memory.episodes no force row level security;
alter table memory.entities no force row level security;
alter table memory.entity_aliases no force row level security;
alter table memory.predicates no force row level security;
alter table memory.tombstones no force row level security;
alter table memory.edges no force row level security;

do $$
declare
  r record;
  v_line text;
  v_any boolean;
begin
  for r in
    select k.conrelid::regclass::text as tbl, k.conname,
           regexp_replace(pg_get_constraintdef(k.oid, true), '^CHECK \((.*)\)( NOT VALID)?$', '\1') as expr
      from pg_constraint k
     where k.conname in ('facts_valid_from_years_check', 'facts_asserted_until_years_check',
                         'facts_valid_range_years_check', 'episodes_occurred_at_years_check')
       and k.connamespace = 'memory'::regnamespace
     order by k.conname
  loop
    v_any := false;
    for v_line in
      execute format(
        'select format(''org %%s project %%s: %%s rows'', org_id, project_id, count(*))
           from %s where not coalesce((%s), true) group by org_id, project_id
          order by org_id, project_id', r.tbl, r.expr)
    loop
      v_any := true;
      raise warning 'chronomem 0035: % breaks %, left not validated: %', r.tbl, r.conname, v_line
        using hint = 'Wipe those facts or episodes (memory.wipe), then ALTER TABLE '
                     || r.tbl || ' VALIDATE CONSTRAINT ' || r.conname || '.';
    end loop;
    if not v_any then
      execute format('alter table %s validate constraint %I', r.tbl, r.conname);
    end if;
  end loop;
end
$$;

-- 2. memory.normalize_text drops Unicode's default-ignorable code points
--    (zero-width spaces and joiners, direction marks, BOM, soft hyphen,
--    variation selectors, ...).  Keys stored with the old normalisation
--    that hold one are re-keyed: entities' normalized names, aliases,
--    predicate declarations, facts' predicate, object and content keys and
--    written names, tombstones' claims and edges' relations.  The new key
--    is computed from the stored one (the ignorable characters dropped,
--    then NFKC and the spaces collapsed again: what normalize_text now
--    gives for the text it was computed from), so this needs none of the
--    functions in functions/, which are applied after the revisions.
--    Where a new key would make two rows one -- two entities or aliases of
--    one name, two declarations of a predicate, facts whose windows would
--    overlap under one identity, a predicate whose cardinality differs --
--    nothing is merged: those rows keep their keys and a NOTICE names
--    them, for the operator to merge (memory.merge_entities) or wipe.
create function pg_temp.ign() returns text language sql immutable as $f$
  select '[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E'
         '\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFF8\U0001BCA0-\U0001BCA3'
         '\U0001D173-\U0001D17A\U000E0000-\U000E0FFF]'::text $f$;
create function pg_temp.rekey(p text) returns text language sql immutable as $f$
  select case when p ~ pg_temp.ign()
              then btrim(regexp_replace(normalize(regexp_replace(p, pg_temp.ign(), '', 'g'), NFKC),
                                        ' {2,}', ' ', 'g'))
              else p end $f$;

do $$
declare
  r record;
  v_ign constant text := pg_temp.ign();
  v_prev text := current_setting('chronomem.org_id', true);
begin
  -- Declared cardinalities as they were, for the facts below.
  create temp table rekey_pred0 on commit drop as
    select org_id, project_id, predicate, cardinality from memory.predicates;

  -- Entities.  A new name that another entity has (or is about to have), or
  -- that is an alias of another entity, is a clash.
  for r in
    with changed as (
      select e.org_id, e.project_id, e.entity_id, e.normalized_name as old_key,
             pg_temp.rekey(e.normalized_name) as new_key
        from memory.entities e where e.normalized_name ~ v_ign)
    select c.*,
           c.new_key = ''
           or count(*) over (partition by c.org_id, c.project_id, c.new_key) > 1
           or exists (select from memory.entities x
                       where x.org_id = c.org_id and x.project_id = c.project_id
                         and x.normalized_name = c.new_key and x.entity_id <> c.entity_id)
           or exists (select from memory.entity_aliases a
                       where a.org_id = c.org_id and a.project_id = c.project_id
                         and pg_temp.rekey(a.normalized_alias) = c.new_key and a.entity_id <> c.entity_id)
             as clash
      from changed c
     order by c.org_id, c.project_id, c.old_key
  loop
    if r.clash then
      raise notice 'chronomem 0035: entity % ("%") of project % keeps its key: "%" would name another entity too',
        r.entity_id, r.old_key, r.project_id, r.new_key;
      continue;
    end if;
    perform set_config('chronomem.org_id', r.org_id::text, true);
    update memory.entities set normalized_name = r.new_key
     where org_id = r.org_id and entity_id = r.entity_id;
  end loop;

  -- Aliases: a clash is a new key that another alias has or gets, or that
  -- is the name of another entity.
  for r in
    with changed as (
      select a.org_id, a.project_id, a.entity_id, a.normalized_alias as old_key,
             pg_temp.rekey(a.normalized_alias) as new_key
        from memory.entity_aliases a where a.normalized_alias ~ v_ign)
    select c.*,
           c.new_key = ''
           or count(*) over (partition by c.org_id, c.project_id, c.new_key) > 1
           or exists (select from memory.entity_aliases x
                       where x.org_id = c.org_id and x.project_id = c.project_id
                         and x.normalized_alias = c.new_key)
           or exists (select from memory.entities x
                       where x.org_id = c.org_id and x.project_id = c.project_id
                         and x.normalized_name = c.new_key and x.entity_id <> c.entity_id)
             as clash
      from changed c
     order by c.org_id, c.project_id, c.old_key
  loop
    if r.clash then
      raise notice 'chronomem 0035: alias "%" of entity % (project %) keeps its key: "%" names another entity or alias',
        r.old_key, r.entity_id, r.project_id, r.new_key;
      continue;
    end if;
    perform set_config('chronomem.org_id', r.org_id::text, true);
    update memory.entity_aliases set normalized_alias = r.new_key
     where org_id = r.org_id and project_id = r.project_id and normalized_alias = r.old_key;
  end loop;

  -- Predicate declarations.
  for r in
    with changed as (
      select d.org_id, d.project_id, d.predicate as old_key, pg_temp.rekey(d.predicate) as new_key
        from memory.predicates d where d.predicate ~ v_ign)
    select c.*,
           c.new_key = ''
           or count(*) over (partition by c.org_id, c.project_id, c.new_key) > 1
           or exists (select from memory.predicates x
                       where x.org_id = c.org_id and x.project_id = c.project_id and x.predicate = c.new_key)
             as clash
      from changed c
     order by c.org_id, c.project_id, c.old_key
  loop
    if r.clash then
      raise notice 'chronomem 0035: predicate declaration "%" of project % keeps its key: "%" is declared too',
        r.old_key, r.project_id, r.new_key;
      continue;
    end if;
    perform set_config('chronomem.org_id', r.org_id::text, true);
    update memory.predicates set predicate = r.new_key
     where org_id = r.org_id and project_id = r.project_id and predicate = r.old_key;
  end loop;

  -- Facts: content keys and written names are no part of any identity.
  update memory.facts
     set content_key = pg_temp.rekey(content_key),
         subject_written = pg_temp.rekey(subject_written),
         object_written = pg_temp.rekey(object_written)
   where content_key ~ v_ign or subject_written ~ v_ign or object_written ~ v_ign;

  -- Facts' identities, all versions of a subject and predicate at once with
  -- the edges they materialise: an entity object is keyed by its entity's
  -- name (as re-keyed above), a literal by its re-keyed text.  Windows that
  -- would overlap under one identity (the exclusion constraints of facts
  -- and edges) leave the group as it was.
  for r in
    select distinct f.org_id, f.project_id, f.subject_id, f.predicate as old_p,
           pg_temp.rekey(f.predicate) as new_p
      from memory.facts f
     where f.predicate ~ v_ign or f.object_key ~ v_ign
     order by f.org_id, f.project_id, f.subject_id, f.predicate
  loop
    if r.new_p = ''
       or coalesce((select d.cardinality from rekey_pred0 d where d.org_id = r.org_id
                     and d.project_id = r.project_id and d.predicate = r.old_p), 'many')
          <> coalesce((select d.cardinality from memory.predicates d where d.org_id = r.org_id
                        and d.project_id = r.project_id and d.predicate = r.new_p), 'many') then
      raise notice 'chronomem 0035: facts of subject % with predicate "%" (project %) keep their keys: "%" is declared with another cardinality',
        r.subject_id, r.old_p, r.project_id, r.new_p;
      continue;
    end if;
    perform set_config('chronomem.org_id', r.org_id::text, true);
    begin
      update memory.facts f
         set predicate = r.new_p,
             object_key = k.object_key,
             identity_object = case when f.identity_object = '' then '' else k.object_key end
        from (select x.fact_id,
                     -- An entity object keeps its key while its entity does.
                     case when exists (select from memory.entities o
                                        where o.org_id = x.org_id and o.entity_id = x.object_entity_id
                                          and o.normalized_name = x.object_key)
                          then x.object_key else pg_temp.rekey(x.object_key) end as object_key
                from memory.facts x
               where x.org_id = r.org_id and x.project_id = r.project_id
                 and x.subject_id = r.subject_id and x.predicate = r.old_p) k
       where f.org_id = r.org_id and f.fact_id = k.fact_id;
      if r.new_p <> r.old_p then
        update memory.edges set relation = r.new_p
         where org_id = r.org_id and project_id = r.project_id and source_id = r.subject_id
           and relation = r.old_p;
      end if;
    exception when exclusion_violation or unique_violation or check_violation then
      raise notice 'chronomem 0035: facts of subject % with predicate "%" (project %) keep their keys: as "%" they would overlap facts of the same identity (%)',
        r.subject_id, r.old_p, r.project_id, r.new_p, sqlerrm;
    end;
  end loop;

  -- Tombstones: a claim that is already tombstoned under its new key keeps
  -- its old one.
  for r in
    select t.org_id, t.fact_id, t.project_id, t.predicate, t.object_key
      from memory.tombstones t where t.predicate ~ v_ign or t.object_key ~ v_ign
     order by t.org_id, t.project_id, t.fact_id
  loop
    perform set_config('chronomem.org_id', r.org_id::text, true);
    begin
      update memory.tombstones
         set predicate = pg_temp.rekey(predicate), object_key = pg_temp.rekey(object_key)
       where org_id = r.org_id and fact_id = r.fact_id;
    exception when unique_violation then
      raise notice 'chronomem 0035: tombstone of fact % ("%" "%", project %) keeps its key: the claim is tombstoned under the new key too',
        r.fact_id, r.predicate, r.object_key, r.project_id;
    end;
  end loop;
  perform set_config('chronomem.org_id', coalesce(v_prev, ''), true);
end
$$;
drop function pg_temp.rekey(text);
drop function pg_temp.ign();

alter table memory.facts force row level security;
alter table memory.episodes force row level security;
alter table memory.entities force row level security;
alter table memory.entity_aliases force row level security;
alter table memory.predicates force row level security;
alter table memory.tombstones force row level security;
alter table memory.edges force row level security;
