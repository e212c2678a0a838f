-- Redaction before storage: a project's policy (memory.redaction_rules, one
-- action per detector) applied by every writer of user or model text --
-- ingest, assert_facts, upsert_entity, add_alias and the worker's notes --
-- before its first insert, so no row, posting, embedding job or webhook
-- payload ever holds the value.  A regular expression finds candidates; a
-- validator (Luhn, mod-97, an inet parse, the SSN rules) decides.  What was
-- redacted is counted per detector (per message in episodes.redactions, per
-- project in the counters), never the value.  Fail-closed: a policy that
-- cannot be evaluated refuses the write.

--------------------------------------------------------------------------
-- Validators
--------------------------------------------------------------------------

-- Luhn's checksum over the digits of p_text (spaces and dashes ignored).
create or replace function memory_internal.luhn_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$
    select d ~ '^[0-9]{2,}$'
           and (select sum(case when (length(d) - i) % 2 = 1
                                then (substr(d, i, 1)::integer * 2) % 10 + (substr(d, i, 1)::integer * 2) / 10
                                else substr(d, i, 1)::integer end) % 10 = 0
                  from generate_series(1, length(d)) i)
      from (select regexp_replace(p_text, '[ -]', '', 'g') as d) x
  $$;
comment on function memory_internal.luhn_valid(text) is
  'Whether the digits of p_text (spaces and dashes ignored; anything else makes it false) pass Luhn''s checksum, as payment card numbers do.';

-- ISO 13616: the first four characters moved to the end, letters as 10..35,
-- the number mod 97 is 1.
create or replace function memory_internal.iban_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$
    select c ~ '^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$'
           and (select string_agg(case when ch between 'A' and 'Z' then (ascii(ch) - 55)::text else ch end,
                                  '' order by i)
                  from (select i, substr(substr(c, 5) || left(c, 4), i, 1) as ch
                          from generate_series(1, length(c)) i) s)::numeric % 97 = 1
      from (select upper(regexp_replace(p_text, '[[:space:]]', '', 'g')) as c) x
  $$;
comment on function memory_internal.iban_valid(text) is
  'Whether p_text (spaces ignored, any case) is an IBAN: country, check digits, 11 to 30 letters or digits, and the ISO 13616 mod-97 check.';

-- US SSN as written AAA-GG-SSSS: no area 000, 666 or 900-999, no group
-- 00, no serial 0000 (never issued).
create or replace function memory_internal.ssn_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$
    select p_text ~ '^[0-9]{3}-[0-9]{2}-[0-9]{4}$'
           and left(p_text, 3) not in ('000', '666') and left(p_text, 1) <> '9'
           and substr(p_text, 5, 2) <> '00' and right(p_text, 4) <> '0000'
  $$;
comment on function memory_internal.ssn_valid(text) is
  'Whether p_text is a US social security number as written AAA-GG-SSSS that could have been issued (area not 000, 666 or 9xx; group not 00; serial not 0000).';

-- An address PostgreSQL's inet accepts, without a prefix length.
create or replace function memory_internal.ip_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$ select strpos(p_text, '/') = 0 and p_text ~ '[0-9A-Fa-f]' and pg_input_is_valid(p_text, 'inet') $$;
comment on function memory_internal.ip_valid(text) is
  'Whether p_text is an IPv4 or IPv6 address (inet''s own parse: 999.1.1.1 is not one), without a prefix length.';

-- A phone number as people write one: 7 to 15 digits (E.164's longest),
-- written with a leading + or with separators, and not the shape of a
-- date, an SSN, an IPv4 address or a decimal number.
create or replace function memory_internal.phone_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$
    select length(regexp_replace(p_text, '[^0-9]', '', 'g')) between 7 and 15
           and (left(p_text, 1) = '+' or p_text ~ '[ ()-]' or p_text ~ '\..*\.')
           and p_text !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$'
           and p_text !~ '^[0-9]{3}-[0-9]{2}-[0-9]{4}$'
           and p_text !~ '^[0-9]{1,3}(\.[0-9]{1,3}){3}$'
  $$;
comment on function memory_internal.phone_valid(text) is
  'Whether a phone candidate is one: 7 to 15 digits, a leading + or separators, and not a date, SSN or IPv4 shape.';

create or replace function memory_internal.email_valid(p_text text) returns boolean
  language sql immutable strict parallel safe
  as $$
    select length(p_text) <= 254 and length(split_part(p_text, '@', 1)) <= 64
           and p_text !~ '\.\.' and p_text !~ '^\.' and p_text !~ '\.@'
  $$;
comment on function memory_internal.email_valid(text) is
  'Whether an e-mail candidate is an address: at most 254 characters, a local part of at most 64 without leading, trailing or doubled dots.';

--------------------------------------------------------------------------
-- Detectors
--------------------------------------------------------------------------

-- The fixed order detectors run in (custom ones last, by name): a value
-- one detector replaced is not seen by the next (an IBAN's digits are not a
-- card, an SSN is not a phone number).
create or replace function memory_internal.redaction_detectors() returns text[]
  language sql immutable parallel safe
  as $$ select array['email', 'iban', 'card', 'ssn', 'ip', 'phone'] $$;
comment on function memory_internal.redaction_detectors() is
  'The built-in redaction detectors, in the order they run (custom:<name> detectors run after them, by name).';

-- The candidate pattern of a detector (no capturing groups: the caller
-- wraps it in one).
create or replace function memory_internal.redaction_pattern(p_detector text, p_pattern text)
  returns text
  language sql immutable parallel safe
  as $$
    select case p_detector
      when 'email' then '[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}'
      when 'iban' then '(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])'
      when 'card' then '(?<![0-9])(?:[0-9]{4}(?: [0-9]{4}){3}|[0-9]{4}(?:-[0-9]{4}){3}'
                       '|[0-9]{4}[ -][0-9]{6}[ -][0-9]{5}|[0-9]{13,19})(?![0-9])'
      when 'ssn' then '(?<![0-9])[0-9]{3}-[0-9]{2}-[0-9]{4}(?![0-9])'
      when 'ip' then '(?<![0-9.])[0-9]{1,3}(?:\.[0-9]{1,3}){3}(?![0-9]|\.[0-9])'
                     '|(?<![0-9A-Za-z:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Za-z:])'
      when 'phone' then '(?<![0-9A-Za-z+])\+?\(?[0-9][0-9 ().-]{5,}[0-9](?![0-9A-Za-z])'
      else p_pattern
    end
  $$;
comment on function memory_internal.redaction_pattern(text, text) is
  'The regular expression that finds a detector''s candidates (a custom detector''s own pattern); the validators decide.';

-- Whether a candidate is the detector's kind of value, and its normalized
-- form (what a keyed hash is made of, so that one address written twice
-- differently hashes the same); NULL when it is not.
create or replace function memory_internal.redaction_normalize(p_detector text, p_value text)
  returns text
  language sql immutable parallel safe
  as $$
    select case p_detector
      when 'email' then case when memory_internal.email_valid(p_value) then lower(p_value) end
      when 'iban' then case when memory_internal.iban_valid(p_value)
                            then upper(regexp_replace(p_value, '[[:space:]]', '', 'g')) end
      when 'card' then case when memory_internal.luhn_valid(p_value)
                            then regexp_replace(p_value, '[^0-9]', '', 'g') end
      when 'ssn' then case when memory_internal.ssn_valid(p_value)
                           then regexp_replace(p_value, '[^0-9]', '', 'g') end
      when 'ip' then case when memory_internal.ip_valid(p_value) then host(p_value::inet) end
      when 'phone' then case when memory_internal.phone_valid(p_value)
                             then regexp_replace(p_value, '[^0-9]', '', 'g') end
      else p_value
    end
  $$;
comment on function memory_internal.redaction_normalize(text, text) is
  'A detector''s candidate in normalized form (lowercased e-mail, digits of a card, phone or SSN, IBAN without spaces, canonical IP, a custom match as found), or NULL when the validator rejects it.';

-- HMAC-SHA256 (RFC 2104) from PostgreSQL's own sha256(): pgcrypto is not
-- installed here, and its hmac() is not needed for this.
create or replace function memory_internal.hmac_sha256(p_key bytea, p_message bytea)
  returns bytea
  language plpgsql immutable strict parallel safe
as $$
declare
  v_key bytea := case when length(p_key) > 64 then sha256(p_key) else p_key end;
  v_inner bytea;
  v_outer bytea;
begin
  v_key := v_key || decode(repeat('00', 64 - length(v_key)), 'hex');
  v_inner := v_key;
  v_outer := v_key;
  for i in 0 .. 63 loop
    v_inner := set_byte(v_inner, i, get_byte(v_key, i) # 54);   -- 0x36
    v_outer := set_byte(v_outer, i, get_byte(v_key, i) # 92);   -- 0x5c
  end loop;
  return sha256(v_outer || sha256(v_inner || p_message));
end
$$;
comment on function memory_internal.hmac_sha256(bytea, bytea) is
  'HMAC-SHA256 of p_message under p_key (RFC 2104, built on sha256(); no pgcrypto).';

create or replace function memory_internal.redaction_label(p_detector text) returns text
  language sql immutable parallel safe
  as $$ select upper(regexp_replace(p_detector, '^custom:', '')) $$;

--------------------------------------------------------------------------
-- The policy and its evaluation
--------------------------------------------------------------------------

-- The project's policy as the evaluator takes it: its rules in detector
-- order, and its hash key (hex) when a rule hashes; NULL when the project
-- has no rule (one probe of the primary key: the price of redaction for a
-- project without a policy).
create or replace function memory_internal.redaction_policy(p_org uuid, p_project uuid)
  returns jsonb
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_rules jsonb;
  v_key bytea;
begin
  if not exists (select from memory.redaction_rules r
                  where r.org_id = p_org and r.project_id = p_project) then
    return null;
  end if;
  select jsonb_agg(jsonb_build_object(
           'detector', r.detector, 'action', r.action,
           'pattern', memory_internal.redaction_pattern(r.detector, r.pattern))
           order by coalesce(array_position(memory_internal.redaction_detectors(), r.detector), 99),
                    r.detector)
    into v_rules
    from memory.redaction_rules r
   where r.org_id = p_org and r.project_id = p_project;
  if exists (select from jsonb_array_elements(v_rules) x where x ->> 'action' = 'hash') then
    select k.key into v_key from memory_internal.redaction_keys k
     where k.org_id = p_org and k.project_id = p_project;
    if v_key is null then
      raise exception 'the redaction policy hashes but the project has no hash key'
        using errcode = 'check_violation';
    end if;
  end if;
  return jsonb_build_object('rules', v_rules, 'key', encode(v_key, 'hex'));
end
$$;
comment on function memory_internal.redaction_policy(uuid, uuid) is
  'A project''s redaction rules in the order they run, with its hash key when a rule hashes; NULL when it has none. For the evaluators only (it holds the key).';

-- Apply a policy to one text.  Candidates are taken in order (the text
-- split around the pattern's matches, and the matches), each kept or
-- replaced as its validator says; refuse raises, naming the detector and
-- p_field, never the value.  Tokens already in the text ([EMAIL],
-- [EMAIL:<hash>]) are kept as they are, so applying a policy twice (model
-- output that quotes a redacted message) changes nothing more.
create or replace function memory_internal.redact_apply(
  p_policy jsonb, p_text text, p_field text,
  out text text, out counts jsonb, out dropped boolean)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  r record;
  v_pieces text[];
  v_matches text[];
  v_out text;
  v_norm text;
  v_n integer;
  c text;
begin
  text := p_text;
  counts := '{}';
  dropped := false;
  if p_text is null or p_policy is null then
    return;
  end if;
  for r in select x ->> 'detector' as detector, x ->> 'action' as action, x ->> 'pattern' as pattern
             from jsonb_array_elements(p_policy -> 'rules') x loop
    if text !~ r.pattern then
      continue;
    end if;
    v_pieces := regexp_split_to_array(text, r.pattern);
    v_matches := array(select m[1] from regexp_matches(text, '(' || r.pattern || ')', 'g') m);
    if cardinality(v_pieces) <> cardinality(v_matches) + 1 then
      raise exception 'redaction detector % matched inconsistently', r.detector
        using errcode = 'internal_error';
    end if;
    v_out := v_pieces[1];
    v_n := 0;
    for i in 1 .. cardinality(v_matches) loop
      c := v_matches[i];
      v_norm := memory_internal.redaction_normalize(r.detector, c);
      if v_norm is null or c ~ '^\[[A-Z0-9_]+(:[0-9a-f]{12})?\]$' then
        v_out := v_out || c || v_pieces[i + 1];
        continue;
      end if;
      v_n := v_n + 1;
      if r.action = 'refuse' then
        raise exception 'the redaction policy refuses % values: % holds one', r.detector, p_field
          using errcode = 'check_violation', detail = p_field,
                hint = 'Remove the value or change the project''s redaction rule for ' || r.detector || '.';
      end if;
      v_out := v_out || '[' || memory_internal.redaction_label(r.detector)
               || case when r.action = 'hash' then
                    ':' || left(encode(memory_internal.hmac_sha256(
                                  decode(p_policy ->> 'key', 'hex'),
                                  convert_to(r.detector || ':' || v_norm, 'UTF8')), 'hex'), 12)
                  else '' end
               || ']' || v_pieces[i + 1];
    end loop;
    if v_n > 0 then
      counts := counts || jsonb_build_object(r.detector, v_n);
      dropped := dropped or r.action = 'drop';
      text := v_out;
    end if;
  end loop;
end
$$;
comment on function memory_internal.redact_apply(jsonb, text, text) is
  'Apply a redaction policy (memory_internal.redaction_policy) to one text: the text with values masked or hashed, counts per detector, and whether a drop rule matched; a refuse rule raises check_violation naming the detector and p_field, never the value.';

-- The same over every string of a JSON value (metadata): keys are kept.
create or replace function memory_internal.redact_jsonb(
  p_policy jsonb, p_value jsonb, p_field text,
  out value jsonb, out counts jsonb, out dropped boolean)
  language plpgsql stable
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  r record;
  x record;
  v_parts jsonb;
begin
  value := p_value;
  counts := '{}';
  dropped := false;
  case jsonb_typeof(p_value)
    when 'string' then
      select to_jsonb(a.text), a.counts, a.dropped into value, counts, dropped
        from memory_internal.redact_apply(p_policy, p_value #>> '{}', p_field) a;
    when 'object' then
      v_parts := '{}';
      for x in select * from jsonb_each(p_value) loop
        select * into r from memory_internal.redact_jsonb(p_policy, x.value, p_field || '.' || x.key);
        v_parts := v_parts || jsonb_build_object(x.key, r.value);
        counts := memory_internal.add_counts(counts, r.counts);
        dropped := dropped or r.dropped;
      end loop;
      value := v_parts;
    when 'array' then
      v_parts := '[]';
      for x in select e, ord from jsonb_array_elements(p_value) with ordinality t(e, ord) loop
        select * into r from memory_internal.redact_jsonb(p_policy, x.e, format('%s[%s]', p_field, x.ord - 1));
        v_parts := v_parts || jsonb_build_array(r.value);
        counts := memory_internal.add_counts(counts, r.counts);
        dropped := dropped or r.dropped;
      end loop;
      value := v_parts;
    else
      null;
  end case;
end
$$;
comment on function memory_internal.redact_jsonb(jsonb, jsonb, text) is
  'memory_internal.redact_apply over every string of a JSON value (keys kept), counts summed.';

create or replace function memory_internal.add_counts(p_a jsonb, p_b jsonb) returns jsonb
  language sql immutable parallel safe
  as $$
    select coalesce(jsonb_object_agg(k, n), '{}') from (
      select k, sum(v::bigint) as n
        from (select * from jsonb_each_text(coalesce(p_a, '{}'))
              union all select * from jsonb_each_text(coalesce(p_b, '{}'))) t(k, v)
       group by k) s
  $$;
comment on function memory_internal.add_counts(jsonb, jsonb) is
  'Sum two {detector: count} objects.';

-- Counters for /metrics: redactions_<detector>, custom detectors together
-- as redactions_custom (an operator's names are not metric names).
create or replace function memory_internal.count_redactions(p_org uuid, p_project uuid, p_counts jsonb)
  returns void
  language sql
  as $$
    select memory_internal.bump_counters(p_org, p_project, array_agg(m), array_agg(n::bigint))
      from (select 'redactions_' || case when k like 'custom:%' then 'custom' else k end as m,
                   sum(v::bigint) as n
              from jsonb_each_text(p_counts) t(k, v) group by 1) s
    having count(*) > 0
  $$;
comment on function memory_internal.count_redactions(uuid, uuid, jsonb) is
  'Add {detector: count} to the project''s redactions_<detector> counters (custom detectors as redactions_custom).';

-- A policy error that is not a refusal: the write is refused (fail-closed),
-- saying what failed but not the text.
create or replace function memory_internal.redaction_failed(p_state text, p_field text)
  returns void
  language plpgsql
as $$
begin
  raise exception 'the redaction policy could not be evaluated for % (SQLSTATE %); nothing was stored',
    p_field, p_state
    using errcode = 'check_violation', detail = p_field,
          hint = 'Fix or delete the project''s redaction rules (memory.redaction_rules_of).';
end
$$;

-- Redact one text of a write with the project's policy, counting what was
-- redacted: the entry point for single values (entity names, aliases,
-- summaries, notes).  No policy: the text as it is.
create or replace function memory_internal.redact(
  p_org uuid, p_project uuid, p_text text, p_field text default 'text', p_count boolean default true,
  out text text, out counts jsonb, out dropped boolean)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_policy jsonb;
begin
  text := p_text;
  counts := null;
  dropped := false;
  -- No policy: one probe, and no subtransaction.
  if p_text is null or not exists (select from memory.redaction_rules r
                                    where r.org_id = p_org and r.project_id = p_project) then
    return;
  end if;
  begin
    v_policy := memory_internal.redaction_policy(p_org, p_project);
    select a.text, a.counts, a.dropped into text, counts, dropped
      from memory_internal.redact_apply(v_policy, p_text, p_field) a;
  exception
    when check_violation then raise;
    when others then perform memory_internal.redaction_failed(sqlstate, p_field);
  end;
  if counts = '{}' then
    counts := null;
  elsif p_count then
    perform memory_internal.count_redactions(p_org, p_project, counts);
  end if;
end
$$;
comment on function memory_internal.redact(uuid, uuid, text, text, boolean) is
  'Apply the project''s redaction policy to one text before it is stored: the text (masked or hashed values), counts per detector (NULL: nothing redacted; added to the counters unless p_count is false) and whether a drop rule matched. A refuse rule, or a policy that cannot be evaluated, raises check_violation naming p_field, never the value.';

-- A value that cannot be left out (a session's id or metadata) matched a
-- drop rule: the write is refused.
create or replace function memory_internal.redaction_refused(p_action text, p_field text)
  returns boolean
  language plpgsql
as $$
begin
  raise exception 'a % rule matched the %, which cannot be left out; nothing was stored', p_action, p_field
    using errcode = 'check_violation', detail = p_field;
end
$$;
comment on function memory_internal.redaction_refused(text, text) is
  'Raise check_violation: a drop rule matched a value that cannot be left out (p_field: session, session_metadata), so the write is refused.';

-- A session's id and metadata under the policy: every string redacted and
-- counted; fail-closed.  A session cannot be left out, so a drop rule that
-- matches either refuses the write.
create or replace function memory_internal.redact_session(
  p_org uuid, p_project uuid, p_policy jsonb, p_session text, p_metadata jsonb,
  out session text, out metadata jsonb)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_id record;
  v_meta record;
begin
  begin
    select * into v_id from memory_internal.redact_apply(p_policy, p_session, 'session');
    select * into v_meta from memory_internal.redact_jsonb(p_policy, p_metadata, 'session_metadata');
  exception
    when check_violation then raise;
    when others then perform memory_internal.redaction_failed(sqlstate, 'session');
  end;
  if v_id.dropped then
    perform memory_internal.redaction_refused('drop', 'session');
  elsif v_meta.dropped then
    perform memory_internal.redaction_refused('drop', 'session_metadata');
  end if;
  perform memory_internal.count_redactions(
    p_org, p_project, memory_internal.add_counts(v_id.counts, coalesce(v_meta.counts, '{}')));
  session := v_id.text;
  metadata := v_meta.value;
end
$$;
comment on function memory_internal.redact_session(uuid, uuid, jsonb, text, jsonb) is
  'Ingest''s session id and metadata under the project''s redaction policy: strings masked or hashed and counted; a drop or refuse rule that matches either, or a policy that cannot be evaluated, refuses the write (check_violation).';

-- Ingest's messages: content and metadata strings redacted; a message a
-- drop rule matched is left out (its index listed).  Each kept message
-- carries its counts under "redactions" (ingest stores them).
create or replace function memory_internal.redact_messages(
  p_org uuid, p_project uuid, p_policy jsonb, p_messages jsonb,
  out messages jsonb, out dropped integer[], out counts jsonb)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  m record;
  c record;
  v_meta jsonb;
  v_meta_drop boolean;
  v_meta_counts jsonb;
  v_counts jsonb;
  v_idx integer;
begin
  messages := '[]';
  dropped := '{}';
  counts := '{}';
  -- One subtransaction for the batch, not one per message; v_idx keeps
  -- the message the handler names (variables survive the error).
  begin
    for m in select t.e, (t.ord - 1)::integer as idx
               from jsonb_array_elements(p_messages) with ordinality t(e, ord) loop
      v_idx := m.idx;
      v_meta := null;
      v_meta_drop := false;
      v_meta_counts := '{}';
      select * into c from memory_internal.redact_apply(
        p_policy, m.e ->> 'content', format('message %s content', m.idx));
      if jsonb_typeof(m.e -> 'metadata') = 'object' then
        select j.value, j.counts, j.dropped into v_meta, v_meta_counts, v_meta_drop
          from memory_internal.redact_jsonb(
                 p_policy, m.e -> 'metadata', format('message %s metadata', m.idx)) j;
      end if;
      v_counts := case when v_meta_counts = '{}' then c.counts
                       else memory_internal.add_counts(c.counts, v_meta_counts) end;
      if v_counts <> '{}' then
        counts := memory_internal.add_counts(counts, v_counts);
      end if;
      if c.dropped or v_meta_drop then
        dropped := dropped || m.idx;
        continue;
      end if;
      messages := messages || jsonb_build_array(
        m.e || jsonb_build_object('content', c.text)
            || case when v_meta is not null then jsonb_build_object('metadata', v_meta) else '{}' end
            || case when v_counts <> '{}' then jsonb_build_object('redactions', v_counts) else '{}' end);
    end loop;
  exception
    when check_violation then raise;
    when others then perform memory_internal.redaction_failed(sqlstate, format('message %s', v_idx));
  end;
  perform memory_internal.count_redactions(p_org, p_project, counts);
end
$$;
comment on function memory_internal.redact_messages(uuid, uuid, jsonb, jsonb) is
  'Ingest''s redaction: each message''s content and metadata strings through the policy; messages a drop rule matched left out (dropped: their indexes); kept ones carry their counts as "redactions"; totals added to the counters.';

-- assert_facts' facts: subject, object and content redacted (strings only:
-- any other type is parse_facts'' to report).  A fact a drop rule matched
-- is left out; kept lists the original index of each fact passed on.
create or replace function memory_internal.redact_facts(
  p_org uuid, p_project uuid, p_policy jsonb, p_facts jsonb,
  out facts jsonb, out kept integer[], out dropped jsonb, out counts jsonb,
  out fact_counts jsonb)
  language plpgsql
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  f record;
  c record;
  k text;
  v_fact jsonb;
  v_counts jsonb;
  v_drop boolean;
  v_idx integer;
begin
  facts := '[]';
  kept := '{}';
  dropped := '[]';
  counts := '{}';
  fact_counts := '{}';
  begin
    for f in select t.e, (t.ord - 1)::integer as idx
               from jsonb_array_elements(p_facts) with ordinality t(e, ord) loop
      v_idx := f.idx;
      v_fact := f.e;
      v_counts := '{}';
      v_drop := false;
      if jsonb_typeof(f.e) = 'object' then
        foreach k in array array['subject', 'object', 'content'] loop
          continue when jsonb_typeof(f.e -> k) is distinct from 'string';
          select * into c from memory_internal.redact_apply(
            p_policy, f.e ->> k, format('fact %s %s', f.idx, k));
          v_fact := v_fact || jsonb_build_object(k, c.text);
          if c.counts <> '{}' then
            v_counts := memory_internal.add_counts(v_counts, c.counts);
          end if;
          v_drop := v_drop or c.dropped;
        end loop;
      end if;
      if v_counts <> '{}' then
        counts := memory_internal.add_counts(counts, v_counts);
      end if;
      if v_drop then
        dropped := dropped || jsonb_build_object('index', f.idx, 'status', 'dropped',
                                                 'redactions', v_counts);
        continue;
      end if;
      if v_counts <> '{}' then
        fact_counts := fact_counts || jsonb_build_object(cardinality(kept)::text, v_counts);
      end if;
      facts := facts || jsonb_build_array(v_fact);
      kept := kept || f.idx;
    end loop;
  exception
    when check_violation then raise;
    when others then perform memory_internal.redaction_failed(sqlstate, format('fact %s', v_idx));
  end;
  perform memory_internal.count_redactions(p_org, p_project, counts);
end
$$;
comment on function memory_internal.redact_facts(uuid, uuid, jsonb, jsonb) is
  'assert_facts'' redaction: subject, object and content of each fact through the policy; facts a drop rule matched left out (dropped: their results); kept: the original index of each fact passed on; fact_counts: counts by passed-on index; totals added to the counters.';

-- assert_facts' answer for the facts as the caller sent them: results
-- renumbered to the original indexes, with their redaction counts, and the
-- dropped facts' results added.
create or replace function memory_internal.redacted_facts_result(
  p_result jsonb, p_kept integer[], p_dropped jsonb, p_counts jsonb, p_fact_counts jsonb)
  returns jsonb
  language sql immutable
  as $$
    select p_result
           || jsonb_build_object(
                'dropped', jsonb_array_length(p_dropped),
                'redactions', p_counts,
                'results', coalesce((
                  select jsonb_agg(x order by (x ->> 'index')::integer)
                    from (select r || jsonb_build_object('index', p_kept[(r ->> 'index')::integer + 1])
                                   || coalesce(jsonb_build_object('redactions',
                                                 p_fact_counts -> (r ->> 'index')), '{}') as x
                            from jsonb_array_elements(p_result -> 'results') r
                          union all
                          select d from jsonb_array_elements(p_dropped) d) s), '[]'))
  $$;
comment on function memory_internal.redacted_facts_result(jsonb, integer[], jsonb, jsonb, jsonb) is
  'assert_facts'' answer under a redaction policy: results at the caller''s indexes with their redaction counts, dropped facts added, and the dropped and redactions totals.';

--------------------------------------------------------------------------
-- The SQL API
--------------------------------------------------------------------------

create or replace function memory.set_redaction_rule(
  p_project uuid, p_detector text, p_action text, p_pattern text default null)
  returns table (detector text, action text, pattern text, created_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
  v_detector text := lower(btrim(p_detector));
  v_action text := lower(btrim(p_action));
  v_matches_empty boolean;
begin
  if v_detector is null
     or not (v_detector = any (memory_internal.redaction_detectors())
             or v_detector ~ '^custom:[a-z][a-z0-9_]{0,39}$') then
    raise exception 'detector must be one of %, or custom:<name> (a lowercase letter, then up to 39 letters, digits or _), not %',
      array_to_string(memory_internal.redaction_detectors(), ', '), coalesce(quote_literal(p_detector), 'NULL')
      using errcode = 'invalid_parameter_value', detail = 'detector';
  end if;
  if v_action is null or v_action not in ('mask', 'hash', 'drop', 'refuse') then
    raise exception 'action must be mask, hash, drop or refuse, not %', coalesce(quote_literal(p_action), 'NULL')
      using errcode = 'invalid_parameter_value', detail = 'action';
  end if;
  if v_detector like 'custom:%' then
    if p_pattern is null or p_pattern = '' or length(p_pattern) > 1000 then
      raise exception 'a custom detector needs a pattern of 1 to 1000 characters'
        using errcode = 'invalid_parameter_value', detail = 'pattern';
    end if;
    -- Compiled here, so that a bad pattern is refused now rather than
    -- refusing every write later; one that matches the empty string would
    -- match between every two characters.
    begin
      v_matches_empty := '' ~ p_pattern;
    exception when invalid_regular_expression then
      raise exception 'pattern is not a valid regular expression: %', sqlerrm
        using errcode = 'invalid_parameter_value', detail = 'pattern';
    end;
    if v_matches_empty then
      raise exception 'pattern must not match the empty string'
        using errcode = 'invalid_parameter_value', detail = 'pattern';
    end if;
  elsif p_pattern is not null then
    raise exception 'only a custom detector takes a pattern'
      using errcode = 'invalid_parameter_value', detail = 'pattern';
  end if;

  -- Every write of the project reads the policy: change it between them.
  perform memory_internal.hold_project(p_project, true);
  insert into memory_internal.redaction_keys (org_id, project_id, key)
  values (v_org, p_project, sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                                   || uuid_send(gen_random_uuid())))
  on conflict do nothing;
  return query
  insert into memory.redaction_rules as r (org_id, project_id, detector, pattern, action)
  values (v_org, p_project, v_detector, case when v_detector like 'custom:%' then p_pattern end, v_action)
  on conflict on constraint redaction_rules_pkey
  do update set action = excluded.action, pattern = excluded.pattern, created_at = excluded.created_at
  returning r.detector, r.action, r.pattern, r.created_at;
end
$$;
comment on function memory.set_redaction_rule(uuid, text, text, text) is
  'Set the project''s redaction rule for a detector (email, phone, card, iban, ip, ssn or custom:<name> with a POSIX pattern, checked now): mask ([EMAIL]), hash ([EMAIL:<first 12 hex of HMAC-SHA256>], the same value always the same token), drop (the message or item is not stored) or refuse (the write fails, naming the detector). Applies to every later write of the project.';

create or replace function memory.delete_redaction_rule(p_project uuid, p_detector text)
  returns boolean
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_org uuid := memory_internal.project_org(p_project);
begin
  perform memory_internal.hold_project(p_project, true);
  delete from memory.redaction_rules r
   where r.org_id = v_org and r.project_id = p_project and r.detector = lower(btrim(p_detector));
  return found;
end
$$;
comment on function memory.delete_redaction_rule(uuid, text) is
  'Delete the project''s redaction rule for a detector; false when there was none. The hash key stays, so hashes made later match earlier ones.';

create or replace function memory.redaction_rules_of(p_project uuid)
  returns table (detector text, action text, pattern text, created_at timestamptz)
  language sql stable
  as $$
    select r.detector, r.action, r.pattern, r.created_at
      from memory.redaction_rules r
     where r.project_id = p_project
     order by coalesce(array_position(memory_internal.redaction_detectors(), r.detector), 99), r.detector
  $$;
comment on function memory.redaction_rules_of(uuid) is
  'The project''s redaction rules, in the order they run (never the hash key).';

--------------------------------------------------------------------------
-- The HTTP layer
--------------------------------------------------------------------------

create or replace function memory_http.set_redaction_rule(
  p_project uuid, p_detector text, p_action text, p_pattern text default null)
  returns table (detector text, action text, pattern text, created_at timestamptz)
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.set_redaction_rule'), p_project);
  return query select * from memory.set_redaction_rule(p_project, p_detector, p_action, p_pattern);
  perform memory_internal.audit(memory_internal.current_org(), p_project, 'redaction_rule.set',
    'redaction_rule:' || lower(btrim(p_detector)));
end
$$;
comment on function memory_http.set_redaction_rule(uuid, text, text, text) is
  'API: memory.set_redaction_rule as the authorized key (needs configuration:write); audited.';

create or replace function memory_http.delete_redaction_rule(p_project uuid, p_detector text)
  returns boolean
  language plpgsql
  security definer
  set search_path = memory_internal, memory, public, pg_temp
as $$
declare
  v_found boolean;
begin
  perform memory_internal.require_api(memory_http.call_permission('memory_http.delete_redaction_rule'), p_project);
  v_found := memory.delete_redaction_rule(p_project, p_detector);
  if v_found then
    perform memory_internal.audit(memory_internal.current_org(), p_project, 'redaction_rule.delete',
      'redaction_rule:' || lower(btrim(p_detector)));
  end if;
  return v_found;
end
$$;
comment on function memory_http.delete_redaction_rule(uuid, text) is
  'API: memory.delete_redaction_rule as the authorized key (needs configuration:write); audited.';
