-- 0033_definer_scratch: Scratch tables for definer functions, which no caller can create or replace.
--
-- Code that runs as the owner (SECURITY DEFINER functions and every helper
-- they call) never uses a temp table: a temp table belongs to the calling
-- session, which can create it first, with a trigger whose function then
-- runs as the owner.  The working sets label propagation changes over its
-- rounds (memory.compute_communities) live here instead: owned by the
-- owner, no privilege for any other role, one project's rows at a time
-- (keyed by org and project; the computation holds the project's
-- communities lock), deleted at the start and at the end of each
-- computation, so they are empty between computations.  UNLOGGED: nothing
-- in them outlives the transaction that wrote them, so they need no WAL
-- (a crash empties them, which is their state between computations).

create unlogged table memory_internal.community_labels (
  org_id     uuid not null,
  project_id uuid not null,
  entity_id  uuid not null,
  label      uuid not null,
  color      integer,
  primary key (org_id, project_id, entity_id)
) with (fillfactor = 50);  -- room on each page for the rounds' HOT updates of label and color
comment on table memory_internal.community_labels is
  'memory.compute_communities'' working set: each entity with a current edge, its label and its colour, while one computation of its project runs. Empty between computations.';

create unlogged table memory_internal.community_links (
  org_id     uuid not null,
  project_id uuid not null,
  a          uuid not null,
  b          uuid not null,
  primary key (org_id, project_id, a, b)
);
comment on table memory_internal.community_links is
  'memory.compute_communities'' working set: the undirected, deduplicated links (both directions) between entities with a current edge, while one computation of its project runs. Empty between computations.';

alter table memory_internal.community_labels enable row level security;
alter table memory_internal.community_labels force row level security;
create policy tenant_isolation on memory_internal.community_labels
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
alter table memory_internal.community_links enable row level security;
alter table memory_internal.community_links force row level security;
create policy tenant_isolation on memory_internal.community_links
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
revoke all on memory_internal.community_labels, memory_internal.community_links from public;

-- A definer function's search_path names public: no role but its owner
-- creates anything there (PostgreSQL 15 and later grant PUBLIC nothing on
-- it; a database created by an older one still may).  Revoking from a
-- schema the owner does not own only warns.
revoke create on schema public from public;
