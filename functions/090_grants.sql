-- Explicit grants, re-applied after every migrate (a function created since
-- the last run starts with PUBLIC execute, which this revokes).

revoke execute on all functions in schema memory, memory_internal from public;

-- Row-level security calls these as the querying role; the invoker-rights
-- readers call the rest.
grant execute on function
  memory_internal.current_org(),
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
  memory.predicates_of(uuid),
  memory.counters(uuid),
  memory.embedding_dim(),
  memory.search(uuid, text, vector, timestamptz, timestamptz, integer, text[], text),
  memory.search_rows(uuid, text, vector, timestamptz, timestamptz, integer, text[], text),
  memory.vector_query_text(uuid, text, timestamptz, timestamptz),
  memory.context(uuid, text, vector, timestamptz, timestamptz, integer, integer)
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
  memory_internal.add_within_budget(text[], integer, text, text, integer)
  to chronomem_app, chronomem_analyst;
grant execute on function memory_internal.fact_versions(uuid) to chronomem_app, chronomem_analyst;

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
  memory.delete_project(uuid, text),
  memory.reconcile_edges(integer, uuid),
  memory.ingest(uuid, text, jsonb, text, jsonb),
  memory.embedding_inputs(uuid, text, uuid[]),
  memory.store_embeddings(text, uuid[], vector[]),
  memory.extraction_context(uuid, integer),
  memory.apply_extraction(uuid, jsonb, real, integer),
  memory.claim_jobs(text, text[], integer, interval),
  memory.complete_job(uuid, bigint, text, jsonb),
  memory.fail_job(uuid, bigint, text, text, boolean),
  memory.park_job(uuid, bigint, text, text),
  memory.extend_lease(uuid, bigint, text, interval),
  memory.resume_waiting_jobs(text[]),
  memory.retry_dead_jobs(text, uuid),
  memory.project_backlog(uuid),
  memory.enqueue_due_jobs(),
  memory.purge_done_jobs(interval),
  memory.compute_communities(uuid, integer),
  memory.refresh_communities(uuid, integer),
  memory.queue_community_refreshes(integer),
  -- Counts across orgs: for the operator's /metrics, not for tenants' analysts.
  memory.queue_stats()
  to chronomem_app;
grant execute on function memory_internal.try_timestamptz(text), memory_internal.is_uuid(text),
  memory_internal.instant_in_range(timestamptz),
  memory_internal.extraction_fact_ids(uuid, integer)
  to chronomem_app;

grant select on all tables in schema memory to chronomem_app, chronomem_analyst;
grant select on memory_internal.counters, memory_internal.episode_terms,
  memory_internal.episode_term_df, memory_internal.episode_term_df_pending, memory_internal.fact_terms,
  memory_internal.entity_name_tokens
  to chronomem_app, chronomem_analyst;
