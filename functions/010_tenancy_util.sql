-- Tenancy, normalization and small helpers every other file uses.
-- CREATE OR REPLACE only: this file is re-applied on every migrate.

-- Normalization: one definition for entity names, predicates, objects and
-- content.  Default-ignorable code points dropped (zero-width spaces and
-- joiners, direction marks, BOM, soft hyphen, variation selectors: text
-- that looks the same is one key), NFKC, Unicode case folding, punctuation
-- to spaces, whitespace collapsed.  Letters and marks of every script are
-- kept ("Zürich" -> "zürich", "東京" stays), and letters of different
-- scripts stay different: a Cyrillic "о" is not a Latin "o" (confusables are
-- not merged; a wrong merge of two entities is worse than a missed one).  The collation that gives Unicode-aware case
-- folding differs by server version, so the body is written for the server
-- it is installed on.  NFKC leaves ASCII as it is, so ASCII text (one byte
-- per character) skips it: most names and sentences are ASCII, and NFKC is
-- half the cost of a call.  Folded text that is already lowercase ASCII
-- words with single spaces between them (most of it) is its own result: the
-- anchored match costs a fifth of the replacement it skips, which a batch
-- would run three times per fact
-- (docs/decisions/010-identity-exact-resolution-and-cardinality.md).
-- Not STRICT, so that calls with a plain column or parameter are inlined
-- (a strict function is inlined only if its body is strict, and CASE is
-- not); NULL still gives NULL.
do $do$
declare
  -- Unicode's Default_Ignorable_Code_Point set: none of them is ASCII, and
  -- NFKC and case folding make none of them from other characters, so they
  -- are dropped in the non-ASCII branch, before NFKC (a ZWJ between a letter
  -- and a combining mark would otherwise keep the two from composing).
  ignorable constant text :=
    '[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E'
    '\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFF8\U0001BCA0-\U0001BCA3'
    '\U0001D173-\U0001D17A\U000E0000-\U000E0FFF]';
  nfkc constant text := format(
    '(case when octet_length(p_text) = length(p_text) then p_text '
    'else normalize(regexp_replace(p_text, %L, '''', ''g''), NFKC) end)', ignorable);
  folded text;
begin
  if exists (select from pg_collation where collname = 'pg_unicode_fast')
     and exists (select from pg_proc where proname = 'casefold') then
    folded := format('casefold(%s collate pg_unicode_fast)', nfkc);
  elsif exists (select from pg_collation where collname = 'pg_c_utf8') then
    folded := format('lower(%s collate pg_c_utf8)', nfkc);
  elsif exists (select from pg_collation where collname = 'und-x-icu') then
    folded := format('lower(%s collate "und-x-icu")', nfkc);
  else
    raise warning 'chronomem: no Unicode-aware collation on this server; '
      'normalize_text folds case with the database default collation';
    folded := format('lower(%s)', nfkc);
  end if;
  execute format($f$
    create or replace function memory.normalize_text(p_text text) returns text
      language sql immutable parallel safe
      as $body$
        select case when %1$s ~ '^[a-z0-9]+( [a-z0-9]+)*$' then %1$s
                    else btrim(regexp_replace(%1$s, '[[:punct:][:space:]]+', ' ', 'g')) end
      $body$ $f$, folded);
end
$do$;
comment on function memory.normalize_text(text) is
  'The one normalization: default-ignorable code points dropped, NFKC, Unicode case fold, punctuation stripped, whitespace collapsed. Confusable letters of other scripts (a Cyrillic о for a Latin o) stay distinct: a wrong merge is worse than a missed one. Used for entity names, predicates, objects and content.';

-- What an instant is, for every path that takes one from a client as text
-- (assert_facts' valid_from and valid_to, ingest's occurred_at, the
-- extraction model's windows): ISO 8601 and nothing else, the whole string
-- -- a date, optionally a time (T or one space) with optional seconds and
-- a fraction of up to nine digits, then a zone (Z, +hh:mm, +hhmm or +hh);
-- a bare date may end in Z ('2024-01-01Z': that day's midnight UTC).
-- Without a zone it is UTC.  PostgreSQL alone would also read 'now', 'Jan 5 2024',
-- '2024-01-01 BC' or '2024-01-01 allballs', which no client means as data.
-- After conversion to UTC it must lie in years 1..9999 (instant_in_range):
-- '9999-12-31T23:59:59-14:00' is year 10000 and '0001-01-01T00:00:00+14:00'
-- is 1 BC, which no ISO 8601 text of four-digit years can be written back
-- as.  Infinity is not an instant.  NULL when the text is not one.  From
-- PostgreSQL 16 on, input functions report bad input without raising
-- (pg_input_is_valid), so the check needs no exception block: each one is
-- a subtransaction, paid per timestamp of every batch.  Older servers keep
-- the exception block.
create or replace function memory_internal.instant_in_range(p_at timestamptz) returns boolean
  language sql immutable parallel safe
  as $$ select p_at >= '0001-01-01 00:00:00+00' and p_at < '10000-01-01 00:00:00+00' $$;
comment on function memory_internal.instant_in_range(timestamptz) is
  'Whether an instant lies in years 1..9999 UTC: the instants a client may give and every read can write back as ISO 8601.';

do $do$
declare
  iso constant text :=
    '^[0-9]{4}-[0-9]{2}-[0-9]{2}'
    '([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,9})?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?|Z)?$';
begin
  if exists (select from pg_proc where proname = 'pg_input_is_valid') then
    execute format($f$
      create or replace function memory_internal.try_timestamptz(p_text text) returns timestamptz
        language plpgsql stable
        set timezone = 'UTC'
      as $$
      declare
        v timestamptz;
      begin
        if p_text !~ %L or not pg_input_is_valid(p_text, 'timestamptz') then
          return null;
        end if;
        v := p_text::timestamptz;
        return case when memory_internal.instant_in_range(v) then v end;
      end
      $$ $f$, iso);
  else
    execute format($f$
      create or replace function memory_internal.try_timestamptz(p_text text) returns timestamptz
        language plpgsql stable
        set timezone = 'UTC'
      as $$
      declare
        v timestamptz;
      begin
        if p_text !~ %L then
          return null;
        end if;
        v := p_text::timestamptz;
        return case when memory_internal.instant_in_range(v) then v end;
      exception when others then
        return null;
      end
      $$ $f$, iso);
  end if;
end
$do$;
comment on function memory_internal.try_timestamptz(text) is
  'The one definition of an instant given as text: the whole string ISO 8601 (date, optional time (T or space) with seconds and up to 9 fraction digits, zone Z/±hh:mm/±hhmm/±hh after a time, Z after a bare date, none = UTC), in years 1..9999 after conversion to UTC. NULL when it is not one.';

-- A version 7 UUID (RFC 9562): the millisecond Unix time of p_at in the
-- first 48 bits, then p_random's bits with the version nibble set to 7
-- (its variant bits are kept: gen_random_uuid() sets them).  The layout of
-- uuidv7(), for servers before PostgreSQL 18; a function of its inputs, so
-- it is tested on every server.
create or replace function memory_internal.uuid_v7(p_random uuid, p_at timestamptz)
  returns uuid
  language sql immutable parallel safe
  as $$
    select encode(set_byte(b, 6, (get_byte(b, 6) & 15) | 112), 'hex')::uuid
      from (select overlay(uuid_send(p_random)
                           placing substring(int8send(floor(extract(epoch from p_at) * 1000)::bigint)
                                             from 3)
                           from 1 for 6) as b) r
  $$;
comment on function memory_internal.uuid_v7(uuid, timestamptz) is
  'A version 7 UUID: the millisecond Unix time of p_at, then p_random''s bits (version nibble set to 7). new_fact_id''s layout before PostgreSQL 18.';

-- Ids of new fact versions, time-ordered (UUID version 7: a millisecond
-- timestamp, then random bits).  Two btrees of memory.facts lead with
-- (org, fact id) (the primary key and the text leg's cover): a random id
-- would land on a random leaf of each, so every batch would dirty (and
-- split, and after a checkpoint log whole) pages all over both; a
-- time-ordered id appends at their right edge, for 2-9% less backend CPU
-- per assert_facts batch.  PostgreSQL 18 has uuidv7(); older servers build
-- the same layout with uuid_v7.
do $do$
begin
  if exists (select from pg_proc where proname = 'uuidv7' and pronargs = 0) then
    execute $f$
      create or replace function memory_internal.new_fact_id() returns uuid
        language sql volatile parallel safe
        as $$ select uuidv7() $$ $f$;
  else
    execute $f$
      create or replace function memory_internal.new_fact_id() returns uuid
        language sql volatile parallel safe
        as $$ select memory_internal.uuid_v7(gen_random_uuid(), clock_timestamp()) $$ $f$;
  end if;
end
$do$;
comment on function memory_internal.new_fact_id() is
  'A new fact version''s id: a time-ordered UUID (version 7), so the btrees keyed on fact ids grow at their right edge.';

create or replace function memory_internal.is_uuid(p_text text) returns boolean
  language sql immutable parallel safe
  as $$ select p_text ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' $$;

-- The org of a project visible in the current org scope, or an error that
-- does not reveal whether the project exists elsewhere.
create or replace function memory_internal.project_org(p_project uuid) returns uuid
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid;
  v_scope uuid := memory_internal.current_org();
begin
  -- The scope named as well as implied by the policy: on Citus, a query
  -- with the org as a value goes to that org's shard alone, where one
  -- without it asks every shard (and a generic plan of that cannot be made).
  select p.org_id into v_org from memory.projects p
   where p.org_id = v_scope and p.project_id = p_project;
  if v_org is null then
    raise exception 'project % not found', p_project
      using errcode = 'no_data_found',
            hint = 'Call memory.use_org(org) first; projects of other orgs are not visible.';
  end if;
  return v_org;
end
$$;

-- A transaction's own settings that rows' policies, triggers and defaults
-- read (the org scope, the API key a call runs under, the record-time
-- instant, the wipe flag) are written here.  On a Citus coordinator with
-- citus.propagate_set_commands = 'local' (`chronomem distribute` sets it)
-- as SET LOCAL, which reaches every worker of the transaction, so the
-- shards' policies see the coordinator's scope; set_config() stays on the
-- coordinator (docs/decisions/016-org-scope-as-set-local.md).  On one
-- server the two are the same.  tests/py/test_citus_lint.py fails on a
-- function that writes a chronomem setting any other way.
create or replace function memory_internal.set_local(p_name text, p_value text) returns text
  language plpgsql
as $$
begin
  -- The name goes into the statement's text: a setting's name, never SQL.
  if p_name !~ '^[a-z_]+[.][a-z_]+$' then
    raise exception 'not a setting name: %', p_name using errcode = 'invalid_parameter_value';
  end if;
  -- Distributed (`chronomem distribute` sets this for the database): SET
  -- LOCAL, parsed per call.  On one server set_config(), a fifth of the cost.
  if current_setting('citus.propagate_set_commands', true) = 'local' then
    execute format('set local %s = %L', p_name, coalesce(p_value, ''));
  else
    perform set_config(p_name, coalesce(p_value, ''), true);
  end if;
  return p_value;
end
$$;
comment on function memory_internal.set_local(text, text) is
  'SET LOCAL p_name = p_value (NULL: empty) for the rest of the transaction: the one way a function writes a chronomem setting, so that Citus carries it to the workers.';

create or replace function memory.use_org(p_org uuid, p_transaction_local boolean default true)
  returns uuid
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  if p_org is null or p_transaction_local is null then
    raise exception 'org and transaction_local must not be null' using errcode = 'null_value_not_allowed';
  end if;
  -- Transaction-local by default, so a pooled connection never carries one
  -- request's org into the next (SQL cannot tell reliably whether it runs
  -- inside a transaction block: drivers' extended protocol defeats the
  -- usual timestamp test).  Session scope is asked for explicitly.
  -- A session scope is also this transaction's, as SET LOCAL: Citus carries
  -- only that to the workers (later transactions of the session scope the
  -- coordinator alone: on Citus, scope each transaction).
  if not p_transaction_local then
    perform set_config('chronomem.org_id', p_org::text, false);
  end if;
  perform memory_internal.set_local('chronomem.org_id', p_org::text);
  if not exists (select from memory.orgs o where o.org_id = p_org) then
    raise exception 'org % not found', p_org using errcode = 'no_data_found';
  end if;
  return p_org;
end
$$;
comment on function memory.use_org(uuid, boolean) is
  'Scope the current transaction (default) or, with p_transaction_local => false, the session to an org. Every table''s row-level security is keyed on it. In psql autocommit use memory.use_org(org, false).';

create or replace function memory.create_org(p_name text) returns uuid
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := gen_random_uuid();
  v_prev text := current_setting('chronomem.org_id', true);
begin
  if p_name is null or length(btrim(p_name)) = 0 then
    raise exception 'org name must not be empty' using errcode = 'invalid_parameter_value';
  end if;
  perform memory_internal.set_local('chronomem.org_id', v_org::text);
  insert into memory.orgs (org_id, name) values (v_org, btrim(p_name));
  perform memory_internal.set_local('chronomem.org_id', v_prev);
  return v_org;
end
$$;
comment on function memory.create_org(text) is 'Create a tenant; returns its id. Does not change the caller''s org scope.';

create or replace function memory.create_project(p_org uuid, p_name text) returns uuid
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_project uuid;
begin
  if p_org is distinct from memory_internal.current_org() then
    raise exception 'org % not found', p_org
      using errcode = 'no_data_found', hint = 'Call memory.use_org(org) first.';
  end if;
  if p_name is null or length(btrim(p_name)) = 0 then
    raise exception 'project name must not be empty' using errcode = 'invalid_parameter_value';
  end if;
  insert into memory.projects (org_id, name) values (p_org, btrim(p_name))
  returning project_id into v_project;
  return v_project;
exception when unique_violation then
  raise exception 'project "%" already exists in org %', btrim(p_name), p_org
    using errcode = 'unique_violation';
end
$$;
comment on function memory.create_project(uuid, text) is
  'Create a project in the org the caller is scoped to; returns its id.';

-- Fix this transaction's record-time instant once a writer's locks are
-- held: now(), unless rows it is about to change were stamped later by a
-- writer that committed while this one waited (p_floor).  Monotonic within
-- the transaction.  Written to the setting even when it is now(): on Citus
-- the rows' defaults are computed on the shards' nodes, whose now() is
-- their own transaction's start, and the setting (a SET LOCAL) reaches them.
create or replace function memory_internal.begin_write(p_floor timestamptz default null)
  returns timestamptz
  language plpgsql
as $$
declare
  v_at timestamptz := greatest(now(), p_floor, memory_internal.txn_instant());
begin
  perform memory_internal.set_local('chronomem.write_instant', v_at::text);
  return v_at;
end
$$;
comment on function memory_internal.begin_write(timestamptz) is
  'Fix the record-time instant for the rest of the transaction (chronomem.write_instant, which memory_internal.txn_instant reads on every node): now(), or p_floor (the latest stamp on rows the writer will change) when that is later.';

-- Counters: added to in the writing transaction, so they roll back with it.
-- Several metrics at once: one statement (assert_facts bumps five per
-- batch).  The metrics must be distinct; zeros are skipped.
create or replace function memory_internal.bump_counters(
  p_org uuid, p_project uuid, p_metrics text[], p_by bigint[])
  returns void
  language sql
  as $$
    insert into memory_internal.counters as c (org_id, project_id, metric, shard, value)
    select p_org, p_project, m.metric, (pg_backend_pid() % 8)::smallint, m.n
      from unnest(p_metrics, p_by) m(metric, n)
     where m.n <> 0
    on conflict (org_id, project_id, metric, shard) do update set value = c.value + excluded.value
  $$;

create or replace function memory_internal.bump_counter(
  p_org uuid, p_project uuid, p_metric text, p_by bigint)
  returns void
  language sql
  as $$ select memory_internal.bump_counters(p_org, p_project, array[p_metric], array[p_by]) $$;

create or replace function memory.counters(p_project uuid default null)
  returns table (project_id uuid, metric text, value bigint)
  language sql stable
  as $$
    select c.project_id, c.metric, sum(c.value)::bigint
    from memory_internal.counters c
    -- The org named, not left to the policy: the owner's metric_totals policy
    -- reads every org's, and on Citus this runs as the owner
    -- (docs/decisions/020-citus-forms-of-the-functions.md).
    where c.org_id = memory_internal.current_org()
      and (p_project is null or c.project_id = p_project)
    group by c.project_id, c.metric
    order by c.project_id, c.metric
  $$;
comment on function memory.counters(uuid) is
  'Totals of facts_inserted, facts_superseded, facts_skipped, facts_refused, facts_retracted, ... per project of the current org (for /metrics).';

-- Append-only guards.  fact_events may lose or change rows only inside
-- memory.wipe, which sets chronomem.wiping for its own transaction (it
-- deletes the wiped facts' events and unbinds the windows they cut:
-- memory_internal.unbound_wiped_ranges).
create or replace function memory_internal.tg_fact_events__append_only() returns trigger
  language plpgsql
as $$
begin
  if current_setting('chronomem.wiping', true) = 'on' then
    return case tg_op when 'DELETE' then old else new end;
  end if;
  raise exception '% is append-only: % refused', tg_table_name, lower(tg_op)
    using errcode = 'insufficient_privilege';
end
$$;

create or replace function memory_internal.tg_audit_log__append_only() returns trigger
  language plpgsql
as $$
begin
  raise exception 'audit_log is append-only: % refused', lower(tg_op)
    using errcode = 'insufficient_privilege';
end
$$;

create or replace trigger "10_fact_events_append_only"
  before update or delete on memory.fact_events
  for each row execute function memory_internal.tg_fact_events__append_only();
create or replace trigger "10_audit_log_append_only"
  before update or delete on memory.audit_log
  for each row execute function memory_internal.tg_audit_log__append_only();
