-- 0029_community_runs: what each project's last community computation saw,
-- so that the periodic job recomputes only the projects whose graph changed
-- since, and can therefore run every few minutes instead of every six hours
-- (a new project's context had no groups until the next six-hourly run).

create table memory.community_runs (
  org_id       uuid not null,
  project_id   uuid not null,
  computed_at  timestamptz not null,
  -- The current edges the computation read: how many, and the XOR of a hash
  -- of each one's id.  Any edge created, expired or deleted since changes
  -- the pair (up to a 64-bit hash collision).
  edges        integer not null check (edges >= 0),
  edges_digest bigint not null,
  communities  integer not null check (communities >= 0),
  members      integer not null check (members >= 0),
  rounds       integer not null check (rounds >= 0),
  converged    boolean not null,
  primary key (org_id, project_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.community_runs is
  'The last memory.compute_communities run of each project: when, a digest of the current edges it read (memory.refresh_communities recomputes only when they changed), and what it found. Counts only, no names.';
comment on column memory.community_runs.edges_digest is
  'XOR of uuid_hash_extended(edge_id, 0) over the current edges read; with edges (their count), what memory.refresh_communities compares.';

alter table memory.community_runs enable row level security;
alter table memory.community_runs force row level security;
create policy tenant_isolation on memory.community_runs
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
grant select on memory.community_runs to chronomem_app, chronomem_analyst;

-- Existing orgs' schedules move to the new default (one changed by hand
-- keeps its interval).  New orgs get it from tg_orgs__schedule.
update memory.job_schedules set every = interval '5 minutes'
 where kind = 'communities' and every = interval '6 hours';
