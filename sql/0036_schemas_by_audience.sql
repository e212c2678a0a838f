-- 0036_schemas_by_audience: one schema per audience.
--
-- memory is the SQL API for agents, psql and analysts, and only it.  The
-- HTTP and MCP layer's wrappers, keys and authorization move to
-- memory_http (memory.api_X becomes memory_http.X; authenticate,
-- authorize, the key functions and the permission vocabulary keep their
-- names), and the worker protocol, with what the worker alone calls to do a
-- job's work, to memory_worker.  Both are for the app role only.  Helpers
-- stay in memory_internal; the key table already lives there (no table
-- changes schema).  The names carry the memory_ prefix so that Chronomem
-- can share a database that has its own api or worker schema.
--
-- functions/ is re-applied after the migrations and creates the functions
-- in their new schemas; this revision drops their old memory.* signatures
-- (nothing to drop on a new database).  It also drops, once, every old
-- signature that functions/ used to drop on each run: a function whose
-- arguments changed, or one nothing calls any more.  No view, default,
-- constraint, policy or trigger calls any of them.

create schema memory_http;
comment on schema memory_http is
  'Chronomem HTTP and MCP layer (chronomem serve, for the app role only): API keys, authentication and authorization, and the audited, key-checked wrappers each route and MCP tool calls. Not for agents in SQL, psql or analysts: they use schema memory.';
create schema memory_worker;
comment on schema memory_worker is
  'Chronomem worker protocol (chronomem worker, for the app role only): claim, complete, fail and park jobs, extend their leases, queue the periodic ones, and the calls a job''s work makes (extraction, embeddings, webhook deliveries, community refreshes).';
comment on schema memory is
  'Chronomem SQL API for agents, psql and analysts: the tables analysts read and the functions they and every client call. The HTTP layer is in memory_http, the worker protocol in memory_worker.';

revoke all on schema memory_http, memory_worker from public;
grant usage on schema memory_http, memory_worker to chronomem_app;

comment on table memory_internal.api_keys is
  'API keys of the HTTP API: one project each, permissions from a fixed vocabulary, the secret stored as a sha256 hash only. Read through memory_http.list_api_keys; checked by memory_http.authenticate / memory_http.authorize.';
comment on table memory.job_schedules is
  'Periodic jobs per org: memory_worker.enqueue_due_jobs() turns due rows into jobs.';
comment on table memory_internal.webhook_secrets is
  'The current signing secret of each webhook endpoint (whsec_ + base64 of 24 random bytes). Shown once by memory.create_webhook and memory.rotate_webhook_secret; read by the worker through memory_worker.webhook_target.';
comment on table memory.fact_embeddings is
  'Embedding of each fact version''s content, written by the embed job (memory_worker.store_embeddings); a version without a row here has none yet. Which versions hold at an instant is memory.facts_at''s to say: join it by (org_id, fact_id).';

-- Moved to memory_http.
drop function if exists memory.api_permissions();
drop function if exists memory.authenticate(text);
drop function if exists memory.authorize(text, text, uuid);
drop function if exists memory.authorize_own_project(text, text);
drop function if exists memory.authorize_key(text);
drop function if exists memory.create_api_key(uuid, text, text[]);
drop function if exists memory.list_api_keys(uuid);
drop function if exists memory.revoke_api_key(uuid, uuid);
drop function if exists memory.bootstrap_api_key(uuid, text, text, text, text[]);
drop function if exists memory.api_org();
drop function if exists memory.api_list_projects();
drop function if exists memory.api_create_project(text);
drop function if exists memory.api_assert_facts(uuid, jsonb, boolean);
drop function if exists memory.api_ingest(uuid, text, jsonb, text, jsonb);
drop function if exists memory.api_retract_fact(uuid, uuid, text);
drop function if exists memory.api_wipe(uuid, text, text);
drop function if exists memory.api_delete_project(uuid);
drop function if exists memory.api_declare_predicate(uuid, text, text);
drop function if exists memory.api_upsert_entity(uuid, text, text, text, text[]);
drop function if exists memory.api_merge_entities(uuid, text, text, boolean);
drop function if exists memory.api_split_entity(uuid, text, boolean);
drop function if exists memory.api_refresh_communities(uuid);
drop function if exists memory.api_fact_history(uuid, uuid);
drop function if exists memory.api_timeline(uuid, text, text);
drop function if exists memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text);
drop function if exists memory.api_context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer);
drop function if exists memory.api_create_webhook(uuid, text, text[]);
drop function if exists memory.api_update_webhook(uuid, uuid, text, text[], boolean);
drop function if exists memory.api_delete_webhook(uuid, uuid);
drop function if exists memory.api_rotate_webhook_secret(uuid, uuid);
drop function if exists memory.api_webhook_deliveries(uuid, uuid, integer, bigint);

-- Moved to memory_worker.
drop function if exists memory.claim_jobs(text, text[], integer, interval);
drop function if exists memory.complete_job(uuid, bigint, text, jsonb);
drop function if exists memory.fail_job(uuid, bigint, text, text, boolean);
drop function if exists memory.park_job(uuid, bigint, text, text);
drop function if exists memory.extend_lease(uuid, bigint, text, interval);
drop function if exists memory.resume_waiting_jobs(text[]);
drop function if exists memory.enqueue_due_jobs();
drop function if exists memory.purge_done_jobs(interval);
drop function if exists memory.extraction_context(uuid, integer);
drop function if exists memory.apply_extraction(uuid, jsonb, real, integer);
drop function if exists memory.embedding_inputs(uuid, text, uuid[]);
drop function if exists memory.store_embeddings(text, uuid[], vector[]);
drop function if exists memory.queue_community_refreshes(integer);
drop function if exists memory.webhook_target(uuid);
drop function if exists memory.log_webhook_attempt(bigint, integer, text, integer, boolean);

-- Old signatures functions/ dropped on every run until this revision.
drop function if exists memory_internal.has_auto_objects(uuid, uuid, text[]);
drop function if exists memory.merge_entities(uuid, text, text);
drop function if exists memory_internal.hold_project(uuid);
drop function if exists memory_internal.restitch(
  uuid, uuid, uuid[], text[], text[], text, text, text, memory_internal.fact_input[], text, boolean);
drop function if exists memory_internal.restitch(
  uuid, uuid, uuid[], text[], text[], text, text, text, memory_internal.fact_input[], text, boolean,
  text[]);
drop function if exists memory_internal.cancel_wiped_jobs(uuid, uuid);
drop function if exists memory_internal.unbound_wiped_ranges(uuid, uuid, uuid[]);
drop function if exists memory.apply_extraction(uuid, jsonb, real);
drop function if exists memory.search_rows(uuid, text, vector, timestamptz, timestamptz, integer, text[]);
drop function if exists memory.search(uuid, text, vector, timestamptz, timestamptz, integer, text[]);
drop function if exists memory_internal.propagate_labels(integer);
drop function if exists memory.refresh_org_communities(integer);
drop function if exists memory_internal.enqueue(uuid, uuid, text, jsonb, timestamptz);
drop function if exists memory_internal.tg__enqueue_embed();
drop function if exists memory.api_merge_entities(uuid, text, text);
drop function if exists memory.api_search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[]);
drop function if exists memory_internal.entity_json(memory.entities);
drop function if exists memory.list_communities(uuid);
