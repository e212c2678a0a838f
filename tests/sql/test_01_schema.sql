-- 01 schema: structure, row-level security, privileges and comments.
-- Catalog queries cover every table and function in the four schemas (memory,
-- memory_http, memory_worker, memory_internal), so an object added later is held to the same rules without editing this file.
BEGIN;
select plan(48);

select has_schema('memory');
select has_schema('memory_internal');
select has_schema('memory_http');
select has_schema('memory_worker');
select has_extension('btree_gist');

select has_table('memory', t, 'table memory.' || t || ' exists')
  from unnest(array['orgs', 'projects', 'predicates', 'sessions', 'episodes', 'entities',
                    'entity_aliases', 'facts', 'fact_events', 'tombstones', 'edges',
                    'audit_log']) t;
select has_table('memory_internal', 'counters', 'table memory_internal.counters exists');

-- Every table carries its org (invariant 5).  Positive control: the catalog
-- query does see the tables it checks.
select cmp_ok((select count(*)::int from pg_class c
                 where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
                   and c.relkind in ('r', 'p')), '>=', 13,
              'the catalog queries below see every table');
select is_empty($$
  select c.oid::regclass::text from pg_class c
   where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and c.relkind in ('r', 'p')
     and not exists (select from pg_attribute a where a.attrelid = c.oid and a.attname = 'org_id'
                                                   and a.atttypid = 'uuid'::regtype and a.attnotnull)
$$, 'every table has a non-null uuid org_id');

-- Every primary key, unique and exclusion constraint, and every unique
-- index, includes org_id (distributable by org).
select is_empty($$
  select i.indexrelid::regclass::text from pg_index i join pg_class c on c.oid = i.indrelid
   where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and (i.indisunique or i.indisexclusion or i.indisprimary)
     and not exists (select from pg_attribute a where a.attrelid = c.oid and a.attname = 'org_id'
                                                   and a.attnum = any (i.indkey))
$$, 'every unique, primary-key and exclusion index includes org_id');

select is_empty($$
  select c.oid::regclass::text from pg_class c
   where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and c.relkind in ('r', 'p') and not (c.relrowsecurity and c.relforcerowsecurity)
$$, 'row-level security is enabled and forced on every table');
select is_empty($$
  select c.oid::regclass::text from pg_class c
   where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and c.relkind in ('r', 'p')
     and not exists (select from pg_policy p where p.polrelid = c.oid)
$$, 'every table has a policy');

-- Invariants 1 and 4 are exclusion constraints.
select is((select contype::text from pg_constraint
            where conrelid = 'memory.facts'::regclass and conname = 'facts_no_overlap'),
          'x', 'facts_no_overlap is an exclusion constraint');
select is((select contype::text from pg_constraint
            where conrelid = 'memory.edges'::regclass and conname = 'edges_no_overlap'),
          'x', 'edges_no_overlap is an exclusion constraint');
select matches((select pg_get_constraintdef(oid) from pg_constraint
                 where conrelid = 'memory.facts'::regclass and conname = 'facts_no_overlap'),
               'gist .*identity_object WITH =.*valid_range WITH &&.*WHERE \(\(invalid_at IS NULL\)\)',
               'facts_no_overlap: identity and valid_range, current facts only');
select has_trigger('memory', 'fact_events', '10_fact_events_append_only', 'fact_events has its append-only trigger');
select has_trigger('memory', 'audit_log', '10_audit_log_append_only', 'audit_log has its append-only trigger');

-- Function privileges.
select ok(has_function_privilege('chronomem_app',
            'memory.assert_facts(uuid, jsonb, text, uuid, boolean, text)', 'execute'),
          'app may execute assert_facts');
select ok(not has_function_privilege('chronomem_analyst',
            'memory.assert_facts(uuid, jsonb, text, uuid, boolean, text)', 'execute'),
          'analyst may not execute assert_facts');
select ok(has_function_privilege('chronomem_analyst',
            'memory.facts_at(uuid, timestamptz, timestamptz)', 'execute'),
          'analyst may execute facts_at');
-- In the functions' Citus form (chronomem.citus_forms: facts_at is PL/pgSQL there) the
-- readers are SECURITY DEFINER too, and this catalog test of the rule does not apply.
select case when (select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang
                   where p.oid = 'memory.facts_at(uuid, timestamptz, timestamptz)'::regprocedure)
                 = 'plpgsql'
            then skip('the readers are SECURITY DEFINER in the Citus form')
            else is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and p.prosecdef and has_function_privilege('chronomem_analyst', p.oid, 'execute')
$$, 'analyst may execute no security definer (writing) function') end;
select is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and p.proacl is null
$$, 'no function keeps the default PUBLIC execute grant');
select ok(not has_function_privilege('public',
            'memory.retract_fact(uuid, uuid, text, text)', 'execute'),
          'PUBLIC may not execute retract_fact');

-- Table privileges: clients read, writes go through the functions.
select is_empty($$
  select c.oid::regclass::text || ' ' || r.rolname || ' ' || pr.p
    from pg_class c
   cross join (values ('chronomem_app'), ('chronomem_analyst')) r(rolname)
   cross join unnest(array['insert', 'update', 'delete', 'truncate']) pr(p)
   where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and c.relkind in ('r', 'p') and has_table_privilege(r.rolname, c.oid, pr.p)
$$, 'neither app nor analyst may insert, update, delete or truncate any table');
select ok(has_table_privilege('chronomem_app', 'memory.facts', 'select')
          and has_table_privilege('chronomem_analyst', 'memory.facts', 'select'),
          'app and analyst may select memory.facts (positive control)');

-- Ownership: the roles clients log in as own nothing.
select is_empty($$
  select c.oid::regclass::text from pg_class c
   where c.relowner in ('chronomem_app'::regrole, 'chronomem_analyst'::regrole)
  union all
  select p.oid::regprocedure::text from pg_proc p
   where p.proowner in ('chronomem_app'::regrole, 'chronomem_analyst'::regrole)
  union all
  select n.nspname::text from pg_namespace n
   where n.nspowner in ('chronomem_app'::regrole, 'chronomem_analyst'::regrole)
$$, 'app and analyst own no relation, function or schema');
select is((select array_agg(distinct pg_get_userbyid(c.relowner)::text) from pg_class c
            where c.relnamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
              and c.relkind in ('r', 'p')),
          array['chronomem_owner'], 'chronomem_owner owns every table');
select ok(not (select rolbypassrls or rolsuper from pg_roles where rolname = 'chronomem_owner'),
          'the owner neither is superuser nor bypasses RLS (forced RLS binds security definer code)');

-- Every security definer function pins its search_path.
select cmp_ok((select count(*)::int from pg_proc p
                where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
                  and p.prosecdef), '>=', 10,
              'security definer functions exist (control for the next test)');
select is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and p.prosecdef
     and not exists (select from unnest(p.proconfig) c where c like 'search_path=%')
$$, 'every security definer function sets search_path');
select is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and p.prosecdef and pg_get_userbyid(p.proowner) <> 'chronomem_owner'
$$, 'every security definer function is owned by chronomem_owner');

-- Schemas by audience: the HTTP layer and the worker protocol are the app
-- role's only; the SQL API in memory holds none of the HTTP layer's wrappers.
select ok(has_schema_privilege('chronomem_app', 'memory_http', 'usage')
          and has_schema_privilege('chronomem_app', 'memory_worker', 'usage'),
          'app may use memory_http and memory_worker');
select ok(not has_schema_privilege('chronomem_analyst', 'memory_http', 'usage')
          and not has_schema_privilege('chronomem_analyst', 'memory_worker', 'usage')
          and not has_schema_privilege('public', 'memory_http', 'usage')
          and not has_schema_privilege('public', 'memory_worker', 'usage'),
          'neither the analyst nor PUBLIC may use memory_http or memory_worker');
select is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace = 'memory'::regnamespace
     and (p.proname like 'api\_%' or p.proname in ('authenticate', 'authorize', 'claim_jobs'))
$$, 'schema memory holds no HTTP wrapper, authorization or worker protocol function');

-- COMMENT ON every schema, and every table and function of the public schemas.
select is_empty($$
  select n.nspname::text from pg_namespace n
   where n.oid in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace, 'memory_internal'::regnamespace)
     and coalesce(obj_description(n.oid, 'pg_namespace'), '') = ''
$$, 'every schema has a comment');
select is_empty($$
  select c.oid::regclass::text from pg_class c
   where c.relnamespace = 'memory'::regnamespace and c.relkind in ('r', 'p', 'v', 'm')
     and coalesce(obj_description(c.oid, 'pg_class'), '') = ''
$$, 'every table in schema memory has a comment');
select is_empty($$
  select p.oid::regprocedure::text from pg_proc p
   where p.pronamespace in ('memory'::regnamespace, 'memory_http'::regnamespace, 'memory_worker'::regnamespace)
     and coalesce(obj_description(p.oid, 'pg_proc'), '') = ''
$$, 'every function in schemas memory, memory_http and memory_worker has a comment');

select * from finish();
ROLLBACK;
