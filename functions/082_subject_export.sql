-- Subject export: everything the store holds about one subject, as one JSON
-- document, for a data-subject access request (memory.wipe's subject scope
-- erases the same facts, edges, aliases and notes; the messages stay).
-- CREATE OR REPLACE only: re-applied on every migrate.

-- The subject is resolved as every read resolves a name (its entity by name
-- or alias).  Its facts are the ones memory.wipe would delete: every stored
-- version naming the entity as subject or object, closed and retracted ones
-- included, and those whose object was written as one of its names as a
-- plain name not taken over yet.  Its episodes are those facts' sources and
-- every episode whose text holds one of its names as whole words, compared
-- as normalize_text compares names ("Ann's" mentions Ann, "Annie" does
-- not).  That reads every episode of the project once, which a rare export
-- can afford; ASCII text (most of it) is normalized only when it holds the
-- first word of a name in some case (without it, it cannot name one): that
-- test costs a twentieth of normalizing (100,000 episodes in 0.45 s).  A
-- reader: invoker rights under row-level security, like the other readers
-- (the analyst's included; security definer is for writers), so a project
-- of another org is not found (P0002).  Every list is in a fixed order, so
-- the same store gives the same document.
create or replace function memory.export_subject(p_project uuid, p_subject text)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_entity uuid;
  v_names text[];
  v_first_words text[];
  v_facts uuid[];
  v_sources uuid[];
  v_fact_docs jsonb;
  v_episode_docs jsonb;
  v_edge_docs jsonb;
  v_note_docs jsonb;
begin
  if p_subject is null or btrim(p_subject) = '' then
    raise exception 'subject must not be empty' using errcode = 'invalid_parameter_value',
      detail = 'subject';
  end if;
  v_entity := memory_internal.find_entity(v_org, p_project, memory.normalize_text(p_subject));
  if v_entity is null then
    raise exception 'subject "%" not found in project %', p_subject, p_project
      using errcode = 'no_data_found';
  end if;
  v_names := memory_internal.entity_names(v_org, v_entity);
  v_first_words := array(select distinct split_part(n, ' ', 1) from unnest(v_names) n);

  -- The facts memory.wipe finds.
  v_facts := memory_internal.facts_naming(v_org, p_project, v_entity);

  select coalesce(jsonb_agg(jsonb_build_object(
           'fact_id', v.fact_id,
           'named_as', case when v.subject_id = v_entity then 'subject' else 'object' end,
           'subject', s.name, 'subject_id', v.subject_id,
           'predicate', v.predicate_label,
           'object', coalesce(o.name, v.object_literal), 'object_entity_id', v.object_entity_id,
           'object_type', case when v.object_entity_id is not null then 'entity'
                               when v.object_auto then 'auto' else 'literal' end,
           'content', v.content, 'confidence', v.confidence, 'source', v.source,
           'source_episode_id', v.source_episode_id, 'actor', v.actor,
           'valid_from', v.valid_from, 'valid_to', upper(v.valid_range),
           'window_empty', isempty(v.valid_range),
           'recorded_at', v.recorded_at, 'invalid_at', v.invalid_at,
           'status', memory_internal.version_status(v.valid_range, v.invalid_at),
           'standing', memory_internal.fact_standing(v.org_id, v.fact_id),
           'reviews', memory_internal.fact_reviews_json(v.org_id, v.fact_id),
           'events', coalesce((
             select jsonb_agg(jsonb_build_object(
                      'event_id', e.event_id, 'event_type', e.event_type, 'at', e.occurred_at,
                      'actor', e.actor, 'reason', e.reason,
                      'old_fact_id', e.old_fact_id, 'new_fact_id', e.new_fact_id,
                      'old_valid_from', lower(e.old_range), 'old_valid_until', upper(e.old_range),
                      'new_valid_from', lower(e.new_range), 'new_valid_until', upper(e.new_range),
                      'new_window_empty', coalesce(isempty(e.new_range), false))
                    order by e.occurred_at, e.event_id)
               from memory.fact_events e
              where e.org_id = v.org_id and e.fact_id = v.fact_id), '[]'))
           order by v.subject_id <> v_entity, v.predicate, s.normalized_name, v.valid_from,
                    v.fact_seq, v.fact_id), '[]'),
         coalesce(array_agg(distinct v.source_episode_id)
                    filter (where v.source_episode_id is not null), '{}')
    into v_fact_docs, v_sources
    from memory_internal.fact_versions(p_project) v
    join memory.entities s on s.org_id = v.org_id and s.entity_id = v.subject_id
    left join memory.entities o on o.org_id = v.org_id and o.entity_id = v.object_entity_id
   where v.org_id = v_org and v.fact_id = any (v_facts);

  select coalesce(jsonb_agg(jsonb_build_object(
           'episode_id', e.episode_id, 'session_id', e.session_id, 'session', s.external_id,
           'seq', e.seq, 'role', e.role, 'content', e.content, 'metadata', e.metadata,
           'occurred_at', e.occurred_at, 'created_at', e.created_at,
           'is_source', m.is_source, 'mentions', m.mentions)
           order by s.external_id, e.seq, e.episode_id), '[]')
    into v_episode_docs
    from memory.episodes e
    join memory.sessions s on s.org_id = e.org_id and s.session_id = e.session_id
   -- Its words, normalized (NULL: ASCII text without a name's first word);
   -- offset 0: computed once per episode, not once per name.
   cross join lateral (
     select case when octet_length(e.content) > length(e.content)
                      or exists (select from unnest(v_first_words) w
                                  where strpos(lower(e.content collate "C"), w) > 0)
                 then ' ' || memory.normalize_text(e.content) || ' ' end as words
     offset 0) t
   cross join lateral (
     select e.episode_id = any (v_sources) as is_source,
            exists (select from unnest(v_names) n where strpos(t.words, ' ' || n || ' ') > 0)
              as mentions) m
   where e.org_id = v_org and e.project_id = p_project and (m.is_source or m.mentions);

  -- Every edge row touching it, expired ones included: the graph's history.
  select coalesce(jsonb_agg(jsonb_build_object(
           'edge_id', g.edge_id, 'source_id', g.source_id, 'source', sn.name,
           'target_id', g.target_id, 'target', tn.name, 'relation', g.relation,
           'valid_from', lower(g.valid_range), 'valid_until', upper(g.valid_range),
           'recorded_at', g.recorded_at, 'expired_at', g.expired_at)
           order by g.relation, sn.normalized_name, tn.normalized_name, g.recorded_at,
                    lower(g.valid_range), g.edge_id), '[]')
    into v_edge_docs
    from (select x.* from memory.edges x
           where x.org_id = v_org and x.project_id = p_project and x.source_id = v_entity
          union all
          select x.* from memory.edges x
           where x.org_id = v_org and x.target_id = v_entity and x.project_id = p_project
             and x.source_id <> v_entity) g
    join memory.entities sn on sn.org_id = g.org_id and sn.entity_id = g.source_id
    join memory.entities tn on tn.org_id = g.org_id and tn.entity_id = g.target_id;

  -- What extraction noted about it (preferences, summaries).
  select coalesce(jsonb_agg(jsonb_build_object(
           'note_id', n.note_id, 'kind', n.kind, 'content', n.content,
           'episode_id', n.episode_id, 'created_at', n.created_at)
           order by n.created_at, n.note_id), '[]')
    into v_note_docs
    from memory.notes n
   where n.org_id = v_org and n.project_id = p_project and n.subject_id = v_entity;

  return jsonb_build_object(
    'project_id', p_project, 'subject', p_subject, 'exported_at', now(),
    'entity', (select ej.j from memory.entities e
                cross join lateral memory_internal.entity_api_json(e) ej
                where e.org_id = v_org and e.entity_id = v_entity),
    'facts', v_fact_docs, 'episodes', v_episode_docs, 'edges', v_edge_docs,
    'notes', v_note_docs,
    -- Its conflicts, open and settled (the members are among its facts).
    'conflicts', coalesce((
      select jsonb_agg(memory.get_conflict(p_project, c.conflict_id) order by c.opened_at, c.conflict_id)
        from memory.conflicts c
       where c.org_id = v_org and c.project_id = p_project and c.subject_id = v_entity), '[]'));
end
$$;
comment on function memory.export_subject(uuid, text) is
  'Everything the project holds about one subject (by name or alias), as one JSON document for a data-subject access request: its entity and aliases; every version of the facts naming it as subject or object (retracted and superseded ones too, and plain-name objects as memory.wipe finds them) with valid window, record window, status and events; the episodes that are those facts'' sources or name it (or an alias) as whole words; every edge row touching it; the notes about it; the reviews of its facts (standing now and every review) and its conflicts (memory.get_conflict). Fixed order throughout. P0002 for a subject or project not found, as memory.wipe.';

-- The API's export: the key must grant project:read on the project.
create or replace function memory_http.export_subject(p_project uuid, p_subject text)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.export_subject'),
                                      p_project);
  return memory.export_subject(p_project, p_subject);
end
$$;
comment on function memory_http.export_subject(uuid, text) is
  'API: memory.export_subject for the authorized key (needs project:read).';
