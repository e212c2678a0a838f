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
grant all on ids, res, snap to public;

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
