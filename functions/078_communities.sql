-- Communities: label propagation over the edges current now.

-- One move of label propagation (memory.compute_communities) over its
-- working set (memory_internal.community_labels / community_links, the
-- project's rows): every entity (p_color NULL), or those of one colour,
-- takes the label most of its neighbours hold, its own voting too (ties:
-- the smallest).  Returns how many moved.  Hash joins only: the statistics
-- of the working set describe no computation (the tables are empty between
-- them), and nested loops over the links cost minutes (see below;
-- docs/decisions/007-plans-made-without-statistics.md).
create or replace function memory_internal.propagate_labels(
  p_org uuid, p_project uuid, p_color integer)
  returns integer
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set enable_nestloop = off
as $$
declare
  v_moved integer;
begin
  with labels as (
    select t.entity_id, t.label, t.color from memory_internal.community_labels t
     where t.org_id = p_org and t.project_id = p_project
  ), votes as (
    select v.entity_id, v.label, count(*) as votes
      from (select l.a as entity_id, n.label
              from memory_internal.community_links l
              join labels t on t.entity_id = l.a
              join labels n on n.entity_id = l.b
             where l.org_id = p_org and l.project_id = p_project
               and (p_color is null or t.color = p_color)
            union all
            select t.entity_id, t.label from labels t
             where p_color is null or t.color = p_color) v
     group by 1, 2
  ), best as (
    select distinct on (v.entity_id) v.entity_id, v.label
      from votes v order by v.entity_id, v.votes desc, v.label
  ), moved as (
    update memory_internal.community_labels t set label = b.label
      from best b
     where t.org_id = p_org and t.project_id = p_project and t.entity_id = b.entity_id
       and t.label <> b.label
    returning 1)
  select count(*) into v_moved from moved;
  return v_moved;
end
$$;
comment on function memory_internal.propagate_labels(uuid, uuid, integer) is
  'One move of memory.compute_communities'' label propagation over the project''s rows of memory_internal.community_labels / community_links: every entity (p_color NULL) or one colour''s take the label most of their neighbours hold, their own voting too (ties: the smallest). Returns how many moved.';

-- The advisory lock a transaction holds while it computes a project's
-- communities (or checks whether they need it): one at a time, so that two
-- never replace the same project's communities at once.
create or replace function memory_internal.communities_lock_key(p_project uuid)
  returns bigint
  language sql immutable parallel safe
  as $$ select hashtextextended('chronomem.communities:' || p_project::text, 0) $$;
comment on function memory_internal.communities_lock_key(uuid) is
  'Advisory lock key held by the one transaction at a time that computes (or checks) a project''s communities.';

-- What a computation of the communities reads, summed up: the count of the
-- edges current now and the XOR of a hash of each one's id
-- (docs/decisions/013-communities-refreshed-by-edge-digest.md).
-- Edge rows are immutable but for their expiry, so every change of the
-- current graph (an edge made, expired, deleted by a wipe, or ended by the
-- passing of its valid time) changes it.
create or replace function memory_internal.current_edges_digest(p_project uuid,
  out edges integer, out edges_digest bigint)
  language sql stable
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select count(*)::integer, coalesce(bit_xor(uuid_hash_extended(e.edge_id, 0)), 0)
      from memory.edges_at(p_project) e
  $$;
comment on function memory_internal.current_edges_digest(uuid) is
  'The count of a project''s current edges and the XOR of uuid_hash_extended(edge_id, 0) over them: changes whenever the graph memory.compute_communities reads changes.';

-- The locks every computation of a project's communities, and every check
-- whether one is due, takes first: the project's write lock shared, as
-- writers hold it (memory_internal.hold_project), so that a wipe or a
-- merge (which hold it exclusively) never runs between the read of the
-- edges and the store of the groups: a wiped name never comes back as a
-- label, and no member is an entity deleted meanwhile.  Then the
-- communities lock, so that one at a time replaces them
-- (docs/decisions/004-lock-order.md).  Returns the digest of the current
-- edges, read after both are held.
create or replace function memory_internal.lock_communities(p_project uuid,
  out edges integer, out edges_digest bigint)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.hold_project(p_project);
  perform pg_advisory_xact_lock(memory_internal.communities_lock_key(p_project));
  select d.edges, d.edges_digest into edges, edges_digest
    from memory_internal.current_edges_digest(p_project) d;
end
$$;
comment on function memory_internal.lock_communities(uuid) is
  'Take the locks a computation (or check) of the project''s communities holds, in order (the project''s write lock shared, then the communities lock), and return the digest of its current edges, read under them.';

-- The rounds of label propagation asked for: at least one.  Checked by the
-- computation and, before it queues any, by the periodic sweep.
create or replace function memory_internal.check_max_rounds(p_max_rounds integer) returns void
  language plpgsql immutable
as $$
begin
  if p_max_rounds is null or p_max_rounds < 1 then
    raise exception 'max_rounds must be at least 1, not %', coalesce(p_max_rounds::text, 'NULL')
      using errcode = 'invalid_parameter_value';
  end if;
end
$$;
comment on function memory_internal.check_max_rounds(integer) is
  'Refuse (22023) a number of label-propagation rounds below 1 or NULL.';

-- Empty a project's rows of the working set of memory.compute_communities
-- (memory_internal.community_labels / community_links): what each
-- computation does first and last.
create or replace function memory_internal.clear_community_work(p_org uuid, p_project uuid)
  returns void
  language sql
  set search_path = memory_internal, memory, public, pg_temp
as $$
  delete from memory_internal.community_labels where org_id = p_org and project_id = p_project;
  delete from memory_internal.community_links where org_id = p_org and project_id = p_project;
$$;
comment on function memory_internal.clear_community_work(uuid, uuid) is
  'Delete a project''s rows of memory_internal.community_labels and community_links (the working set of memory.compute_communities), as each computation does first and last.';

-- The computation itself (label propagation over the current edges, the
-- store, the run), for compute_communities and refresh_communities once
-- they hold the locks and read the digest (p_edges, p_digest): read before
-- the links, so that an edge committed between the two reads is missing
-- from the digest, not from the groups only, and the next refresh computes
-- again rather than never.
--
-- The working set (which entity holds which label and colour, and the
-- links) is the project's rows of memory_internal.community_labels and
-- community_links: tables of the owner's that no caller can create, write
-- or put a trigger on, unlike a temp table (the caller's session owns
-- those, and a trigger on one would run as the owner here).  One
-- computation of a project runs at a time (the communities lock), and it
-- deletes the project's rows first and last, so they are empty between
-- computations.  Their statistics describe no computation (autovacuum
-- sees them empty, or another project's rows; an explicit ANALYZE of a
-- shared table would hold a lock to commit that serialises every org's
-- computations), so the plans must not depend on them: nested loops are
-- off (planned as nested loops over the links, label propagation's rounds
-- take minutes instead of seconds at a few thousand entities:
-- docs/decisions/007-plans-made-without-statistics.md), and each
-- member's name is read by key.
create or replace function memory_internal.compute_communities_locked(
  p_org uuid, p_project uuid, p_max_rounds integer, p_edges integer, p_digest bigint)
  returns jsonb
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
  set enable_nestloop = off
as $$
declare
  v_round integer := 0;
  v_colors integer;
  v_changed integer;
  v_moved integer;
  v_count integer;
  v_communities integer;
  v_old memory.communities[];
begin
  perform memory_internal.check_max_rounds(p_max_rounds);
  perform memory_internal.clear_community_work(p_org, p_project);

  -- Undirected, deduplicated links between entities with a current edge.
  insert into memory_internal.community_links (org_id, project_id, a, b)
  select distinct p_org, p_project, x.a, x.b
    from memory.edges_at(p_project) e
   cross join lateral (values (e.source_id, e.target_id), (e.target_id, e.source_id)) x(a, b)
   where e.source_id <> e.target_id;
  insert into memory_internal.community_labels (org_id, project_id, entity_id, label)
  select distinct p_org, p_project, l.a, l.a from memory_internal.community_links l
   where l.org_id = p_org and l.project_id = p_project;

  -- Label propagation: each entity takes the label most of its neighbours
  -- hold, its own label voting too (ties: the smallest), until nothing
  -- changes.  First in synchronous rounds (every entity at once: the
  -- result does not depend on row order), at most 10.  Those oscillate on
  -- some graphs and never settle (two linked entities trading labels: on
  -- 3,000 people, 40 employers and 3,000 "knows", 60-300 entities still
  -- flip after 60 rounds), so the rest of the rounds are semi-synchronous
  -- (Cordasco & Gargano 2010): the entities are coloured so that no two
  -- linked ones share a colour, and one colour moves at a time, which is as
  -- if each moved alone.  Then every move makes more links join entities of
  -- one label (the new label has more votes than the old one had, its own
  -- vote included), so the rounds end.
  loop
    v_round := v_round + 1;
    v_moved := memory_internal.propagate_labels(p_org, p_project, null);
    exit when v_moved = 0 or v_round >= least(10, p_max_rounds);
  end loop;
  if v_moved > 0 and v_round < p_max_rounds then
    -- Colouring (Jones & Plassmann 1993): in each step the uncoloured
    -- entities with no uncoloured neighbour of a higher id take the
    -- smallest colour none of their neighbours has; they are never linked
    -- to each other, so they choose at once.
    loop
      with labels as (
        select t.entity_id, t.color from memory_internal.community_labels t
         where t.org_id = p_org and t.project_id = p_project
      ), links as (
        select l.a, l.b from memory_internal.community_links l
         where l.org_id = p_org and l.project_id = p_project
      ), blocked as (
        select distinct l.a
          from links l
          join labels ta on ta.entity_id = l.a
          join labels tb on tb.entity_id = l.b
         where ta.color is null and tb.color is null and l.b > l.a
      ), pick as (
        select t.entity_id from labels t
         where t.color is null and not exists (select from blocked b where b.a = t.entity_id)
      ), used as (
        select p.entity_id, array_agg(distinct u.color) filter (where u.color is not null) as colors
          from pick p
          left join links l on l.a = p.entity_id
          left join labels u on u.entity_id = l.b
         group by p.entity_id
      ), colored as (
        update memory_internal.community_labels t
           set color = (select min(g) from generate_series(0, coalesce(cardinality(u.colors), 0)) g
                         where not g = any (coalesce(u.colors, '{}')))
          from used u
         where t.org_id = p_org and t.project_id = p_project and t.entity_id = u.entity_id
        returning 1)
      select count(*) into v_changed from colored;
      exit when v_changed = 0;
    end loop;
    select max(t.color) + 1 into v_colors from memory_internal.community_labels t
     where t.org_id = p_org and t.project_id = p_project;
    loop
      exit when v_moved = 0 or v_round >= p_max_rounds;
      v_round := v_round + 1;
      v_moved := 0;
      for v_color in 0 .. v_colors - 1 loop
        v_moved := v_moved + memory_internal.propagate_labels(p_org, p_project, v_color);
      end loop;
    end loop;
  end if;

  -- The summaries of the last computation's communities: a community found
  -- again with the same members (the same digest and size) keeps its own,
  -- so the model writes only for those whose members changed
  -- (functions/079_community_summaries.sql).  A SELECT INTO, not an
  -- assignment: Citus cannot run the assignment of a table's rows.
  select array(select c from memory.communities c
                where c.org_id = p_org and c.project_id = p_project and c.summary is not null)
    into v_old;
  delete from memory.communities where org_id = p_org and project_id = p_project;
  -- A community's label is the name of its member with the most links
  -- (ties: the first name).  Each member's links are counted once, for
  -- all (counted per member, naming costs entities x links, about five
  -- times as much at 3,000 entities and 6,000 edges), and its name read
  -- by key (with nested loops off, a join would hash the org's entities
  -- of every project).
  with members as (
    select t.label, t.entity_id, d.links, en.name
      from memory_internal.community_labels t
      join (select l.a, count(*) as links from memory_internal.community_links l
             where l.org_id = p_org and l.project_id = p_project group by l.a) d
        on d.a = t.entity_id
     cross join lateral (
       select en.name from memory.entities en
        where en.org_id = p_org and en.entity_id = t.entity_id
       offset 0) en
     where t.org_id = p_org and t.project_id = p_project
  ), groups as (
    select m.label, count(*)::integer as size, array_agg(m.entity_id) as members,
           coalesce(bit_xor(uuid_hash_extended(m.entity_id, 0)), 0) as digest,
           gen_random_uuid() as community_id
      from members m group by m.label
  ), names as (
    select distinct on (m.label) m.label, m.name
      from members m order by m.label, m.links desc, m.name
  ), kept as (
    select distinct on (o.summary_digest, o.size) o.summary_digest, o.size, o.summary,
           o.summarized_at, o.summary_facts, o.summary_model
      from unnest(v_old) o
     order by o.summary_digest, o.size, o.summarized_at desc
  ), made as (
    insert into memory.communities (org_id, project_id, community_id, label, size, members_digest,
                                    summary, summarized_at, summary_digest, summary_facts,
                                    summary_model)
    select p_org, p_project, g.community_id, n.name, g.size, g.digest,
           k.summary, k.summarized_at, k.summary_digest, coalesce(k.summary_facts, '{}'),
           k.summary_model
      from groups g join names n on n.label = g.label
      left join kept k on k.summary_digest = g.digest and k.size = g.size
  )
  insert into memory.community_members (org_id, project_id, community_id, entity_id)
  select p_org, p_project, g.community_id, u.entity_id
    from groups g
   cross join lateral unnest(g.members) u(entity_id);
  get diagnostics v_count = row_count;
  perform memory_internal.clear_community_work(p_org, p_project);
  select count(*)::integer into v_communities from memory.communities c
   where c.org_id = p_org and c.project_id = p_project;
  insert into memory.community_runs as r
         (org_id, project_id, computed_at, edges, edges_digest, communities, members, rounds, converged)
  values (p_org, p_project, now(), p_edges, p_digest, v_communities, v_count, v_round,
          coalesce(v_moved = 0, false))
  on conflict (org_id, project_id) do update
     set computed_at = excluded.computed_at, edges = excluded.edges,
         edges_digest = excluded.edges_digest, communities = excluded.communities,
         members = excluded.members, rounds = excluded.rounds, converged = excluded.converged;
  -- The model summarizes the communities whose members changed.
  perform memory_internal.queue_community_summaries(p_org, p_project);
  return jsonb_build_object('computed', true, 'computed_at', now(), 'communities', v_communities,
                            'members', v_count, 'rounds', v_round, 'colors', v_colors,
                            'converged', coalesce(v_moved = 0, false), 'edges', p_edges);
end
$$;
comment on function memory_internal.compute_communities_locked(uuid, uuid, integer, integer, bigint) is
  'The body of compute_communities and refresh_communities: label propagation over the project''s current edges, the store of the groups (each keeping the summary of a last computation''s community with the same members) and the run (with the given edge count and digest), then a summarize_communities job when a community has no current summary. The caller holds memory_internal.lock_communities.';

create or replace function memory.compute_communities(p_project uuid, p_max_rounds integer default 20)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_now record;
begin
  select l.edges, l.edges_digest into v_now from memory_internal.lock_communities(p_project) l;
  return memory_internal.compute_communities_locked(
    v_org, p_project, p_max_rounds, v_now.edges, v_now.edges_digest);
end
$$;
comment on function memory.compute_communities(uuid, integer) is
  'Group a project''s entities by label propagation over current edges (semi-synchronous: entities coloured so that linked ones differ, one colour moving at a time, which converges) and store the result in memory.communities / community_members (replacing the previous one) and the run in memory.community_runs. Returns computed (true), computed_at, counts, the rounds run (at most p_max_rounds), the colours, whether it converged and the current edges read.';

-- The periodic job's step per project: compute the communities again only
-- when the current edges differ from those the last run read (or there
-- was none).  Cheap when nothing changed (one read of the current edges,
-- against label propagation over them), so the job can run every few
-- minutes and a new or busy project's groups follow its graph closely
-- (docs/decisions/013-communities-refreshed-by-edge-digest.md).
create or replace function memory.refresh_communities(p_project uuid, p_max_rounds integer default 20)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_run memory.community_runs;
  v_now record;
begin
  -- The locks compute_communities takes, before the check: a concurrent
  -- refresh of the same project waits, then finds the work done.
  select l.edges, l.edges_digest into v_now from memory_internal.lock_communities(p_project) l;
  select r.* into v_run from memory.community_runs r
   where r.org_id = v_org and r.project_id = p_project;
  if v_run.project_id is not null and v_run.edges = v_now.edges
     and v_run.edges_digest = v_now.edges_digest then
    -- The last run's answer (what compute_communities returned, without
    -- the colours).
    return jsonb_build_object('computed', false, 'computed_at', v_run.computed_at,
                              'communities', v_run.communities, 'members', v_run.members,
                              'rounds', v_run.rounds, 'converged', v_run.converged,
                              'edges', v_run.edges);
  end if;
  return memory_internal.compute_communities_locked(
    v_org, p_project, p_max_rounds, v_now.edges, v_now.edges_digest);
end
$$;
comment on function memory.refresh_communities(uuid, integer) is
  'Compute a project''s communities again (memory.compute_communities) only if its current edges changed since the last run (memory.community_runs), else return that run''s time and counts (as compute_communities returned them, without the colours) with computed = false. What the periodic communities job calls for each project.';

-- The periodic communities job (one per org): for each project of the org
-- in scope whose current edges differ from its last run's, a job of the
-- same kind for that project alone, unless one is queued already.  The
-- check reads the edges without a lock (a later change is the next
-- sweep's); each project's job takes the locks and checks again
-- (memory.refresh_communities).  So a computation holds only its own
-- project's locks and only while it runs: a wipe or a merge of one project
-- never waits for the computations of the org's others, and a project
-- whose computation fails is retried (and dead-lettered) on its own.
create or replace function memory_worker.queue_community_refreshes(p_max_rounds integer default 20)
  returns jsonb
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.current_org();
  v_queued uuid[];
  v_pending integer;
  v_unchanged integer;
begin
  -- Refused here, not in each project's job (which would fail for good).
  perform memory_internal.check_max_rounds(p_max_rounds);
  with projects as (
    select p.project_id,
           (r.project_id is null or r.edges <> d.edges or r.edges_digest <> d.edges_digest)
             as changed,
           exists (select from memory.jobs j
                    where j.org_id = v_org and j.kind = 'communities'
                      and j.project_id = p.project_id and j.status = 'queued') as pending
      from memory.projects p
      left join memory.community_runs r
        on r.org_id = p.org_id and r.project_id = p.project_id
     cross join lateral memory_internal.current_edges_digest(p.project_id) d
     where p.org_id = v_org),
  queued as (
    insert into memory.jobs (org_id, project_id, kind, payload)
    select v_org, x.project_id, 'communities', jsonb_build_object('max_rounds', p_max_rounds)
      from projects x where x.changed and not x.pending
     order by x.project_id
    returning project_id)
  select coalesce((select array_agg(q.project_id order by q.project_id) from queued q), '{}'),
         (select count(*) from projects x where x.changed and x.pending),
         (select count(*) from projects x where not x.changed)
    into v_queued, v_pending, v_unchanged;
  return jsonb_build_object('queued', to_jsonb(v_queued), 'pending', v_pending,
                            'unchanged', v_unchanged);
end
$$;
comment on function memory_worker.queue_community_refreshes(integer) is
  'The periodic communities job of the org in scope: queues a communities job for each project whose current edges changed since its last computation (memory.community_runs) and that has none queued; that job runs memory.refresh_communities(project, max_rounds). Reads without locks. Returns {queued: [project ids], pending: count already queued, unchanged: count}.';

-- The communities a prompt context names (memory.context's last section):
-- those holding an entity the context mentions (the subjects and objects
-- of its facts, which are read as of p_at / p_known_at, and its entity
-- hits), as their last computation found them, and only when that
-- computation is not later than the instant asked nor the knowledge
-- asked: a grouping found afterwards would describe a later graph.  Those
-- naming most of the context's entities first, then the largest; each
-- with every member's name when it has at most p_names members, else the
-- names of the members the context mentions, and how many more there are.
-- Every read is by key (the facts by their ids in their key's order, the
-- rest one probe each, offset 0), so one generic plan serves any project
-- whatever the statistics know.
create or replace function memory_internal.context_communities(
  p_project uuid, p_at timestamptz, p_known_at timestamptz, p_facts uuid[], p_entities uuid[],
  p_limit integer default 5, p_names integer default 8)
  returns table (community_id uuid, label text, size integer, computed_at timestamptz,
                 members text[], more integer)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
  set plan_cache_mode = force_generic_plan
  set enable_sort = off
as $$
#variable_conflict use_column
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  return query
    with named as materialized (
      -- The facts by their ids, in the order of their key: with sorts off
      -- only an index by (org, project, fact) gives it, where a probe per
      -- id planned without statistics can read the project's versions by
      -- another.
      select n.id
        from (select f.subject_id, f.object_entity_id
                from memory.facts_at(p_project, p_at, p_known_at) f
               where f.fact_id = any (p_facts)
               order by f.org_id, f.project_id, f.fact_id) f
       cross join lateral (values (f.subject_id), (f.object_entity_id)) n(id)
       where n.id is not null
      union
      select e.id from unnest(p_entities) e(id) where e.id is not null
    ), hits as materialized (
      select m.community_id, n.id as entity_id
        from named n
       cross join lateral (
         select m.community_id from memory.community_members m
          where m.org_id = v_org and m.project_id = p_project and m.entity_id = n.id
         offset 0) m
    ), picked as materialized (
      select c.community_id, c.label, c.size, c.computed_at, h.named
        from (select h.community_id, count(*) as named from hits h group by h.community_id) h
       cross join lateral (
         select c.community_id, c.label, c.size, c.computed_at from memory.communities c
          where c.org_id = v_org and c.community_id = h.community_id
         offset 0) c
       where c.computed_at <= least(p_at, p_known_at)
       order by h.named desc, c.size desc, c.label, c.community_id
       limit p_limit
    )
    select p.community_id, p.label, p.size, p.computed_at, s.names,
           p.size - cardinality(s.names)
      from picked p
     cross join lateral (
       select array(
         select e.name
           from (select m.entity_id from memory.community_members m
                  where p.size <= p_names and m.org_id = v_org and m.community_id = p.community_id
                 union
                 select h.entity_id from hits h where h.community_id = p.community_id) w
          cross join lateral (
            select e.name from memory.entities e
             where e.org_id = v_org and e.entity_id = w.entity_id
            offset 0) e
          order by e.name) as names
       offset 0) s  -- once per community, not once per use of the names
     order by p.named desc, p.size desc, p.label, p.community_id;
end
$$;
comment on function memory_internal.context_communities(uuid, timestamptz, timestamptz, uuid[], uuid[], integer, integer) is
  'memory.context''s communities: those holding a subject or object of the given facts (read as of p_at / p_known_at) or one of the given entities, computed no later than p_at and p_known_at; most named first, then largest, at most p_limit; members'' names (all when at most p_names, else the named ones) and how many more.';
