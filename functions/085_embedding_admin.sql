-- Changing the embedding model: `chronomem reembed --dim N [--model NAME]`
-- runs memory.reembed as the owner.  The dimension lives in the column
-- types (memory.embedding_dim() reads it); the model that produced the
-- vectors, when an operator named one, is noted in the columns' comments
-- so a worker configured with another model refuses to start instead of
-- mixing two models' vectors in one index.

create or replace function memory.embedding_model() returns text
  language sql stable
  as $$
    select substring(col_description('memory.episodes'::regclass, a.attnum)
                     from '\[model: ([^]]+)\]')
      from pg_attribute a
     where a.attrelid = 'memory.episodes'::regclass and a.attname = 'embedding'
  $$;
comment on function memory.embedding_model() is
  'The embedding model named by the last `chronomem reembed --model`, or NULL (none named: only the dimension is checked).';

create or replace function memory.reembed(p_dim integer, p_model text default null)
  returns jsonb
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  c_chunk constant integer := 100;  -- ids per embed job
  v_prev_org text := current_setting('chronomem.org_id', true);
  v_org uuid;
  v_kind text;
  v_table regclass;
  v_index text;
  v_what text;
  v_episode_jobs integer := 0; v_fact_jobs integer := 0; v_entity_jobs integer := 0;
  v_n integer;
begin
  if p_dim is null or p_dim not between 1 and 2000 then
    -- pgvector's HNSW index takes at most 2000 dimensions of type vector.
    raise exception 'dimension must be between 1 and 2000, not %', coalesce(p_dim::text, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
  if p_model is not null and p_model !~ '^[A-Za-z0-9._:/@+-]{1,200}$' then
    raise exception 'model name must be 1 to 200 letters, digits or ._:/@+-, not "%"', p_model
      using errcode = 'invalid_parameter_value';
  end if;

  -- Each ALTER locks its table until the commit (writers wait).  Tables in
  -- the order writers take them (episodes, then entities before facts), so
  -- a concurrent ingest or assert_facts cannot deadlock with this.
  foreach v_kind in array array['episode', 'entity', 'fact'] loop
    v_table := case v_kind when 'episode' then 'memory.episodes'
                           when 'fact' then 'memory.fact_embeddings'
                           else 'memory.entities' end::regclass;
    v_index := case v_kind when 'episode' then 'episodes_embedding_idx'
                           when 'fact' then 'fact_embeddings_embedding_idx'
                           else 'entities_embedding_idx' end;
    v_what := case v_kind when 'entity' then 'Embedding of name and summary'
                          when 'fact' then 'Embedding of the version''s content'
                          else 'Embedding of content' end;
    execute format('drop index if exists memory.%I', v_index);
    if v_kind = 'fact' then
      -- Fact versions hold their vectors as rows (sql/0026): none is left.
      truncate memory.fact_embeddings;
    end if;
    execute format('alter table %s alter column embedding type vector(%s) using null',
                   v_table, p_dim);
    execute format('create index %I on %s using hnsw (embedding vector_cosine_ops)',
                   v_index, v_table);
    execute format('comment on column %s.embedding is %L', v_table,
                   v_what || coalesce(' [model: ' || p_model || ']', '')
                   || case v_kind when 'fact' then '.' else '; NULL until the embed job ran.' end);
  end loop;

  -- Every row needs a new vector: embed jobs per org and project, c_chunk
  -- ids each.  The owner reads content only under an org scope (forced
  -- RLS); every org has its periodic schedules, which the owner may read.
  for v_org in select distinct s.org_id from memory.job_schedules s order by 1 loop
    perform memory_internal.set_local('chronomem.org_id', v_org::text);
    insert into memory.jobs (org_id, project_id, kind, payload)
    select v_org, c.project_id, 'embed', jsonb_build_object('kind', 'episode', 'ids', jsonb_agg(c.id))
      from (select e.project_id, e.episode_id as id,
                   (row_number() over (partition by e.project_id order by e.episode_id) - 1) / c_chunk as chunk
              from memory.episodes e where e.org_id = v_org) c
     group by c.project_id, c.chunk;
    get diagnostics v_n = row_count;
    v_episode_jobs := v_episode_jobs + v_n;

    insert into memory.jobs (org_id, project_id, kind, payload)
    select v_org, c.project_id, 'embed', jsonb_build_object('kind', 'fact', 'ids', jsonb_agg(c.id))
      from (select p.project_id, v.fact_id as id,
                   (row_number() over (partition by p.project_id order by v.fact_id) - 1) / c_chunk as chunk
              from memory.projects p
              cross join lateral memory_internal.fact_versions(p.project_id) v
             where p.org_id = v_org) c
     group by c.project_id, c.chunk;
    get diagnostics v_n = row_count;
    v_fact_jobs := v_fact_jobs + v_n;

    insert into memory.jobs (org_id, project_id, kind, payload)
    select v_org, c.project_id, 'embed', jsonb_build_object('kind', 'entity', 'ids', jsonb_agg(c.id))
      from (select n.project_id, n.entity_id as id,
                   (row_number() over (partition by n.project_id order by n.entity_id) - 1) / c_chunk as chunk
              from memory.entities n where n.org_id = v_org) c
     group by c.project_id, c.chunk;
    get diagnostics v_n = row_count;
    v_entity_jobs := v_entity_jobs + v_n;
  end loop;
  perform memory_internal.set_local('chronomem.org_id', v_prev_org);

  return jsonb_build_object(
    'dim', p_dim, 'model', p_model,
    'embed_jobs', jsonb_build_object('episode', v_episode_jobs, 'fact', v_fact_jobs,
                                     'entity', v_entity_jobs));
end
$$;
comment on function memory.reembed(integer, text) is
  'Owner only: switch the installation to p_dim-dimension embeddings (from model p_model, if named). Drops the HNSW indexes, sets every embedding column to vector(p_dim) with all vectors NULL (fact versions'' vectors deleted), recreates the indexes and queues embed jobs for every episode, fact and entity of every org and project. Run by `chronomem reembed`.';
