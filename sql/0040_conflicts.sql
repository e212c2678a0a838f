-- 0040_conflicts: contradictions a person can settle.  A predicate nobody
-- declared has cardinality 'unknown' (no row in memory.predicates): a second
-- current object for a subject over an overlapping window stands beside the
-- first, and an open conflict records the pair (functions/055_conflicts.sql).
-- A fact gains a standing (unreviewed, confirmed, rejected) set by a
-- reviewer, kept as a history so that reads at an earlier known_at see the
-- standing of then.  A project's policy says what extraction may do to
-- contradicted and confirmed facts and whether cardinality is learned; every
-- change of a predicate's cardinality is logged so a learned one can be undone.

-- One row per conflicting set: a subject and a predicate whose current
-- facts disagree.  At most one is open per subject and predicate (the
-- partial unique index), so concurrent writers create it once.
create table memory.conflicts (
  org_id            uuid not null,
  project_id        uuid not null,
  conflict_id       uuid not null default gen_random_uuid(),
  subject_id        uuid not null,
  predicate         text not null check (predicate <> ''),
  cause             text not null
    constraint conflicts_cause_check
    check (cause in ('unknown_cardinality', 'contradiction', 'confirmed_fact')),
  status            text not null default 'open'
    constraint conflicts_status_check check (status in ('open', 'resolved')),
  resolution        text
    constraint conflicts_resolution_check
    check (resolution in ('kept', 'superseded', 'retracted', 'declared_one', 'declared_many')),
  -- The episode whose write opened it (no foreign key: a wipe of that
  -- episode clears it, or takes the conflict when it held the episode's
  -- facts).
  source_episode_id uuid,
  opened_at         timestamptz not null default memory_internal.txn_instant(),
  resolved_at       timestamptz,
  resolved_by       text,
  reason            text,
  primary key (org_id, conflict_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  -- A subject wipe erases its conflicts with it.
  foreign key (org_id, subject_id) references memory.entities on delete cascade,
  constraint conflicts_resolved_check check (
    (status = 'open') = (resolution is null)
    and (status = 'open') = (resolved_at is null)
    and (resolved_at is null or resolved_at >= opened_at))
);
comment on table memory.conflicts is
  'A conflicting set: a subject whose current facts of one predicate disagree (two objects at once for a predicate of unknown cardinality, a contradiction the extraction model reported, a claim against a confirmed fact). At most one open per subject and predicate. Read through memory.list_conflicts and memory.get_conflict; settled by memory.resolve_conflict or a declaration.';
create unique index conflicts_open_idx on memory.conflicts (org_id, project_id, subject_id, predicate)
  where status = 'open';
create index conflicts_project_idx on memory.conflicts (org_id, project_id, opened_at);

-- The members of a conflict: stored facts, or a claim held back (a claim
-- extraction made against a confirmed fact, not stored as a fact).
create table memory.conflict_members (
  org_id            uuid not null,
  project_id        uuid not null,
  conflict_id       uuid not null,
  member_id         uuid not null default gen_random_uuid(),
  fact_id           uuid,
  claim             jsonb,
  source_episode_id uuid,
  outcome           text
    constraint conflict_members_outcome_check check (outcome in ('won', 'lost', 'kept', 'retracted')),
  added_at          timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, member_id),
  unique (org_id, conflict_id, fact_id),
  foreign key (org_id, conflict_id) references memory.conflicts on delete cascade,
  -- A wiped fact leaves its conflicts (wipe_content drops the conflicts
  -- left with fewer than two members).
  foreign key (org_id, fact_id) references memory.facts on delete cascade,
  foreign key (org_id, source_episode_id) references memory.episodes on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  constraint conflict_members_kind_check check ((fact_id is null) <> (claim is null)),
  constraint conflict_members_claim_check check (claim is null or jsonb_typeof(claim) = 'object')
);
comment on table memory.conflict_members is
  'The facts of a conflict, or a claim held back instead of being stored (fact_id NULL, claim: the fact as asserted). outcome: what the resolution made of it.';
create index conflict_members_fact_idx on memory.conflict_members (org_id, fact_id)
  where fact_id is not null;

create table memory.conflict_events (
  org_id      uuid not null,
  project_id  uuid not null,
  event_id    bigint generated always as identity,
  conflict_id uuid not null,
  event_type  text not null
    constraint conflict_events_type_check check (event_type in ('opened', 'member_added', 'member_retracted', 'resolved')),
  actor       text,
  reason      text,
  detail      jsonb not null default '{}',
  recorded_at timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, event_id),
  foreign key (org_id, conflict_id) references memory.conflicts on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.conflict_events is
  'The history of each conflict: opened, a member added, resolved (with the resolution and what it changed in detail). Each fires a webhook (conflict.detected, conflict.resolved).';
create index conflict_events_conflict_idx on memory.conflict_events (org_id, conflict_id, event_id);

-- A subject for which a person said both objects hold (keep_both): its
-- later objects of that predicate open no conflict.
create table memory.subject_cardinalities (
  org_id      uuid not null,
  project_id  uuid not null,
  subject_id  uuid not null,
  predicate   text not null check (predicate <> ''),
  cardinality text not null constraint subject_cardinalities_cardinality_check check (cardinality = 'many'),
  conflict_id uuid,
  declared_at timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, project_id, subject_id, predicate),
  foreign key (org_id, subject_id) references memory.entities on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.subject_cardinalities is
  'A predicate of unknown cardinality that is many for one subject (a conflict resolved keep_both): that subject''s objects of it open no conflict. A declaration of the predicate replaces these.';

-- A fact's standing, as a history: the standing at known_at is the latest
-- review recorded by then (none: unreviewed).
create table memory.fact_reviews (
  org_id      uuid not null,
  project_id  uuid not null,
  review_id   bigint generated always as identity,
  fact_id     uuid not null,
  standing    text not null
    constraint fact_reviews_standing_check check (standing in ('unreviewed', 'confirmed', 'rejected')),
  reviewer    text not null,
  reason      text,
  reviewed_at timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, review_id),
  foreign key (org_id, fact_id) references memory.facts on delete cascade,
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.fact_reviews is
  'Reviews of facts (memory.review_fact): the standing at a known_at instant is the latest review recorded by then, unreviewed when there is none. A rejection also retracts the fact.';
create index fact_reviews_fact_idx on memory.fact_reviews (org_id, fact_id, reviewed_at, review_id);

-- Every change of a predicate's cardinality: declared by a caller, learned
-- from the project's statistics, or undone.
create table memory.predicate_changes (
  org_id          uuid not null,
  project_id      uuid not null,
  change_id       bigint generated always as identity,
  predicate       text not null check (predicate <> ''),
  old_cardinality text not null
    constraint predicate_changes_old_check check (old_cardinality in ('one', 'many', 'unknown')),
  new_cardinality text not null
    constraint predicate_changes_new_check check (new_cardinality in ('one', 'many', 'unknown')),
  cause           text not null
    constraint predicate_changes_cause_check check (cause in ('declared', 'learned', 'undone')),
  evidence        jsonb,
  undoes          bigint,
  actor           text not null,
  changed_at      timestamptz not null default memory_internal.txn_instant(),
  primary key (org_id, change_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade,
  foreign key (org_id, undoes) references memory.predicate_changes
);
comment on table memory.predicate_changes is
  'Every change of a predicate''s cardinality, with its cause (declared, learned from memory.suggest_cardinality''s evidence, undone) and the evidence: what an operator reads to see and undo a learned declaration (memory.undo_predicate_change).';
create index predicate_changes_project_idx on memory.predicate_changes (org_id, project_id, change_id);

do $$
declare
  t text;
begin
  foreach t in array array['memory.conflicts', 'memory.conflict_members', 'memory.conflict_events',
                           'memory.subject_cardinalities', 'memory.fact_reviews',
                           'memory.predicate_changes'] loop
    execute format('alter table %s enable row level security', t);
    execute format('alter table %s force row level security', t);
    execute format(
      'create policy tenant_isolation on %s using (org_id = memory_internal.current_org()) '
      'with check (org_id = memory_internal.current_org())', t);
    execute format('grant select on %s to chronomem_app, chronomem_analyst', t);
  end loop;
end
$$;

-- The project's conflict policy.
alter table memory.projects
  add column contradictions text not null default 'close'
    constraint projects_contradictions_check check (contradictions in ('close', 'conflict')),
  add column protect_confirmed boolean not null default false,
  add column learn_cardinality boolean not null default false,
  add column learn_threshold real not null default 0.9
    constraint projects_learn_threshold_check check (learn_threshold between 0.5 and 1),
  add column learn_min_evidence integer not null default 5
    constraint projects_learn_min_evidence_check check (learn_min_evidence >= 2);
comment on column memory.projects.contradictions is
  'What the extraction model''s contradictions do: close (the contradicted fact''s window ends at the episode) or conflict (a conflict opens; a person decides).';
comment on column memory.projects.protect_confirmed is
  'When true, extraction does not supersede a confirmed fact: its claim is held in a conflict instead.';
comment on column memory.projects.learn_cardinality is
  'When true, a resolution that makes memory.suggest_cardinality''s suggestion for the predicate pass learn_threshold with at least learn_min_evidence cases declares it (logged as learned; memory.undo_predicate_change undoes it).';
comment on column memory.projects.learn_threshold is 'The share of the evidence a learned cardinality needs (0.5 to 1).';
comment on column memory.projects.learn_min_evidence is 'The cases (subjects and resolved conflicts) a learned cardinality needs, at least 2.';

-- A reviewer's permission, which a writing key does not imply.
create or replace function memory_http.permissions() returns text[]
  language sql immutable parallel safe
  as $$
    select array['project:read', 'project:write', 'project:manage',
                 'configuration:read', 'configuration:write',
                 'members:read', 'members:write', 'memory:review']::text[]
  $$;
comment on function memory_http.permissions() is
  'The fixed vocabulary of API key permissions, the one list (memory_internal.api_keys'' check constraint calls it). project:read/write: the key''s project''s memory (facts, episodes, search); configuration:read/write: its predicates, policies and webhooks; memory:review: settle conflicts and set facts'' standing (project:write does not imply it); project:manage: every project of the org (create projects, manage keys) and implies every other permission; members:read/write: reserved.';

-- The new event types (the constraint reads the list through the function).
create or replace function memory.webhook_event_types()
  returns table (event_type text, description text)
  language sql immutable parallel safe
  as $$
    select * from (values
      ('fact.asserted', 'A new fact was stored (not an exact retry of a stored one): its id, triple, content and window.'),
      ('fact.superseded', 'A newer fact closed a fact''s window (same identity): old and new fact ids, the old fact''s triple.'),
      ('fact.retracted', 'A fact was retracted (it never held; its claim is tombstoned).'),
      ('fact.contradicted', 'A fact''s window was closed by a contradiction (e.g. one the extraction model reported).'),
      ('fact.expired', 'A fact''s window was closed without a newer fact (memory.close_fact, or a split moving the fact to another entity).'),
      ('fact.restored', 'A fact''s window was given back: what had closed it was retracted or wiped, or a split laid its name out again.'),
      ('fact.reviewed', 'A reviewer set a fact''s standing (confirmed, unreviewed, rejected).'),
      ('conflict.detected', 'A conflict opened: a subject''s facts of one predicate disagree (ids, predicate, cause).'),
      ('conflict.resolved', 'A conflict was settled: its resolution and the facts it closed, retracted or asserted.'),
      ('predicate.declared', 'A predicate''s cardinality changed: declared, learned from the project''s statistics, or undone.'),
      ('episode.enriched', 'The extraction model''s answer for an episode was applied.'),
      ('memory.wiped', 'A project''s memory (or a session''s, or a subject''s) was wiped; counts only.')
    ) t(event_type, description)
  $$;

-- The overlaps that already stand in undeclared predicates become open
-- conflicts, as a write would have opened them.  The owner reads and writes
-- every org's rows here only, with forced row-level security lifted inside
-- this transaction.
alter table memory.facts no force row level security;
alter table memory.predicates no force row level security;
alter table memory.conflicts no force row level security;
alter table memory.conflict_members no force row level security;
alter table memory.conflict_events no force row level security;
insert into memory.conflicts (org_id, project_id, subject_id, predicate, cause, opened_at)
select distinct a.org_id, a.project_id, a.subject_id, a.predicate, 'unknown_cardinality', now()
  from memory.facts a
  join memory.facts b
    on b.org_id = a.org_id and b.project_id = a.project_id and b.subject_id = a.subject_id
   and b.predicate = a.predicate and b.object_key <> a.object_key
   and b.invalid_at is null and b.valid_range && a.valid_range
 where a.invalid_at is null
   and not exists (select from memory.predicates d
                    where d.org_id = a.org_id and d.project_id = a.project_id
                      and d.predicate = a.predicate);
insert into memory.conflict_members (org_id, project_id, conflict_id, fact_id, source_episode_id)
select c.org_id, c.project_id, c.conflict_id, f.fact_id, null
  from memory.conflicts c
  join memory.facts f
    on f.org_id = c.org_id and f.project_id = c.project_id and f.subject_id = c.subject_id
   and f.predicate = c.predicate and f.invalid_at is null and not isempty(f.valid_range)
   and exists (select from memory.facts b
                where b.org_id = f.org_id and b.project_id = f.project_id
                  and b.subject_id = f.subject_id and b.predicate = f.predicate
                  and b.object_key <> f.object_key and b.invalid_at is null
                  and b.valid_range && f.valid_range);
insert into memory.conflict_events (org_id, project_id, conflict_id, event_type, actor, reason)
select c.org_id, c.project_id, c.conflict_id, 'opened', 'migration 0040',
       'the predicate is undeclared and the subject holds several objects at once'
  from memory.conflicts c;
alter table memory.facts force row level security;
alter table memory.predicates force row level security;
alter table memory.conflicts force row level security;
alter table memory.conflict_members force row level security;
alter table memory.conflict_events force row level security;
comment on table memory.predicates is
  'Declared predicate cardinality. ''one'': a new object supersedes the old one; ''many'': objects hold together; an undeclared predicate is ''unknown'': a second object at once stands beside the first and opens a conflict.';
