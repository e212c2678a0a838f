-- JSON reads of a project (keyset-paged) for agents, analysts and the HTTP
-- API's routes: facts, sessions, messages, the graph, entities, communities.
-- Invoker rights, read under row-level security.  CREATE OR REPLACE only: re-applied on every migrate.

--------------------------------------------------------------------------
-- Reads for the API (JSON, keyset-paged).  Timestamps come out in UTC.
--------------------------------------------------------------------------
create or replace function memory_internal.check_limit(p_limit integer, p_max integer) returns void
  language plpgsql immutable
as $$
begin
  if p_limit is null or p_limit < 1 or p_limit > p_max then
    raise exception 'limit must be between 1 and %', p_max
      using errcode = 'invalid_parameter_value', detail = 'limit';
  end if;
end
$$;


create or replace function memory.get_project(p_project uuid)
  returns table (project_id uuid, org_id uuid, name text, created_at timestamptz)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.project_org(p_project);
  return query select p.project_id, p.org_id, p.name, p.created_at
                 from memory.projects p where p.project_id = p_project;
end
$$;
comment on function memory.get_project(uuid) is 'A project of the current org; no_data_found otherwise.';


create or replace function memory.list_facts(
  p_project uuid,
  p_at timestamptz default null,
  p_known_at timestamptz default null,
  p_subject text default null,
  p_predicate text default null,
  p_after uuid default null,
  p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_at timestamptz;
  v_known timestamptz;
  v_subject uuid;
  v_facts jsonb;
  v_n integer;
begin
  -- NULL instants mean now, as in every read.
  select i.at, i.known_at into v_at, v_known
    from memory_internal.read_instants(p_at, p_known_at) i;
  perform memory_internal.check_instants(v_at, v_known);
  perform memory_internal.check_limit(p_limit, 1000);
  if p_subject is not null then
    v_subject := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
    if v_subject is null then
      return jsonb_build_object('facts', '[]'::jsonb, 'next_cursor', null,
                                'as_of', v_at, 'known_at', v_known);
    end if;
  end if;
  -- One row more than asked says whether there is a next page.
  select coalesce(jsonb_agg(x.j order by x.fact_id), '[]'), count(*) into v_facts, v_n
    from (select f.fact_id, jsonb_build_object(
                   'fact_id', f.fact_id, 'subject', s.name, 'subject_id', f.subject_id,
                   'predicate', f.predicate_label, 'object', coalesce(o.name, f.object_literal),
                   'object_entity_id', f.object_entity_id, 'content', f.content,
                   'valid_from', lower(f.valid_range), 'valid_until', upper(f.valid_range),
                   'confidence', f.confidence, 'source', f.source,
                   'source_episode_id', f.source_episode_id, 'recorded_at', f.recorded_at) as j
            from memory.facts_at(p_project, v_at, v_known) f
            join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
            left join memory.entities o on o.org_id = f.org_id and o.entity_id = f.object_entity_id
           where (v_subject is null or f.subject_id = v_subject)
             and (p_predicate is null or f.predicate = memory.normalize_text(p_predicate))
             and (p_after is null or f.fact_id > p_after)
           order by f.fact_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_facts := v_facts - p_limit;
  end if;
  return jsonb_build_object(
    'facts', v_facts,
    'next_cursor', case when v_n > p_limit then v_facts -> (p_limit - 1) -> 'fact_id' end,
    'as_of', v_at, 'known_at', v_known);
end
$$;
comment on function memory.list_facts(uuid, timestamptz, timestamptz, text, text, uuid, integer) is
  'Facts effective at p_at as believed at p_known_at (defaults: now), optionally of one subject and/or predicate, ordered by fact_id and paged by keyset: pass next_cursor as p_after for the next page.';

-- A fact event as the API shows it (windows as bounds): fact_history's
-- answer and fact_changes' share it.
create or replace function memory_internal.fact_event_json(
  p_event_id bigint, p_occurred_at timestamptz, p_event_type text, p_fact uuid,
  p_old_fact uuid, p_new_fact uuid, p_old_range tstzrange, p_new_range tstzrange,
  p_actor text, p_reason text, p_subject text, p_predicate text, p_object text, p_content text)
  returns jsonb
  -- Stable, as jsonb_build_object of a timestamp is (the time zone): so it
  -- is inlined into the caller's query instead of called per event.
  language sql stable parallel safe
  as $$
    select jsonb_build_object(
             'event_id', p_event_id, 'occurred_at', p_occurred_at, 'event_type', p_event_type,
             'fact_id', p_fact, 'old_fact_id', p_old_fact, 'new_fact_id', p_new_fact,
             'old_valid_from', lower(p_old_range), 'old_valid_until', upper(p_old_range),
             'new_valid_from', lower(p_new_range), 'new_valid_until', upper(p_new_range),
             'new_window_empty', coalesce(isempty(p_new_range), false),
             'actor', p_actor, 'reason', p_reason, 'subject', p_subject,
             'predicate', p_predicate, 'object', p_object, 'content', p_content)
  $$;
comment on function memory_internal.fact_event_json(bigint, timestamptz, text, uuid, uuid, uuid, tstzrange, tstzrange, text, text, text, text, text, text) is
  'A fact event as the API shows it, windows as bounds (api_fact_history, fact_changes).';


-- The sessions of a project by their external id (a keyset page: the
-- cursor is the last id), each with its last message's sequence number
-- and time: one probe of the (session, seq) key per session, however long
-- the sessions are.
create or replace function memory.list_sessions(
  p_project uuid, p_after text default null, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_sessions jsonb;
  v_n integer;
  v_last text;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select coalesce(jsonb_agg(x.j order by x.external_id), '[]'), count(*),
         max(x.external_id) filter (where x.rn = p_limit)
    into v_sessions, v_n, v_last
    from (select s.external_id, row_number() over (order by s.external_id) as rn,
                 jsonb_build_object(
                   'session_id', s.session_id, 'session', s.external_id,
                   'metadata', s.metadata, 'created_at', s.created_at,
                   'last_seq', l.seq, 'last_message_at', l.occurred_at) as j
            from memory.sessions s
            left join lateral (
              select e.seq, e.occurred_at from memory.episodes e
               where e.org_id = s.org_id and e.session_id = s.session_id
               order by e.seq desc limit 1) l on true
           where s.org_id = v_org and s.project_id = p_project
             and (p_after is null or s.external_id > p_after)
           order by s.external_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_sessions := v_sessions - p_limit;
  end if;
  return jsonb_build_object('sessions', v_sessions,
                            'next_cursor', case when v_n > p_limit then v_last end);
end
$$;
comment on function memory.list_sessions(uuid, text, integer) is
  'A project''s sessions by external id, each with its metadata, creation time and its last message''s sequence number and time (null when it has none), paged by keyset: pass next_cursor as p_after.';

create or replace function memory.session_messages(
  p_project uuid, p_session text, p_after_seq integer default 0, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  s memory.sessions;
  v_messages jsonb;
  v_n integer;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select * into s from memory.sessions x
   where x.org_id = v_org and x.project_id = p_project and x.external_id = btrim(p_session);
  if s.session_id is null then
    raise exception 'session "%" not found in project %', p_session, p_project
      using errcode = 'no_data_found';
  end if;
  select coalesce(jsonb_agg(x.j order by x.seq), '[]'), count(*) into v_messages, v_n
    from (select e.seq, jsonb_build_object(
                   'episode_id', e.episode_id, 'seq', e.seq, 'role', e.role, 'content', e.content,
                   'metadata', e.metadata, 'occurred_at', e.occurred_at,
                   'created_at', e.created_at, 'token_count', e.token_count) as j
            from memory.episodes e
           where e.org_id = v_org and e.session_id = s.session_id
             and e.seq > coalesce(p_after_seq, 0)
           order by e.seq
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_messages := v_messages - p_limit;
  end if;
  return jsonb_build_object(
    'session_id', s.session_id, 'session', s.external_id, 'metadata', s.metadata,
    'messages', v_messages,
    'next_cursor', case when v_n > p_limit then v_messages -> (p_limit - 1) -> 'seq' end);
end
$$;
comment on function memory.session_messages(uuid, text, integer, integer) is
  'The messages (episodes) of a session in order, paged by sequence number: pass next_cursor as p_after_seq.';

create or replace function memory.graph_neighbors(
  p_project uuid, p_entity text, p_depth integer default 1,
  p_at timestamptz default null, p_known_at timestamptz default null, p_limit integer default 200)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_at timestamptz;
  v_known timestamptz;
  v_root uuid;
  v_result jsonb;
begin
  -- NULL instants mean now, as in every read.
  select i.at, i.known_at into v_at, v_known
    from memory_internal.read_instants(p_at, p_known_at) i;
  perform memory_internal.check_instants(v_at, v_known);
  if p_depth is null or p_depth not between 1 and 3 then
    raise exception 'depth must be between 1 and 3' using errcode = 'invalid_parameter_value',
      detail = 'depth';
  end if;
  perform memory_internal.check_limit(p_limit, 1000);
  v_root := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_entity));
  if v_root is null then
    raise exception 'entity "%" not found in project %', p_entity, p_project
      using errcode = 'no_data_found';
  end if;
  with recursive g as (
    select e.edge_id, e.source_id, e.target_id, e.relation, e.valid_range
      from memory.edges_at(p_project, v_at, v_known) e
  ), walk (entity_id, depth) as (
    select v_root, 0
    union
    select case when g.source_id = w.entity_id then g.target_id else g.source_id end, w.depth + 1
      from walk w join g on w.entity_id in (g.source_id, g.target_id)
     where w.depth < p_depth
  ), nearest as (
    -- The closest first, then by name: p_limit of them, and one more to
    -- tell whether the limit left some out.
    select n.entity_id, n.name, n.entity_type, w.depth
      from (select w.entity_id, min(w.depth) as depth from walk w group by 1) w
      join memory.entities n on n.org_id = v_org and n.entity_id = w.entity_id
     order by w.depth, n.name, n.entity_id limit p_limit + 1
  ), reached as (
    select x.* from nearest x order by x.depth, x.name, x.entity_id limit p_limit
  ), walked as (
    select g.* from g
      join reached rs on rs.entity_id = g.source_id
      join reached rt on rt.entity_id = g.target_id
  )
  select jsonb_build_object(
    'entity', (select jsonb_build_object('entity_id', n.entity_id, 'name', n.name,
                                         'entity_type', n.entity_type)
                 from memory.entities n where n.org_id = v_org and n.entity_id = v_root),
    'depth', p_depth, 'as_of', v_at, 'known_at', v_known,
    'nodes', coalesce((select jsonb_agg(jsonb_build_object(
                                'entity_id', r.entity_id, 'name', r.name,
                                'entity_type', r.entity_type, 'depth', r.depth)
                              order by r.depth, r.name, r.entity_id)
                         from reached r),
                      '[]'),
    'truncated', (select count(*) from nearest) > p_limit,
    'edges', coalesce((select jsonb_agg(jsonb_build_object(
                                'edge_id', w.edge_id, 'source_id', w.source_id,
                                'target_id', w.target_id, 'relation', w.relation,
                                'valid_from', lower(w.valid_range),
                                'valid_until', upper(w.valid_range))
                              order by w.relation, w.source_id, w.target_id, w.edge_id)
                         from walked w), '[]'))
    into v_result;
  return v_result;
end
$$;
comment on function memory.graph_neighbors(uuid, text, integer, timestamptz, timestamptz, integer) is
  'The entities within p_depth (1-3) edges of an entity, over the edges effective at p_at as believed at p_known_at (defaults: now), with the edges between them: at most p_limit nodes, the closest first, then by name (truncated: the limit left some out).';

-- One entity as the API shows it: in the entity list, and as the answer
-- to an upsert.  A set-returning SQL function, called with cross join
-- lateral, so that the planner inlines it: as a scalar function (its alias
-- subquery keeps those from being inlined) it was called per row, and a
-- page of 1,000 entities took 8.2-8.7 ms against 5.0-5.8 written inline
-- (the list's query alone, on the 100k benchmark load).
create or replace function memory_internal.entity_api_json(p_entity memory.entities)
  returns table (j jsonb)
  language sql stable
  as $$
    select jsonb_build_object(
             'entity_id', p_entity.entity_id, 'name', p_entity.name,
             'entity_type', p_entity.entity_type, 'summary', p_entity.summary,
             'created_at', p_entity.created_at,
             'aliases', coalesce((select jsonb_agg(a.alias order by a.normalized_alias)
                                    from memory.entity_aliases a
                                   where a.org_id = p_entity.org_id
                                     and a.entity_id = p_entity.entity_id), '[]'))
  $$;

-- An entity as the API shows it, by id (NULL when there is none).
create or replace function memory_internal.entity_api_answer(p_org uuid, p_entity uuid)
  returns jsonb
  language sql stable
  as $$
    select ej.j
      from memory.entities e cross join lateral memory_internal.entity_api_json(e) ej
     where e.org_id = p_org and e.entity_id = p_entity
  $$;
comment on function memory_internal.entity_api_answer(uuid, uuid) is
  'The entity p_entity as the API shows it (entity_api_json), or NULL.';

create or replace function memory.list_entities(
  p_project uuid, p_after text default null, p_limit integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_entities jsonb;
  v_n integer;
  v_last text;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  select coalesce(jsonb_agg(x.j order by x.normalized_name), '[]'), count(*),
         max(x.normalized_name) filter (where x.rn = p_limit)
    into v_entities, v_n, v_last
    from (select n.normalized_name, row_number() over (order by n.normalized_name) as rn,
                 ej.j
            from memory.entities n
           cross join lateral memory_internal.entity_api_json(n) ej
           where n.org_id = v_org and n.project_id = p_project
             and (p_after is null or n.normalized_name > p_after)
           order by n.normalized_name
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_entities := v_entities - p_limit;
  end if;
  return jsonb_build_object('entities', v_entities,
                            'next_cursor', case when v_n > p_limit then v_last end);
end
$$;
comment on function memory.list_entities(uuid, text, integer) is
  'A project''s entities by normalized name, paged by keyset: pass next_cursor as p_after.';

-- Paged by keyset over their order (largest first, then label, then id);
-- the cursor is those three values as hex-encoded JSON, so a page after a
-- recomputation (which makes new ids) still starts where the last one
-- ended.  Members: the first p_members by name, and how many more.
create or replace function memory.list_communities(
  p_project uuid, p_after text default null, p_limit integer default 100,
  p_members integer default 100)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_after jsonb;
  v_size integer;
  v_label text;
  v_id uuid;
  v_page jsonb;
  v_n integer;
  v_last jsonb;
begin
  perform memory_internal.check_limit(p_limit, 1000);
  if p_members is null or p_members < 0 or p_members > 10000 then
    raise exception 'members must be between 0 and 10000' using errcode = 'invalid_parameter_value',
      detail = 'members';
  end if;
  if p_after is not null then
    begin
      v_after := convert_from(decode(p_after, 'hex'), 'UTF8')::jsonb;
      v_size := (v_after ->> 0)::integer;
      v_label := v_after ->> 1;
      v_id := (v_after ->> 2)::uuid;
    exception when others then
      v_id := null;
    end;
    if v_id is null or v_size is null or v_label is null then
      raise exception 'cursor is not a next_cursor of this list' using errcode = 'invalid_parameter_value',
        detail = 'cursor';
    end if;
  end if;
  select coalesce(jsonb_agg(x.j order by x.rn), '[]'), count(*),
         max(jsonb_build_array(x.size, x.label, x.community_id)::text) filter (where x.rn = p_limit)::jsonb
    into v_page, v_n, v_last
    from (select c.size, c.label, c.community_id,
                 row_number() over (order by c.size desc, c.label, c.community_id) as rn,
                 jsonb_build_object(
                   'community_id', c.community_id, 'label', c.label, 'size', c.size,
                   'computed_at', c.computed_at,
                   -- The model's summary (functions/079_community_summaries.sql).
                   'summary', c.summary, 'summarized_at', c.summarized_at,
                   'members', coalesce((
                     select jsonb_agg(jsonb_build_object('entity_id', n.entity_id, 'name', n.name)
                                      order by n.name, n.entity_id)
                       from (select n.entity_id, n.name
                               from memory.community_members m
                               join memory.entities n on n.org_id = m.org_id
                                                     and n.entity_id = m.entity_id
                              where m.org_id = c.org_id and m.community_id = c.community_id
                              order by n.name, n.entity_id
                              limit p_members) n), '[]'),
                   'more', greatest(c.size - p_members, 0)) as j
            from memory.communities c
           where c.org_id = v_org and c.project_id = p_project
             and (v_id is null
                  or (-c.size, c.label, c.community_id) > (-v_size, v_label, v_id))
           order by c.size desc, c.label, c.community_id
           limit p_limit + 1) x;
  if v_n > p_limit then
    v_page := v_page - p_limit;
  end if;
  return jsonb_build_object(
    -- When they were last computed (null: never), so that "no communities"
    -- reads as "none found" or "not computed yet".
    'computed_at', (select r.computed_at from memory.community_runs r
                     where r.org_id = v_org and r.project_id = p_project),
    'communities', v_page,
    'next_cursor', case when v_n > p_limit then encode(convert_to(v_last::text, 'UTF8'), 'hex') end);
end
$$;
comment on function memory.list_communities(uuid, text, integer, integer) is
  'A project''s communities from the last memory.compute_communities run (computed_at: its time, null if none ran), largest first, p_limit (1-1000) a page: pass next_cursor as p_after. Each with its summary (null until the model wrote one) and summarized_at, its first p_members members by name and how many more.';
