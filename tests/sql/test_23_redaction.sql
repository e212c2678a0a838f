-- 23 redaction: a project's redaction policy applied before anything is
-- stored.  Each detector with true positives and near misses (a 16-digit
-- number failing Luhn stays, an IBAN with a wrong check digit stays,
-- 999.1.1.1 stays, SSN 000-12-3456 stays); mask, hash (the same value the
-- same token across messages, another value another), drop and refuse; the
-- facts, entities, aliases and notes the worker writes back; a broken policy
-- refusing the write with nothing stored; the counts per message and in the
-- counters.  Writes go through chronomem_app; the checks of stores run as
-- the owner (verify_erased has no grant).
--
-- Org A projects: m (every detector masked, and custom:ticket), h (e-mail
-- hashed), d (e-mail dropped), r (SSN refused), i (IBAN alone), b (a broken
-- rule), c (no policy: the control).
BEGIN;
select plan(53);

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('redaction org A');
begin
  insert into pg_temp.ids values ('org_a', a);
  perform memory.use_org(a);
  insert into pg_temp.ids
  select k, memory.create_project(a, 'redaction ' || k) from unnest(array['m', 'h', 'd', 'r', 'i', 'b', 'c']) k;
end $$;

-- Setting rules: bad ones are refused with the field.
select throws_ok($$select memory.set_redaction_rule(pg_temp.id('m'), 'passport', 'mask')$$, '22023', null,
                 'an unknown detector is refused');
select throws_ok($$select memory.set_redaction_rule(pg_temp.id('m'), 'email', 'scramble')$$, '22023', null,
                 'an unknown action is refused');
select throws_ok($$select memory.set_redaction_rule(pg_temp.id('m'), 'custom:ticket', 'mask', 'TCK-([0-9]')$$,
                 '22023', null, 'a custom pattern that does not compile is refused when set');
select throws_ok($$select memory.set_redaction_rule(pg_temp.id('m'), 'custom:ticket', 'mask', 'x*')$$,
                 '22023', 'pattern must not match the empty string', 'a pattern matching the empty string is refused');
select throws_ok($$select memory.set_redaction_rule(pg_temp.id('m'), 'email', 'mask', '.+@.+')$$,
                 '22023', 'only a custom detector takes a pattern', 'a built-in detector takes no pattern');

do $$
declare d text;
begin
  foreach d in array array['email', 'phone', 'card', 'iban', 'ip', 'ssn'] loop
    perform memory.set_redaction_rule(pg_temp.id('m'), d, 'mask');
  end loop;
  perform memory.set_redaction_rule(pg_temp.id('m'), 'custom:ticket', 'mask', 'TCK-[0-9]{6}');
  perform memory.set_redaction_rule(pg_temp.id('h'), 'email', 'hash');
  perform memory.set_redaction_rule(pg_temp.id('d'), 'email', 'drop');
  perform memory.set_redaction_rule(pg_temp.id('d'), 'phone', 'mask');
  perform memory.set_redaction_rule(pg_temp.id('r'), 'SSN', 'refuse');
  perform memory.set_redaction_rule(pg_temp.id('i'), 'iban', 'mask');
  perform memory.set_redaction_rule(pg_temp.id('b'), 'email', 'mask');
end $$;

select is((select array_agg(detector || '=' || action order by detector) from memory.redaction_rules_of(pg_temp.id('m'))),
          array['card=mask', 'custom:ticket=mask', 'email=mask', 'iban=mask', 'ip=mask', 'phone=mask', 'ssn=mask'],
          'redaction_rules_of lists the project''s rules');
select is((select array_agg(detector order by detector) from memory.redaction_rules_of(pg_temp.id('r'))),
          array['ssn'], 'detector names are case-folded');
reset role;

-- The detectors, through memory_internal.redact on project m (everything
-- masked) and i (IBAN alone).
create function pg_temp.red(p_project text, p_text text) returns text language sql as $$
  select r.text from memory_internal.redact(pg_temp.id('org_a'), pg_temp.id(p_project), p_text, 'text', false) r $$;

select is(pg_temp.red('m', 'write to Ada.Lovelace@Example.co.uk today'), 'write to [EMAIL] today',
          'email: an address is masked');
select is(pg_temp.red('m', 'user@localhost and a@b'), 'user@localhost and a@b',
          'email near miss: no top-level domain stays');
select is(pg_temp.red('m', 'card 4111 1111 1111 1111, 5500-0000-0000-0004, 378282246310005'),
          'card [CARD], [CARD], [CARD]', 'card: Luhn-valid numbers in groups, dashed and bare are masked');
select is(pg_temp.red('i', 'order 4111111111111112 shipped'), 'order 4111111111111112 shipped',
          'card near miss: a 16-digit number failing Luhn stays');
select is(pg_temp.red('m', 'order 4111111111111112 shipped'), 'order 4111111111111112 shipped',
          'card near miss: it stays with every detector on');
select is(pg_temp.red('i', 'pay GB82 WEST 1234 5698 7654 32 or DE89370400440532013000'), 'pay [IBAN] or [IBAN]',
          'iban: spaced and packed IBANs with a right check are masked');
select is(pg_temp.red('i', 'pay GB83 WEST 1234 5698 7654 32'), 'pay GB83 WEST 1234 5698 7654 32',
          'iban near miss: a wrong check digit stays');
select is(pg_temp.red('m', 'ssn 123-45-6789'), 'ssn [SSN]', 'ssn: a possible number is masked');
select is(pg_temp.red('m', 'ids 000-12-3456 666-12-3456 912-12-3456 123-00-4567 123-45-0000'),
          'ids 000-12-3456 666-12-3456 912-12-3456 123-00-4567 123-45-0000',
          'ssn near misses: area 000, 666, 9xx, group 00, serial 0000 stay');
select is(pg_temp.red('m', 'from 192.168.1.20 and 2001:db8::1'), 'from [IP] and [IP]', 'ip: IPv4 and IPv6 are masked');
select is(pg_temp.red('m', 'not 999.1.1.1 nor 12:30:45 nor v1.2.3'), 'not 999.1.1.1 nor 12:30:45 nor v1.2.3',
          'ip near misses: 999.1.1.1, a time and a version stay');
select is(pg_temp.red('m', 'call +49 30 1234567 or (555) 123-4567'), 'call [PHONE] or [PHONE]',
          'phone: international and national forms are masked');
select is(pg_temp.red('m', 'on 2024-01-15, pi 3.14159, room 12345, ref 123456789012'),
          'on 2024-01-15, pi 3.14159, room 12345, ref 123456789012',
          'phone near misses: a date, a decimal, a short number and a bare digit run stay');
select is(pg_temp.red('m', 'see TCK-123456 not TCK-12'), 'see [TICKET] not TCK-12', 'custom: the operator''s pattern');
select is(pg_temp.red('c', 'ada@example.com 4111 1111 1111 1111'), 'ada@example.com 4111 1111 1111 1111',
          'control: a project without a policy stores text as it is');
select is(pg_temp.red('m', '[EMAIL] [CARD]'), '[EMAIL] [CARD]', 'redacting twice changes nothing more');

-- Ingest: content and metadata masked, counts per message.
set local role chronomem_app;
insert into pg_temp.res values ('m.ingest', memory.ingest(pg_temp.id('m'), 's1', $j$[
  {"role": "user", "content": "mail ada@example.com or call +49 30 1234567 re TCK-123456", "metadata": {"from": "ada@example.com", "n": 1}},
  {"role": "user", "content": "nothing here"}]$j$));
select is((select array_agg(content order by seq) from memory.episodes where project_id = pg_temp.id('m')),
          array['mail [EMAIL] or call [PHONE] re [TICKET]', 'nothing here'], 'ingest stores the masked content');
select is((select metadata from memory.episodes where project_id = pg_temp.id('m') and seq = 1),
          '{"from": "[EMAIL]", "n": 1}'::jsonb, 'metadata strings are masked, other values kept');
select is((select array_agg(redactions order by seq) from memory.episodes where project_id = pg_temp.id('m')),
          array['{"custom:ticket": 1, "email": 2, "phone": 1}'::jsonb, null], 'episodes.redactions counts per detector; NULL when nothing');
select is(pg_temp.r('m.ingest') -> 'redactions', '{"custom:ticket": 1, "email": 2, "phone": 1}'::jsonb, 'ingest reports the counts');

-- Hash: the same address (any case) the same token, across messages; another address another.
insert into pg_temp.res values
  ('h.1', memory.ingest(pg_temp.id('h'), 's1', '[{"role": "user", "content": "I am ada@example.com"}]')),
  ('h.2', memory.ingest(pg_temp.id('h'), 's2', '[{"role": "user", "content": "Ada@Example.com again, cc bob@example.com"}]'));
select matches((select content from memory.episodes where project_id = pg_temp.id('h') and seq = 1 and
                  session_id = (select session_id from memory.sessions where project_id = pg_temp.id('h') and external_id = 's1')),
               '^I am \[EMAIL:[0-9a-f]{12}\]$', 'hash: the address becomes a keyed hash token');
create temp table tokens as
  select substring(e.content from '\[EMAIL:[0-9a-f]{12}\]') as t, s.external_id as s, e.content
    from memory.episodes e join memory.sessions s using (org_id, session_id)
   where e.project_id = pg_temp.id('h');
select is((select count(distinct t) from tokens), 1::bigint, 'the same address hashes the same in two messages');
select isnt((select substring(content from 'cc (\[EMAIL:[0-9a-f]{12}\])') from tokens where s = 's2'),
            (select t from tokens where s = 's1'), 'another address hashes differently');

-- Drop: the message is not stored, the rest is.
insert into pg_temp.res values ('d.ingest', memory.ingest(pg_temp.id('d'), 's1', $j$[
  {"role": "user", "content": "write ada@example.com"}, {"role": "user", "content": "call (555) 123-4567"}]$j$));
select is((select array_agg(content) from memory.episodes where project_id = pg_temp.id('d')),
          array['call [PHONE]'], 'drop: the matching message is not stored, the other is');
select is(pg_temp.r('d.ingest') -> 'dropped', '[0]'::jsonb, 'ingest lists the dropped message');

-- Refuse: the write fails naming the detector and the message, never the value.
select throws_ok($$select memory.ingest(pg_temp.id('r'), 's1', '[{"role": "user", "content": "hi"},
                   {"role": "user", "content": "my ssn is 123-45-6789"}]')$$,
                 '23514', 'the redaction policy refuses ssn values: message 1 content holds one',
                 'refuse: ingest fails naming the detector and the message');
select is((select count(*) from memory.sessions where project_id = pg_temp.id('r')), 0::bigint,
          'refused: not even the session is stored');
select lives_ok($$select memory.ingest(pg_temp.id('r'), 's1', '[{"role": "user", "content": "ids 000-12-3456"}]')$$,
                'control: a near miss is not refused');

-- Facts: subject, object and content; drop leaves the fact out, reported at its index.
insert into pg_temp.res values ('m.facts', memory.assert_facts(pg_temp.id('m'), $j$[
  {"subject": "ada@example.com", "predicate": "phone", "object": "+49 30 1234567"}]$j$));
select is((select subject || ' ' || object from memory.readable_facts_at(pg_temp.id('m'))),
          '[EMAIL] [PHONE]', 'assert_facts stores the masked subject and object');
select is(pg_temp.r('m.facts') #> '{results,0,redactions}', '{"email": 1, "phone": 1}'::jsonb,
          'the fact''s result counts what was redacted');
insert into pg_temp.res values ('d.facts', memory.assert_facts(pg_temp.id('d'), $j$[
  {"subject": "ada@example.com", "predicate": "is", "object": "a user"},
  {"subject": "Bob", "predicate": "is", "object": "a user"}]$j$));
select is(pg_temp.r('d.facts') -> 'results',
          '[{"index": 0, "status": "dropped", "redactions": {"email": 1}}]'::jsonb
            || jsonb_build_array(pg_temp.r('d.facts') #> '{results,1}'),
          'the dropped fact is reported at its index');
select is(pg_temp.r('d.facts') #>> '{results,1,status}', 'inserted', 'the other fact is inserted at its own index');

-- Entities and aliases.
do $$ begin
  perform memory.upsert_entity(pg_temp.id('m'), 'Ada', 'person', 'reach her at ada@example.com');
  perform memory.add_alias(pg_temp.id('m'), 'Ada', 'Lady L ada.l@example.org');
end $$;
reset role;
select is((select summary from memory.entities where project_id = pg_temp.id('m') and name = 'Ada'),
          'reach her at [EMAIL]', 'upsert_entity masks the summary');
select is((select alias from memory.entity_aliases where project_id = pg_temp.id('m')),
          'Lady L [EMAIL]', 'add_alias masks the alias');

-- The worker's answer: entities, aliases, facts and notes, for an episode of h.
set local role chronomem_app;
insert into pg_temp.res select 'h.extraction', memory_worker.apply_extraction(
  (select episode_id from memory.episodes where project_id = pg_temp.id('h') order by occurred_at, seq limit 1),
  $j$ {"entities": [{"name": "carol@example.net", "type": "person", "summary": "writes from carol@example.net",
                     "aliases": ["carol.k@example.net"]}],
       "facts": [{"subject": "carol@example.net", "predicate": "knows", "object": "dave@example.net",
                  "content": "carol@example.net knows dave@example.net", "confidence": 0.9}],
       "notes": [{"kind": "preference", "content": "prefers mail to carol@example.net"}]} $j$);
reset role;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
select is((select coalesce(string_agg(distinct v.store, ','), '')
             from memory.verify_erased(pg_temp.id('h'), array['carol@example.net', 'dave@example.net',
                                                              'carol.k@example.net', 'example.net']) v),
          '', 'the worker''s entities, aliases, facts and notes hold no address');
select ok((select count(*) from memory.notes where project_id = pg_temp.id('h') and content ~ '\[EMAIL:[0-9a-f]{12}\]') = 1,
          'the note is stored with the hash token');

-- A broken policy (a pattern that no longer compiles, set behind the API's
-- back) refuses every write and stores nothing, in any store.
insert into memory.redaction_rules (org_id, project_id, detector, pattern, action)
values (pg_temp.id('org_a'), pg_temp.id('b'), 'custom:broken', 'TCK-([0-9]', 'mask');
set local role chronomem_app;
select throws_like($$select memory.ingest(pg_temp.id('b'), 's1', '[{"role": "user", "content": "Wilhelmina at wil@example.com"}]')$$,
                   'the redaction policy could not be evaluated%nothing was stored', 'a broken policy refuses ingest');
select throws_like($$select memory.assert_facts(pg_temp.id('b'), '[{"subject": "Wilhelmina", "predicate": "is", "object": "x"}]')$$,
                   'the redaction policy could not be evaluated%', 'and assert_facts');
select throws_like($$select memory.upsert_entity(pg_temp.id('b'), 'Wilhelmina')$$,
                   'the redaction policy could not be evaluated%', 'and upsert_entity');
reset role;
select is((select coalesce(string_agg(distinct v.store, ','), '')
             from memory.verify_erased(pg_temp.id('b'), array['Wilhelmina']) v),
          '', 'nothing of the refused writes is in any store');

-- Counters, and deleting a rule.
set local role chronomem_app;
select is((select sum(value) from memory.counters(pg_temp.id('m')) where metric = 'redactions_email'), 5::numeric,
          'the counters count the redactions per detector');
select ok((select count(*) from memory.counters(pg_temp.id('m')) where metric = 'redactions_custom') = 1,
          'custom detectors are counted together');
select is(memory.delete_redaction_rule(pg_temp.id('i'), 'iban'), true, 'delete_redaction_rule deletes');
select is(memory.delete_redaction_rule(pg_temp.id('i'), 'iban'), false, 'and says when there was none');
reset role;
select is(pg_temp.red('i', 'pay DE89370400440532013000'), 'pay DE89370400440532013000',
          'without rules nothing is redacted');

-- The hash key is the owner's alone.
select is(has_table_privilege('chronomem_app', 'memory_internal.redaction_keys', 'select'), false,
          'the app role cannot read the hash keys');

select * from finish();
ROLLBACK;
