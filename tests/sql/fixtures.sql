-- Fixtures shared by the pgTAP files (tests/sql/test_*.sql).  tests/conftest.py
-- creates them once per session on the connection the files run on, before
-- the first file; each file's rows in them are rolled back with the file.  By
-- hand, run this file first in the session that runs a test file.  Temp
-- tables, granted to PUBLIC: the files switch to the app role (set local role
-- chronomem_app) after their own fixtures.

-- Ids by name ("p", "p.acme", ...), and results and snapshots kept by name.
create temp table ids (k text primary key, id uuid not null);
create temp table res (k text primary key, r jsonb not null);
create temp table snap (k text primary key, v text);
-- Job ids by name.
create temp table jid (k text primary key, id bigint not null);
grant all on ids, res, snap, jid to public;

-- The id stored under a name; a missing name is an error, not a NULL that
-- would make a test pass by matching nothing.
create function pg_temp.id(p_k text) returns uuid language plpgsql stable as $$
declare v uuid;
begin
  select i.id into v from pg_temp.ids i where i.k = p_k;
  if v is null then raise exception 'test fixture % missing', p_k; end if;
  return v;
end $$;

create function pg_temp.r(p_k text) returns jsonb language sql stable
  as $$ select r from pg_temp.res where k = p_k $$;

-- A deterministic 384-dimension embedding per seed; different seeds point in
-- clearly different directions.
create function pg_temp.vec(p_seed integer) returns vector language sql immutable as $$
  select array_agg(sin(i * (p_seed + 1) * 0.7 + p_seed) order by i)::vector(384)
    from generate_series(1, 384) i $$;

-- Move a project's record time back by p_by: every record-time column of its
-- facts, events, edges, tombstones, entities and episodes, so that a test can
-- ask about a known_at before a later change within its one transaction (in
-- which now() is constant).  As superuser (security definer), with triggers
-- off (session_replication_role = replica): the rows are rewritten in place,
-- not written again.  The arithmetic is on UTC timestamps, which is immutable,
-- and each statement names the org: Citus refuses a STABLE timestamptz -
-- interval on a column in an UPDATE, and routes a named org to its shard.
create procedure pg_temp.shift_back(p_project uuid, p_by interval)
  language plpgsql security definer set session_replication_role = replica as $$
declare
  o uuid := (select p.org_id from memory.projects p where p.project_id = p_project);
begin
  update memory.facts
     set recorded_at = ((recorded_at at time zone 'UTC') - p_by) at time zone 'UTC',
         range_changed_at = ((range_changed_at at time zone 'UTC') - p_by) at time zone 'UTC',
         last_seen_at = ((last_seen_at at time zone 'UTC') - p_by) at time zone 'UTC',
         invalid_at = ((invalid_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
  update memory.fact_events
     set occurred_at = ((occurred_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
  update memory.edges
     set recorded_at = ((recorded_at at time zone 'UTC') - p_by) at time zone 'UTC',
         expired_at = ((expired_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
  update memory.tombstones
     set created_at = ((created_at at time zone 'UTC') - p_by) at time zone 'UTC',
         lifted_at = ((lifted_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
  update memory.entities
     set created_at = ((created_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
  update memory.episodes
     set created_at = ((created_at at time zone 'UTC') - p_by) at time zone 'UTC'
   where org_id = o and project_id = p_project;
end $$;
grant execute on procedure pg_temp.shift_back(uuid, interval) to public;

-- The job id stored under a name (as pg_temp.id).
create function pg_temp.j(p_k text) returns bigint language plpgsql stable as $$
declare v bigint;
begin
  select i.id into v from pg_temp.jid i where i.k = p_k;
  if v is null then raise exception 'test job % missing', p_k; end if;
  return v;
end $$;

-- Scope the transaction to the org stored under a name.
create procedure pg_temp.use(p_org text) language plpgsql as $$
begin perform memory.use_org(pg_temp.id(p_org)); end $$;

-- Assert one fact in a project (by name) and store its id as "<project>.<key>".
create procedure pg_temp.fact(p_project text, p_k text, p_fact jsonb) language sql as $$
  insert into pg_temp.ids
  select p_project || '.' || p_k, (r #>> '{results,0,fact_id}')::uuid
    from memory.assert_facts(pg_temp.id(p_project), jsonb_build_array(p_fact)) r $$;
