-- The HTTP and MCP layer's calls of the conflict inbox, reviews and the
-- cardinality log (schema memory_http; functions/055_conflicts.sql).  Each
-- checks the key's permission for its call (memory_http.call_permissions)
-- and makes one call of the SQL API.  CREATE OR REPLACE only.

create or replace function memory_http.list_conflicts(
  p_project uuid, p_status text default 'open', p_predicate text default null,
  p_limit integer default 50, p_before timestamptz default null, p_before_id uuid default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_rows jsonb;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.list_conflicts'), p_project);
  select coalesce(jsonb_agg(to_jsonb(c) order by c.opened_at desc, c.conflict_id desc), '[]') into v_rows
    from memory.list_conflicts(p_project, p_status, p_predicate, p_limit, p_before, p_before_id) c;
  return jsonb_build_object(
    'conflicts', v_rows,
    'next_before', case when jsonb_array_length(v_rows) = p_limit
                        then v_rows -> (p_limit - 1) -> 'opened_at' end,
    'next_before_id', case when jsonb_array_length(v_rows) = p_limit
                           then v_rows -> (p_limit - 1) -> 'conflict_id' end);
end
$$;
comment on function memory_http.list_conflicts(uuid, text, text, integer, timestamptz, uuid) is
  'API: memory.list_conflicts as JSON {conflicts, next_before, next_before_id} (needs project:read).';

create or replace function memory_http.get_conflict(p_project uuid, p_conflict uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.get_conflict'), p_project);
  return memory.get_conflict(p_project, p_conflict);
end
$$;
comment on function memory_http.get_conflict(uuid, uuid) is
  'API: memory.get_conflict (needs project:read).';

create or replace function memory_http.resolve_conflict(
  p_project uuid, p_conflict uuid, p_resolution text, p_member uuid default null,
  p_at timestamptz default null, p_reason text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.resolve_conflict'), p_project);
  -- resolve_conflict writes the audit row itself.
  return memory.resolve_conflict(p_project, p_conflict, p_resolution, p_member, p_at, p_reason,
                                 memory_internal.api_actor());
end
$$;
comment on function memory_http.resolve_conflict(uuid, uuid, text, uuid, timestamptz, text) is
  'API: memory.resolve_conflict as the authorized key (needs memory:review, which project:write does not imply); audited.';

create or replace function memory_http.review_fact(
  p_project uuid, p_fact uuid, p_standing text, p_reason text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.review_fact'), p_project);
  -- review_fact writes the audit row itself.
  return memory.review_fact(p_project, p_fact, p_standing, p_reason, memory_internal.api_actor());
end
$$;
comment on function memory_http.review_fact(uuid, uuid, text, text) is
  'API: memory.review_fact as the authorized key (needs memory:review); audited.';

create or replace function memory_http.suggest_cardinality(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.suggest_cardinality'), p_project);
  return jsonb_build_object('suggestions', coalesce((
    select jsonb_agg(to_jsonb(s) order by s.predicate) from memory.suggest_cardinality(p_project) s), '[]'));
end
$$;
comment on function memory_http.suggest_cardinality(uuid) is
  'API: memory.suggest_cardinality as JSON {suggestions} (needs configuration:read).';

create or replace function memory_http.conflict_policy(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.conflict_policy'), p_project);
  return memory.conflict_policy(p_project);
end
$$;
comment on function memory_http.conflict_policy(uuid) is
  'API: memory.conflict_policy (needs configuration:read).';

-- The policy as a JSON object of the settings to change; another key or a
-- value of the wrong JSON type is refused, naming it.
create or replace function memory_http.set_conflict_policy(p_project uuid, p_policy jsonb)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  k text;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.set_conflict_policy'), p_project);
  if p_policy is null or jsonb_typeof(p_policy) <> 'object' then
    raise exception 'the policy must be a JSON object' using errcode = 'invalid_parameter_value';
  end if;
  for k in select jsonb_object_keys(p_policy) loop
    if k not in ('contradictions', 'protect_confirmed', 'learn_cardinality', 'learn_threshold',
                 'learn_min_evidence') then
      raise exception 'unknown policy setting %', quote_literal(k)
        using errcode = 'invalid_parameter_value', detail = k;
    end if;
    if jsonb_typeof(p_policy -> k) <> 'null' and jsonb_typeof(p_policy -> k) <> (case k
         when 'contradictions' then 'string' when 'learn_threshold' then 'number'
         when 'learn_min_evidence' then 'number' else 'boolean' end) then
      raise exception '% has the wrong JSON type (%)', k, jsonb_typeof(p_policy -> k)
        using errcode = 'invalid_parameter_value', detail = k;
    end if;
  end loop;
  if jsonb_typeof(p_policy -> 'learn_min_evidence') = 'number'
     and (p_policy ->> 'learn_min_evidence')::numeric <> trunc((p_policy ->> 'learn_min_evidence')::numeric) then
    raise exception 'learn_min_evidence must be a whole number' using errcode = 'invalid_parameter_value',
      detail = 'learn_min_evidence';
  end if;
  -- set_conflict_policy writes the audit row itself.
  return memory.set_conflict_policy(
    p_project, p_policy ->> 'contradictions', (p_policy ->> 'protect_confirmed')::boolean,
    (p_policy ->> 'learn_cardinality')::boolean, (p_policy ->> 'learn_threshold')::real,
    (p_policy ->> 'learn_min_evidence')::numeric::integer, memory_internal.api_actor());
end
$$;
comment on function memory_http.set_conflict_policy(uuid, jsonb) is
  'API: memory.set_conflict_policy from a JSON object of the settings to change (needs configuration:write); audited.';

create or replace function memory_http.predicate_changes(p_project uuid, p_limit integer default 50)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.predicate_changes'), p_project);
  return jsonb_build_object('changes', coalesce((
    select jsonb_agg(to_jsonb(c) order by c.change_id desc)
      from memory.predicate_changes(p_project, p_limit) c), '[]'));
end
$$;
comment on function memory_http.predicate_changes(uuid, integer) is
  'API: memory.predicate_changes as JSON {changes} (needs configuration:read).';

create or replace function memory_http.undo_predicate_change(p_project uuid, p_change bigint)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.undo_predicate_change'), p_project);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'predicate.undo',
    'predicate_change:' || p_change);
  return memory.undo_predicate_change(p_project, p_change, memory_internal.api_actor());
end
$$;
comment on function memory_http.undo_predicate_change(uuid, bigint) is
  'API: memory.undo_predicate_change as the authorized key (needs configuration:write); audited.';
