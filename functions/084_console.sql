-- Reads the operator console shows that no other read gives: a project's
-- overview (its sizes, backlog and webhook health) and one fact version with
-- its source.  Both are plain SQL API reads (operators may call them in psql).
-- CREATE OR REPLACE only: re-applied on every migrate.

create or replace function memory.project_overview(p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_current bigint;
  v_versions bigint;
begin
  select count(*) into v_current from memory.facts_at(p_project) f;
  select count(*) into v_versions from memory_internal.fact_versions(p_project) v
   where v.org_id = v_org;
  return jsonb_build_object(
    'project', (select jsonb_build_object('project_id', p.project_id, 'name', p.name,
                                          'created_at', p.created_at)
                  from memory.projects p where p.org_id = v_org and p.project_id = p_project),
    'facts_current', v_current,
    -- Versions that do not hold now: superseded, closed, retracted or not yet valid.
    'facts_historical', v_versions - v_current,
    'episodes', (select count(*) from memory.episodes e
                  where e.org_id = v_org and e.project_id = p_project),
    'sessions', (select count(*) from memory.sessions s
                  where s.org_id = v_org and s.project_id = p_project),
    'entities', (select count(*) from memory.entities e
                  where e.org_id = v_org and e.project_id = p_project),
    'backlog', memory.project_backlog(p_project),
    'webhooks', jsonb_build_object(
      'endpoints', (select count(*) from memory.webhook_endpoints w
                     where w.org_id = v_org and w.project_id = p_project
                       and w.deleted_at is null),
      'enabled', (select count(*) from memory.webhook_endpoints w
                   where w.org_id = v_org and w.project_id = p_project
                     and w.deleted_at is null and w.enabled),
      -- Attempts of the last 24 hours by outcome, and the last failure.
      'last_day', (select jsonb_build_object(
                            'delivered', count(*) filter (where d.outcome = 'delivered'),
                            'retrying', count(*) filter (where d.outcome = 'retrying'),
                            'failed', count(*) filter (where d.outcome = 'failed'))
                     from memory.webhook_delivery_log d
                    where d.org_id = v_org and d.project_id = p_project
                      and d.attempted_at > now() - interval '24 hours'),
      'last_failure', (select jsonb_build_object('at', d.attempted_at,
                                                 'status_code', d.status_code, 'error', d.error)
                         from memory.webhook_delivery_log d
                        where d.org_id = v_org and d.project_id = p_project
                          and d.outcome <> 'delivered'
                        order by d.delivery_id desc limit 1)));
end
$$;
comment on function memory.project_overview(uuid) is
  'A project at a glance, as the console''s overview shows it: facts that hold now (memory.facts_at) and the other stored versions, episodes, sessions and entities counted, memory.project_backlog, and webhook health (endpoints, enabled ones, attempts of the last 24 hours by outcome, the last failed attempt). Counts every fact of the project: a read for people, not for a hot path.';

create or replace function memory.fact_detail(p_project uuid, p_fact uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_answer jsonb;
begin
  select jsonb_build_object(
           'fact_id', f.fact_id, 'subject', s.name, 'predicate', f.predicate_label,
           'object', coalesce(o.name, f.object_literal), 'object_entity_id', f.object_entity_id,
           'content', f.content, 'window_from', lower(f.valid_range),
           'window_until', upper(f.valid_range), 'window_empty', isempty(f.valid_range),
           'valid_from', f.valid_from, 'recorded_at', f.recorded_at,
           'retracted_at', f.invalid_at,
           'status', memory_internal.version_status(f.valid_range, f.invalid_at),
           'confidence', f.confidence, 'source', f.source,
           'source_episode', (
             select jsonb_build_object(
                      'episode_id', e.episode_id, 'session', ss.external_id, 'seq', e.seq,
                      'role', e.role, 'occurred_at', e.occurred_at,
                      'excerpt', left(e.content, 500), 'truncated', length(e.content) > 500)
               from memory.episodes e
               join memory.sessions ss on ss.org_id = e.org_id and ss.session_id = e.session_id
              where e.org_id = v_org and e.episode_id = f.source_episode_id))
    into v_answer
    -- The org as a value in each table's condition: on Citus, one statement
    -- on the org's shard.
    from memory_internal.fact_versions(p_project) f
    join memory.entities s on s.org_id = v_org and s.entity_id = f.subject_id
    left join memory.entities o on o.org_id = v_org and o.entity_id = f.object_entity_id
   where f.org_id = v_org and f.fact_id = p_fact;
  if v_answer is null then
    raise exception 'fact % not found in project %', p_fact, p_project
      using errcode = 'no_data_found';
  end if;
  return v_answer;
end
$$;
comment on function memory.fact_detail(uuid, uuid) is
  'One stored version of a fact (closed and retracted ones too): its triple by name, window, record time, status, confidence and source, with an excerpt (the first 500 characters) of the episode it was drawn from. no_data_found for a fact not in the project.';
