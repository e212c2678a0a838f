-- The HTTP layer's JSON reads that wrap a memory read (schema memory_http).
-- CREATE OR REPLACE only: re-applied on every migrate.

create or replace function memory_http.fact_history(p_project uuid, p_fact uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  if not exists (select from memory_internal.fact_versions(p_project) v where v.fact_id = p_fact) then
    raise exception 'fact % not found in project %', p_fact, p_project using errcode = 'no_data_found';
  end if;
  return jsonb_build_object('fact_id', p_fact, 'events', coalesce((
    select jsonb_agg(memory_internal.fact_event_json(
             h.event_id, h.occurred_at, h.event_type, h.fact_id, h.old_fact_id, h.new_fact_id,
             h.old_range, h.new_range, h.actor, h.reason, h.subject, h.predicate, h.object,
             h.content)
             -- The version's standing now (functions/055).
             || jsonb_build_object('standing',
                                   memory_internal.fact_standing(memory_internal.current_org(), h.fact_id))
           order by h.occurred_at, h.event_id)
      from memory.fact_history(p_project, p_fact) h), '[]'));
end
$$;
comment on function memory_http.fact_history(uuid, uuid) is
  'memory.fact_history as JSON with windows as bounds and each version''s standing now; no_data_found for a fact not in the project.';

create or replace function memory_http.timeline(
  p_project uuid, p_subject text, p_predicate text default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  if p_subject is null or btrim(p_subject) = '' then
    raise exception 'subject must not be empty' using errcode = 'invalid_parameter_value',
      detail = 'subject';
  end if;
  return jsonb_build_object('subject', p_subject, 'facts', coalesce((
    select jsonb_agg(jsonb_build_object(
             'fact_id', t.fact_id, 'predicate', t.predicate, 'object', t.object,
             'content', t.content, 'valid_from', t.valid_from,
             'window_from', lower(t.valid_range), 'window_until', upper(t.valid_range),
             'window_empty', isempty(t.valid_range), 'recorded_at', t.recorded_at,
             'retracted_at', t.invalid_at, 'status', t.status,
             -- Its standing now and the reviews that set it (functions/055).
             'standing', memory_internal.fact_standing(memory_internal.current_org(), t.fact_id),
             'reviews', memory_internal.fact_reviews_json(memory_internal.current_org(), t.fact_id),
             'events', coalesce((
               select jsonb_agg(jsonb_build_object(
                        'event', e ->> 'event', 'at', (e ->> 'at')::timestamptz,
                        'new_fact_id', e -> 'new_fact_id', 'actor', e -> 'actor',
                        'reason', e -> 'reason') order by o)
                 from jsonb_array_elements(t.events) with ordinality u(e, o)), '[]'))
           order by n)
      from memory.subject_timeline(p_project, p_subject, p_predicate) with ordinality t(
             fact_id, predicate, object, content, valid_from, valid_range, recorded_at,
             invalid_at, status, events, n)), '[]'));
end
$$;
comment on function memory_http.timeline(uuid, text, text) is
  'memory.subject_timeline as JSON (windows as bounds), with each version''s standing and reviews, for the API.';

-- Search and context for the API: a query embedding the client sent must
-- have the installation's dimension (an error naming the field); one the
-- server computed with another dimension is dropped (the vector legs are
-- skipped, as without any embedding).
create or replace function memory_internal.api_query_embedding(
  p_client vector, p_computed vector)
  returns vector
  language plpgsql stable
as $$
declare
  v_dim integer := memory.embedding_dim();
begin
  if p_client is not null then
    if vector_dims(p_client) <> v_dim then
      raise exception 'query_embedding must have % dimensions, not %', v_dim, vector_dims(p_client)
        using errcode = 'invalid_parameter_value', detail = 'query_embedding';
    end if;
    return p_client;
  end if;
  if p_computed is not null and vector_dims(p_computed) = v_dim then
    return p_computed;
  end if;
  return null;
end
$$;

create or replace function memory_http.search(
  p_project uuid, p_query text, p_client_embedding vector default null,
  p_computed_embedding vector default null, p_at timestamptz default null,
  p_known_at timestamptz default null, p_k integer default 10, p_legs text[] default null,
  p_fusion text default 'scores', p_labels text[] default null, p_fields jsonb default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  return memory.search(p_project, p_query,
                       memory_internal.api_query_embedding(p_client_embedding, p_computed_embedding),
                       p_at, p_known_at, p_k, p_legs, p_fusion, p_labels, p_fields);
end
$$;
comment on function memory_http.search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb) is
  'memory.search for the API: a client embedding of the wrong dimension is an error, a server-computed one is dropped.';

create or replace function memory_http.context(
  p_project uuid, p_query text, p_client_embedding vector default null,
  p_computed_embedding vector default null, p_at timestamptz default null,
  p_known_at timestamptz default null, p_max_tokens integer default 1500, p_k integer default 20,
  p_labels text[] default null, p_fields jsonb default null)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
begin
  perform memory_internal.project_org(p_project);
  return memory.context(p_project, p_query,
                        memory_internal.api_query_embedding(p_client_embedding, p_computed_embedding),
                        p_at, p_known_at, p_max_tokens, p_k, p_labels, p_fields);
end
$$;
comment on function memory_http.context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer, text[], jsonb) is
  'memory.context for the API (embeddings as in memory_http.search).';
