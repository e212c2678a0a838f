-- The change feed: what the store came to believe in a span of record time.
-- CREATE OR REPLACE only: re-applied on every migrate.

-- What the store came to believe in a span of record time: every event of
-- the project's facts (asserted, superseded, contradicted, expired,
-- retracted, restored) that occurred after p_since and at or before
-- p_until, oldest first, with the fact's triple -- "what changed since my
-- last session?".  p_until NULL is now (this transaction's record-time
-- instant, as known_at's default); p_since NULL is the beginning.  An event
-- occurs at its writer's record-time instant (its transaction's start,
-- memory_internal.begin_write), and becomes visible when that transaction
-- commits: a span that ends now can still gain the events of writers
-- running now, so a reader that polls keeps p_until a little in the past
-- or reads again from a little before its last one.  Wiped facts take
-- their events with them.  A keyset page on (occurred_at, event_id): pass
-- next_cursor as p_after, with the same span.  Read under row-level
-- security, as the caller; the span is read through fact_events_project_idx.
create or replace function memory.fact_changes(
  p_project uuid,
  p_since timestamptz default null,
  p_until timestamptz default null,
  p_after text default null,
  p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_until timestamptz;
  v_lo timestamptz := coalesce(p_since, '-infinity');
  v_after jsonb;
  v_after_at timestamptz;
  v_after_id bigint;
  v_rows jsonb;
  v_n integer;
  v_last jsonb;
begin
  select i.known_at into v_until from memory_internal.read_instants(null, p_until) i;
  if not isfinite(v_until) then
    raise exception 'until must be finite' using errcode = 'invalid_parameter_value', detail = 'until';
  end if;
  if v_lo > v_until then
    raise exception 'since (%) is later than until (%)', v_lo, v_until
      using errcode = 'invalid_parameter_value', detail = 'since';
  end if;
  perform memory_internal.check_limit(p_limit, 1000);
  if p_after is not null then
    begin
      v_after := convert_from(decode(p_after, 'hex'), 'UTF8')::jsonb;
      v_after_at := (v_after ->> 0)::timestamptz;
      v_after_id := (v_after ->> 1)::bigint;
    exception when others then
      v_after_id := null;
    end;
    if v_after_at is null or v_after_id is null then
      raise exception 'cursor is not a next_cursor of this list' using errcode = 'invalid_parameter_value',
        detail = 'cursor';
    end if;
    v_lo := greatest(v_lo, v_after_at);
  end if;
  -- One row more than asked says whether there is a next page.  The span's
  -- start is an index condition (occurred_at >= v_lo: timestamps compare
  -- leakproof under row-level security, a row comparison would not); the
  -- strict bound and the cursor's tie-break on event_id are filters.
  select coalesce(jsonb_agg(memory_internal.fact_event_json(
                    e.event_id, e.occurred_at, e.event_type, e.fact_id, e.old_fact_id, e.new_fact_id,
                    e.old_range, e.new_range, e.actor, e.reason, s.name, v.predicate_label,
                    coalesce(o.name, v.object_literal), v.content)
                  order by e.occurred_at, e.event_id), '[]'),
         count(*)
    into v_rows, v_n
    -- The page's events first (a writer's batch shares one instant: the
    -- sort within it reads the batch's events, not their facts), then each
    -- one's fact by its key (offset 0: a probe per event; as a join, a plan
    -- made without statistics read the project's facts for every event).
    from (select e.*
            from memory.fact_events e
           where e.org_id = v_org and e.project_id = p_project
             and e.occurred_at >= v_lo and e.occurred_at <= v_until
             and e.occurred_at > coalesce(p_since, '-infinity')
             and (v_after_id is null or e.occurred_at > v_after_at or e.event_id > v_after_id)
           order by e.occurred_at, e.event_id
           limit p_limit + 1) e
   -- (The org as a value in each, not a column of the row before: on Citus
   -- that routes the statement to the org's shard.)
   cross join lateral (
     select x.org_id, x.subject_id, x.object_entity_id, x.predicate_label, x.object_literal, x.content
       from memory_internal.fact_versions(p_project) x
      where x.org_id = v_org and x.fact_id = e.fact_id
     offset 0) v
   -- And its names by key (as a join, the object's was a hash of the
   -- org's every entity on a page of a hundred events).
   cross join lateral (
     select n.name from memory.entities n where n.org_id = v_org and n.entity_id = v.subject_id
     offset 0) s
    left join lateral (
     select n.name from memory.entities n where n.org_id = v_org and n.entity_id = v.object_entity_id
     offset 0) o on true;
  if v_n > p_limit then
    v_rows := v_rows - p_limit;
    v_last := v_rows -> (p_limit - 1);
  end if;
  return jsonb_build_object(
    'changes', v_rows,
    'next_cursor', case when v_last is not null then encode(convert_to(
                     jsonb_build_array(v_last -> 'occurred_at', v_last -> 'event_id')::text, 'UTF8'), 'hex') end,
    'since', p_since, 'until', v_until);
end
$$;
comment on function memory.fact_changes(uuid, timestamptz, timestamptz, text, integer) is
  'What the store came to believe between two record-time instants: every event of the project''s facts (asserted, superseded, contradicted, expired, retracted, restored) after p_since (NULL: the beginning) and at or before p_until (NULL: now), oldest first, each with its fact''s subject, predicate, object and content; p_limit (1-1000) a page, next_cursor as p_after for the next. An event shows once its writer commits, stamped with its writer''s record-time instant: a span ending now can still gain events of writers running now.';
