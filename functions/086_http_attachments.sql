-- The HTTP layer's attachment write: memory.ingest_attachments as the
-- authorized key, audited with counts.  The reads (memory.get_attachment,
-- memory.attachment_content) are invoker-rights functions the API calls
-- directly under memory_http.authorize_call.

create or replace function memory_http.ingest_attachments(
  p_project uuid, p_session text, p_messages jsonb, p_files jsonb, p_contents bytea[],
  p_idempotency_key text default null, p_session_metadata jsonb default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_result jsonb;
begin
  perform memory_internal.require_api(
    memory_http.call_permission('memory_http.ingest_attachments'), p_project);
  v_result := memory.ingest_attachments(
    p_project, p_session, p_messages, p_files, p_contents, p_idempotency_key, p_session_metadata);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'memory.ingest_attachments',
    'session:' || (v_result ->> 'session_id'),
    jsonb_build_object('episodes', jsonb_array_length(v_result -> 'episode_ids'),
                       'attachments', jsonb_array_length(coalesce(v_result -> 'attachments', '[]')),
                       'replayed', v_result -> 'replayed'));
  return v_result;
end
$$;
comment on function memory_http.ingest_attachments(uuid, text, jsonb, jsonb, bytea[], text, jsonb) is
  'API: memory.ingest_attachments as the authorized key (needs project:write); audited with counts.';
