-- 25 console: sign-in sessions, the OIDC claim mapping and the console's reads.
-- An API key opens a session (cms_ token) that authenticates with the key's
-- org, project and permissions and ends with sign-out, the key's revocation,
-- idle expiry or its age; a token with a wrong secret, a malformed one or an
-- API key's own token is refused.  Verified JWT claims open a session only
-- through a mapping of their issuer, audience and claim: no mapping, another
-- audience or issuer, another claim value, an expired exp, a scope of another
-- org or mappings naming two projects are refused; an array claim matches an
-- element; permissions are the mappings' union; the actor is the user; a
-- deleted mapping ends its sessions.  The app role can neither read nor
-- write the mappings.  memory.project_overview counts what facts_at, the
-- versions, episodes, sessions and entities hold, and project_backlog;
-- memory.fact_detail shows a closed version with its source episode.
--
-- Org A: projects p (key root, key reader), q.  Org B: project pb (key b).
BEGIN;
select plan(44);

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('console org A');
        b uuid := memory.create_org('console org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('pb', memory.create_project(b, 'console pb'));
  insert into pg_temp.res select 'key.b', to_jsonb(k)
    from memory_http.create_api_key(pg_temp.id('pb'), 'b', array['project:manage']) k;
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'console p')),
                                 ('q', memory.create_project(a, 'console q'));
  insert into pg_temp.res select 'key.root', to_jsonb(k)
    from memory_http.create_api_key(pg_temp.id('p'), 'root', array['project:manage']) k;
  insert into pg_temp.res select 'key.reader', to_jsonb(k)
    from memory_http.create_api_key(pg_temp.id('p'), 'reader', array['project:read']) k;
end $$;
create function pg_temp.tok(p_k text) returns text language sql stable as
  $$ select pg_temp.r('key.' || p_k) ->> 'token' $$;
create function pg_temp.sess(p_k text) returns text language sql stable as
  $$ select pg_temp.r('session.' || p_k) ->> 'token' $$;
-- A JWT's claims: issuer, audience, subject, groups, seconds to expiry.
create function pg_temp.claims(p_iss text, p_aud jsonb, p_sub text, p_groups jsonb,
                               p_exp_in integer) returns jsonb language sql stable as $$
  select jsonb_build_object('iss', p_iss, 'aud', p_aud, 'sub', p_sub, 'groups', p_groups,
                            'exp', extract(epoch from now()) + p_exp_in) $$;

-- ---- API key sessions --------------------------------------------------------
insert into pg_temp.res select 'session.reader', to_jsonb(s) from memory_http.open_key_session(pg_temp.tok('reader')) s;
select ok(pg_temp.sess('reader') ~ '^cms_[0-9a-f]{32}_[0-9a-f]{64}$', 'a key opens a session token');
select is((select array[org_id::text, project_id::text] || permissions
             from memory_http.authenticate(pg_temp.sess('reader'))),
          array[pg_temp.id('org_a')::text, pg_temp.id('p')::text, 'project:read'],
          'the session authenticates with the key''s org, project and permissions');
select is(memory_internal.current_org(), pg_temp.id('org_a'), 'and scopes the transaction to the org');
select is((select key_id from memory_http.authenticate(pg_temp.sess('reader'))),
          (pg_temp.r('key.reader') ->> 'key_id')::uuid, 'its credential is the key (the audited actor)');
select isnt(memory_http.authorize_call(pg_temp.sess('reader'), 'memory.list_facts', pg_temp.id('p')), null,
            'it is authorized for a read of its project');
select throws_ok(format('select memory_http.authorize_call(%L, ''memory_http.retract_fact'', %L)',
                        pg_temp.sess('reader'), pg_temp.id('p')),
                 'CM403', null, 'and refused a write (the key''s permissions)');
select is((select org_id from memory_http.authenticate(
             regexp_replace(pg_temp.sess('reader'), '.$', case when right(pg_temp.sess('reader'), 1) = '0' then '1' else '0' end))),
          null, 'a wrong secret is refused');
select is((select org_id from memory_http.authenticate('cms_nope')), null, 'a malformed session token is refused');
select is(memory_internal.current_org(), null, 'and leaves no org scope');
select throws_ok(format('select * from memory_http.open_key_session(%L)', pg_temp.sess('reader')),
                 '28000', null, 'a session is not exchanged for another');
select throws_ok($$select * from memory_http.open_key_session('cmk_x')$$, '28000', null,
                 'a malformed key opens nothing');
select throws_ok(format('select * from memory_http.open_key_session(%L, 5)', pg_temp.tok('reader')),
                 '22023', null, 'an idle expiry under a minute is refused');

-- Sign-out.
insert into pg_temp.res select 'session.out', to_jsonb(s) from memory_http.open_key_session(pg_temp.tok('reader')) s;
select ok(memory_http.close_session(pg_temp.sess('out')), 'sign-out ends a session');
select is((select org_id from memory_http.authenticate(pg_temp.sess('out'))), null, 'which no longer authenticates');
select ok(not memory_http.close_session(pg_temp.sess('out')), 'a second sign-out finds nothing');
select isnt((select org_id from memory_http.authenticate(pg_temp.sess('reader'))), null,
            'another session of the key lives on');

-- Idle expiry and the absolute age (the clock moved by the superuser).
insert into pg_temp.res select 'session.idle', to_jsonb(s) from memory_http.open_key_session(pg_temp.tok('reader'), 60) s;
reset role;
update memory_internal.auth_sessions set last_seen_at = now() - interval '61 seconds'
 where session_id = substr(pg_temp.sess('idle'), 5, 32)::uuid;
update memory_internal.auth_sessions set expires_at = now() - interval '1 second', created_at = now() - interval '13 hours'
 where session_id = substr(pg_temp.sess('reader'), 5, 32)::uuid;
set local role chronomem_app;
select is((select org_id from memory_http.authenticate(pg_temp.sess('idle'))), null,
          'a session idle longer than its expiry is refused');
select is((select org_id from memory_http.authenticate(pg_temp.sess('reader'))), null,
          'a session past its absolute age is refused');

-- Revoking the key ends its sessions.
insert into pg_temp.res select 'session.root', to_jsonb(s) from memory_http.open_key_session(pg_temp.tok('root')) s;
select isnt((select org_id from memory_http.authenticate(pg_temp.sess('root'))), null, 'control: the root session works');
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
do $$ begin perform memory_http.revoke_api_key(pg_temp.id('p'), (pg_temp.r('key.root') ->> 'key_id')::uuid); end $$;
select is((select org_id from memory_http.authenticate(pg_temp.sess('root'))), null,
          'a revoked key''s session is refused');

-- ---- OIDC mappings ------------------------------------------------------------
select throws_ok($$select * from memory.oidc_mappings()$$, '42501', null, 'the app role cannot list mappings');
select throws_ok(format('select memory.set_oidc_mapping(%L, ''https://idp.test'', ''cm'', ''sub'', ''x'', array[''project:read''])',
                        pg_temp.id('p')), '42501', null, 'nor write them');
select throws_ok($$select * from memory_internal.oidc_mappings$$, '42501', null, 'nor read the table');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"cm"', 'alice', '["support"]', 600)),
                 '28000', 'no mapping for this token''s issuer, audience and claims',
                 'a verified token no mapping names opens nothing');

set local role chronomem_owner;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
insert into pg_temp.ids values
  ('m_support', memory.set_oidc_mapping(pg_temp.id('p'), 'https://idp.test', 'cm', 'groups', 'support', array['project:read'])),
  ('m_alice', memory.set_oidc_mapping(pg_temp.id('p'), 'https://idp.test', 'cm', 'sub', 'alice', array['project:write'])),
  ('m_ops', memory.set_oidc_mapping(pg_temp.id('q'), 'https://idp.test', 'cm', 'groups', 'ops', array['project:read']));
select throws_ok(format('select memory.set_oidc_mapping(%L, ''i'', ''a'', ''sub'', ''x'', array[''root''])', pg_temp.id('p')),
                 '22023', null, 'a mapping with an unknown permission is refused');
select is((select count(*)::int from memory.oidc_mappings()), 3, 'the owner lists the org''s mappings');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select is((select count(*)::int from memory.oidc_mappings()), 0, 'another org lists none of them');
select throws_ok(format('select memory.set_oidc_mapping(%L, ''https://idp.test'', ''cm'', ''sub'', ''x'', array[''project:read''])',
                        pg_temp.id('p')), 'P0002', null, 'nor maps to A''s project');
set local role chronomem_app;
-- No org in scope, as in the API's sign-in.
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;

insert into pg_temp.res select 'session.alice', to_jsonb(s) from memory_http.open_oidc_session(
  pg_temp.claims('https://idp.test', '["other", "cm"]', 'alice', '["support", "x"]', 600), 1800) s;
select is((select array[org_id::text, project_id::text] || permissions from memory_http.authenticate(pg_temp.sess('alice'))),
          array[pg_temp.id('org_a')::text, pg_temp.id('p')::text, 'project:read', 'project:write'],
          'a token matching two mappings of one project gets the union of their permissions');
select is(memory_internal.api_actor(), 'oidc:https://idp.test#alice', 'and acts as the user who signed in');
select ok((select expires_at <= now() + interval '601 seconds' from memory_http.open_oidc_session(
             pg_temp.claims('https://idp.test', '"cm"', 'bob', '["support"]', 600))),
          'a session ends no later than its token');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"cm"', 'bob', '["support"]', -5)),
                 '28000', 'the token has expired', 'an expired token is refused');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"someone-else"', 'bob', '["support"]', 600)),
                 '28000', null, 'another audience is refused');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://evil.test', '"cm"', 'bob', '["support"]', 600)),
                 '28000', null, 'another issuer is refused');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"cm"', 'bob', '["sales"]', 600)),
                 '28000', null, 'another claim value is refused');
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"cm"', 'bob', '["support", "ops"]', 600)),
                 '28000', 'this token''s claims map to more than one project', 'mappings naming two projects are refused');
do $$ begin perform memory.use_org(pg_temp.id('org_b')); end $$;
select throws_ok(format('select * from memory_http.open_oidc_session(%L)',
                        pg_temp.claims('https://idp.test', '"cm"', 'bob', '["support"]', 600)),
                 '28000', null, 'a transaction scoped to another org reaches no mapping of A''s');

set local role chronomem_owner;
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
select ok(memory.delete_oidc_mapping(pg_temp.id('m_alice')), 'the owner deletes a mapping');
set local role chronomem_app;
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
select is((select org_id from memory_http.authenticate(pg_temp.sess('alice'))), null,
          'which ends the sessions it granted');

-- ---- the console's reads -------------------------------------------------------
do $$ begin perform memory.use_org(pg_temp.id('org_a')); end $$;
do $$ begin perform memory.declare_predicate(pg_temp.id('p'), 'plan', 'one'); end $$;
do $$ begin perform memory.ingest(pg_temp.id('p'), 'chat', '[{"role": "user", "content": "I am on the pro plan now."}]'); end $$;
do $$ begin perform memory.assert_facts(pg_temp.id('p'), '[{"subject": "u", "predicate": "plan", "object": "free", "valid_from": "2024-01-01"}]'); end $$;
do $$ begin perform memory.assert_facts(pg_temp.id('p'), '[{"subject": "u", "predicate": "plan", "object": "pro", "valid_from": "2024-02-01"}]',
                           'api', (select episode_id from memory.episodes where project_id = pg_temp.id('p'))); end $$;
select is(memory.project_overview(pg_temp.id('p')) - 'project' - 'backlog' - 'webhooks',
          jsonb_build_object('facts_current', 1, 'facts_historical', 1, 'episodes', 1, 'sessions', 1,
                             'entities', (select count(*) from memory.entities where project_id = pg_temp.id('p'))),
          'the overview counts facts now, other versions, episodes, sessions and entities');
select is(memory.project_overview(pg_temp.id('p')) -> 'backlog', memory.project_backlog(pg_temp.id('p')),
          'and shows project_backlog');
select is(memory.fact_detail(pg_temp.id('p'), (select fact_id from memory.readable_facts_at(pg_temp.id('p'), '2024-01-15') limit 1))
            - array['fact_id', 'recorded_at', 'valid_from', 'confidence', 'object_entity_id', 'window_empty', 'retracted_at', 'source_episode', 'content'],
          jsonb_build_object('subject', 'u', 'predicate', 'plan', 'object', 'free', 'status', 'ended', 'source', 'api',
                             'window_from', '2024-01-01T00:00:00+00:00', 'window_until', '2024-02-01T00:00:00+00:00'),
          'fact_detail shows a closed version');
select is(memory.fact_detail(pg_temp.id('p'), (select fact_id from memory.readable_facts_at(pg_temp.id('p')) limit 1))
            -> 'source_episode' ->> 'excerpt', 'I am on the pro plan now.', 'with its source episode''s excerpt');
select throws_ok(format('select memory.fact_detail(%L, %L)', pg_temp.id('q'),
                        (select fact_id from memory.readable_facts_at(pg_temp.id('p')) limit 1)),
                 'P0002', null, 'a fact of another project is not found');

select * from finish();
ROLLBACK;
