-- The only two functions that read memory.facts (a lint in tests/py enforces
-- it): facts_at, the effective-at predicate every read of "what holds"
-- goes through, and fact_versions, every stored version for the history
-- and bookkeeping paths that need closed and retracted versions too.
-- Both are LANGUAGE sql without SET clauses so the planner inlines them and
-- pushes the caller's filters into the indexed scans
-- (docs/decisions/006-valid-time-and-record-time.md).

-- The valid window a fact had as the store believed it at p_known_at: the
-- new_range of the last range change recorded at or before that instant.
create or replace function memory_internal.range_believed(
  p_org uuid, p_fact uuid, p_known_at timestamptz)
  returns tstzrange
  language sql stable parallel safe
  as $$
    select e.new_range
    from memory.fact_events e
    where e.org_id = p_org and e.fact_id = p_fact
      and e.new_range is not null and e.occurred_at <= p_known_at
    order by e.occurred_at desc, e.event_id desc
    limit 1
  $$;

-- The instants a read asks about: p_at, else now(); p_known_at, else this
-- transaction's record-time instant (txn_instant, so a transaction sees
-- its own writes).  NULL and an omitted argument mean the same, for every
-- read that takes an instant: this is the one place that says so.
-- LANGUAGE sql without SET clauses, so that facts_at and edges_at, which
-- read it in FROM, inline it as a one-row subquery the planner pulls up:
-- each instant is then the expression below wherever it is used, and the
-- record-time default is a scalar subquery, run once per query.  (A
-- parameter default cannot hold a subquery: as a default expression it
-- would be evaluated for every row at each of its uses, a GUC read each
-- time, and a whole-project facts_at would take nearly twice as long:
-- docs/decisions/006-valid-time-and-record-time.md.)  A constant argument
-- folds the COALESCE away, so the planner estimates with the caller's own
-- instants.  PL/pgSQL readers (search, context, list_facts,
-- graph_neighbors) resolve both once, at their start.
create or replace function memory_internal.read_instants(
  p_at timestamptz, p_known_at timestamptz)
  returns table (at timestamptz, known_at timestamptz)
  language sql stable parallel safe
  as $$
    select coalesce(p_at, now()), coalesce(p_known_at, (select memory_internal.txn_instant()))
  $$;
comment on function memory_internal.read_instants(timestamptz, timestamptz) is
  'The instants a read asks about: p_at, else now(); p_known_at, else this transaction''s record-time instant (its own writes included). NULL and omitted mean the same for every read.';

-- The PL/pgSQL readers (search, context, list_facts, graph_neighbors) also
-- refuse an instant outside years 1..9999 UTC (infinity included): at
-- 'infinity' no window, open ones included, would hold, and an answer
-- about year 10000 or a year BC could not be written back as ISO 8601.
-- The bounds are memory_internal.instant_in_range's, written out so that
-- every role that reads can call this.  (facts_at and edges_at, inlined
-- into their callers' queries, cannot raise: they answer nothing.)
create or replace function memory_internal.check_instants(p_at timestamptz, p_known_at timestamptz)
  returns void
  language plpgsql immutable
as $$
declare
  v_bad text := case
    when not (p_at >= '0001-01-01 00:00:00+00' and p_at < '10000-01-01 00:00:00+00') then 'as_of'
    when not (p_known_at >= '0001-01-01 00:00:00+00' and p_known_at < '10000-01-01 00:00:00+00')
      then 'known_at' end;
begin
  if not isfinite(p_at) or not isfinite(p_known_at) then
    raise exception 'as_of and known_at must be finite' using errcode = 'invalid_parameter_value',
      detail = v_bad;
  elsif v_bad is not null then
    raise exception '% must be an instant in years 1 to 9999 (UTC)', v_bad
      using errcode = 'invalid_parameter_value', detail = v_bad;
  end if;
end
$$;
comment on function memory_internal.check_instants(timestamptz, timestamptz) is
  'Refuse an as_of (at) or known_at outside years 1..9999 UTC (infinity included), naming which (22023): what the PL/pgSQL readers call after read_instants.';

create or replace function memory.facts_at(
  p_project uuid,
  p_at timestamptz default null,
  p_known_at timestamptz default null)
  returns setof memory.facts
  language sql stable parallel safe
  as $$
    -- One SELECT, no UNION: inlined into a caller's query it is pulled up
    -- like a table scan, so the caller's filters and joins reach its
    -- indexes (the fact vector leg probes it per HNSW candidate).
    -- (Columns in table order: a migration that adds or drops a column of
    -- memory.facts must do the same here, or this file fails to apply.)
    select f.org_id, f.project_id, f.fact_id, f.fact_seq, f.subject_id, f.predicate,
           f.predicate_label, f.object_entity_id, f.object_literal, f.object_key,
           f.identity_object, f.content, f.content_key, f.confidence, f.source,
           f.source_episode_id, f.actor, f.valid_from, f.asserted_until,
           case when f.range_changed_at <= k.known_at then f.valid_range
                else memory_internal.range_believed(f.org_id, f.fact_id, k.known_at) end,
           case when f.range_changed_at <= k.known_at then f.valid_until
                else memory_internal.range_until(
                       memory_internal.range_believed(f.org_id, f.fact_id, k.known_at), f.valid_from)
           end,
           f.recorded_at, f.range_changed_at, f.invalid_at,
           f.support_count, f.last_seen_at, f.content_tsv, f.object_auto,
           f.subject_written, f.object_written
      from memory.facts f, memory_internal.read_instants(p_at, p_known_at) k
     -- The org named as well as implied by the policy (one condition to the
     -- planner): on Citus the org, read once into a variable, routes the query
     -- to the org's shard (docs/decisions/020-citus-forms-of-the-functions.md).
     where f.org_id = memory_internal.current_org()
       and f.project_id = p_project
       and f.recorded_at <= k.known_at
       and (
             -- Believed now and unchanged since known_at: the window as
             -- stored, tested as valid_from <= at < valid_until (same as
             -- valid_range @> at, but with statistics under RLS).
             (f.invalid_at is null and f.range_changed_at <= k.known_at
              and f.valid_from <= k.at and f.valid_until > k.at)
             -- Retracted or re-windowed after known_at (few rows, found by
             -- their own indexes): the window as believed then.
          or ((f.invalid_at > k.known_at or (f.invalid_at is null and f.range_changed_at > k.known_at))
              and case when f.range_changed_at <= k.known_at then f.valid_range
                       else memory_internal.range_believed(f.org_id, f.fact_id, k.known_at)
                  end @> k.at))
  $$;
comment on function memory.facts_at(uuid, timestamptz, timestamptz) is
  'The effective-at predicate: facts of a project that hold at world instant p_at, as the store believed at p_known_at (both default now, and NULL means now too; known_at''s now includes this transaction''s own writes). Every read of facts goes through it.';

create or replace function memory_internal.fact_versions(p_project uuid)
  returns setof memory.facts
  language sql stable parallel safe
  as $$
    select f.* from memory.facts f
     where f.org_id = memory_internal.current_org() and f.project_id = p_project
  $$;
comment on function memory_internal.fact_versions(uuid) is
  'Every stored version of a project''s facts, closed and retracted ones included: for history, the write path and edge bookkeeping. Reads of what holds use memory.facts_at.';

create or replace function memory.edges_at(
  p_project uuid,
  p_at timestamptz default null,
  p_known_at timestamptz default null)
  returns setof memory.edges
  language sql stable parallel safe
  as $$
    select e.*
    from memory.edges e, memory_internal.read_instants(p_at, p_known_at) k
    where e.org_id = memory_internal.current_org()  -- the org named, as in facts_at
      and e.project_id = p_project
      and e.recorded_at <= k.known_at
      and (e.expired_at is null or e.expired_at > k.known_at)
      and e.valid_range @> k.at
  $$;
comment on function memory.edges_at(uuid, timestamptz, timestamptz) is
  'Graph edges of a project effective at world instant p_at as believed at p_known_at (both default now, and NULL means now too, as in facts_at).';

create or replace function memory.readable_facts_at(
  p_project uuid,
  p_at timestamptz default null,
  p_known_at timestamptz default null)
  returns table (fact_id uuid, subject text, predicate text, object text, content text,
                 valid_from timestamptz, valid_until timestamptz, confidence real)
  language sql stable parallel safe
  as $$
    select f.fact_id, s.name, f.predicate_label, coalesce(o.name, f.object_literal), f.content,
           lower(f.valid_range), upper(f.valid_range), f.confidence
      from memory.facts_at(p_project, p_at, p_known_at) f
      join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
      left join memory.entities o on o.org_id = f.org_id and o.entity_id = f.object_entity_id
     -- A project the caller cannot see is "not found", as in every other
     -- function that takes one (a one-time test; facts_at, inlined
     -- everywhere, cannot raise).
     where memory_internal.project_org(p_project) is not null
       and s.org_id = memory_internal.current_org()  -- the org named, as in facts_at
     order by s.name, f.predicate_label, lower(f.valid_range)
  $$;
comment on function memory.readable_facts_at(uuid, timestamptz, timestamptz) is
  'facts_at with names instead of ids, for people reading in psql: subject, predicate, object, content and the window. A project of another org is not found (P0002).';
