-- 0044_community_summaries: a short summary of each community, written by
-- the model (the summarize_communities job) and shown by memory.context
-- and memory.list_communities.
--
-- A community's summary is kept on its row.  Each computation makes new
-- rows (new ids); a community whose members are the same as one of the
-- last computation's keeps that one's summary (members_digest: the count
-- and XOR of a hash of the member ids), so the model writes again only for
-- communities whose members changed.  summary_digest is the members'
-- digest the summary was written for; summary_facts the facts it was
-- written from, which a wipe that deletes one of them clears it with.

alter table memory.communities
  add column members_digest bigint,
  add column summary text
    constraint communities_summary_check check (summary <> '' and length(summary) <= 1000),
  add column summarized_at timestamptz,
  add column summary_digest bigint,
  add column summary_facts uuid[] not null default '{}',
  add column summary_model text,
  add constraint communities_summarized_check check (
    (summary is null) = (summarized_at is null) and (summary is null) = (summary_digest is null));
comment on column memory.communities.members_digest is
  'XOR of uuid_hash_extended(entity_id, 0) over the members: equal for two computations that found the same members.';
comment on column memory.communities.summary is
  'The model''s short summary of the community (the summarize_communities job), redacted by the project''s policy; NULL until written, or cleared by a wipe of what it was written from.';
comment on column memory.communities.summarized_at is 'When the summary was written.';
comment on column memory.communities.summary_digest is
  'The members_digest the summary was written for: when it differs from members_digest the summary is due again.';
comment on column memory.communities.summary_facts is
  'The facts the summary was written from: a wipe deleting one of them clears the summary.';
comment on column memory.communities.summary_model is 'The model that wrote the summary.';

-- The digest of the communities computed before this revision.
alter table memory.communities no force row level security;
alter table memory.community_members no force row level security;
update memory.communities c
   set members_digest = (select coalesce(bit_xor(uuid_hash_extended(m.entity_id, 0)), 0)
                           from memory.community_members m
                          where m.org_id = c.org_id and m.community_id = c.community_id);
alter table memory.communities force row level security;
alter table memory.community_members force row level security;

-- The jobs that ask the model for the summaries: one queued per project at
-- a time.
create index communities_summary_due_idx on memory.communities (org_id, project_id)
  where summary is null or summary_digest <> members_digest;

create or replace function memory_internal.job_kinds() returns text[]
  language sql immutable parallel safe
  as $$ select array['enrich', 'embed', 'deliver_webhook', 'reconcile_edges', 'communities', 'purge',
                     'summarize_communities'] $$;
comment on function memory_internal.job_kinds() is
  'Every job kind, in the order queue_stats lists them: the one list, which memory.jobs'' check constraint (jobs_kind_check) calls.';

alter table memory.jobs
  drop constraint jobs_kind_check,
  add constraint jobs_kind_check check (kind = any (memory_internal.job_kinds()));
