-- The write state machine: assert_facts and the two pieces every writer
-- (assert, retract, contradict, expire, wipe) shares: restitch, which lays
-- one identity's facts out in world-time order, and sync_edges, which keeps
-- edges equal to the union of the windows of the facts asserting them
-- (docs/decisions/010-identity-exact-resolution-and-cardinality.md,
-- docs/decisions/006-valid-time-and-record-time.md).

-- Lay out the current (not retracted) facts of each given identity in
-- world-time order: each one's window is [valid_from, least(asserted_until,
-- start of the next one)).  Ties on valid_from go to the newer assertion
-- (higher fact_seq).  p_new are facts to add (at most one per identity,
-- newer than every stored one): they are inserted straight into their
-- place.  A p_new fact whose identity is not among the given ones is laid
-- out alone: the caller knows that identity has no stored current facts.
-- Order of writes: shrink stored windows, insert the new facts, grow
-- stored windows, so the exclusion constraint holds after each statement.
-- Every change is an event whose new_range lets facts_at answer for
-- earlier known_at instants (p_forget_old_ranges: wipe, whose events must
-- not keep the windows wiped facts had imposed).  p_layout_objects and
-- p_layout_subjects (paired with the identities) lay several identities
-- out as one, under the subject and object given: adopt_auto_objects and
-- merge_entities, before they re-key them.  Callers hold the identities'
-- locks.
create or replace function memory_internal.restitch(
  p_org uuid, p_project uuid,
  p_subjects uuid[], p_predicates text[], p_identity_objects text[],
  p_shrink_event text, p_actor text, p_reason text default null,
  p_new memory_internal.fact_input[] default '{}', p_source text default 'api',
  p_forget_old_ranges boolean default false, p_layout_objects text[] default null,
  p_layout_subjects uuid[] default null)
  returns table (fact_id uuid, subject_id uuid, predicate text, object_entity_id uuid,
                 old_range tstzrange, new_range tstzrange, closed_by uuid, grew boolean)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  -- Everything here is per-identity and per-row work through indexes,
  -- including the foreign-key checks the fact INSERT fires (planned once
  -- per session, inside this function).  A plan made while the project (or
  -- the install) is still small would otherwise keep scanning whole tables
  -- as they grow, until autovacuum re-analyzes them.
  set enable_seqscan = off
  -- And the identity btree's order without a sort: a range of the project in
  -- a smaller index, sorted, can cost less on the statistics of a project
  -- the planner does not know (see the per-identity read below).
  set enable_sort = off
  -- Generic plans, for every caller (assert_facts sets it too; retraction,
  -- close_fact and wipe do not): a custom plan for a project the
  -- statistics do not know reads each identity's versions through a range
  -- of the whole project (tests/py/test_write_plans.py;
  -- docs/decisions/007-plans-made-without-statistics.md).
  set plan_cache_mode = force_generic_plan
as $$
declare
  v_ids uuid[]; v_subjects uuid[]; v_predicates text[]; v_objects uuid[];
  v_old tstzrange[]; v_new tstzrange[]; v_closers uuid[]; v_grew boolean[]; v_is_new boolean[];
  v_shrinks integer; v_grows integer;
begin
  -- The layout is a function of the identities' facts (valid_from,
  -- asserted_until, order), which the writes below do not change: compute
  -- it once, new facts included.
  select array_agg(d.fact_id), array_agg(d.subject_id), array_agg(d.predicate),
         array_agg(d.object_entity_id), array_agg(d.valid_range), array_agg(d.want),
         array_agg(case when isempty(d.want) or upper(d.want) = d.next_from then d.next_id end),
         array_agg(not d.is_new and not d.valid_range @> d.want), array_agg(d.is_new),
         count(*) filter (where not d.is_new and d.valid_range @> d.want),
         count(*) filter (where not d.is_new and not d.valid_range @> d.want)
    into v_ids, v_subjects, v_predicates, v_objects, v_old, v_new, v_closers, v_grew, v_is_new,
         v_shrinks, v_grows
    from (
      select o.*,
             tstzrange(o.valid_from,
                       case when o.next_from is null then o.asserted_until
                            when o.asserted_until is null then o.next_from
                            else least(o.asserted_until, o.next_from) end) as want
        from (
          select v.*,
                 lead(v.valid_from) over w as next_from,
                 lead(v.fact_id) over w as next_id
            from (
              select f.fact_id, f.subject_id, f.predicate, ids.ms as layout_subject,
                     ids.m as layout_object,
                     f.object_entity_id, f.valid_range, f.valid_from, f.asserted_until, f.fact_seq,
                     false as is_new
                from (select distinct s, p, o, m, ms
                        from unnest(p_subjects, p_predicates, p_identity_objects,
                                    coalesce(p_layout_objects, p_identity_objects),
                                    coalesce(p_layout_subjects, p_subjects)) u(s, p, o, m, ms)) ids
               cross join lateral (
                 -- offset 0 keeps this a per-identity probe of the identity
                 -- btree whatever the statistics say; invalid_at is tested
                 -- outside it, or the planner may probe the exclusion
                 -- constraint's GiST instead, several times slower and
                 -- slower still as the project grows.  The order is that
                 -- btree's own (after the identity), and sorts are off: on
                 -- a table with no statistics, or a project the statistics
                 -- do not know, a range of the project in a smaller index
                 -- costs as little or less, but only this btree gives the
                 -- order without a sort.
                 select y.* from (
                   select x.* from memory_internal.fact_versions(p_project) x
                    where x.org_id = p_org and x.subject_id = ids.s and x.predicate = ids.p
                      and x.identity_object = ids.o
                   order by x.valid_from, x.fact_seq
                   offset 0) y
                  where y.invalid_at is null) f
              union all
              select n.fact_id, n.subject_id, n.predicate, n.subject_id, n.identity_object,
                     n.object_entity_id,
                     'empty'::tstzrange, n.valid_from, n.valid_to, null::bigint, true
                from unnest(p_new) n) v
          window w as (partition by v.layout_subject, v.predicate, v.layout_object
                       order by v.valid_from, v.is_new, v.fact_seq)) o) d
   where d.is_new or d.valid_range <> d.want;
  if v_ids is null then
    return;
  end if;

  -- (Each write only when it has rows: a statement costs its start-up
  -- even then.)  The rows are found by their keys (= any): as a join alone,
  -- a plan made with no statistics reads the org's whole key range.
  if v_shrinks > 0 then
    update memory.facts f set valid_range = c.want, range_changed_at = memory_internal.txn_instant()
      from unnest(v_ids, v_new, v_grew, v_is_new) c(id, want, grew, is_new)
     where f.org_id = p_org and f.fact_id = any (v_ids) and f.fact_id = c.id
       and not c.grew and not c.is_new;
  end if;

  insert into memory.facts (
    org_id, project_id, fact_id, subject_id, predicate, predicate_label, object_entity_id,
    object_literal, object_key, identity_object, content, content_key, confidence,
    source, source_episode_id, actor, valid_from, asserted_until, valid_range, object_auto,
    subject_written, object_written)
  select p_org, p_project, n.fact_id, n.subject_id, n.predicate, n.predicate_label,
         n.object_entity_id, case when n.object_entity_id is null then n.object_name end,
         n.object_key, n.identity_object, n.content, n.content_key, n.confidence, p_source,
         n.source_episode_id, p_actor, n.valid_from, n.valid_to, c.want,
         n.object_kind = 'auto' and n.object_entity_id is null,
         -- The names as written (an alias, maybe): what split_entity reads.
         n.subject_norm, case when n.object_entity_id is not null then n.object_norm end
    from unnest(p_new) n
    join unnest(v_ids, v_new) c(id, want) on c.id = n.fact_id
   order by n.idx;

  if v_grows > 0 then
    update memory.facts f set valid_range = c.want, range_changed_at = memory_internal.txn_instant()
      from unnest(v_ids, v_new, v_grew) c(id, want, grew)
     where f.org_id = p_org and f.fact_id = any (v_ids) and f.fact_id = c.id and c.grew;
  end if;

  insert into memory.fact_events
    (org_id, project_id, fact_id, event_type, old_fact_id, new_fact_id, old_range, new_range,
     actor, reason)
  select p_org, p_project, c.id,
         case when c.is_new then 'asserted' when c.grew then 'restored' else p_shrink_event end,
         case when c.is_new then null else c.id end,
         case when c.is_new then c.id when not c.grew then c.closer end,
         case when c.is_new or p_forget_old_ranges then null else c.old end,
         c.want, p_actor,
         case when c.is_new then null else p_reason end
    from unnest(v_ids, v_old, v_new, v_closers, v_grew, v_is_new) c(id, old, want, closer, grew, is_new);

  -- Stored facts whose window changed; new facts are reported by the caller.
  return query
  select c.id, c.s, c.p, c.o, c.old, c.want, c.closer, c.grew
    from unnest(v_ids, v_subjects, v_predicates, v_objects, v_old, v_new, v_closers, v_grew,
                v_is_new) c(id, s, p, o, old, want, closer, grew, is_new)
   where not c.is_new;
end
$$;
comment on function memory_internal.restitch(uuid, uuid, uuid[], text[], text[], text, text, text, memory_internal.fact_input[], text, boolean, text[], uuid[]) is
  'Lay out the given identities'' current facts (and p_new, inserted here) in world-time order and log every window change. Caller holds the identity locks.';

-- Expire the edges at the given row addresses (of rows the caller has
-- locked, so the addresses hold), at this transaction's instant.  Index
-- scans are off: a plan made while memory.edges looked empty would read
-- the org's edges by an index and test each address, where a TID scan
-- fetches each row.
create or replace function memory_internal.expire_edges(p_org uuid, p_rows tid[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set enable_indexscan = off
  set enable_bitmapscan = off
  set enable_seqscan = off
as $$
declare
  v_n integer;
begin
  update memory.edges e
     set expired_at = memory_internal.txn_instant()
   where e.ctid = any (p_rows) and e.org_id = p_org;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function memory_internal.expire_edges(uuid, tid[]) is
  'Expire the edges at these row addresses (rows the caller locked), by a TID scan; sync_edges'' expiry.';

-- Make the current edges of the given (source, target, relation) keys equal
-- to the maximal windows over which some current fact asserts them.  Edge
-- rows never change but for expired_at, so a window that closes expires
-- the old row and inserts the closed one, at this transaction's instant.
create or replace function memory_internal.sync_edges(
  p_org uuid, p_project uuid, p_sources uuid[], p_targets uuid[], p_relations text[])
  returns table (edges_expired integer, edges_inserted integer)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  -- Generic plans for every caller, and no sequential scan: as restitch.
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
as $$
declare
  v_src uuid[]; v_tgt uuid[]; v_rel text[]; v_range tstzrange[];
  v_gone tid[];
  v_expired integer;
  v_inserted integer;
begin
  -- The edges there should be: per key, each maximal window of the union
  -- of its current facts' windows.
  select array_agg(k.src), array_agg(k.tgt), array_agg(k.rel), array_agg(d.r)
    into v_src, v_tgt, v_rel, v_range
    from (select distinct s as src, t as tgt, r as rel
            from unnest(p_sources, p_targets, p_relations) u(s, t, r)
           where s is not null and t is not null and r is not null) k
   cross join lateral (
     select unnest(range_agg(v.valid_range)) as r
       from memory_internal.fact_versions(p_project) v
      where v.org_id = p_org and v.subject_id = k.src and v.predicate = k.rel
        and v.object_entity_id = k.tgt and v.invalid_at is null and not isempty(v.valid_range)
   ) d;

  -- Expire current edges of these keys that are not wanted, then insert
  -- the wanted ones that are missing (in that order: the exclusion
  -- constraint holds after each statement).  Both read each key's edges
  -- by one probe of edges_key_idx: as a join, a plan made while the
  -- planner guesses the project has one edge scans all of them for every
  -- key (tests/py/test_write_plans.py).  The probe is by the whole key,
  -- behind offset 0, with expired_at tested outside it (or the partial
  -- GiST indexes apply), in record-time order: with no statistics on
  -- memory.edges (a new install), edges_target_idx costs the same, and
  -- reads every edge into the key's target (a hub's are many); only
  -- edges_key_idx gives that order (sql/0019), so it wins the tie.
  -- The edges to expire are locked as they are found, and the update
  -- takes them by their row address (a TID scan, the one plan for it):
  -- an UPDATE joined to them by id is planned, on a memory.edges
  -- analyzed while empty, as a scan of the org's edges by edges_pkey
  -- repeated for every key, slower with every batch
  -- (docs/decisions/007-plans-made-without-statistics.md).
  -- The locks keep those addresses current until the update.
  v_gone := array(
    select c.ctid
      from (select distinct s, t, r from unnest(p_sources, p_targets, p_relations) u(s, t, r)) k
     cross join lateral (
       select y.ctid, y.valid_range, y.expired_at from memory.edges y
        where y.org_id = p_org and y.project_id = p_project
          and y.source_id = k.s and y.target_id = k.t and y.relation = k.r
        order by y.recorded_at
       offset 0) c
     where c.expired_at is null
       and not exists (select from unnest(v_src, v_tgt, v_rel, v_range) w(s, t, r, vr)
                        where w.s = k.s and w.t = k.t and w.r = k.r and w.vr = c.valid_range)
       for update of c);
  v_expired := memory_internal.expire_edges(p_org, v_gone);

  insert into memory.edges (org_id, project_id, source_id, target_id, relation, valid_range)
  select p_org, p_project, w.s, w.t, w.r, w.vr
    from unnest(v_src, v_tgt, v_rel, v_range) w(s, t, r, vr)
   where not exists (select from (select y.valid_range, y.expired_at from memory.edges y
                                   where y.org_id = p_org and y.project_id = p_project
                                     and y.source_id = w.s and y.target_id = w.t
                                     and y.relation = w.r
                                   order by y.recorded_at
                                  offset 0) c
                      where c.expired_at is null and c.valid_range = w.vr);
  get diagnostics v_inserted = row_count;
  return query select v_expired, v_inserted;
end
$$;
comment on function memory_internal.sync_edges(uuid, uuid, uuid[], uuid[], text[]) is
  'Make the current edges of the given keys equal to the union of the windows of the current facts asserting them (invariant 4).';

-- The latest record-time stamp on the edges from some subjects with some
-- relations (sources and relations paired): the edges half of the
-- record-time floor, for identities_floor and assert_facts (whose outcome
-- lookup reads the facts half itself, in its pass over the versions).
-- One probe of edges_key_idx per (source, relation): as a join, a plan
-- made on few statistics reads all the org's edges.  In the order of the
-- rest of that index's key, sorts off: planned while memory.edges looks
-- empty, the probe could take edges_target_idx by the org and relation
-- alone (a skip scan over the targets), reading every edge of that relation.
create or replace function memory_internal.edges_floor(
  p_org uuid, p_project uuid, p_sources uuid[], p_relations text[])
  returns timestamptz
  -- plpgsql with generic plans: as identities_floor.
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_sort = off
  set enable_incremental_sort = off
as $$
begin
  return (
    select max(greatest(e.recorded_at, e.expired_at))
      from (select distinct s, r from unnest(p_sources, p_relations) u(s, r)) k
     cross join lateral (
       select y.recorded_at, y.expired_at from memory.edges y
        where y.org_id = p_org and y.project_id = p_project and y.source_id = k.s
          and y.relation = k.r
        order by y.target_id, y.relation, y.recorded_at
       offset 0) e);
end
$$;
comment on function memory_internal.edges_floor(uuid, uuid, uuid[], text[]) is
  'The latest record-time stamp (recorded_at, expired_at) on the edges from the given sources with the paired relations: the edges half of the record-time floor.';

-- The latest record-time stamp on the facts and edges of some identities:
-- the floor for a writer's record-time instant once it holds their locks.
create or replace function memory_internal.identities_floor(
  p_org uuid, p_project uuid, p_subjects uuid[], p_predicates text[], p_identity_objects text[])
  returns timestamptz
  -- plpgsql, not sql: its plan is cached per session instead of planned per
  -- call (planning this query costs twice as much as running it); generic,
  -- so that it is (see restitch).
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_sort = off
as $$
begin
  return greatest(
    (select max(greatest(f.recorded_at, f.range_changed_at, f.invalid_at))
       from (select distinct s, p, o
               from unnest(p_subjects, p_predicates, p_identity_objects) u(s, p, o)) ids
      cross join lateral (
        select x.recorded_at, x.range_changed_at, x.invalid_at
          from memory_internal.fact_versions(p_project) x
         where x.org_id = p_org and x.subject_id = ids.s and x.predicate = ids.p
           and x.identity_object = ids.o
         order by x.valid_from, x.fact_seq  -- the identity btree's order: see restitch
        offset 0) f),
    memory_internal.edges_floor(p_org, p_project, p_subjects, p_predicates));
end
$$;

-- One error for one fact of a batch: reported, never raised.
create or replace function memory_internal.fact_error(p_idx integer, p_field text, p_message text)
  returns jsonb
  language sql immutable
  as $$
    select jsonb_build_object('index', p_idx, 'status', 'invalid',
                              'error', jsonb_build_object('field', p_field, 'message', p_message))
  $$;

-- Text of a JSON scalar (strings unquoted, numbers and booleans as text);
-- NULL for null, absent, objects and arrays.
create or replace function memory_internal.json_text(p_value jsonb) returns text
  language sql immutable
  as $$
    select case when jsonb_typeof(p_value) in ('string', 'number', 'boolean') then p_value #>> '{}' end
  $$;


-- The keys a fact may have, and the JSON type of each: a fact with any
-- other key (a typo such as valid_form would otherwise leave the fact
-- valid from now) or a field of another type (subject 123 would otherwise
-- be the entity "123") is refused, naming the key or field.  JSON null is
-- an absent optional field.  NULL when the shape is right; the first
-- unknown key (in key order) wins over a wrong type.  For assert_facts and
-- for the extraction model's facts (apply_extraction).
create or replace function memory_internal.fact_keys() returns text[]
  language sql immutable parallel safe
  as $$ select '{subject,predicate,object,content,object_type,subject_type,object_entity_type,source_episode_id,confidence,valid_from,valid_to}'::text[] $$;
comment on function memory_internal.fact_keys() is
  'The keys a fact of assert_facts may have, in the order their types are checked (fact_key_types).';
create or replace function memory_internal.fact_key_types() returns text[]
  language sql immutable parallel safe
  as $$ select '{string,string,string,string,string,string,string,string,number,string,string}'::text[] $$;
comment on function memory_internal.fact_key_types() is
  'The JSON type of each key of memory_internal.fact_keys(), in its order.';

create or replace function memory_internal.fact_shape_problem(p_fact jsonb) returns text[]
  language sql immutable parallel safe
  as $$
    select case
      when jsonb_typeof(p_fact) is distinct from 'object' then null
      when p_fact - memory_internal.fact_keys() <> '{}' then
        (select array[k, format('unknown key "%s" (a fact has %s)', k,
                                array_to_string(memory_internal.fact_keys(), ', '))]
           from jsonb_object_keys(p_fact - memory_internal.fact_keys()) k
          order by k limit 1)
      else
        (select array[k, format('%s must be a %s, not %s', k, t, jsonb_typeof(p_fact -> k))]
           from unnest(memory_internal.fact_keys(), memory_internal.fact_key_types()) with ordinality u(k, t, n)
          where jsonb_typeof(p_fact -> k) not in (t, 'null')
          order by n limit 1)
    end
  $$;
comment on function memory_internal.fact_shape_problem(jsonb) is
  'A fact''s first unknown key or wrongly typed field as {field, message}; NULL when every key is documented and of its JSON type (null = absent).';

-- Parse and validate a batch.  One row per element: the fact (resolved
-- fields still empty) or the field that is wrong and why.  The first
-- problem found is the one reported.
create or replace function memory_internal.parse_facts(
  p_org uuid, p_project uuid, p_facts jsonb, p_default_episode uuid)
  returns table (idx integer, item memory_internal.fact_input, field text, message text)
  -- plpgsql, not sql: its plan is cached per session instead of planned per call.
  language plpgsql volatile
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  return query
    with raw as (
      select (t.ord - 1)::integer as idx, t.e, jsonb_typeof(t.e) = 'object' as is_object
        from jsonb_array_elements(p_facts) with ordinality t(e, ord)
    ), f as materialized (
      -- materialized: the fields are plain columns below, so normalize_text
      -- calls on them are inlined.
      select r.idx, r.e, r.is_object,
             memory_internal.json_text(r.e -> 'subject') as subject,
             memory_internal.json_text(r.e -> 'predicate') as predicate,
             memory_internal.json_text(r.e -> 'object') as object,
             coalesce(memory_internal.json_text(r.e -> 'object_type'), 'auto') as object_kind,
             memory_internal.json_text(r.e -> 'content') as content,
             coalesce(jsonb_typeof(r.e -> 'content'), 'null') as content_type,
             coalesce(jsonb_typeof(r.e -> 'confidence'), 'null') as confidence_type,
             coalesce(jsonb_typeof(r.e -> 'source_episode_id'), 'null') as episode_type,
             coalesce(jsonb_typeof(r.e -> 'valid_from'), 'null') as from_type,
             coalesce(jsonb_typeof(r.e -> 'valid_to'), 'null') as to_type
        from raw r
    ), preds as (
      -- A batch names few predicates: each normalized once, not per fact.
      select d.predicate, memory.normalize_text(d.predicate) as predicate_norm
        from (select distinct f.predicate from f where f.predicate is not null) d
    ), g as materialized (
      -- materialized: each expensive expression once per fact, however
      -- often the checks below refer to it.
      select f.*,
             memory.normalize_text(f.subject) as subject_norm,
             pr.predicate_norm,
             memory.normalize_text(f.object) as object_norm,
             memory_internal.fact_shape_problem(f.e) as shape,
             case when f.from_type = 'string'
                  then memory_internal.try_timestamptz(f.e ->> 'valid_from') end as vf,
             case when f.to_type = 'string'
                  then memory_internal.try_timestamptz(f.e ->> 'valid_to') end as vt,
             case when f.episode_type = 'null' then p_default_episode
                  when f.episode_type = 'string' and memory_internal.is_uuid(f.e ->> 'source_episode_id')
                  then (f.e ->> 'source_episode_id')::uuid end as episode_id
        from f
        left join preds pr on pr.predicate = f.predicate
    ), h as (
      select g.*, ep.occurred_at as episode_at,
             case when g.vt in ('infinity') then null else g.vt end as valid_to
        from g
        left join memory.episodes ep
          on ep.org_id = p_org and ep.project_id = p_project and ep.episode_id = g.episode_id
    ), checked as (
      select h.*,
             -- World time: the fact's own window, else its episode's, else now.
             coalesce(h.vf, h.episode_at, now()) as valid_from,
             case
               when not h.is_object then array['fact', 'each fact must be a JSON object']
               when h.shape is not null then h.shape
               when coalesce(btrim(h.subject), '') = '' then
                 array['subject', 'subject is required and must be a non-empty string']
               when h.subject_norm = '' then array['subject', 'subject has no letters or digits']
               when length(h.subject) > 500 then array['subject', 'subject is longer than 500 characters']
               when coalesce(h.predicate_norm, '') = '' then
                 array['predicate', 'predicate is required and must contain letters or digits']
               when length(h.predicate) > 200 then
                 array['predicate', 'predicate is longer than 200 characters']
               when coalesce(h.object_norm, '') = '' then
                 array['object', 'object is required and must contain letters or digits']
               when length(h.object) > 2000 then array['object', 'object is longer than 2000 characters']
               when h.object_kind not in ('auto', 'entity', 'literal') then
                 array['object_type', 'object_type must be entity or literal']
               when h.content_type not in ('null', 'string') or (h.content_type = 'string' and btrim(h.content) = '') then
                 array['content', 'content must be a non-empty string']
               when length(h.content) > 8192 then array['content', 'content is longer than 8192 characters']
               when h.confidence_type not in ('null', 'number') then
                 array['confidence', 'confidence must be a number between 0 and 1']
               when h.confidence_type = 'number' and (h.e ->> 'confidence')::numeric not between 0 and 1 then
                 array['confidence', 'confidence must be a number between 0 and 1']
               when h.episode_type not in ('null', 'string') or (h.episode_type = 'string' and h.episode_id is null) then
                 array['source_episode_id', 'source_episode_id must be a UUID string']
               when h.episode_id is not null and h.episode_at is null then
                 array['source_episode_id', format('episode %s not found in this project', h.episode_id)]
               when h.from_type <> 'null' and (h.vf is null or not isfinite(h.vf)) then
                 array['valid_from', 'valid_from must be an ISO 8601 timestamp']
               when h.to_type <> 'null' and (h.vt is null or h.vt = '-infinity') then
                 array['valid_to', 'valid_to must be an ISO 8601 timestamp']
             end as problem
        from h
    )
    select c.idx,
           case when c.problem is null then row(
             c.idx, memory_internal.new_fact_id(), btrim(c.subject), c.subject_norm,
             memory_internal.json_text(c.e -> 'subject_type'),
             c.predicate_norm, btrim(c.predicate), btrim(c.object), c.object_norm, c.object_kind,
             memory_internal.json_text(c.e -> 'object_entity_type'),
             coalesce(btrim(c.content), btrim(c.subject) || ' ' || btrim(c.predicate) || ' ' || btrim(c.object)),
             memory.normalize_text(coalesce(c.content, c.subject || ' ' || c.predicate || ' ' || c.object)),
             coalesce((c.e ->> 'confidence')::real, 1),
             c.valid_from, c.valid_to, c.episode_id,
             null, null, null, null, null, null)::memory_internal.fact_input end,
           coalesce(c.problem[1], case when c.valid_to <= c.valid_from then 'valid_to' end),
           coalesce(c.problem[2], case when c.valid_to <= c.valid_from
                                       then 'valid_to must be later than valid_from' end)
      from checked c;
end
$$;

create or replace function memory.assert_facts(
  p_project uuid,
  p_facts jsonb,
  p_source text default 'api',
  p_source_episode uuid default null,
  p_override_tombstones boolean default false,
  p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
  -- One plan per statement and session, for this function and everything
  -- it calls (restitch, parse_facts, sync_edges, the triggers).  Every
  -- statement here is index probes keyed by the batch's arrays, whatever
  -- the batch size.  Custom plans are planned on every call (a quarter of
  -- a single-fact call) and are made from the project's statistics: for a
  -- project the statistics do not know yet (a new one, until autovacuum
  -- analyzes) they make the identity lookups scans of its whole
  -- range_changed index, several times slower per batch; a generic plan
  -- sees any project (tests/py/test_write_plans.py;
  -- docs/decisions/007-plans-made-without-statistics.md).
  set plan_cache_mode = force_generic_plan
  -- And a session's first plans, made on a new install's empty tables,
  -- must not scan them once they have grown, nor sort a range of the
  -- project for the identity btree's order (as restitch).
  set enable_seqscan = off
  set enable_sort = off
as $$
declare
  c_max_batch constant integer := 1000;
  v_org uuid := memory_internal.project_org(p_project);
  v_actor text := coalesce(p_actor, session_user);
  v_n integer;
  v_items memory_internal.fact_input[];
  v_round memory_internal.fact_input[];
  v_round_subjects uuid[];
  v_stored_s uuid[]; v_stored_p text[]; v_stored_o text[];
  -- Each fact's result, in no particular order (sorted by index at the end).
  v_out jsonb[];
  v_rounds integer;
  v_floor timestamptz;
  v_skip uuid[]; v_new uuid[]; v_lift_tomb uuid[]; v_lift_by uuid[];
  v_fresh memory_internal.fact_input[];
  v_pairs jsonb := '[]';
  v_edge_src uuid[] := '{}'; v_edge_tgt uuid[] := '{}'; v_edge_rel text[] := '{}';
  v_inserted integer := 0; v_superseded integer := 0; v_skipped integer := 0;
  v_refused integer := 0; v_invalid integer := 0;
  v_names text[]; v_found text[]; v_found_ids uuid[]; v_found_canon text[];
  v_created text[]; v_adopt_keys bigint[] := '{}';
  v_policy jsonb;
  v_red_kept integer[]; v_red_dropped jsonb; v_red_counts jsonb; v_red_fact_counts jsonb;
  v_result jsonb;
  -- Conflicts (functions/055_conflicts.sql): the batch's predicates of
  -- unknown cardinality, the subjects and predicates of their new claims,
  -- and claims held back by a confirmed fact (protect_confirmed).
  v_unknown text[];
  v_preds text[]; v_cards text[];
  v_touch_s uuid[] := '{}'; v_touch_p text[] := '{}';
  v_conflicts uuid[] := '{}';
  v_protect boolean;
  v_held_items memory_internal.fact_input[]; v_held_by uuid[];
  v_held integer := 0;
  v_h memory_internal.fact_input;
  v_conflict uuid;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'assert_facts needs READ COMMITTED isolation, not %',
      current_setting('transaction_isolation')
      using errcode = 'invalid_transaction_state',
            hint = 'Identity locks order the writers; an older snapshot cannot see the facts they wrote.';
  end if;
  if p_facts is null or jsonb_typeof(p_facts) <> 'array' then
    raise exception 'facts must be a JSON array of fact objects'
      using errcode = 'invalid_parameter_value';
  end if;
  v_n := jsonb_array_length(p_facts);
  if v_n > c_max_batch then
    raise exception 'a batch holds at most % facts, got %', c_max_batch, v_n
      using errcode = 'program_limit_exceeded';
  end if;
  if p_source is null or p_source not in ('api', 'extraction', 'import') then
    raise exception 'source must be api, extraction or import, not %', coalesce(p_source, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  perform memory_internal.hold_project(p_project);

  -- 0. The project's redaction policy (no policy: one probe): subject,
  -- object and content redacted before anything is parsed or stored; facts
  -- a drop rule matched are left out (reported at their index at the end).
  v_policy := memory_internal.redaction_policy(v_org, p_project);
  if v_policy is not null then
    select r.facts, r.kept, r.dropped, r.counts, r.fact_counts
      into p_facts, v_red_kept, v_red_dropped, v_red_counts, v_red_fact_counts
      from memory_internal.redact_facts(v_org, p_project, v_policy, p_facts) r;
  end if;

  -- 1. Parse and validate.  A bad fact is reported at its index and costs
  -- nothing else.
  select coalesce(array_agg(p.item order by p.idx) filter (where p.field is null), '{}'),
         coalesce(array_agg(memory_internal.fact_error(p.idx, p.field, p.message))
                    filter (where p.field is not null), '{}')
    into v_items, v_out
    from memory_internal.parse_facts(v_org, p_project, p_facts, p_source_episode) p;
  v_invalid := cardinality(v_out);

  -- 2. Predicates' shared locks (cardinality cannot change under us), then
  -- the entities the batch names: looked up once, the missing ones created
  -- in name order so concurrent batches never wait on each other in a
  -- cycle.
  perform pg_advisory_xact_lock_shared(k)
     from (select distinct memory_internal.predicate_lock_key(p_project, i.predicate) as k
             from unnest(v_items) i order by 1) keys;
  v_names := array(select i.subject_norm from unnest(v_items) i
                   union
                   select i.object_norm from unnest(v_items) i where i.object_kind <> 'literal');
  select coalesce(array_agg(f.normalized), '{}'), coalesce(array_agg(f.entity_id), '{}'),
         coalesce(array_agg(f.canonical), '{}')
    into v_found, v_found_ids, v_found_canon
    from memory_internal.find_entities(v_org, p_project, v_names) f;
  with created as (
    insert into memory.entities (org_id, project_id, name, normalized_name, entity_type)
    select v_org, p_project, d.name, d.norm, d.type
      from (select distinct on (n.norm) n.name, n.norm, n.type
              from (select i.subject_name, i.subject_norm, i.subject_type, i.idx from unnest(v_items) i
                    union all
                    select i.object_name, i.object_norm, i.object_entity_type, i.idx
                      from unnest(v_items) i where i.object_kind = 'entity') n(name, norm, type, idx)
             order by n.norm, n.idx) d
     where not exists (select from unnest(v_found) f(norm) where f.norm = d.norm)
     order by d.norm
    on conflict (org_id, project_id, normalized_name) do nothing
    returning normalized_name, entity_id)
  -- v_names: the entity names neither found nor created here, i.e. a name
  -- a concurrent batch created first (our insert skipped it).
  select v_found || coalesce(array_agg(c.normalized_name), '{}'),
         v_found_ids || coalesce(array_agg(c.entity_id), '{}'),
         v_found_canon || coalesce(array_agg(c.normalized_name), '{}'),
         array(select i.subject_norm from unnest(v_items) i
               union
               select i.object_norm from unnest(v_items) i where i.object_kind = 'entity'
               except
               select f.norm from unnest(v_found) f(norm)
               except
               select c2.normalized_name from created c2),
         coalesce(array_agg(c.normalized_name), '{}')
    into v_found, v_found_ids, v_found_canon, v_names, v_created
    from created c;
  -- Its row is visible to this new statement.  (The names go in as a
  -- variable: a subquery argument would keep find_entities from being
  -- inlined.)
  if cardinality(v_names) > 0 then
    select v_found || coalesce(array_agg(f.normalized), '{}'),
           v_found_ids || coalesce(array_agg(f.entity_id), '{}'),
           v_found_canon || coalesce(array_agg(f.canonical), '{}')
      into v_found, v_found_ids, v_found_canon
      from memory_internal.find_entities(v_org, p_project, v_names) f;
  end if;

  -- The batch's predicates and their cardinalities, read once (under the
  -- predicates' shared locks) for the identities and the conflict locks.
  select coalesce(array_agg(d.predicate), '{}'),
         coalesce(array_agg(memory_internal.cardinality(v_org, p_project, d.predicate)), '{}')
    into v_preds, v_cards
    from (select distinct i.predicate from unnest(v_items) i) d;

  -- 3. Resolve identities.  An entity object is keyed by its canonical
  -- name, so an alias or a plain string naming it share one identity.
  -- round = how many earlier facts of the batch share the identity, + 1.
  select coalesce(array_agg(row(
           x.idx, x.fact_id, x.subject_name, x.subject_norm, x.subject_type, x.predicate,
           x.predicate_label, x.object_name, x.object_norm, x.object_kind, x.object_entity_type,
           x.content, x.content_key, x.confidence, x.valid_from, x.valid_to, x.source_episode_id,
           x.subject_id, x.object_entity_id, x.object_key, x.identity_object,
           memory_internal.identity_lock_key(p_project, x.subject_id, x.predicate, x.identity_object),
           x.round
         )::memory_internal.fact_input order by x.idx), '{}'),
         coalesce(max(x.round), 0)
    into v_items, v_rounds
    from (select y.*, row_number() over (
                   partition by y.subject_id, y.predicate, y.identity_object order by y.idx)::integer
                   as round
    from (select i.idx, i.fact_id, i.subject_name, i.subject_norm, i.subject_type, i.predicate,
                 i.predicate_label, i.object_name, i.object_norm, i.object_kind,
                 i.object_entity_type, i.content, i.content_key, i.confidence, i.valid_from,
                 i.valid_to, i.source_episode_id, s.id as subject_id, o.id as object_entity_id,
                 coalesce(o.canonical, i.object_norm) as object_key,
                 case c.cardinality when 'one' then '' else coalesce(o.canonical, i.object_norm) end
                   as identity_object
            from unnest(v_items) i
            left join unnest(v_found, v_found_ids) s(norm, id) on s.norm = i.subject_norm
            left join unnest(v_found, v_found_ids, v_found_canon) o(norm, id, canonical)
              on i.object_kind <> 'literal' and o.norm = i.object_norm
            join unnest(v_preds, v_cards) c(predicate, cardinality) on c.predicate = i.predicate) y) x;

  -- Predicates of unknown cardinality: a second object of a subject opens
  -- a conflict, so their writers also hold the (subject, predicate) lock
  -- (the key a cardinality-one identity has) and see each other's facts.
  v_unknown := array(select u.p from unnest(v_preds, v_cards) u(p, c) where u.c = 'unknown');
  -- Extraction does not supersede a confirmed fact when the project says so
  -- (a resolution storing a held claim is not held again).
  v_protect := p_source = 'extraction'
               and coalesce(current_setting('chronomem.resolving', true), '') <> 'on'
               and exists (select from memory.projects p
                            where p.org_id = v_org and p.project_id = p_project and p.protect_confirmed);

  -- 4. Lock every identity of the batch in one fixed order, so concurrent
  -- batches over the same identities queue instead of deadlocking.
  -- The record-time floor (see begin_write) is read by round 1's lookup
  -- below, which visits every identity of the batch once anyway, and is
  -- fixed before anything is written.
  -- Stored objects written as a name this batch made an entity of become
  -- that entity's (adopt_auto_objects, in round 1): their identities are
  -- locked with the batch's, in the same order.
  if cardinality(v_created) > 0 then
    v_adopt_keys := array(
      select distinct memory_internal.identity_lock_key(
               p_project, a.subject_id, a.predicate, a.identity_object)
        from memory_internal.named_auto_objects(v_org, p_project, v_created) a);
  end if;
  perform pg_advisory_xact_lock(k)
     from (select i.lock_key as k from unnest(v_items) i
           union
           select memory_internal.identity_lock_key(p_project, i.subject_id, i.predicate, '')
             from unnest(v_items) i where i.predicate = any (v_unknown)
           union
           select unnest(v_adopt_keys)
           order by 1) keys;

  -- 5. Apply in rounds: round n holds the n-th fact of each identity in
  -- batch order, so within a round identities are distinct and the work is
  -- set-based, and a later fact of the batch is the newer assertion.
  for v_r in 1 .. v_rounds loop
    select array_agg(i order by i.idx), array_agg(distinct i.subject_id)
      into v_round, v_round_subjects
      from unnest(v_items) i where i.round = v_r;
    -- Each fact's outcome, in one statement: refused (a retracted claim,
    -- unless the caller overrides), skipped (a retry) or inserted.
    select coalesce(array_agg(l.existing_id) filter (where l.outcome = 'skipped'), '{}'),
           coalesce(array_agg(l.fact_id) filter (where l.outcome = 'inserted'), '{}'),
           -- The round's new claims, picked out once for everything below.
           coalesce(array_agg(l.item order by l.idx) filter (where l.outcome = 'inserted'), '{}'),
           -- The identities of new claims that have stored versions: the
           -- only ones restitch must read (stamp is null when there are none).
           coalesce(array_agg(l.subject_id) filter (where l.outcome = 'inserted' and l.stamp is not null), '{}'),
           coalesce(array_agg(l.predicate) filter (where l.outcome = 'inserted' and l.stamp is not null), '{}'),
           coalesce(array_agg(l.identity_object) filter (where l.outcome = 'inserted' and l.stamp is not null), '{}'),
           coalesce(array_agg(l.tomb_id) filter (where l.outcome = 'inserted' and l.tomb_id is not null), '{}'),
           coalesce(array_agg(l.fact_id) filter (where l.outcome = 'inserted' and l.tomb_id is not null), '{}'),
           coalesce(array_agg(l.item order by l.idx) filter (where l.outcome = 'held'), '{}'),
           coalesce(array_agg(l.held_by order by l.idx) filter (where l.outcome = 'held'), '{}'),
           v_refused + count(*) filter (where l.outcome = 'refused'),
           v_skipped + count(*) filter (where l.outcome = 'skipped'),
           -- The record-time floor: the identities' versions (above) and,
           -- in round 1, their subjects' edges of their predicates
           -- (edges_floor, the half identities_floor shares).
           greatest(max(l.stamp),
                    case when v_r = 1 then memory_internal.edges_floor(
                      v_org, p_project, array_agg(l.subject_id), array_agg(l.predicate)) end),
           v_out || coalesce(array_agg(
             case l.outcome
               when 'refused' then jsonb_build_object(
                 'index', l.idx, 'status', 'refused', 'reason', 'retracted', 'retracted_fact_id', l.tomb_id)
               else jsonb_build_object('index', l.idx, 'status', 'skipped', 'fact_id', l.existing_id)
             end) filter (where l.outcome in ('refused', 'skipped')), '{}')
      into v_skip, v_new, v_fresh, v_stored_s, v_stored_p, v_stored_o, v_lift_tomb, v_lift_by,
           v_held_items, v_held_by, v_refused, v_skipped, v_floor, v_out
      from (
        select q.*,
               case when q.tomb_id is not null and not p_override_tombstones then 'refused'
                    when q.held_by is not null then 'held'
                    when q.existing_id is not null then 'skipped'
                    else 'inserted' end as outcome
          from (
            select i as item, i.idx, i.fact_id, i.subject_id, i.predicate, i.identity_object,
                   t.fact_id as tomb_id, x.fact_id as existing_id, x.stamp, x.held_by
              from unnest(v_round) i
              -- A retracted claim stays refused unless the caller overrides.
              -- One scan of the round's subjects' live tombstones (usually
              -- none) instead of a probe per fact; the claim index is unique
              -- on the joined key, so a fact meets at most one.
              left join (
                select tb.subject_id, tb.predicate, tb.object_key, tb.fact_id
                  from memory.tombstones tb
                 where tb.org_id = v_org and tb.project_id = p_project
                   and tb.subject_id = any (v_round_subjects) and tb.lifted_at is null) t
                on t.subject_id = i.subject_id and t.predicate = i.predicate
               and t.object_key = i.object_key
              -- The same claim from the same instant is already stored: a retry.
              -- It only counts as support.  (A restatement from a later instant
              -- is a new fact: skipping it would lose its start if a fact
              -- arriving later cut the earlier window, and the end state would
              -- depend on arrival order.)  An open-ended claim repeats a stored
              -- one whatever end a contradiction or expiry has given that since.
              -- (The identity btree finds the versions, in its order, and
              -- invalid_at is tested after it: see restitch.)  The same pass
              -- over the identity's versions yields their latest record-time
              -- stamp for the floor, as identities_floor reads it (that
              -- function's edges half is read above, once per round).
              left join lateral (
                select (array_agg(v.fact_id) filter (
                          where v.invalid_at is null and v.valid_from = i.valid_from
                            and v.object_key = i.object_key and v.content_key = i.content_key
                            and (i.valid_to is null or v.asserted_until = i.valid_to)))[1] as fact_id,
                       max(greatest(v.recorded_at, v.range_changed_at, v.invalid_at)) as stamp,
                       -- A confirmed version of another object this claim
                       -- would close (protect_confirmed): the claim is held.
                       (array_agg(v.fact_id) filter (
                          where case when v_protect
                                     then v.invalid_at is null and v.object_key <> i.object_key
                                          and v.valid_from <= i.valid_from and v.valid_until > i.valid_from
                                          and memory_internal.fact_standing(v_org, v.fact_id) = 'confirmed'
                                     else false end))[1] as held_by
                  from (
                  select y.fact_id, y.fact_seq, y.invalid_at, y.valid_from, y.object_key, y.content_key,
                         y.asserted_until, y.recorded_at, y.range_changed_at, y.valid_until
                    from memory_internal.fact_versions(p_project) y
                   where y.org_id = v_org and y.subject_id = i.subject_id
                     and y.predicate = i.predicate and y.identity_object = i.identity_object
                   order by y.valid_from, y.fact_seq
                  offset 0) v) x on true) q) l;

    if v_r = 1 then
      perform memory_internal.begin_write(v_floor);
      if cardinality(v_adopt_keys) > 0 then
        perform memory_internal.adopt_auto_objects(v_org, p_project, v_created, v_adopt_keys, v_actor);
      end if;
    end if;
    -- Held claims: recorded in the conflict of their subject and predicate,
    -- beside the confirmed fact, instead of being stored.
    for k in 1 .. coalesce(cardinality(v_held_items), 0) loop
      v_h := v_held_items[k];
      v_conflict := memory_internal.hold_claim(
        v_org, p_project, v_h.subject_id, v_h.predicate, v_held_by[k],
        jsonb_strip_nulls(jsonb_build_object(
          'subject', v_h.subject_name, 'predicate', v_h.predicate_label, 'object', v_h.object_name,
          'object_type', v_h.object_kind, 'content', v_h.content, 'confidence', v_h.confidence,
          'valid_from', v_h.valid_from, 'valid_to', v_h.valid_to, 'subject_type', v_h.subject_type,
          'object_entity_type', v_h.object_entity_type, 'source', p_source)),
        v_h.source_episode_id, v_actor);
      v_conflicts := v_conflicts || v_conflict;
      v_held := v_held + 1;
      v_out := v_out || jsonb_build_object('index', v_h.idx, 'status', 'conflict',
                                           'conflict_id', v_conflict, 'held_by', v_held_by[k]);
    end loop;
    if cardinality(v_skip) > 0 then
      update memory.facts f set support_count = f.support_count + 1, last_seen_at = memory_internal.txn_instant()
       where f.org_id = v_org and f.fact_id = any (v_skip);
    end if;
    continue when cardinality(v_new) = 0;

    if cardinality(v_lift_tomb) > 0 then
      update memory.tombstones t set lifted_at = memory_internal.txn_instant(), lifted_by = l.by
        from unnest(v_lift_tomb, v_lift_by) l(tomb, by)
       where t.org_id = v_org and t.fact_id = l.tomb;
    end if;

    -- restitch inserts the new claims into their place in world time and
    -- closes whatever they follow: count them, pair them with their
    -- closers (in restitch's order), note their edges and the new claims'
    -- results (each with what it closed), all in this one statement.  It
    -- reads the stored versions only of the identities that have some (a
    -- new identity's claim is laid out alone; the locks keep it new).
    with c as materialized (
      select x.*
        from memory_internal.restitch(
          v_org, p_project, v_stored_s, v_stored_p, v_stored_o,
          'superseded', v_actor, null, v_fresh, p_source) with ordinality x),
    closed as (
      select c.closed_by, jsonb_agg(c.fact_id order by c.ordinality) as ids
        from c where c.closed_by is not null
       group by c.closed_by)
    select v_superseded + (select count(*) from c),
           v_pairs || coalesce((select jsonb_agg(jsonb_build_object(
                                         'old_fact_id', c.fact_id, 'new_fact_id', c.closed_by)
                                       order by c.ordinality)
                                  from c), '[]'),
           v_edge_src || array(select c.subject_id from c where c.object_entity_id is not null
                               order by c.ordinality)
                      || array(select i.subject_id from unnest(v_fresh) i
                                where i.object_entity_id is not null),
           v_edge_tgt || array(select c.object_entity_id from c where c.object_entity_id is not null
                               order by c.ordinality)
                      || array(select i.object_entity_id from unnest(v_fresh) i
                                where i.object_entity_id is not null),
           v_edge_rel || array(select c.predicate from c where c.object_entity_id is not null
                               order by c.ordinality)
                      || array(select i.predicate from unnest(v_fresh) i
                                where i.object_entity_id is not null),
           v_out || array(select jsonb_build_object(
                                   'index', i.idx, 'status', 'inserted', 'fact_id', i.fact_id,
                                   'superseded', coalesce(d.ids, '[]'))
                            from unnest(v_fresh) i
                            left join closed d on d.closed_by = i.fact_id)
      into v_superseded, v_pairs, v_edge_src, v_edge_tgt, v_edge_rel, v_out;
    v_inserted := v_inserted + cardinality(v_new);
    v_touch_s := v_touch_s || array(select i.subject_id from unnest(v_fresh) i
                                     where i.predicate = any (v_unknown) order by i.idx);
    v_touch_p := v_touch_p || array(select i.predicate from unnest(v_fresh) i
                                     where i.predicate = any (v_unknown) order by i.idx);
  end loop;

  -- A new claim of an unknown predicate beside another current object of
  -- its subject: the conflict opens (or grows) in this transaction.
  if cardinality(v_touch_s) > 0 then
    v_conflicts := v_conflicts || memory_internal.detect_conflicts(
      v_org, p_project, v_touch_s, v_touch_p, v_actor, 'unknown_cardinality', p_source_episode);
  end if;

  if cardinality(v_edge_src) > 0 then
    perform memory_internal.sync_edges(v_org, p_project, v_edge_src, v_edge_tgt, v_edge_rel);
  end if;

  perform memory_internal.bump_counters(
    v_org, p_project,
    array['facts_inserted', 'facts_superseded', 'facts_skipped', 'facts_refused', 'facts_invalid'],
    array[v_inserted, v_superseded, v_skipped, v_refused, v_invalid]);

  v_result := jsonb_build_object(
    'inserted', v_inserted, 'superseded', v_superseded, 'skipped', v_skipped,
    'refused', v_refused, 'invalid', v_invalid,
    'superseded_pairs', v_pairs,
    'results', to_jsonb(array(select x from unnest(v_out) x order by (x ->> 'index')::integer)));
  -- Conflicts, when the batch opened, joined or was held in any.
  if cardinality(v_conflicts) > 0 then
    v_result := v_result || jsonb_build_object(
      'held', v_held, 'conflicts', to_jsonb(array(select distinct u from unnest(v_conflicts) u order by 1)));
  end if;
  if v_policy is not null then
    v_result := memory_internal.redacted_facts_result(
      v_result, v_red_kept, v_red_dropped, v_red_counts, v_red_fact_counts);
  end if;
  return v_result;
end
$$;
comment on function memory.assert_facts(uuid, jsonb, text, uuid, boolean, text) is
  'The one write path for facts. p_facts: JSON array of {subject, predicate, object, object_type?, content?, confidence?, valid_from?, valid_to?, source_episode_id?, subject_type?, object_entity_type?}: strings but confidence (a number), null = absent; any other key or JSON type makes the fact invalid, naming it. object_type: entity (created if missing), literal, or auto (default: the entity of that name or alias, else a literal that an entity or alias of that name created later takes over). Each fact is inserted (closing what it follows in world time), skipped (a retry: the same claim with the same valid_from is stored; a restatement from another instant is a new version), refused (a retracted claim: the tombstone covers the claim (subject, predicate, object), not the identity; p_override_tombstones lifts it) or invalid (reported with its field); under the project''s protect_confirmed, an extraction claim that would supersede a confirmed fact is held in a conflict instead (status conflict, counted as held). A new claim of a predicate of unknown cardinality (undeclared) beside another current object of its subject opens or joins that subject''s conflict (the answer then adds conflicts, their ids, and held). Instants are ISO 8601 in years 1..9999 UTC (memory_internal.try_timestamptz); zone-less ones are UTC. Under a redaction policy (memory.set_redaction_rule) subject, object and content are redacted first: a fact a drop rule matches is dropped (its result says so), a refuse rule fails the call; the answer adds dropped and redactions (counts per detector, also per fact). Returns counts, superseded_pairs and a per-fact result.';
