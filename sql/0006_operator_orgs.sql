-- Operators in psql (the analyst role, or the owner) see the list of orgs
-- before choosing one with memory.use_org: ids, names and creation times,
-- nothing else.  Once scoped they see that org's row only, like every
-- other table.  The app role (API, worker) is unchanged: unscoped, it sees
-- no org at all.  Policies are permissive, so this adds to tenant_isolation.
create policy operator_directory on memory.orgs
  for select to chronomem_owner, chronomem_analyst
  using (memory_internal.current_org() is null);

comment on table memory.orgs is
  'Tenants. Every other row carries its org_id. An operator (chronomem_analyst or chronomem_owner) with no org scope lists every org here, to pick one with memory.use_org(org, false); the app role sees only the org it is scoped to.';
