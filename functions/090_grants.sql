-- Explicit grants, re-applied after every migrate (a function created since
-- the last run starts with PUBLIC execute, which this revokes).  Every grant
-- of every schema is here: memory (the SQL API: agents, psql, analysts),
-- memory_http (the HTTP and MCP layer) and memory_worker (the worker
-- protocol) for the app role only, memory_internal's helpers for the roles
-- whose invoker-rights calls reach them.

revoke execute on all functions in schema memory, memory_http, memory_worker, memory_internal
  from public;

-- Row-level security calls these as the querying role; the invoker-rights
-- readers call the rest.
grant execute on function
  memory_internal.current_org(),
  memory_internal.set_local(text, text),
  memory_internal.txn_instant(),
  memory_internal.read_instants(timestamptz, timestamptz),
  memory_internal.check_instants(timestamptz, timestamptz),
  memory_internal.range_until(tstzrange, timestamptz),
  memory_internal.range_believed(uuid, uuid, timestamptz),
  memory_internal.project_org(uuid),
  memory_internal.find_entity(uuid, uuid, text),
  memory_internal.find_entities(uuid, uuid, text[]),
  memory_internal.find_entities_by_name(uuid, uuid, text[])
  to chronomem_app, chronomem_analyst;

-- Readers: app and analyst.
grant execute on function
  memory.use_org(uuid, boolean),
  memory.normalize_text(text),
  memory.facts_at(uuid, timestamptz, timestamptz),
  memory.readable_facts_at(uuid, timestamptz, timestamptz),
  memory.edges_at(uuid, timestamptz, timestamptz),
  memory.fact_history(uuid, uuid),
  memory.subject_timeline(uuid, text, text),
  memory.export_subject(uuid, text),
  memory.predicates_of(uuid),
  memory.redaction_rules_of(uuid),
  memory.counters(uuid),
  memory.embedding_dim(),
  memory.search(uuid, text, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb),
  memory.search_rows(uuid, text, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb),
  memory.vector_query_text(uuid, text, timestamptz, timestamptz),
  memory.context(uuid, text, vector, timestamptz, timestamptz, integer, integer, text[], jsonb)
  to chronomem_app, chronomem_analyst;
grant execute on function
  memory_internal.question_tsquery(text),
  memory_internal.rrf(integer),
  memory_internal.episode_speaker(jsonb),
  memory_internal.question_period(text),
  memory_internal.episode_visible(timestamptz, timestamptz, timestamptz, timestamptz),
  memory_internal.vector_exact_budget(integer, real),
  memory_internal.vector_ef_search(integer),
  memory_internal.search_leg_hits(integer),
  memory_internal.search_episode_vector(uuid, vector, timestamptz, timestamptz, integer),
  memory_internal.search_episode_vector_within(uuid, vector, tstzrange, timestamptz, timestamptz, integer),
  memory_internal.search_episode_vector_cached(uuid, vector, timestamptz, timestamptz, integer),
  memory_internal.search_episode_vector_planned(uuid, vector, tstzrange, timestamptz, timestamptz, integer),
  memory_internal.search_fact_vector(uuid, vector, timestamptz, timestamptz, integer),
  memory_internal.search_fact_vector_cached(uuid, vector, timestamptz, timestamptz, integer),
  memory_internal.search_fact_vector_planned(uuid, vector, timestamptz, timestamptz, integer),
  memory_internal.project_sizes(uuid, uuid),
  memory_internal.rarest_words(text[], double precision[], double precision),
  memory_internal.search_episode_fulltext(uuid, text, timestamptz, timestamptz, integer),
  memory_internal.episode_term_dfs(uuid, uuid, text[]),
  memory_internal.episode_collection(uuid, uuid),
  memory_internal.search_fact_fulltext(uuid, text, timestamptz, timestamptz, integer),
  memory_internal.search_entities(uuid, text, timestamptz, integer),
  memory_internal.search_graph_level(uuid, timestamptz, timestamptz, uuid[], uuid[], uuid[], integer),
  memory_internal.search_fact_details(uuid, timestamptz, timestamptz, uuid[]),
  memory_internal.context_communities(uuid, timestamptz, timestamptz, uuid[], uuid[], integer, integer),
  memory_internal.question_ngrams(text), memory_internal.name_tokens(text),
  memory_internal.content_words(text[]),
  memory_internal.estimate_tokens(text),
  memory_internal.redaction_detectors(),
  memory_internal.add_within_budget(text[], integer, text, text, integer)
  to chronomem_app, chronomem_analyst;
grant execute on function memory_internal.fact_versions(uuid) to chronomem_app, chronomem_analyst;
-- memory.export_subject finds a subject's facts as memory.wipe does, and
-- the timeline and the export give a version's status alike.
grant execute on function
  memory_internal.auto_object_names(uuid, uuid, text[]),
  memory_internal.named_auto_objects(uuid, uuid, text[]),
  memory_internal.entity_names(uuid, uuid),
  memory_internal.facts_naming(uuid, uuid, uuid),
  memory_internal.version_status(tstzrange, timestamptz)
  to chronomem_app, chronomem_analyst;
-- The conflict inbox and its rules (functions/055_conflicts.sql).
grant execute on function
  memory.list_conflicts(uuid, text, text, integer, timestamptz, uuid),
  memory.get_conflict(uuid, uuid),
  memory.suggest_cardinality(uuid),
  memory.conflict_policy(uuid),
  memory.predicate_changes(uuid, integer),
  memory_internal.cardinality(uuid, uuid, text),
  memory_internal.fact_standing(uuid, uuid, timestamptz),
  memory_internal.fact_reviews_json(uuid, uuid),
  memory_internal.fact_trust(text, real),
  memory_internal.conflict_member_json(uuid, memory.conflict_members)
  to chronomem_app, chronomem_analyst;

-- Writers: the app role only.  These are security definer: they write as
-- the owner, under the same forced row-level security.
grant execute on function
  memory.create_org(text),
  memory.create_project(uuid, text),
  memory.declare_predicate(uuid, text, text),
  memory.upsert_entity(uuid, text, text, text),
  memory.add_alias(uuid, text, text),
  memory.merge_entities(uuid, text, text, boolean),
  memory.split_entity(uuid, text, boolean),
  memory.assert_facts(uuid, jsonb, text, uuid, boolean, text),
  memory.retract_fact(uuid, uuid, text, text),
  memory.close_fact(uuid, uuid, timestamptz, text, text, text),
  memory.wipe(uuid, text, text, text),
  memory.set_retention(uuid, interval, text),
  memory.set_redaction_rule(uuid, text, text, text),
  memory.delete_redaction_rule(uuid, text),
  memory.purge_expired(uuid, text),
  memory.delete_project(uuid, text),
  memory.reconcile_edges(integer, uuid),
  memory.ingest(uuid, text, jsonb, text, jsonb),
  memory.retry_dead_jobs(text, uuid),
  memory.project_backlog(uuid),
  memory.compute_communities(uuid, integer),
  memory.refresh_communities(uuid, integer),
  memory.create_webhook(uuid, text, text[]),
  memory.rotate_webhook_secret(uuid, uuid),
  memory.update_webhook(uuid, uuid, text, text[], boolean),
  memory.delete_webhook(uuid, uuid),
  memory.resolve_conflict(uuid, uuid, text, uuid, timestamptz, text, text),
  memory.review_fact(uuid, uuid, text, text, text),
  memory.set_conflict_policy(uuid, text, boolean, boolean, real, integer, text),
  memory.undo_predicate_change(uuid, bigint, text),
  -- Counts across orgs: for the operator's /metrics, not for tenants' analysts.
  memory.queue_stats()
  to chronomem_app;
grant execute on function memory_internal.try_timestamptz(text), memory_internal.is_uuid(text),
  memory_internal.instant_in_range(timestamptz),
  memory_internal.extraction_fact_ids(uuid, integer)
  to chronomem_app;

-- JSON reads (invoker rights, under row-level security): app and analyst.
grant execute on function
  memory.get_project(uuid),
  memory.list_facts(uuid, timestamptz, timestamptz, text, text, uuid, integer),
  memory.fact_changes(uuid, timestamptz, timestamptz, text, integer),
  memory.session_messages(uuid, text, integer, integer),
  memory.list_sessions(uuid, text, integer),
  memory.graph_neighbors(uuid, text, integer, timestamptz, timestamptz, integer),
  memory.list_entities(uuid, text, integer),
  memory.list_communities(uuid, text, integer, integer),
  memory.project_overview(uuid),
  memory.fact_detail(uuid, uuid),
  memory.embedding_model(),
  -- Webhook readers read no secret.
  memory.webhook_event_types(),
  memory.list_webhooks(uuid),
  memory.webhook_deliveries(uuid, uuid, integer, bigint)
  to chronomem_app, chronomem_analyst;
grant execute on function memory.project_backlog(uuid) to chronomem_analyst;
-- Totals across orgs: for the operator's /metrics, not for tenants' analysts.
grant execute on function memory.metric_totals() to chronomem_app;
-- memory.reembed(integer, text): the owner only (no grant).

-- The HTTP and MCP layer (schema memory_http): the app role only.
grant execute on function
  memory_http.permissions(),
  memory_http.authenticate(text),
  memory_http.authorize(text, text, uuid),
  memory_http.authorize_call(text, text, uuid, boolean),
  memory_http.call_permissions(),
  memory_http.call_permission(text),
  memory_http.authorize_own_project(text, text),
  memory_http.authorize_key(text),
  memory_http.create_api_key(uuid, text, text[]),
  memory_http.list_api_keys(uuid),
  memory_http.revoke_api_key(uuid, uuid),
  memory_http.bootstrap_api_key(uuid, text, text, text, text[]),
  memory_http.org(),
  memory_http.list_projects(),
  memory_http.create_project(text),
  memory_http.assert_facts(uuid, jsonb, boolean),
  memory_http.ingest(uuid, text, jsonb, text, jsonb),
  memory_http.retract_fact(uuid, uuid, text),
  memory_http.wipe(uuid, text, text),
  memory_http.set_retention(uuid, bigint),
  memory_http.delete_project(uuid),
  memory_http.declare_predicate(uuid, text, text),
  memory_http.set_redaction_rule(uuid, text, text, text),
  memory_http.delete_redaction_rule(uuid, text),
  memory_http.upsert_entity(uuid, text, text, text, text[]),
  memory_http.merge_entities(uuid, text, text, boolean),
  memory_http.split_entity(uuid, text, boolean),
  memory_http.refresh_communities(uuid),
  memory_http.fact_history(uuid, uuid),
  memory_http.timeline(uuid, text, text),
  memory_http.export_subject(uuid, text),
  memory_http.search(uuid, text, vector, vector, timestamptz, timestamptz, integer, text[], text, text[], jsonb),
  memory_http.context(uuid, text, vector, vector, timestamptz, timestamptz, integer, integer, text[], jsonb),
  memory_http.create_webhook(uuid, text, text[]),
  memory_http.update_webhook(uuid, uuid, text, text[], boolean),
  memory_http.delete_webhook(uuid, uuid),
  memory_http.rotate_webhook_secret(uuid, uuid),
  memory_http.webhook_deliveries(uuid, uuid, integer, bigint),
  memory_http.list_conflicts(uuid, text, text, integer, timestamptz, uuid),
  memory_http.get_conflict(uuid, uuid),
  memory_http.resolve_conflict(uuid, uuid, text, uuid, timestamptz, text),
  memory_http.review_fact(uuid, uuid, text, text),
  memory_http.suggest_cardinality(uuid),
  memory_http.conflict_policy(uuid),
  memory_http.set_conflict_policy(uuid, jsonb),
  memory_http.predicate_changes(uuid, integer),
  memory_http.undo_predicate_change(uuid, bigint),
  memory_http.open_key_session(text, integer),
  memory_http.open_oidc_session(jsonb, integer),
  memory_http.close_session(text)
  to chronomem_app;
-- memory.set_oidc_mapping, oidc_mappings and delete_oidc_mapping: the owner
-- only (no grant): no client role may map a token to an org.
revoke execute on function
  memory.set_oidc_mapping(uuid, text, text, text, text, text[]),
  memory.oidc_mappings(),
  memory.delete_oidc_mapping(uuid)
  from chronomem_app, chronomem_analyst;
-- Called by the invoker-rights functions of memory_http and memory as the
-- calling role.
grant execute on function
  memory_internal.api_allows(text[], uuid, text, uuid),
  memory_internal.require_api(text, uuid),
  memory_internal.api_key_id(),
  memory_internal.api_actor(),
  memory_internal.check_limit(integer, integer),
  memory_internal.api_query_embedding(vector, vector),
  memory_internal.entity_api_json(memory.entities),
  memory_internal.fact_event_json(bigint, timestamptz, text, uuid, uuid, uuid, tstzrange, tstzrange,
                                  text, text, text, text, text, text)
  to chronomem_app, chronomem_analyst;
grant execute on function memory_internal.require_api_key() to chronomem_app;

-- The worker protocol and the work of its jobs (schema memory_worker): the
-- app role only (the workers connect as it).  webhook_target returns
-- secrets: the analyst must never reach it.
grant execute on function
  memory_worker.claim_jobs(text, text[], integer, interval),
  memory_worker.complete_job(uuid, bigint, text, jsonb),
  memory_worker.fail_job(uuid, bigint, text, text, boolean),
  memory_worker.park_job(uuid, bigint, text, text),
  memory_worker.extend_lease(uuid, bigint, text, interval),
  memory_worker.resume_waiting_jobs(text[]),
  memory_worker.enqueue_due_jobs(),
  memory_worker.purge_done_jobs(interval),
  memory_worker.purge_expired_episodes(),
  memory_worker.extraction_context(uuid, integer),
  memory_worker.apply_extraction(uuid, jsonb, real, integer, jsonb),
  memory_worker.embedding_inputs(uuid, text, uuid[]),
  memory_worker.store_embeddings(text, uuid[], vector[]),
  memory_worker.queue_community_refreshes(integer),
  memory_worker.webhook_target(uuid),
  memory_worker.log_webhook_attempt(bigint, integer, text, integer, boolean)
  to chronomem_app;

grant select on all tables in schema memory to chronomem_app, chronomem_analyst;
grant select on memory_internal.counters, memory_internal.episode_terms,
  memory_internal.episode_term_df, memory_internal.episode_term_df_pending, memory_internal.fact_terms,
  memory_internal.entity_name_tokens
  to chronomem_app, chronomem_analyst;
-- readyz compares the schema's revision with the code's.
grant select on public.alembic_version to chronomem_app;

-- Model usage and budgets (functions/083_model_usage.sql): usage and the
-- budget are read by app and analyst; the budget is set by the app (the
-- HTTP layer asks for project:manage); calls are recorded by the worker.
grant execute on function
  memory.model_usage(uuid, timestamptz, timestamptz),
  memory.model_budget(uuid),
  memory_internal.model_period_start(text, timestamptz),
  memory_internal.model_tokens_since(uuid, uuid, timestamptz),
  memory_internal.model_job_kinds()
  to chronomem_app, chronomem_analyst;
grant execute on function memory.set_model_budget(uuid, bigint, text) to chronomem_app;
grant execute on function
  memory_worker.record_model_call(uuid, text, bigint, uuid, text, text, integer, integer, double precision, text)
  to chronomem_app;
grant execute on function
  memory_http.model_usage(uuid, timestamptz, timestamptz),
  memory_http.model_budget(uuid),
  memory_http.set_model_budget(uuid, bigint, text)
  to chronomem_app;

-- Attachments (functions/071_attachments.sql, 086_http_attachments.sql):
-- read by app and analyst (search hits name the file a chunk came from);
-- written by the app through the HTTP layer (project:write) or the SQL API.
grant execute on function
  memory.get_attachment(uuid, uuid),
  memory.attachment_content(uuid, uuid),
  memory_internal.episode_attachment(uuid, uuid)
  to chronomem_app, chronomem_analyst;
grant execute on function
  memory.ingest_attachments(uuid, text, jsonb, jsonb, bytea[], text, jsonb),
  memory_http.ingest_attachments(uuid, text, jsonb, jsonb, bytea[], text, jsonb)
  to chronomem_app;

-- Community summaries (functions/079_community_summaries.sql): memory.context
-- reads them as the caller; the worker reads the due communities and
-- stores what the model wrote.
grant execute on function
  memory_internal.context_summary(uuid, uuid, timestamptz, timestamptz, boolean)
  to chronomem_app, chronomem_analyst;
grant execute on function
  memory_worker.community_summary_inputs(uuid, integer, integer, integer),
  memory_worker.store_community_summaries(uuid, jsonb, text)
  to chronomem_app;

-- Extraction schemas, enrichment and rejections
-- (functions/074_extraction_schemas.sql, 086_http_extraction.sql): read by
-- app and analyst (search's label and field filter as the caller); the
-- schema is set by the app (the HTTP layer asks for configuration:write);
-- the worker records rejections.
grant execute on function
  memory.extraction_schema(uuid, integer),
  memory.extraction_schema_versions(uuid),
  memory.episode_extraction(uuid, uuid),
  memory.list_extraction_rejections(uuid, text, integer, bigint, uuid),
  memory_internal.extraction_rejection_reasons(),
  memory_internal.current_extraction_schema(uuid, uuid),
  memory_internal.extraction_schema_json(memory.extraction_schemas),
  memory_internal.extraction_matches(uuid, uuid, text, uuid, text[], jsonb)
  to chronomem_app, chronomem_analyst;
grant execute on function
  memory.set_extraction_schema(uuid, jsonb, text),
  memory_http.set_extraction_schema(uuid, jsonb),
  memory_http.extraction_schema(uuid, integer),
  memory_http.extraction_schema_versions(uuid),
  memory_http.episode_extraction(uuid, uuid),
  memory_http.extraction_rejections(uuid, text, integer, bigint),
  memory_worker.record_extraction_rejections(uuid, jsonb, jsonb)
  to chronomem_app;
