-- 0039_redaction: a per-project redaction policy, applied by the write
-- functions before anything is stored (functions/062_redaction.sql).  One
-- rule per detector; the key that keyed hashes are made with lives apart
-- from the rules, in a table no client role can read.

create table memory.redaction_rules (
  org_id      uuid not null,
  project_id  uuid not null,
  -- A built-in detector, or custom:<name> with an operator's pattern.
  detector    text not null
    constraint redaction_rules_detector_check
    check (detector in ('email', 'phone', 'card', 'iban', 'ip', 'ssn')
           or detector ~ '^custom:[a-z][a-z0-9_]{0,39}$'),
  -- A POSIX regular expression (custom detectors only; checked when set).
  pattern     text
    constraint redaction_rules_pattern_check
    check ((detector like 'custom:%') = (pattern is not null)),
  action      text not null
    constraint redaction_rules_action_check
    check (action in ('mask', 'hash', 'drop', 'refuse')),
  created_at  timestamptz not null default now(),
  primary key (org_id, project_id, detector),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory.redaction_rules is
  'The redaction policy of a project: per detector (email, phone, card, iban, ip, ssn, custom:<name> with its pattern) an action: mask ([EMAIL]), hash ([EMAIL:<keyed hash>]), drop (the message or item is not stored) or refuse (the write fails). Applied by ingest, assert_facts, upsert_entity, add_alias and the worker''s apply_extraction before anything is stored. Written through memory.set_redaction_rule / delete_redaction_rule.';

alter table memory.redaction_rules enable row level security;
alter table memory.redaction_rules force row level security;
create policy tenant_isolation on memory.redaction_rules
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
grant select on memory.redaction_rules to chronomem_app, chronomem_analyst;

-- The key of a project's keyed hashes (HMAC-SHA256), 32 random bytes.  Kept
-- out of the table it protects and readable by no client role: with the key
-- an attacker could test guesses against the hashes in stored text.
create table memory_internal.redaction_keys (
  org_id      uuid not null,
  project_id  uuid not null,
  key         bytea not null check (length(key) = 32),
  created_at  timestamptz not null default now(),
  primary key (org_id, project_id),
  foreign key (org_id, project_id) references memory.projects on delete cascade
);
comment on table memory_internal.redaction_keys is
  'The HMAC-SHA256 key of each project''s redaction hashes (32 random bytes). Read only by security definer functions; no client role has a grant on it.';

alter table memory_internal.redaction_keys enable row level security;
alter table memory_internal.redaction_keys force row level security;
create policy tenant_isolation on memory_internal.redaction_keys
  using (org_id = memory_internal.current_org())
  with check (org_id = memory_internal.current_org());
revoke all on memory_internal.redaction_keys from public, chronomem_app, chronomem_analyst;

-- What was redacted in each message: counts per detector, never the value.
alter table memory.episodes add column redactions jsonb
  constraint episodes_redactions_check
  check (redactions is null or jsonb_typeof(redactions) = 'object');
comment on column memory.episodes.redactions is
  'Values the project''s redaction policy replaced in this message, counted per detector ({"email": 2}); NULL when nothing was redacted. Never the values.';
