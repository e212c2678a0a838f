-- Entity resolution (exact on the normalized name or an alias, never fuzzy)
-- and predicate cardinality.

-- The entities of a project with these normalized names (each name at most
-- once: the key is unique), in name order: one scan of the unique name key
-- with the names as an array key, the only plan that gives that order
-- without a sort (sorts, bitmap and sequential scans are off here).  Costed
-- by statistics alone, a session's generic plan made before the first
-- ANALYZE of a grown table would read every entity of the project through
-- the (org, project, entity_id) key and filter the names: without
-- statistics that costs the same as probing the names
-- (tests/py/test_write_plans.py;
-- docs/decisions/007-plans-made-without-statistics.md).
create or replace function memory_internal.find_entities_by_name(
  p_org uuid, p_project uuid, p_normalized text[])
  returns table (normalized text, entity_id uuid)
  language sql stable
  set enable_sort = off
  set enable_bitmapscan = off
  set enable_seqscan = off
  set plan_cache_mode = force_generic_plan
  as $$
    select x.normalized_name, x.entity_id
      from memory.entities x
     where x.org_id = p_org and x.project_id = p_project and x.normalized_name = any (p_normalized)
     order by x.normalized_name
  $$;
comment on function memory_internal.find_entities_by_name(uuid, uuid, text[]) is
  'The entities of the project with these normalized names, in name order, by one scan of the unique name key whatever the statistics: find_entities'' first half.';

-- The entities names resolve to in a project: for each distinct name, its
-- entity by own normalized name first (find_entities_by_name), then by
-- alias, with the entity's canonical (normalized) name.  Names that resolve
-- to nothing are left out.  One index scan for all the names (= ANY on the
-- unique keys, a leakproof index condition), never a probe per name (a
-- batch names a hundred or more, most of them literals that are no entity)
-- nor a scan of the project's entities.  Both keys are unique, so each name
-- comes out at most once.  Plain index scans: a plan made while the project
-- is small would otherwise read all its entities (seqscan), and a bitmap
-- scan compares each row found with every name again.  (The SETs keep the
-- function from being inlined: it runs once per calling statement.)
-- force_generic_plan: planned once per session; a custom plan per call
-- costs more than running it.
create or replace function memory_internal.find_entities(
  p_org uuid, p_project uuid, p_normalized text[])
  returns table (normalized text, entity_id uuid, canonical text)
  language sql stable
  set enable_seqscan = off
  set enable_bitmapscan = off
  set plan_cache_mode = force_generic_plan
  as $$
    with own as materialized (
      select n.normalized, n.entity_id
        from memory_internal.find_entities_by_name(p_org, p_project, p_normalized) n
    )
    select o.normalized, o.entity_id, o.normalized from own o
    union all
    select y.normalized_alias, x.entity_id, x.normalized_name
      from memory.entity_aliases y
      join memory.entities x on x.org_id = y.org_id and x.entity_id = y.entity_id
     where y.org_id = p_org and y.project_id = p_project and y.normalized_alias = any (p_normalized)
       -- An entity's own name wins over another entity's alias.  (The own
       -- names among the given ones, found above: a test of the name key
       -- here would be planned, without statistics, as a read of the
       -- project's entities per alias.)
       and not exists (select from own o where o.normalized = y.normalized_alias)
  $$;

-- The entity one name resolves to (see find_entities).  NULL when there is
-- none.
create or replace function memory_internal.find_entity(
  p_org uuid, p_project uuid, p_normalized text)
  returns uuid
  language sql stable
  as $$
    select f.entity_id from memory_internal.find_entities(p_org, p_project, array[p_normalized]) f
  $$;

-- Find or create.  Safe under concurrency: a concurrent creator of the same
-- name makes our insert a no-op and the second lookup sees its row.
create or replace function memory_internal.ensure_entity(
  p_org uuid, p_project uuid, p_name text, p_type text default null)
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_norm text := memory.normalize_text(p_name);
  v_id uuid;
begin
  if v_norm is null or v_norm = '' then
    raise exception 'name "%" is empty after normalization', p_name
      using errcode = 'invalid_parameter_value';
  end if;
  v_id := memory_internal.find_entity(p_org, p_project, v_norm);
  if v_id is not null then
    return v_id;
  end if;
  insert into memory.entities (org_id, project_id, name, normalized_name, entity_type)
  values (p_org, p_project, btrim(p_name), v_norm, p_type)
  on conflict (org_id, project_id, normalized_name) do nothing
  returning entity_id into v_id;
  return coalesce(v_id, memory_internal.find_entity(p_org, p_project, v_norm));
end
$$;

create or replace function memory.upsert_entity(
  p_project uuid, p_name text, p_type text default null, p_summary text default null)
  returns uuid
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_names text[];
  v_id uuid;
  r record;
begin
  -- The project's redaction policy first (functions/062_redaction.sql): a
  -- name a drop rule matches is not stored (NULL), a summary it matches is
  -- left out.
  select * into r from memory_internal.redact(v_org, p_project, p_name, 'name');
  if r.dropped then
    return null;
  end if;
  p_name := r.text;
  select * into r from memory_internal.redact(v_org, p_project, p_summary, 'summary');
  p_summary := case when not r.dropped then r.text end;
  v_names := array[memory.normalize_text(p_name)];
  perform memory_internal.hold_project_to_name(v_org, p_project, v_names);
  v_id := memory_internal.ensure_entity(v_org, p_project, p_name, p_type);
  -- Facts stored with the name as a plain-name object are the entity's
  -- (none once adopted: a probe of an index).
  perform memory_internal.adopt_named_objects(v_org, p_project, v_names);
  if p_type is not null or p_summary is not null then
    update memory.entities e
       set entity_type = coalesce(p_type, e.entity_type),
           summary = coalesce(p_summary, e.summary)
     where e.org_id = v_org and e.entity_id = v_id
       and (e.entity_type is distinct from coalesce(p_type, e.entity_type)
            or e.summary is distinct from coalesce(p_summary, e.summary));
  end if;
  return v_id;
end
$$;
comment on function memory.upsert_entity(uuid, text, text, text) is
  'Resolve a name to its entity in the project (exact normalized name or alias), creating it if missing; sets type/summary when given. Stored facts whose object was written as that name (object_type auto) become the entity''s. The project''s redaction policy applies to the name and summary first: NULL (nothing stored) when a drop rule matches the name.';

create or replace function memory.add_alias(p_project uuid, p_entity text, p_alias text)
  returns uuid
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_entity uuid;
  v_norm text;
  v_other uuid;
  r record;
begin
  -- Both names as the redaction policy stores them (the entity's was
  -- redacted when it was made); an alias a drop rule matches is not stored.
  select * into r from memory_internal.redact(v_org, p_project, p_entity, 'entity');
  p_entity := r.text;
  select * into r from memory_internal.redact(v_org, p_project, p_alias, 'alias');
  if r.dropped then
    return null;
  end if;
  p_alias := r.text;
  v_entity := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_entity));
  v_norm := memory.normalize_text(p_alias);
  perform memory_internal.hold_project_to_name(v_org, p_project, array[v_norm]);
  if v_entity is null then
    raise exception 'entity "%" not found in project %', p_entity, p_project
      using errcode = 'no_data_found';
  end if;
  if v_norm is null or v_norm = '' then
    raise exception 'alias "%" is empty after normalization', p_alias
      using errcode = 'invalid_parameter_value';
  end if;
  v_other := memory_internal.find_entity(v_org, p_project, v_norm);
  if v_other = v_entity then
    return v_entity;
  elsif v_other is not null then
    raise exception 'alias "%" already names another entity', p_alias
      using errcode = 'unique_violation';
  end if;
  insert into memory.entity_aliases (org_id, project_id, normalized_alias, alias, entity_id)
  values (v_org, p_project, v_norm, btrim(p_alias), v_entity);
  -- Facts stored with the alias as a plain-name object are the entity's.
  perform memory_internal.adopt_named_objects(v_org, p_project, array[v_norm]);
  return v_entity;
end
$$;
comment on function memory.add_alias(uuid, text, text) is
  'Make another name resolve to an existing entity. Refused when the name already resolves to a different entity. Stored facts whose object was written as that name (object_type auto) become the entity''s, as if the alias had come first; when there are such facts it takes the project lock, so call it before writes in a transaction. The project''s redaction policy applies to both names first: NULL (nothing stored) when a drop rule matches the alias.';

-- Tombstones follow the versions re-keyed under them (adoption, merges,
-- splits): each tombstone of p_fact_ids[i] gets p_subjects[i] and
-- p_keys[i] (NULL: unchanged).  Of two live tombstones that come to name
-- one claim, the older stays and the other is lifted first (the claim
-- index is unique over live tombstones).  p_scope: the subjects whose live
-- tombstones may meet them (before and after).
create or replace function memory_internal.rekey_tombstones(
  p_org uuid, p_project uuid, p_fact_ids uuid[], p_subjects uuid[], p_keys text[],
  p_scope uuid[])
  returns void
  language sql
  as $$
    update memory.tombstones t
       set lifted_at = memory_internal.txn_instant()
      from (select x.fact_id,
                   row_number() over (partition by x.subject_id, x.predicate, x.key
                                      order by x.created_at, x.fact_id) as nth
              from (select tb.fact_id, coalesce(c.s, tb.subject_id) as subject_id, tb.predicate,
                           tb.created_at, coalesce(c.k, tb.object_key) as key
                      from memory.tombstones tb
                      left join unnest(p_fact_ids, p_subjects, p_keys) c(id, s, k)
                        on c.id = tb.fact_id
                     where tb.org_id = p_org and tb.project_id = p_project
                       and tb.subject_id = any (p_scope) and tb.lifted_at is null) x) d
     where t.org_id = p_org and t.fact_id = d.fact_id and d.nth > 1;
    update memory.tombstones t
       set subject_id = coalesce(c.s, t.subject_id), object_key = coalesce(c.k, t.object_key)
      from unnest(p_fact_ids, p_subjects, p_keys) c(id, s, k)
     where t.org_id = p_org and t.fact_id = any (p_fact_ids) and t.fact_id = c.id;
  $$;
comment on function memory_internal.rekey_tombstones(uuid, uuid, uuid[], uuid[], text[], uuid[]) is
  'Tombstones follow re-keyed versions (new subject and object key per fact id, NULL unchanged); of two live tombstones that come to name one claim, the older stays.';

-- The names among p_names that stored fact versions use as a plain-name
-- object (object_type auto, not yet an entity's): what an entity or alias
-- of one of them takes over.  One probe of facts_auto_object_idx per name
-- (offset 0: a probe whatever the statistics say, not a read of every auto
-- object of the project into a hash).
create or replace function memory_internal.auto_object_names(
  p_org uuid, p_project uuid, p_names text[])
  returns text[]
  language sql stable
  as $$
    select array(select k.name
                   from unnest(p_names) k(name)
                  where exists (select from memory_internal.fact_versions(p_project) x
                                 where x.org_id = p_org and x.object_auto and x.object_key = k.name
                                offset 0))
  $$;
comment on function memory_internal.auto_object_names(uuid, uuid, text[]) is
  'The names among p_names (normalized) that stored fact versions use as a plain-name object (object_type auto, not yet an entity''s): what an entity or alias of that name would take over.';

-- Objects written as a plain name (object_type auto) that named no entity
-- then and that some entity now bears, by its name or an alias: the stored
-- versions (retracted ones included) whose object is one of p_names, with
-- the entity, its canonical key and the identity object that key gives
-- (unchanged under a 'one' predicate).
create or replace function memory_internal.named_auto_objects(
  p_org uuid, p_project uuid, p_names text[])
  returns table (fact_id uuid, subject_id uuid, predicate text, identity_object text,
                 invalid_at timestamptz, entity_id uuid, canonical text, new_identity_object text)
  language sql stable
  as $$
    -- Entities looked up only for the names some fact uses (usually none),
    -- then per name one probe of facts_auto_object_idx (offset 0, as in
    -- auto_object_names).
    select v.fact_id, v.subject_id, v.predicate, v.identity_object, v.invalid_at,
           n.entity_id, n.canonical,
           case when v.identity_object = '' then '' else n.canonical end
      from memory_internal.find_entities(
             p_org, p_project, memory_internal.auto_object_names(p_org, p_project, p_names)) n
     cross join lateral (
       select y.* from memory_internal.fact_versions(p_project) y
        where y.org_id = p_org and y.object_auto and y.object_key = n.normalized
       offset 0) v
  $$;
comment on function memory_internal.named_auto_objects(uuid, uuid, text[]) is
  'Stored fact versions whose object was written as a plain name that an entity now bears (by name or alias), with that entity and the key and identity object it gives.';

-- Give those objects to their entities (see named_auto_objects), so that
-- the state is what it would have been had the entity or alias come first:
-- the fact gets the entity, its canonical key and the identity that key
-- gives, its edge, and its tombstone follows it.  When an alias joins two
-- identities, their windows are first laid out as one (restitch: a later
-- start closes an earlier window, logged as superseded), then re-keyed.
-- Of two live tombstones that come to name one claim, the older stays.
-- p_lock_keys: only the identities whose lock keys are listed (the caller
-- holds them; assert_facts); else the caller holds the project lock
-- exclusively.  Returns how many versions were taken over.
create or replace function memory_internal.adopt_auto_objects(
  p_org uuid, p_project uuid, p_names text[], p_lock_keys bigint[] default null,
  p_actor text default null)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_ids uuid[]; v_s uuid[]; v_p text[]; v_old text[]; v_new text[];
  v_entities uuid[]; v_keys text[]; v_current boolean[];
  v_ms uuid[]; v_mp text[]; v_mo text[]; v_ml text[];
  v_src uuid[] := '{}'; v_tgt uuid[] := '{}'; v_rel text[] := '{}';
  v_closed integer;
begin
  select array_agg(a.fact_id), array_agg(a.subject_id), array_agg(a.predicate),
         array_agg(a.identity_object), array_agg(a.new_identity_object),
         array_agg(a.entity_id), array_agg(a.canonical), array_agg(a.invalid_at is null)
    into v_ids, v_s, v_p, v_old, v_new, v_entities, v_keys, v_current
    from memory_internal.named_auto_objects(p_org, p_project, p_names) a
   where p_lock_keys is null
      or memory_internal.identity_lock_key(p_project, a.subject_id, a.predicate, a.identity_object)
         = any (p_lock_keys);
  if v_ids is null then
    return 0;
  end if;

  -- Identities an alias joins: the name's and the entity's, laid out as
  -- the entity's.
  select array_agg(m.s), array_agg(m.p), array_agg(m.o), array_agg(m.l)
    into v_ms, v_mp, v_mo, v_ml
    from (select distinct c.s, c.p, u.o, c.l
            from unnest(v_s, v_p, v_old, v_new) c(s, p, old, l)
           cross join lateral (values (c.old), (c.l)) u(o)
           where c.old <> c.l) m;

  -- Changes land after every stamp on what they change.
  perform memory_internal.begin_write(memory_internal.identities_floor(
    p_org, p_project, v_s || coalesce(v_ms, '{}'), v_p || coalesce(v_mp, '{}'),
    v_old || coalesce(v_mo, '{}')));

  if v_ms is not null then
    select v_src || coalesce(array_agg(r.subject_id) filter (where r.object_entity_id is not null), '{}'),
           v_tgt || coalesce(array_agg(r.object_entity_id) filter (where r.object_entity_id is not null), '{}'),
           v_rel || coalesce(array_agg(r.predicate) filter (where r.object_entity_id is not null), '{}'),
           count(*) filter (where not r.grew)
      into v_src, v_tgt, v_rel, v_closed
      from memory_internal.restitch(
             p_org, p_project, v_ms, v_mp, v_mo, 'superseded', coalesce(p_actor, session_user),
             'an alias joined two names', p_layout_objects => v_ml) r;
    -- Counted as assert_facts counts them, had the alias come first.
    perform memory_internal.bump_counter(p_org, p_project, 'facts_superseded', v_closed);
  end if;

  update memory.facts f
     set object_entity_id = c.entity, object_literal = null, object_key = c.key,
         identity_object = c.ident, object_auto = false,
         object_written = f.object_key  -- the plain name, maybe an alias: see split_entity
    from unnest(v_ids, v_entities, v_keys, v_new) c(id, entity, key, ident)
   where f.org_id = p_org and f.fact_id = any (v_ids) and f.fact_id = c.id;

  -- The tombstones of the versions taken over name the entity's key too.
  perform memory_internal.rekey_tombstones(p_org, p_project, v_ids, v_s, v_keys, v_s);

  -- Edges: of the versions taken over that are believed, and of the
  -- entity's own facts whose windows the layout closed.
  perform memory_internal.sync_edges(
    p_org, p_project,
    v_src || array(select c.s from unnest(v_s, v_current) c(s, cur) where c.cur),
    v_tgt || array(select c.e from unnest(v_entities, v_current) c(e, cur) where c.cur),
    v_rel || array(select c.p from unnest(v_p, v_current) c(p, cur) where c.cur));
  perform memory_internal.bump_counter(p_org, p_project, 'objects_adopted', cardinality(v_ids));
  return cardinality(v_ids);
end
$$;
comment on function memory_internal.adopt_auto_objects(uuid, uuid, text[], bigint[], text) is
  'Give stored objects written as a plain name to the entity that now bears the name (named_auto_objects): entity, key, identity, edge and tombstone follow, and identities an alias joins are laid out as one first. Caller holds the project lock exclusively, or the listed identity locks.';

-- Whether stored auto objects wait for a name: then take the project lock
-- exclusively (no writer runs meanwhile; writers hold it shared) and give
-- them to their entity.  For add_alias, upsert_entity and reconcile_edges.
create or replace function memory_internal.adopt_named_objects(
  p_org uuid, p_project uuid, p_names text[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  -- NULL: every plain name some stored fact uses.
  v_names text[] := coalesce(p_names, array(
    select distinct x.object_key from memory_internal.fact_versions(p_project) x
     where x.org_id = p_org and x.object_auto));
begin
  if not exists (select from memory_internal.named_auto_objects(p_org, p_project, v_names)) then
    return 0;
  end if;
  perform memory_internal.hold_project(p_project, true);
  return memory_internal.adopt_auto_objects(p_org, p_project, v_names);
end
$$;
comment on function memory_internal.adopt_named_objects(uuid, uuid, text[]) is
  'When stored objects written as one of these names (NULL: any) now name an entity, take the project lock exclusively and adopt them (adopt_auto_objects). Returns how many versions were taken over.';

-- A write's dry run: p_query (one of the functions below, called with
-- $1..$3) runs in a subtransaction that is then undone, and its jsonb
-- answer leaves through the exception that undoes it, so a preview is the
-- write's own answer, marked dry_run.  p_query is a constant of the
-- caller's, never user input.
create or replace function memory_internal.dry_run(
  p_query text, p_project uuid, p_a text, p_b text default null)
  returns jsonb
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_answer text;
begin
  begin
    execute p_query || '::text' into v_answer using p_project, p_a, p_b;
    raise exception 'dry run' using errcode = 'CMDRY', detail = v_answer;
  exception when sqlstate 'CMDRY' then
    get stacked diagnostics v_answer = pg_exception_detail;
  end;
  return v_answer::jsonb || jsonb_build_object('dry_run', true);
end
$$;
comment on function memory_internal.dry_run(text, uuid, text, text) is
  'Run a write (a constant query of the caller''s with $1..$3) and undo it: its jsonb answer, marked dry_run.';

-- Two entities found to be one thing (an extractor named "Mel" and
-- "Melanie" apart): the absorbed entity's facts, edges, aliases and notes
-- become the kept one's and its name an alias of it, as if that name had
-- been an alias from the start, the merge's counterpart of add_alias.
-- Identities the merge joins are laid out as one first (restitch: a later
-- start closes an earlier window, logged as superseded, "two entities
-- merged"), then the versions are re-keyed; reads at an earlier known_at
-- still show the windows believed then, under the kept entity (naming is
-- not versioned: the absorbed entity's edge history is re-pointed too, and
-- its row deleted).  Takes the project lock exclusively, so call it before
-- writes in a transaction.  p_dry_run: the same merge, rolled back (a
-- subtransaction), answering what it would do; a merge cannot be undone.
create or replace function memory.merge_entities(
  p_project uuid, p_keep text, p_absorb text, p_dry_run boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_keep uuid;
  v_absorb uuid;
  v_kept memory.entities;
  v_gone memory.entities;
  v_names text[];
  v_ids uuid[]; v_s uuid[]; v_p text[]; v_o text[]; v_ns uuid[]; v_no text[];
  v_obj uuid[]; v_nobj uuid[]; v_current boolean[];
  v_src uuid[] := '{}'; v_tgt uuid[] := '{}'; v_rel text[] := '{}';
  v_closed integer := 0;
  v_edges integer;
  v_notes integer;
  v_alias_norms text[];
  v_alias_texts text[];
begin
  if p_dry_run then
    return memory_internal.dry_run('select memory.merge_entities($1, $2, $3)',
                                   p_project, p_keep, p_absorb);
  end if;
  -- No writer runs meanwhile (writers hold it shared), and the names are
  -- resolved under it.
  perform memory_internal.hold_project(p_project, true);
  v_keep := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_keep));
  v_absorb := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_absorb));
  -- (The detail names the argument: the API's error names it as the field.)
  if v_keep is null then
    raise exception 'entity "%" not found in project %', p_keep, p_project
      using errcode = 'no_data_found', detail = 'keep';
  end if;
  if v_absorb is null then
    raise exception 'entity "%" not found in project %', p_absorb, p_project
      using errcode = 'no_data_found', detail = 'absorb';
  end if;
  if v_keep = v_absorb then
    return jsonb_build_object('entity_id', v_keep, 'merged', false, 'dry_run', false,
                              'facts_rekeyed', 0, 'facts_superseded', 0, 'edges_repointed', 0,
                              'notes_moved', 0, 'aliases', '[]'::jsonb);
  end if;
  select * into strict v_kept from memory.entities e where e.org_id = v_org and e.entity_id = v_keep;
  select * into strict v_gone from memory.entities e where e.org_id = v_org and e.entity_id = v_absorb;
  v_names := array[v_gone.normalized_name] || array(
    select a.normalized_alias from memory.entity_aliases a
     where a.org_id = v_org and a.project_id = p_project and a.entity_id = v_absorb
     order by a.normalized_alias);

  -- Every stored version naming the absorbed entity (retracted ones too),
  -- with the identity it gets: the kept entity as subject, and as object its
  -- key (unchanged under a 'one' predicate, whose identity has no object).
  select array_agg(v.fact_id), array_agg(v.subject_id), array_agg(v.predicate),
         array_agg(v.identity_object),
         array_agg(case when v.subject_id = v_absorb then v_keep else v.subject_id end),
         array_agg(case when v.object_entity_id = v_absorb and v.identity_object <> ''
                        then v_kept.normalized_name else v.identity_object end),
         array_agg(v.object_entity_id),
         array_agg(case when v.object_entity_id = v_absorb then v_keep else v.object_entity_id end),
         array_agg(v.invalid_at is null)
    into v_ids, v_s, v_p, v_o, v_ns, v_no, v_obj, v_nobj, v_current
    from (select x.* from memory_internal.fact_versions(p_project) x
           where x.org_id = v_org and x.subject_id = v_absorb
          union
          select x.* from memory_internal.fact_versions(p_project) x
           where x.org_id = v_org and x.object_entity_id = v_absorb) v;

  if v_ids is not null then
    -- Changes land after every stamp on what they change.
    perform memory_internal.begin_write(memory_internal.identities_floor(
      v_org, p_project, v_s || v_ns, v_p || v_p, v_o || v_no));
    -- The absorbed entity's identities and those they become, laid out as
    -- the latter.
    select coalesce(array_agg(r.subject_id) filter (where r.object_entity_id is not null), '{}'),
           coalesce(array_agg(r.object_entity_id) filter (where r.object_entity_id is not null), '{}'),
           coalesce(array_agg(r.predicate) filter (where r.object_entity_id is not null), '{}'),
           count(*) filter (where not r.grew)
      into v_src, v_tgt, v_rel, v_closed
      from memory_internal.restitch(
             v_org, p_project, v_s || v_ns, v_p || v_p, v_o || v_no, 'superseded', session_user,
             'two entities merged', p_layout_objects => v_no || v_no,
             p_layout_subjects => v_ns || v_ns) r;
    perform memory_internal.bump_counter(v_org, p_project, 'facts_superseded', v_closed);

    -- Tombstones follow their versions.
    perform memory_internal.rekey_tombstones(
      v_org, p_project, v_ids, v_ns,
      array(select case when o = v_absorb then v_kept.normalized_name end
              from unnest(v_obj) with ordinality u(o, n) order by n),
      v_s || v_ns);

    -- (The names they were written with stay, the absorbed entity's own
    -- where unknown, so that split_entity can take them apart again.)
    update memory.facts f
       set subject_id = c.ns, object_entity_id = c.nobj, identity_object = c.no,
           object_key = case when c.obj = v_absorb then v_kept.normalized_name else f.object_key end,
           subject_written = case when f.subject_id = v_absorb
                                  then coalesce(f.subject_written, v_gone.normalized_name)
                                  else f.subject_written end,
           object_written = case when c.obj = v_absorb
                                 then coalesce(f.object_written, v_gone.normalized_name)
                                 else f.object_written end
      from unnest(v_ids, v_ns, v_no, v_obj, v_nobj) c(id, ns, no, obj, nobj)
     where f.org_id = v_org and f.fact_id = any (v_ids) and f.fact_id = c.id;

    -- Edges: the absorbed entity's keys end (no fact asserts them now), the
    -- kept entity's are the union of both windows.
    perform memory_internal.sync_edges(
      v_org, p_project,
      -- (Literal objects are NULL targets: no edge key, sync_edges skips them.)
      v_src || v_s || v_ns, v_tgt || v_obj || v_nobj, v_rel || v_p || v_p);
  end if;

  -- The absorbed entity's edge history (all of it ended now) under the
  -- kept one, so its row can go.
  update memory.edges e
     set source_id = case when e.source_id = v_absorb then v_keep else e.source_id end,
         target_id = case when e.target_id = v_absorb then v_keep else e.target_id end
   where e.org_id = v_org and e.project_id = p_project
     and (e.source_id = v_absorb or e.target_id = v_absorb);
  get diagnostics v_edges = row_count;
  update memory.notes n set subject_id = v_keep
   where n.org_id = v_org and n.project_id = p_project and n.subject_id = v_absorb;
  get diagnostics v_notes = row_count;

  -- Its names: aliases of the kept entity (re-inserted, so that the name
  -- tokens the entity leg reads follow), its type and summary where the
  -- kept entity has none.
  with gone as (
    delete from memory.entity_aliases a
     where a.org_id = v_org and a.project_id = p_project and a.entity_id = v_absorb
    returning a.normalized_alias, a.alias)
  select array_agg(g.normalized_alias), array_agg(g.alias) into v_alias_norms, v_alias_texts
    from gone g;
  -- Its conflicts and keep_both exceptions are the kept entity's; an open
  -- conflict of a predicate the kept entity has one open for too joins
  -- that one.  Then the kept entity's disagreements that the merge made
  -- (two objects at once of an unknown predicate) open conflicts
  -- (functions/055_conflicts.sql; the project lock is held exclusively).
  insert into memory.conflict_members (org_id, project_id, conflict_id, fact_id, claim, source_episode_id, outcome, added_at)
  select m.org_id, m.project_id, k.conflict_id, m.fact_id, m.claim, m.source_episode_id, m.outcome, m.added_at
    from memory.conflicts a
    join memory.conflicts k on k.org_id = a.org_id and k.project_id = a.project_id
     and k.subject_id = v_keep and k.predicate = a.predicate and k.status = 'open'
    join memory.conflict_members m on m.org_id = a.org_id and m.conflict_id = a.conflict_id
   where a.org_id = v_org and a.project_id = p_project and a.subject_id = v_absorb and a.status = 'open'
  on conflict (org_id, conflict_id, fact_id) do nothing;
  delete from memory.conflicts a
   where a.org_id = v_org and a.project_id = p_project and a.subject_id = v_absorb and a.status = 'open'
     and exists (select from memory.conflicts k
                  where k.org_id = a.org_id and k.project_id = a.project_id and k.subject_id = v_keep
                    and k.predicate = a.predicate and k.status = 'open');
  update memory.conflicts set subject_id = v_keep
   where org_id = v_org and project_id = p_project and subject_id = v_absorb;
  insert into memory.subject_cardinalities (org_id, project_id, subject_id, predicate, cardinality, conflict_id, declared_at)
  select c.org_id, c.project_id, v_keep, c.predicate, c.cardinality, c.conflict_id, c.declared_at
    from memory.subject_cardinalities c
   where c.org_id = v_org and c.project_id = p_project and c.subject_id = v_absorb
  on conflict do nothing;
  perform memory_internal.detect_conflicts(
    v_org, p_project, array_agg(d.subject_id), array_agg(d.predicate), session_user)
    from (select distinct v.subject_id, v.predicate from memory_internal.fact_versions(p_project) v
           where v.org_id = v_org and v.subject_id = v_keep and v.invalid_at is null) d;
  delete from memory.entities e where e.org_id = v_org and e.entity_id = v_absorb;
  insert into memory.entity_aliases (org_id, project_id, normalized_alias, alias, entity_id)
  select v_org, p_project, x.normalized_alias, x.alias, v_keep
    from unnest(array[v_gone.normalized_name] || coalesce(v_alias_norms, '{}'),
                array[v_gone.name] || coalesce(v_alias_texts, '{}')) x(normalized_alias, alias)
  -- (An alias the kept entity already has stays as it is.)
  on conflict do nothing;
  update memory.entities e
     set entity_type = coalesce(e.entity_type, v_gone.entity_type),
         summary = coalesce(e.summary, v_gone.summary)
   where e.org_id = v_org and e.entity_id = v_keep
     and ((e.entity_type is null and v_gone.entity_type is not null)
          or (e.summary is null and v_gone.summary is not null));

  -- Plain-name objects some writer stored under one of those names before
  -- it named an entity here: the kept entity's now.
  perform memory_internal.adopt_named_objects(v_org, p_project, v_names);
  perform memory_internal.bump_counter(v_org, p_project, 'entities_merged', 1);
  return jsonb_build_object(
    'entity_id', v_keep, 'merged', true, 'dry_run', false,
    'facts_rekeyed', coalesce(cardinality(v_ids), 0), 'facts_superseded', v_closed,
    'edges_repointed', v_edges, 'notes_moved', v_notes, 'aliases', to_jsonb(v_names));
end
$$;
comment on function memory.merge_entities(uuid, text, text, boolean) is
  'Merge the entity p_absorb names into the one p_keep names (each by name or alias): its facts (every version), edges, tombstones, notes, aliases and name become the kept entity''s, as if its name had been an alias from the start. Identities the merge joins are laid out as one first (a later start closes an earlier window, logged as superseded). Returns a report; merging an entity with itself changes nothing. p_dry_run: the same merge rolled back, answering what it would do. Takes the project lock exclusively, so call it before writes in a transaction.';

-- The inverse of an alias or a merge found wrong: the name stops being an
-- alias and becomes an entity of its own again, with every stored version
-- written with that name (as subject, or as an entity object: the names
-- facts.subject_written and object_written keep, including the absorbed
-- entity's after a merge).  The versions are taken out of the entity's
-- layout (an empty window, logged as expired), re-keyed, and both sides are
-- laid out again (restitch): windows the joined claims had closed are given
-- back (restored), and a moved claim that meets a literal of the same name
-- closes or is closed by it in world-time order.  Tombstones follow their
-- versions, edges their facts, and plain-name objects of that name become
-- the new entity's.  Versions stored before migration 0022 count as written
-- with their entity's own name and stay; so do notes and the entity's edge
-- history (read at an earlier known_at, the graph shows the entity they were
-- joined to).  Takes the project lock exclusively, like merge_entities.
create or replace function memory.split_entity(
  p_project uuid, p_name text, p_dry_run boolean default false)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_key text := memory.normalize_text(p_name);
  v_alias memory.entity_aliases;
  v_from uuid;
  v_type text;
  v_new uuid;
  v_ids uuid[]; v_s uuid[]; v_p text[]; v_o text[]; v_ns uuid[]; v_no text[];
  v_obj uuid[]; v_nobj uuid[]; v_moved_obj boolean[];
  v_src uuid[] := '{}'; v_tgt uuid[] := '{}'; v_rel text[] := '{}';
  v_closed integer := 0;
  v_restored integer := 0;
begin
  if p_dry_run then
    return memory_internal.dry_run('select memory.split_entity($1, $2)', p_project, p_name);
  end if;
  perform memory_internal.hold_project(p_project, true);
  select * into v_alias from memory.entity_aliases a
   where a.org_id = v_org and a.project_id = p_project and a.normalized_alias = v_key;
  if not found then
    if memory_internal.find_entity(v_org, p_project, v_key) is not null then
      raise exception 'name "%" is an entity''s own name, not an alias', p_name
        using errcode = 'invalid_parameter_value', detail = 'name';
    end if;
    raise exception 'alias "%" not found in project %', p_name, p_project
      using errcode = 'no_data_found', detail = 'name';
  end if;
  v_from := v_alias.entity_id;
  select e.entity_type into v_type from memory.entities e
   where e.org_id = v_org and e.entity_id = v_from;
  delete from memory.entity_aliases a
   where a.org_id = v_org and a.project_id = p_project and a.normalized_alias = v_key;
  -- The name is no alias now: this creates its entity (of the same type).
  v_new := memory_internal.ensure_entity(v_org, p_project, v_alias.alias, v_type);

  -- Every stored version written with the name, and the identity it gets.
  select array_agg(v.fact_id), array_agg(v.subject_id), array_agg(v.predicate),
         array_agg(v.identity_object),
         array_agg(case when v.moves_subject then v_new else v.subject_id end),
         array_agg(case when v.moves_object and v.identity_object <> '' then v_key
                        else v.identity_object end),
         array_agg(v.object_entity_id),
         array_agg(case when v.moves_object then v_new else v.object_entity_id end),
         array_agg(v.moves_object)
    into v_ids, v_s, v_p, v_o, v_ns, v_no, v_obj, v_nobj, v_moved_obj
    from (select x.*,
                 x.subject_id = v_from and x.subject_written = v_key as moves_subject,
                 coalesce(x.object_entity_id = v_from and x.object_written = v_key, false)
                   as moves_object
            from (select y.* from memory_internal.fact_versions(p_project) y
                   where y.org_id = v_org and y.subject_id = v_from
                  union
                  select y.* from memory_internal.fact_versions(p_project) y
                   where y.org_id = v_org and y.object_entity_id = v_from) x) v
   where v.moves_subject or v.moves_object;

  if v_ids is not null then
    perform memory_internal.begin_write(memory_internal.identities_floor(
      v_org, p_project, v_s || v_ns, v_p || v_p, v_o || v_no));
    -- Out of the entity's layout: an empty window overlaps nothing, so the
    -- versions can be re-keyed whatever their new identities hold.
    with taken as (
      select y.fact_id, y.valid_range from memory_internal.fact_versions(p_project) y
       where y.org_id = v_org and y.fact_id = any (v_ids)
         and y.invalid_at is null and not isempty(y.valid_range)
    ), emptied as (
      update memory.facts f
         set valid_range = 'empty', range_changed_at = memory_internal.txn_instant()
        from taken t
       where f.org_id = v_org and f.fact_id = any (v_ids) and f.fact_id = t.fact_id
      returning f.fact_id)
    insert into memory.fact_events
      (org_id, project_id, fact_id, event_type, old_fact_id, old_range, new_range, actor, reason)
    select v_org, p_project, t.fact_id, 'expired', t.fact_id, t.valid_range, 'empty',
           session_user, 'an alias split off'
      from taken t join emptied e on e.fact_id = t.fact_id;

    update memory.facts f
       set subject_id = c.ns, object_entity_id = c.nobj, identity_object = c.no,
           object_key = case when c.moved then v_key else f.object_key end
      from unnest(v_ids, v_ns, v_no, v_nobj, v_moved_obj) c(id, ns, no, nobj, moved)
     where f.org_id = v_org and f.fact_id = any (v_ids) and f.fact_id = c.id;

    -- Tombstones follow their versions.
    perform memory_internal.rekey_tombstones(
      v_org, p_project, v_ids, v_ns,
      array(select case when m then v_key end
              from unnest(v_moved_obj) with ordinality u(m, n) order by n),
      v_s || v_ns);

    -- Both sides laid out again: what the joined claims had closed is given
    -- back, the moved versions take their places in their new identities.
    select coalesce(array_agg(r.subject_id) filter (where r.object_entity_id is not null), '{}'),
           coalesce(array_agg(r.object_entity_id) filter (where r.object_entity_id is not null), '{}'),
           coalesce(array_agg(r.predicate) filter (where r.object_entity_id is not null), '{}'),
           count(*) filter (where not r.grew), count(*) filter (where r.grew)
      into v_src, v_tgt, v_rel, v_closed, v_restored
      from memory_internal.restitch(
             v_org, p_project, v_s || v_ns, v_p || v_p, v_o || v_no, 'superseded', session_user,
             'an alias split off') r;
    perform memory_internal.bump_counter(v_org, p_project, 'facts_superseded', v_closed);

    perform memory_internal.sync_edges(
      v_org, p_project,
      -- (Literal objects are NULL targets: no edge key, sync_edges skips them.)
      v_src || v_s || v_ns, v_tgt || v_obj || v_nobj, v_rel || v_p || v_p);
  end if;

  -- Plain-name objects of that name are the new entity's.
  perform memory_internal.adopt_named_objects(v_org, p_project, array[v_key]);
  perform memory_internal.bump_counter(v_org, p_project, 'entities_split', 1);
  return jsonb_build_object(
    'entity_id', v_new, 'split_from', v_from, 'dry_run', false,
    'facts_moved', coalesce(cardinality(v_ids), 0), 'facts_superseded', v_closed,
    'windows_restored', v_restored);
end
$$;
comment on function memory.split_entity(uuid, text, boolean) is
  'Undo an alias or a merge: the alias p_name becomes an entity of its own (of its entity''s type) with every stored version written with that name (as subject or entity object; versions stored before migration 0022 stay), and both sides are laid out again in world-time order (windows the joined claims had closed are given back). Tombstones, edges and plain-name objects of the name follow. p_dry_run: the same split rolled back, answering what it would do. Takes the project lock exclusively.';

-- Advisory lock keys, always taken in this order: project, predicates,
-- identities (each group sorted; docs/decisions/004-lock-order.md).  Writers
-- hold the project and predicate locks shared and identity locks exclusive;
-- wipe and declare_predicate hold the project lock exclusive
-- (declare_predicate its predicate's too), as do add_alias and
-- upsert_entity when they re-key stored facts (adopt_named_objects; else
-- they hold it shared, as writers), so none of them races a write.  The
-- project lock is taken only through hold_project (below).
create or replace function memory_internal.project_lock_key(p_project uuid)
  returns bigint
  language sql immutable parallel safe
  as $$ select hashtextextended('chronomem.project:' || p_project::text, 0) $$;

-- A hold on a project: its write lock, shared (writers) or exclusive (wipe,
-- delete_project, declare_predicate, merges, splits, adoptions), then the
-- project looked up again, so that a caller which waited while
-- delete_project (which holds the lock exclusively) removed it finds it not
-- found, rather than meeting a foreign key's refusal of what it writes next
-- or working on (and auditing) a project that is gone.
create or replace function memory_internal.hold_project(
  p_project uuid, p_exclusive boolean default false)
  returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if p_exclusive then
    perform pg_advisory_xact_lock(memory_internal.project_lock_key(p_project));
  else
    perform pg_advisory_xact_lock_shared(memory_internal.project_lock_key(p_project));
  end if;
  perform memory_internal.project_org(p_project);
end
$$;
comment on function memory_internal.hold_project(uuid, boolean) is
  'Take the project''s write lock, shared (as every writer does) or exclusively (p_exclusive: no writer of the project runs meanwhile), and check the project still exists: not found (P0002) when it was deleted while this waited. Every taker of the project lock goes through it.';

-- The hold of a call that names p_names as an entity or alias (upsert_entity,
-- add_alias): exclusive when stored facts use one of them as a plain-name
-- object (adoption re-keys them), else shared, as a writer's.  Taken before
-- the write, so that two such calls queue instead of each holding it shared
-- and waiting for the other's upgrade.
create or replace function memory_internal.hold_project_to_name(
  p_org uuid, p_project uuid, p_names text[])
  returns void
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.hold_project(
    p_project, cardinality(memory_internal.auto_object_names(p_org, p_project, p_names)) > 0);
end
$$;
comment on function memory_internal.hold_project_to_name(uuid, uuid, text[]) is
  'hold_project for a call that makes p_names (normalized) an entity''s: exclusively when stored facts use one of them as a plain-name object, which adopting re-keys; else shared.';

create or replace function memory_internal.predicate_lock_key(p_project uuid, p_predicate text)
  returns bigint
  language sql immutable parallel safe
  as $$ select hashtextextended('chronomem.predicate:' || p_project::text || ':' || p_predicate, 0) $$;

create or replace function memory_internal.identity_lock_key(
  p_project uuid, p_subject uuid, p_predicate text, p_identity_object text)
  returns bigint
  language sql immutable parallel safe
  as $$
    select hashtextextended(
      'chronomem.identity:' || p_project::text || ':' || p_subject::text || ':'
      || p_predicate || ':' || p_identity_object, 0)
  $$;

-- Lock the given identities (subjects, predicates and identity objects
-- paired) in the one fixed order, so writers over the same identities queue
-- instead of deadlocking.  (assert_facts takes its batch's precomputed keys
-- in the same order itself.)
create or replace function memory_internal.lock_identities(
  p_project uuid, p_subjects uuid[], p_predicates text[], p_identity_objects text[])
  returns void
  language plpgsql
as $$
begin
  perform pg_advisory_xact_lock(keys.k)
     from (select distinct memory_internal.identity_lock_key(p_project, u.s, u.p, u.o) as k
             from unnest(p_subjects, p_predicates, p_identity_objects) u(s, p, o)
            order by 1) keys;
end
$$;

create or replace function memory_internal.cardinality(
  p_org uuid, p_project uuid, p_predicate text)
  returns text
  language sql stable
  as $$
    select coalesce(
      (select d.cardinality from memory.predicates d
        where d.org_id = p_org and d.project_id = p_project and d.predicate = p_predicate),
      'unknown')
  $$;

-- memory.declare_predicate: functions/055_conflicts.sql (declare_cardinality).

create or replace function memory.predicates_of(p_project uuid)
  returns table (predicate text, cardinality text, declared_at timestamptz)
  language sql stable
  as $$
    -- The org named as a value (the scope RLS applies): Citus routes the read.
    select d.predicate, d.cardinality, d.declared_at
    from memory.predicates d
   where d.org_id = memory_internal.current_org() and d.project_id = p_project
   order by d.predicate
  $$;
comment on function memory.predicates_of(uuid) is 'Declared predicates of a project with their cardinality.';
