-- Erasure you can prove: every table that holds a tenant's rows, named once
-- with what it holds; the receipt a wipe returns (rows it deleted and
-- changed in each store that held content); and a scan of every store for
-- residue of given strings.

-- Every table of the chronomem schemas, with what it holds of a tenant:
--   content   what users wrote or what is derived from it (text, names,
--             lexemes, embeddings, payloads): a wipe erases it in its scope;
--   settings  the project's configuration, written by operators (names,
--             URLs, keys): kept by a wipe, removed by delete_project;
--   counts    numbers and audit rows with counts only, never content.
-- tests/py/test_erasure.py fails when a table exists that is not listed
-- here, so a new store cannot be added without deciding how it is erased.
create or replace function memory_internal.data_stores()
  returns table (store text, relation regclass, holds text, about text)
  language sql stable parallel safe
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select s.store, s.store::regclass, s.holds, s.about from (values
    ('memory.episodes', 'content', 'messages as written, their embeddings and text vectors'),
    ('memory.sessions', 'content', 'session ids and metadata as the client named them'),
    ('memory.attachments', 'content', 'files sent with messages: bytes, names, digests'),
    ('memory.attachment_chunks', 'content', 'which episode holds which page and offset of a file'),
    ('memory.facts', 'content', 'every fact version: subject, predicate, object, windows'),
    ('memory.fact_events', 'content', 'the history of fact versions, with reasons and actors'),
    ('memory.fact_embeddings', 'content', 'embeddings of fact texts'),
    ('memory.tombstones', 'content', 'retracted identities'),
    ('memory.edges', 'content', 'the entity graph drawn from facts'),
    ('memory.entities', 'content', 'entity names, kinds, embeddings'),
    ('memory.entity_aliases', 'content', 'other names of entities'),
    ('memory.notes', 'content', 'preferences and summaries drawn from episodes'),
    ('memory.communities', 'content', 'communities of entities, labelled by a member''s name, with the model''s summary'),
    ('memory.community_members', 'content', 'which entity is in which community'),
    ('memory.community_runs', 'counts', 'when communities were computed and how many'),
    ('memory.conflicts', 'content', 'conflicting sets of facts: subject, predicate, reasons'),
    ('memory.conflict_members', 'content', 'the facts and held claims of each conflict'),
    ('memory.conflict_events', 'content', 'the history of conflicts, with reasons and actors'),
    ('memory.subject_cardinalities', 'content', 'subjects whose predicate was kept as many'),
    ('memory.fact_reviews', 'content', 'reviews of facts: standing, reviewer, reason'),
    ('memory.predicate_changes', 'settings', 'changes of predicates'' cardinality and their evidence'),
    ('memory.extraction_schemas', 'settings', 'versions of the project''s extraction schema'),
    ('memory.episode_extractions', 'content', 'episodes'' enrichment: classification labels, custom fields, provenance'),
    ('memory.extraction_rejections', 'content', 'extracted items dropped, as the model gave them, with reasons'),
    ('memory.jobs', 'content', 'queued work: episode and fact ids, webhook bodies, results'),
    ('memory.webhook_delivery_log', 'content', 'delivery attempts: event ids, status, errors'),
    ('memory_internal.episode_terms', 'content', 'lexemes of episodes (full-text postings)'),
    ('memory_internal.episode_term_df', 'content', 'lexemes of a project with their document counts'),
    ('memory_internal.episode_term_df_pending', 'content', 'lexeme count changes not folded in yet'),
    ('memory_internal.fact_terms', 'content', 'lexemes of facts (full-text postings)'),
    ('memory_internal.entity_name_tokens', 'content', 'tokens of entity names and aliases'),
    ('memory_internal.ingest_requests', 'content', 'idempotency keys and the answers they replay'),
    ('memory_internal.community_labels', 'content', 'working set of a community computation'),
    ('memory_internal.community_links', 'content', 'working set of a community computation'),
    ('memory.orgs', 'settings', 'tenant names'),
    ('memory.projects', 'settings', 'project names'),
    ('memory.predicates', 'settings', 'declared predicates and their cardinality'),
    ('memory.redaction_rules', 'settings', 'redaction detectors, custom patterns and actions'),
    ('memory_internal.redaction_keys', 'settings', 'keys of the redaction hashes'),
    ('memory.webhook_endpoints', 'settings', 'webhook URLs and subscriptions'),
    ('memory_internal.webhook_secrets', 'settings', 'webhook signing secrets'),
    ('memory_internal.api_keys', 'settings', 'API key hashes and permissions'),
    ('memory_internal.auth_sessions', 'settings', 'sign-in session hashes, permissions, who signed in'),
    ('memory_internal.oidc_mappings', 'settings', 'OIDC issuer, audience and claim to project and permissions'),
    ('memory.job_schedules', 'settings', 'periodic jobs of an org'),
    ('memory.audit_log', 'counts', 'who did what, with counts, never content'),
    ('memory.model_calls', 'counts', 'model calls of jobs: kind, model, tokens, latency, outcome'),
    ('memory.model_usage_periods', 'counts', 'model calls and tokens per day and job kind'),
    ('memory.model_budgets', 'settings', 'a project''s model token budget per day or month'),
    ('memory_internal.counters', 'counts', 'per-project counters for /metrics')
  ) s(store, holds, about)
$$;
comment on function memory_internal.data_stores() is
  'Every table of the chronomem schemas and what it holds of a tenant: content (a wipe erases it in its scope), settings (kept by a wipe, removed with the project) or counts (never content). The one list the wipe receipt and memory.verify_erased read.';

-- Rows deleted, updated and inserted so far in this transaction in each store
-- holding one of p_holds, from the statistics collector's per-transaction counters: exact
-- for this transaction's own statements (cascades and triggers included),
-- at no cost of counting rows.  NULL when track_counts is off.
create or replace function memory_internal.store_changes(p_holds text[])
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select case when current_setting('track_counts')::boolean then
    (select jsonb_object_agg(s.store, jsonb_build_array(
              pg_stat_get_xact_tuples_deleted(s.relation), pg_stat_get_xact_tuples_updated(s.relation),
              pg_stat_get_xact_tuples_inserted(s.relation)))
       from memory_internal.data_stores() s where s.holds = any (p_holds))
  end
$$;
comment on function memory_internal.store_changes(text[]) is
  'Per store of memory_internal.data_stores() holding one of p_holds: [rows deleted, updated, inserted] by this transaction so far (NULL when track_counts is off). Two readings around a wipe give its receipt.';

-- The receipt: per store read by p_before, the rows the wipe deleted, the
-- rows it changed in place (job payloads losing wiped ids or bodies,
-- staying facts' windows laid out again, lexeme counts going down) and the
-- rows it wrote (the staying facts' history laid out again: their events
-- and edges, deleted and written anew, count in both).
create or replace function memory_internal.erasure_receipt(p_before jsonb)
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select case when p_before is not null then
    (select jsonb_object_agg(b.key, jsonb_build_object(
              'deleted', pg_stat_get_xact_tuples_deleted(b.key::regclass) - (b.value ->> 0)::bigint,
              'updated', pg_stat_get_xact_tuples_updated(b.key::regclass) - (b.value ->> 1)::bigint,
              'inserted', pg_stat_get_xact_tuples_inserted(b.key::regclass) - (b.value ->> 2)::bigint)
              order by b.key)
       from jsonb_each(p_before) b)
  end
$$;
comment on function memory_internal.erasure_receipt(jsonb) is
  'Rows deleted, updated and inserted in each store p_before names since memory_internal.store_changes() read it: the receipt memory.wipe returns (NULL when track_counts is off).';

-- Where residue of given strings remains in a tenant's stores: every store
-- of memory_internal.data_stores() (settings and counts too: proving they
-- hold no content is part of the proof), every row of the project (of the
-- org for stores without a project column), matched case-insensitively on
-- the row's text, and on the lexemes and name tokens the strings would have
-- produced in the stores that keep those instead of the words.  For the
-- owner and operators only: it reads every tenant's rows of the org scoped
-- by memory.use_org, and works after delete_project (no project row needed).
create or replace function memory.verify_erased(p_project uuid, p_strings text[])
  returns table (store text, string text, rows_found bigint)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := nullif(current_setting('chronomem.org_id', true), '')::uuid;
  v_strings text[];
  s record;
  v_where text;
  v_match text;
  v_unlisted text;
begin
  if v_org is null then
    raise exception 'verify_erased needs an org scope' using errcode = 'invalid_parameter_value',
      hint = 'Call memory.use_org(org) first.';
  end if;
  if p_project is null then
    raise exception 'project must not be null' using errcode = 'null_value_not_allowed';
  end if;
  v_strings := array(select distinct btrim(x) from unnest(p_strings) x where btrim(x) <> '');
  if coalesce(cardinality(v_strings), 0) = 0 then
    raise exception 'verify_erased needs at least one non-empty string' using errcode = 'invalid_parameter_value';
  end if;
  -- A store the list does not know could hold anything: no proof then.
  select string_agg(c.oid::regclass::text, ', ' order by c.oid::regclass::text) into v_unlisted
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
   where n.nspname in ('memory', 'memory_internal', 'memory_http', 'memory_worker')
     and c.relkind in ('r', 'p') and not c.relispartition
     and c.oid not in (select d.relation from memory_internal.data_stores() d);
  if v_unlisted is not null then
    raise exception 'tables not in memory_internal.data_stores(): %', v_unlisted
      using errcode = 'object_not_in_prerequisite_state';
  end if;

  for s in
    select d.relation, d.store as name,
           exists (select from pg_attribute a where a.attrelid = d.relation
                     and a.attname = 'project_id' and not a.attisdropped) as by_project,
           (select a.attname::text from pg_attribute a where a.attrelid = d.relation
               and a.attname in ('lexeme', 'token') and not a.attisdropped) as word_column,
           (select a.attname::text from pg_attribute a where a.attrelid = d.relation
               and a.attname = 'lexemes' and not a.attisdropped) as words_column
      from memory_internal.data_stores() d order by 2
  loop
    v_where := case when s.by_project then 't.org_id = $1 and t.project_id = $2' else 't.org_id = $1' end;
    -- strpos on lower(): no pattern characters to escape in the strings.
    v_match := 'strpos(lower(t::text), lower(w.string)) > 0';
    if s.word_column is not null then
      v_match := v_match || format(
        ' or t.%1$I = any (tsvector_to_array(to_tsvector(''english'', w.string)))'
        ' or t.%1$I = any (memory_internal.name_tokens(memory.normalize_text(w.string)))',
        s.word_column);
    end if;
    if s.words_column is not null then
      v_match := v_match || format(
        ' or t.%1$I && tsvector_to_array(to_tsvector(''english'', w.string))', s.words_column);
    end if;
    return query execute format(
      'select %L::text, w.string, count(*) from unnest($3) w(string) join %s t on %s and (%s)'
      ' group by w.string order by w.string',
      s.name, s.relation, v_where, v_match)
      using v_org, p_project, v_strings;
  end loop;
end
$$;
comment on function memory.verify_erased(uuid, text[]) is
  'Owner and operators only: every store of memory_internal.data_stores() where a row of the project (of the org for org-wide stores) still holds one of the strings (case-insensitive, or as the lexemes and name tokens it would produce), with the number of rows; no rows means none remains. Fails when a table exists that data_stores() does not list. Needs memory.use_org; works after delete_project.';

-- Retention: a project may keep episodes for a period after they are
-- stored (record time, not occurred_at: a conversation imported today from
-- last year is kept for the period from today).
create or replace function memory.set_retention(
  p_project uuid, p_retention interval, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_retention is not null and p_retention < interval '1 hour' then
    raise exception 'retention must be at least 1 hour, not %', p_retention
      using errcode = 'invalid_parameter_value', detail = 'retention';
  end if;
  update memory.projects set retention = p_retention
   where org_id = v_org and project_id = p_project;
  insert into memory.audit_log (org_id, project_id, action, resource, actor, counts)
  values (v_org, p_project, 'project.retention', 'project:' || p_project,
          coalesce(p_actor, session_user),
          jsonb_build_object('retention_seconds', extract(epoch from p_retention)::bigint));
  return jsonb_build_object('project_id', p_project,
                            'retention_seconds', extract(epoch from p_retention)::bigint);
end
$$;
comment on function memory.set_retention(uuid, interval, text) is
  'Keep the project''s episodes for this long after they are stored (NULL: for ever; at least an hour); the periodic purge job erases older ones and the facts drawn from them. Audited.';

create or replace function memory.purge_expired(p_project uuid, p_actor text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_before timestamptz;
begin
  select now() - p.retention into v_before from memory.projects p
   where p.org_id = v_org and p.project_id = p_project;
  -- Nothing to erase: no wipe, no lock, no audit row.
  if v_before is null or not exists (
       select from memory.episodes e
        where e.org_id = v_org and e.project_id = p_project and e.created_at < v_before) then
    return null;
  end if;
  return memory_internal.wipe_content(p_project, null, null, v_before,
                                      coalesce(p_actor, 'retention'));
end
$$;
comment on function memory.purge_expired(uuid, text) is
  'Erase the project''s episodes stored longer ago than its retention and the facts drawn from them, as a wipe of scope expired (receipt, audit row, memory.wiped event); NULL when the project has no retention or nothing is that old.';

create or replace function memory_worker.purge_expired_episodes()
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  p record;
  v_out jsonb := '{}';
  v_receipt jsonb;
begin
  for p in select x.project_id from memory.projects x
            where x.org_id = memory_internal.current_org() and x.retention is not null
            order by x.project_id loop
    v_receipt := memory.purge_expired(p.project_id);
    if v_receipt is not null then
      v_out := v_out || jsonb_build_object(p.project_id::text, v_receipt ->> 'episodes');
    end if;
  end loop;
  return v_out;
end
$$;
comment on function memory_worker.purge_expired_episodes() is
  'The periodic purge job: memory.purge_expired for every project of the current org with a retention period; returns the episodes erased per project that had any.';
