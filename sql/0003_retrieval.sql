-- 0003_retrieval: what one-call hybrid search and communities need.

-- Fact full-text leg: an expression index (the fact row stays as it is).
create index facts_content_tsv_idx on memory.facts
  using gin (to_tsvector('english'::regconfig, content)) where invalid_at is null;

-- Communities: label propagation over current edges, stored per project.
create table memory.communities (
  org_id       uuid not null,
  project_id   uuid not null,
  community_id uuid not null default gen_random_uuid(),
  label        text not null,
  size         integer not null check (size >= 1),
  computed_at  timestamptz not null default now(),
  primary key (org_id, community_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.communities is
  'Groups of entities connected by current edges (label propagation), recomputed by the communities job; label = the name of its best-connected member.';
create index communities_project_idx on memory.communities (org_id, project_id);

create table memory.community_members (
  org_id       uuid not null,
  project_id   uuid not null,
  community_id uuid not null,
  entity_id    uuid not null,
  primary key (org_id, community_id, entity_id),
  unique (org_id, project_id, entity_id),
  foreign key (org_id, community_id) references memory.communities on delete cascade,
  foreign key (org_id, entity_id) references memory.entities on delete cascade
);
comment on table memory.community_members is 'Which community each entity of a project belongs to (at most one).';

do $$
declare
  t regclass;
begin
  foreach t in array array['memory.communities', 'memory.community_members']::regclass[]
  loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
  end loop;
end
$$;
grant select on memory.communities, memory.community_members to chronomem_app, chronomem_analyst;
