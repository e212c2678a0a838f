-- Community summaries: the model writes a short summary of each community
-- whose members changed since its summary was written (the
-- summarize_communities job, workers/summaries.py), stored on the
-- community's row (sql/0044).  Communities are current only (each
-- computation replaces them); a summary is shown by memory.context when it
-- was written by the instants asked for, like the community itself.

-- A community is due a summary when it has none, or one written for other
-- members (members_digest, sql/0044).  One summarize_communities job per
-- project is queued (or waiting for a model) at a time; a running one does
-- not count, since the communities it read may have changed since.
-- Returns whether it queued one.
create or replace function memory_internal.queue_community_summaries(p_org uuid, p_project uuid)
  returns boolean
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if not exists (select from memory.communities c
                  where c.org_id = p_org and c.project_id = p_project
                    and (c.summary is null or c.summary_digest <> c.members_digest))
     or exists (select from memory.jobs j
                 where j.org_id = p_org and j.project_id = p_project
                   and j.kind = 'summarize_communities' and j.status in ('queued', 'waiting')) then
    return false;
  end if;
  insert into memory.jobs (org_id, project_id, kind, payload)
  values (p_org, p_project, 'summarize_communities', '{}');
  return true;
end
$$;
comment on function memory_internal.queue_community_summaries(uuid, uuid) is
  'Queue a summarize_communities job for the project when one of its communities has no summary for its current members and no such job is queued or waiting; returns whether it queued one.';

-- What the model reads to summarize a project's due communities: the
-- largest first, at most p_communities; each with its id, label, size,
-- members_digest, its first p_members members (name, type) and at most
-- p_facts of the facts that hold now whose subject is a member (and their
-- object's name), with their ids (summary_facts, for the wipes).
create or replace function memory_worker.community_summary_inputs(
  p_project uuid, p_communities integer default 20, p_members integer default 30,
  p_facts integer default 20)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  if p_communities is null or p_communities not between 1 and 200 then
    raise exception 'communities must be between 1 and 200' using errcode = 'invalid_parameter_value',
      detail = 'communities';
  end if;
  if p_members is null or p_members not between 1 and 1000 then
    raise exception 'members must be between 1 and 1000' using errcode = 'invalid_parameter_value',
      detail = 'members';
  end if;
  if p_facts is null or p_facts not between 0 and 1000 then
    raise exception 'facts must be between 0 and 1000' using errcode = 'invalid_parameter_value',
      detail = 'facts';
  end if;
  return coalesce((
    select jsonb_agg(jsonb_build_object(
             'community_id', c.community_id, 'label', c.label, 'size', c.size,
             'members_digest', c.members_digest,
             'members', coalesce((
               select jsonb_agg(jsonb_build_object('name', n.name, 'type', n.entity_type)
                                order by n.name)
                 from (select e.name, e.entity_type
                         from memory.community_members m
                         join memory.entities e on e.org_id = m.org_id and e.entity_id = m.entity_id
                        where m.org_id = v_org and m.community_id = c.community_id
                        order by e.name
                        limit p_members) n), '[]'),
             'facts', coalesce((
               select jsonb_agg(jsonb_build_object('fact_id', f.fact_id, 'content', f.content,
                                                   'subject', f.subject, 'predicate', f.predicate,
                                                   'object', f.object)
                                order by f.subject, f.predicate, f.fact_id)
                 from (select f.fact_id, f.content, s.name as subject, f.predicate,
                              coalesce(o.name, f.object_literal) as object
                         from memory.community_members m
                         join memory.facts_at(p_project) f
                           on f.org_id = m.org_id and f.subject_id = m.entity_id
                         join memory.entities s on s.org_id = f.org_id and s.entity_id = f.subject_id
                         left join memory.entities o
                           on o.org_id = f.org_id and o.entity_id = f.object_entity_id
                        where m.org_id = v_org and m.community_id = c.community_id
                        order by f.recorded_at desc, f.fact_id
                        limit p_facts) f), '[]'))
           order by c.size desc, c.label, c.community_id)
      from (select c.* from memory.communities c
             where c.org_id = v_org and c.project_id = p_project
               and (c.summary is null or c.summary_digest <> c.members_digest)
             order by c.size desc, c.label, c.community_id
             limit p_communities) c), '[]');
end
$$;
comment on function memory_worker.community_summary_inputs(uuid, integer, integer, integer) is
  'The communities of a project due a summary (none yet, or written for other members), largest first, at most p_communities: id, label, size, members_digest, the first p_members members (name, type) and at most p_facts current facts about them (fact_id, content, subject, predicate, object). What the summarize_communities job shows the model.';

-- Store the model's summaries: each item {community_id, members_digest,
-- summary, fact_ids}.  Under the locks a computation takes (so neither a
-- computation nor a wipe runs between the checks and the write), a
-- summary is stored only if its community still exists with the members
-- it was written for and every fact it was written from is still stored;
-- else it is skipped (a later computation queues the job again).  The
-- text is redacted by the project's policy (a drop or refuse rule that
-- matches: skipped) and cut to 1,000 characters.
create or replace function memory_worker.store_community_summaries(
  p_project uuid, p_items jsonb, p_model text default null)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_item jsonb;
  v_id uuid;
  v_digest bigint;
  v_facts uuid[];
  v_text text;
  v_community memory.communities;
  v_redacted record;
  v_stored integer := 0;
  v_skipped jsonb := '[]';
  v_reason text;
begin
  if p_items is null or jsonb_typeof(p_items) <> 'array' then
    raise exception 'summaries must be a JSON array' using errcode = 'invalid_parameter_value',
      detail = 'summaries';
  end if;
  if p_model is not null and length(p_model) > 200 then
    raise exception 'model must be at most 200 characters' using errcode = 'invalid_parameter_value',
      detail = 'model';
  end if;
  perform memory_internal.lock_communities(p_project);
  for v_item in select x from jsonb_array_elements(p_items) x loop
    v_reason := null;
    v_id := null;
    begin
      v_id := (v_item ->> 'community_id')::uuid;
      v_digest := (v_item ->> 'members_digest')::bigint;
      v_facts := array(select jsonb_array_elements_text(coalesce(v_item -> 'fact_ids', '[]'))::uuid);
      v_text := btrim(v_item ->> 'summary');
    exception when others then
      v_reason := 'malformed';
    end;
    if v_reason is null and (v_id is null or v_digest is null) then
      v_reason := 'malformed';
    end if;
    if v_reason is null and coalesce(v_text, '') = '' then
      v_reason := 'empty';
    end if;
    if v_reason is null then
      select c.* into v_community from memory.communities c
       where c.org_id = v_org and c.project_id = p_project and c.community_id = v_id
         for update;
      if v_community.community_id is null then
        v_reason := 'community_gone';
      elsif v_community.members_digest is distinct from v_digest then
        v_reason := 'members_changed';
      elsif (select count(distinct v.fact_id) from memory_internal.fact_versions(p_project) v
              where v.org_id = v_org and v.fact_id = any (v_facts))
            < cardinality(array(select distinct u from unnest(v_facts) u)) then
        v_reason := 'facts_changed';
      end if;
    end if;
    if v_reason is null then
      begin
        select r.text, r.dropped into v_redacted
          from memory_internal.redact(v_org, p_project, v_text, 'community summary') r;
        if v_redacted.dropped then
          v_reason := 'redacted';
        end if;
      exception when check_violation then
        v_reason := 'redacted';
      end;
    end if;
    if v_reason is null then
      v_text := v_redacted.text;
      if length(v_text) > 1000 then
        v_text := left(v_text, 999) || '…';
      end if;
      update memory.communities c
         set summary = v_text, summarized_at = now(), summary_digest = v_digest,
             summary_facts = coalesce(array(select distinct u from unnest(v_facts) u), '{}'),
             summary_model = p_model
       where c.org_id = v_org and c.community_id = v_id;
      v_stored := v_stored + 1;
    else
      v_skipped := v_skipped || jsonb_build_object('community_id', v_item -> 'community_id',
                                                   'reason', v_reason);
    end if;
  end loop;
  -- More due than one batch: the next job (this one runs, so it does not
  -- count), only after progress, so an answer that leaves some out ends.
  if v_stored > 0 then
    perform memory_internal.queue_community_summaries(v_org, p_project);
  end if;
  return jsonb_build_object('stored', v_stored, 'skipped', v_skipped);
end
$$;
comment on function memory_worker.store_community_summaries(uuid, jsonb, text) is
  'Store the model''s community summaries (items {community_id, members_digest, summary, fact_ids}) under the communities'' locks: each only if the community still has the members it was written for and its facts are still stored, redacted by the project''s policy and cut to 1,000 characters; then, if any was stored and some community is still due, the next summarize_communities job. Returns {stored, skipped: [{community_id, reason: malformed | empty | community_gone | members_changed | facts_changed | redacted}]}.';

-- memory.context's summary of one of its communities: the summary when
-- p_include and it was written no later than p_at and p_known_at (a later
-- one describes a later graph), else nulls.
create or replace function memory_internal.context_summary(
  p_project uuid, p_community uuid, p_at timestamptz, p_known_at timestamptz, p_include boolean)
  returns jsonb
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
  select coalesce(
    (select jsonb_build_object('summary', c.summary, 'summarized_at', c.summarized_at)
       from memory.communities c
      where p_include and memory_internal.project_org(p_project) is not null
        and c.org_id = memory_internal.current_org()  -- named, for Citus
        and c.community_id = p_community and c.summary is not null
        and c.summarized_at <= least(p_at, p_known_at)),
    jsonb_build_object('summary', null, 'summarized_at', null))
$$;
comment on function memory_internal.context_summary(uuid, uuid, timestamptz, timestamptz, boolean) is
  'memory.context''s summary of a community: {summary, summarized_at} when p_include and it was written by p_at and p_known_at, else both null.';

-- A wipe clears the summaries it may have made wrong (wipe_content): those
-- written from a wiped fact, those of a community holding an entity a
-- wiped fact named, and any naming the wiped entity (p_names: its
-- normalized names, found as whole words of the normalized text); a job
-- is queued to write them again.  Returns how many.
create or replace function memory_internal.clear_wiped_summaries(
  p_org uuid, p_project uuid, p_facts uuid[], p_entities uuid[], p_names text[])
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_n integer;
begin
  update memory.communities c
     set summary = null, summarized_at = null, summary_digest = null, summary_facts = '{}',
         summary_model = null
   where c.org_id = p_org and c.project_id = p_project and c.summary is not null
     and (c.summary_facts && coalesce(p_facts, '{}')
          or exists (select from memory.community_members m
                      where m.org_id = p_org and m.community_id = c.community_id
                        and m.entity_id = any (coalesce(p_entities, '{}')))
          or exists (select from unnest(coalesce(p_names, '{}')) n(name)
                      where n.name <> ''
                        and strpos(' ' || memory.normalize_text(c.summary) || ' ',
                                   ' ' || n.name || ' ') > 0));
  get diagnostics v_n = row_count;
  if v_n > 0 then
    perform memory_internal.queue_community_summaries(p_org, p_project);
  end if;
  return v_n;
end
$$;
comment on function memory_internal.clear_wiped_summaries(uuid, uuid, uuid[], uuid[], text[]) is
  'Clear the project''s community summaries written from one of p_facts, of a community holding one of p_entities, or whose normalized text holds one of p_names as whole words; queue a summarize_communities job when one was cleared. Returns how many. Called by memory_internal.wipe_content.';
