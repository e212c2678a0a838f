-- Ingest: messages become episodes at once; understanding comes later
-- (the enrich and embed jobs the episode trigger enqueues).

create or replace function memory_internal.estimate_tokens(p_text text) returns integer
  language sql immutable parallel safe
  -- About four characters per token for English BPE vocabularies; a budget
  -- estimate, not a tokenizer.
  as $$ select greatest(1, ceil(length(p_text) / 4.0))::integer $$;

create or replace function memory.ingest(
  p_project uuid,
  p_session text,
  p_messages jsonb,
  p_idempotency_key text default null,
  p_session_metadata jsonb default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set timezone = 'UTC'
as $$
declare
  c_max_messages constant integer := 100;
  c_max_content constant integer := 32768;
  v_org uuid := memory_internal.project_org(p_project);
  v_n integer;
  v_hash text;
  v_session uuid;
  v_last_seq integer;
  v_prior record;
  v_bad record;
  v_response jsonb;
  v_ids jsonb;
  v_policy jsonb;
  v_dropped integer[];
  v_redacted jsonb;
begin
  if p_session is null or p_session !~ '[^[:space:]]' or length(p_session) > 200 then
    raise exception 'session must be a non-empty string of at most 200 characters'
      using errcode = 'invalid_parameter_value';
  end if;
  if p_idempotency_key is not null and (length(p_idempotency_key) = 0 or length(p_idempotency_key) > 200) then
    raise exception 'idempotency key must be 1 to 200 characters' using errcode = 'invalid_parameter_value';
  end if;
  if p_messages is null or jsonb_typeof(p_messages) <> 'array' then
    raise exception 'messages must be a JSON array' using errcode = 'invalid_parameter_value';
  end if;
  v_n := jsonb_array_length(p_messages);
  if v_n = 0 then
    raise exception 'messages must not be empty' using errcode = 'invalid_parameter_value';
  elsif v_n > c_max_messages then
    raise exception 'at most % messages per call, got %', c_max_messages, v_n
      using errcode = 'program_limit_exceeded';
  end if;

  -- Every message is checked before anything is stored; the first problem
  -- is raised with its index, and nothing is half-stored.
  select m.idx, m.problem into v_bad
    from (
      select (t.ord - 1)::integer as idx,
             case
               when jsonb_typeof(t.e) <> 'object' then 'must be a JSON object'
               -- A message has these keys and no other: a misspelt
               -- occurred_at would otherwise leave the message at now().
               when t.e - '{role,content,occurred_at,metadata}'::text[] <> '{}' then
                 (select format('unknown key "%s" (a message has role, content, occurred_at, metadata)', k)
                    from jsonb_object_keys(t.e - '{role,content,occurred_at,metadata}'::text[]) k
                   order by k limit 1)
               when jsonb_typeof(t.e -> 'role') is distinct from 'string'
                    or t.e ->> 'role' not in ('user', 'assistant', 'system', 'tool')
                 then 'role must be one of user, assistant, system, tool'
               when jsonb_typeof(t.e -> 'content') is distinct from 'string'
                    or (t.e ->> 'content') !~ '[^[:space:]]'
                 then 'content must be a non-empty string'
               when length(t.e ->> 'content') > c_max_content
                 then format('content is longer than %s characters', c_max_content)
               when coalesce(jsonb_typeof(t.e -> 'occurred_at'), 'null') not in ('null', 'string')
                    or (jsonb_typeof(t.e -> 'occurred_at') = 'string'
                        and memory_internal.try_timestamptz(t.e ->> 'occurred_at') is null)
                 then 'occurred_at must be an ISO 8601 timestamp'
               when coalesce(jsonb_typeof(t.e -> 'metadata'), 'null') not in ('null', 'object')
                 then 'metadata must be a JSON object'
             end as problem
        from jsonb_array_elements(p_messages) with ordinality t(e, ord)) m
   where m.problem is not null
   order by m.idx
   limit 1;
  if v_bad.idx is not null then
    raise exception 'message %: %', v_bad.idx, v_bad.problem
      using errcode = 'invalid_parameter_value',
            detail = format('messages[%s]', v_bad.idx);
  end if;

  -- The body is the session and its messages: the same key with the same
  -- messages for another session is another request.
  v_hash := encode(sha256(convert_to(
    jsonb_build_object('session', btrim(p_session), 'messages', p_messages)::text, 'UTF8')), 'hex');

  -- Like every writer of the project (assert_facts, retract_fact), ingest
  -- holds the project's lock shared; wipe holds it exclusive, so content
  -- (and the document frequencies it lowers) never disappears under an
  -- ingest that has not committed.
  perform memory_internal.hold_project(p_project);

  -- The project's redaction policy, read once (no policy: one probe).  The
  -- session's id and metadata are stored too: redacted like messages (a
  -- hashed id still names one session; a masked one merges sessions).
  v_policy := memory_internal.redaction_policy(v_org, p_project);
  if v_policy is not null then
    select r.session, r.metadata into p_session, p_session_metadata
      from memory_internal.redact_session(
             v_org, p_project, v_policy, btrim(p_session), p_session_metadata) r;
  end if;

  -- One writer per session at a time: sequence numbers and the "latest
  -- batch" that recognises retries are decided under the session's lock.
  insert into memory.sessions (org_id, project_id, external_id, metadata)
  values (v_org, p_project, btrim(p_session), coalesce(p_session_metadata, '{}'))
  on conflict (org_id, project_id, external_id) do nothing;
  select s.session_id, s.last_seq into v_session, v_last_seq
    from memory.sessions s
   where s.org_id = v_org and s.project_id = p_project and s.external_id = btrim(p_session)
     for update;

  if p_idempotency_key is not null then
    -- Keys are per project: serialise their first use across sessions.
    perform pg_advisory_xact_lock(hashtextextended(
      'chronomem.ingest_key:' || p_project::text || ':' || p_idempotency_key, 0));
    select r.body_hash, r.response into v_prior
      from memory_internal.ingest_requests r
     where r.org_id = v_org and r.project_id = p_project and r.idempotency_key = p_idempotency_key;
    if v_prior.body_hash is not null then
      if v_prior.body_hash <> v_hash then
        raise exception 'idempotency key "%" was already used with a different body', p_idempotency_key
          using errcode = 'unique_violation', detail = 'Idempotency-Key';
      end if;
      return v_prior.response || jsonb_build_object('replayed', true);
    end if;
  else
    -- Without a key, a retry is the same body as the session's latest batch.
    select r.body_hash, r.response into v_prior
      from memory_internal.ingest_requests r
     where r.org_id = v_org and r.session_id = v_session
     order by r.request_id desc
     limit 1;
    if v_prior.body_hash = v_hash then
      return v_prior.response || jsonb_build_object('replayed', true);
    end if;
  end if;

  -- The messages under the policy, before any episode exists: content and
  -- metadata redacted, dropped messages left out,
  -- each kept one with its counts under "redactions" (no message can have
  -- that key: the checks above refuse it).  A refusal or a policy that
  -- cannot be evaluated raises, and this transaction (the session row
  -- too) stores nothing.
  if v_policy is not null then
    select r.messages, r.dropped, r.counts into p_messages, v_dropped, v_redacted
      from memory_internal.redact_messages(v_org, p_project, v_policy, p_messages) r;
    v_n := jsonb_array_length(p_messages);
  end if;

  with inserted as (
    insert into memory.episodes
      (org_id, project_id, session_id, seq, role, content, metadata, occurred_at, token_count,
       redactions)
    select v_org, p_project, v_session, v_last_seq + t.ord::integer, t.e ->> 'role', t.e ->> 'content',
           coalesce(t.e -> 'metadata', '{}'),
           coalesce(memory_internal.try_timestamptz(t.e ->> 'occurred_at'), now()),
           memory_internal.estimate_tokens(t.e ->> 'content'),
           t.e -> 'redactions'
      from jsonb_array_elements(p_messages) with ordinality t(e, ord)
     order by t.ord
    returning episode_id, seq
  )
  select coalesce(jsonb_agg(i.episode_id order by i.seq), '[]') into v_ids from inserted i;

  update memory.sessions set last_seq = v_last_seq + v_n
   where org_id = v_org and session_id = v_session;

  v_response := jsonb_build_object('session_id', v_session, 'episode_ids', v_ids, 'replayed', false);
  if v_policy is not null then
    v_response := v_response || jsonb_build_object('dropped', to_jsonb(v_dropped), 'redactions', v_redacted);
  end if;
  insert into memory_internal.ingest_requests
    (org_id, project_id, session_id, idempotency_key, body_hash, response)
  values (v_org, p_project, v_session, p_idempotency_key, v_hash, v_response);
  return v_response;
end
$$;
comment on function memory.ingest(uuid, text, jsonb, text, jsonb) is
  'Store messages [{role, content, occurred_at?, metadata?}] as episodes of a session (created on first use) at once; enrich and embed jobs are enqueued in the same transaction. The same idempotency key with the same body returns the first answer (replayed: true); with another body it is an error. Without a key, resending a session''s latest batch is recognised as a retry. Under a redaction policy (memory.set_redaction_rule) content and metadata strings are redacted before anything is stored; the answer adds dropped (indexes of messages a drop rule left out) and redactions (counts per detector); a refuse rule fails the call (check_violation).';

-- The dimension the installation embeds with, read from the column type.
create or replace function memory.embedding_dim() returns integer
  language sql stable
  as $$
    select a.atttypmod from pg_attribute a
     where a.attrelid = 'memory.episodes'::regclass and a.attname = 'embedding'
  $$;
comment on function memory.embedding_dim() is 'Dimension of the embedding columns (fixed per installation).';

-- Rows still to embed, for the embed job: text to embed per id.
create or replace function memory_worker.embedding_inputs(p_project uuid, p_kind text, p_ids uuid[])
  returns table (id uuid, input text)
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select e.episode_id, e.content from memory.episodes e
     where p_kind = 'episode' and e.project_id = p_project and e.episode_id = any (p_ids)
    union all
    select f.fact_id, f.content from memory_internal.fact_versions(p_project) f
     where p_kind = 'fact' and f.fact_id = any (p_ids)
    union all
    select n.entity_id, n.name || coalesce(': ' || n.summary, '') from memory.entities n
     where p_kind = 'entity' and n.project_id = p_project and n.entity_id = any (p_ids)
  $$;
comment on function memory_worker.embedding_inputs(uuid, text, uuid[]) is
  'The text the embed job embeds for each id: episode content, fact content, entity name and summary.';

create or replace function memory_worker.store_embeddings(p_kind text, p_ids uuid[], p_vectors vector[])
  returns integer
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  set enable_sort = off
as $$
declare
  v_n integer;
begin
  if p_kind is null or p_kind not in ('episode', 'fact', 'entity') then
    raise exception 'kind must be episode, fact or entity' using errcode = 'invalid_parameter_value';
  end if;
  if cardinality(p_ids) is distinct from cardinality(p_vectors) then
    raise exception 'ids and vectors differ in length' using errcode = 'invalid_parameter_value';
  end if;
  if p_kind = 'episode' then
    -- The org named (as the policy implies): on Citus, routed to its shard.
    update memory.episodes e set embedding = u.v
      from unnest(p_ids, p_vectors) u(id, v)
     where e.org_id = memory_internal.current_org() and e.episode_id = u.id;
  elsif p_kind = 'fact' then
    -- The write lock (shared) of each project holding one of the versions,
    -- in project order, before the versions are read again and stored: a
    -- wipe holds it exclusively, so none runs between that read and this
    -- transaction's end, and one that ran before left nothing to read.
    -- (The guarantee a foreign key's check would give; there is none:
    -- docs/decisions/003-fact-embeddings-beside-facts.md.)
    perform pg_advisory_xact_lock_shared(memory_internal.project_lock_key(x.project_id))
       from (select distinct f.project_id
               from memory.projects p
              cross join lateral (
                    select v.project_id
                      from memory_internal.fact_versions(p.project_id) v
                     where v.fact_id = any (p_ids)
                     order by v.fact_id) f
              where p.org_id = memory_internal.current_org()
              order by 1) x;
    -- Versions of the org's projects only (a wiped id is skipped), their
    -- project from the version itself; the last vector given for an id wins.
    -- A NULL vector clears, as it does for episodes and entities.
    with given as (
      select distinct on (u.id) u.id, u.v
        from unnest(p_ids, p_vectors) with ordinality u(id, v, i)
       order by u.id, u.i desc),
    cleared as (
      delete from memory.fact_embeddings e
       using given g
       where g.v is null and e.org_id = memory_internal.current_org() and e.fact_id = g.id
      returning e.fact_id),
    upserted as (
      -- The ids in each project of the org, in fact_id order with sorts
      -- off: only an index holding fact_id after the project serves that,
      -- whatever the statistics (planned on a new install, an index by
      -- (org, project) alone costs the same, and would read the project's
      -- every version).
      insert into memory.fact_embeddings (org_id, project_id, fact_id, embedding)
      select f.org_id, f.project_id, f.fact_id, g.v
        from memory.projects p
       cross join lateral (
             select v.org_id, v.project_id, v.fact_id
               from memory_internal.fact_versions(p.project_id) v
              where v.fact_id = any (p_ids)
              order by v.fact_id) f
        join given g on g.id = f.fact_id and g.v is not null
       where p.org_id = memory_internal.current_org()
          on conflict (org_id, fact_id) do update set embedding = excluded.embedding
      returning fact_id)
    select (select count(*) from cleared) + (select count(*) from upserted) into v_n;
    return v_n;
  else
    update memory.entities n set embedding = u.v
      from unnest(p_ids, p_vectors) u(id, v)
     where n.org_id = memory_internal.current_org() and n.entity_id = u.id;
  end if;
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
-- A deleted fact version's embedding goes in the deleting statement (a
-- wipe: found by key from the deleted rows), as a foreign key's cascade
-- would take it (there is none:
-- docs/decisions/007-plans-made-without-statistics.md).
-- Per org of the rows (one, but for an operator's own SQL, which runs without
-- a scope), the org a value in each condition: on Citus, where the trigger runs
-- on the org's shard, each delete stays there.
create or replace function memory_internal.tg_facts__embeddings() returns trigger
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
begin
  for v_org in select distinct x.org_id from old_rows x loop
    delete from memory.fact_embeddings e
     using old_rows o
     where e.org_id = v_org and o.org_id = v_org and e.fact_id = o.fact_id;
  end loop;
  return null;
end
$$;
comment on function memory_internal.tg_facts__embeddings() is
  'Deletes the embeddings of the fact versions a statement deletes (memory.fact_embeddings has no foreign key).';

create or replace trigger "40_embeddings_delete" after delete on memory.facts
  referencing old table as old_rows
  for each statement execute function memory_internal.tg_facts__embeddings();

comment on function memory_worker.store_embeddings(text, uuid[], vector[]) is
  'Write embeddings computed by the embed worker (rows of the current org only).';
