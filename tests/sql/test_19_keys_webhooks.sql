-- 19 API keys and webhooks, at the SQL level (the HTTP tests in tests/py
-- cover the routes): a key's token authenticates to its org, project, id
-- and permissions and scopes the transaction to its org; every failure
-- (malformed, unknown, wrong secret, revoked) is all NULL with no org scope;
-- authorize / authorize_own_project / authorize_key raise 28000, P0002 or
-- CM403; keys are listed without secrets and revoked idempotently; webhook
-- endpoints are created, listed (no secret), updated, rotated and deleted
-- within their project and org; log_webhook_attempt turns an attempt of a
-- running deliver_webhook job into delivered / retrying / failed, and
-- webhook_deliveries lists those attempts.  Runs as chronomem_app.
--
-- Org A: projects p (keys reader, writer, manager, spare, doomed; webhooks
-- p1, p2), q (key q_reader; webhook q), d (deliveries).  Org B: project pb
-- (key b_manager; webhook b).
BEGIN;
select plan(96);

-- Delivery jobs by name.
-- Update one job as superuser (moves it to its last attempt).
create procedure pg_temp.set_job(p_id bigint, p_set text) language plpgsql security definer as $$
begin execute format('update memory.jobs set %s where job_id = $1', p_set) using p_id; end $$;

create procedure pg_temp.scope(p_k text) language plpgsql as $$
begin perform memory.use_org(pg_temp.id(p_k), true); end $$;
-- Create an API key named p_k in a project (of the current org) and keep
-- create_api_key's answer (token included) under 'key.<name>'.
create procedure pg_temp.key(p_k text, p_project text, p_permissions text[]) language sql as $$
  insert into pg_temp.res select 'key.' || p_k, to_jsonb(k)
    from memory_http.create_api_key(pg_temp.id(p_project), p_k, p_permissions) k $$;
create function pg_temp.tok(p_k text) returns text language plpgsql stable as $$
declare v text := pg_temp.r('key.' || p_k) ->> 'token';
begin
  if v is null then raise exception 'test key % missing', p_k; end if;
  return v;
end $$;
create function pg_temp.kid(p_k text) returns uuid language plpgsql stable as $$
declare v uuid := (pg_temp.r('key.' || p_k) ->> 'key_id')::uuid;
begin
  if v is null then raise exception 'test key % missing', p_k; end if;
  return v;
end $$;
-- Call one of the four checks from a transaction scoped to p_from (another
-- org than the key's, so the scope it leaves is its own doing); its answer
-- and the org scope it left.
create function pg_temp.check_key(p_fn text, p_token text, p_permission text default null,
                                  p_project uuid default null, p_from text default 'org_b')
  returns jsonb language plpgsql as $$
declare a record;
begin
  perform memory.use_org(pg_temp.id(p_from), true);
  case p_fn
    when 'authenticate' then select * into a from memory_http.authenticate(p_token);
    when 'authorize' then select * into a from memory_http.authorize(p_token, p_permission, p_project);
    when 'authorize_own_project' then select * into a from memory_http.authorize_own_project(p_token, p_permission);
    when 'authorize_key' then select * into a from memory_http.authorize_key(p_token);
  end case;
  return jsonb_build_object('org', a.org_id, 'project', a.project_id, 'key', a.key_id,
                            'permissions', to_jsonb(a.permissions),
                            'scope', memory_internal.current_org());
end $$;
create function pg_temp.auth(p_token text) returns jsonb language sql
  as $$ select pg_temp.check_key('authenticate', p_token) $$;
-- What a check answers for key p_k of p_org's project p_project.
create function pg_temp.as_key(p_k text, p_org text, p_project text) returns jsonb language sql stable as $$
  select jsonb_build_object('org', pg_temp.id(p_org), 'project', pg_temp.id(p_project),
                            'key', (pg_temp.r('key.' || p_k) ->> 'key_id')::uuid,
                            'permissions', pg_temp.r('key.' || p_k) -> 'permissions',
                            'scope', pg_temp.id(p_org)) $$;
create function pg_temp.nobody() returns jsonb language sql immutable
  as $$ select '{"org": null, "project": null, "key": null, "permissions": null, "scope": null}'::jsonb $$;
-- Webhook endpoints by name ('wh.<name>' holds create_webhook's answer).
create procedure pg_temp.hook(p_k text, p_project text, p_url text, p_types text[]) language sql as $$
  insert into pg_temp.res values ('wh.' || p_k, memory.create_webhook(pg_temp.id(p_project), p_url, p_types)) $$;
create function pg_temp.eid(p_k text) returns uuid language plpgsql stable as $$
declare v uuid := (pg_temp.r('wh.' || p_k) ->> 'endpoint_id')::uuid;
begin
  if v is null then raise exception 'test webhook % missing', p_k; end if;
  return v;
end $$;
create procedure pg_temp.fact(p_project text, p_fact jsonb) language sql as $$
  select memory.assert_facts(pg_temp.id(p_project), jsonb_build_array(p_fact)) $$;

set local role chronomem_app;
do $$
declare a uuid := memory.create_org('keys org A'); b uuid := memory.create_org('keys org B');
begin
  insert into pg_temp.ids values ('org_a', a), ('org_b', b);
  perform memory.use_org(b);
  insert into pg_temp.ids values ('pb', memory.create_project(b, 'p'));
  call pg_temp.key('b_manager', 'pb', array['project:manage']);
  perform memory.use_org(a);
  insert into pg_temp.ids values ('p', memory.create_project(a, 'p')), ('q', memory.create_project(a, 'q')),
                                  ('d', memory.create_project(a, 'd'));
  call pg_temp.key('reader', 'p', array['project:read']);
  call pg_temp.key('writer', 'p', array['project:write', 'project:read', 'project:write']);
  call pg_temp.key('manager', 'p', array['project:manage']);
  call pg_temp.key('spare', 'p', array['project:read']);
  call pg_temp.key('doomed', 'p', array['project:read']);
  call pg_temp.key('q_reader', 'q', array['project:read']);
end $$;

-- A. Creating keys.
select is(memory_http.permissions(),
          array['project:read', 'project:write', 'project:manage', 'configuration:read',
                'configuration:write', 'members:read', 'members:write', 'memory:review'],
          'api_permissions: the vocabulary a key''s permissions come from');
select ok(pg_temp.tok('reader') ~ '^cmk_[0-9a-f]{32}_[0-9a-f]{64}$'
          and substr(pg_temp.tok('reader'), 5, 32) = replace(pg_temp.r('key.reader') ->> 'key_id', '-', '')
          and pg_temp.r('key.reader') ->> 'prefix' = left(pg_temp.tok('reader'), 16)
          and pg_temp.r('key.reader') ->> 'project_id' = pg_temp.id('p')::text,
          'create_api_key: a cmk_<key id>_<secret> token, its prefix, the project');
select is(pg_temp.r('key.writer') -> 'permissions', '["project:read", "project:write"]',
          'permissions are stored de-duplicated and sorted');
select throws_ok($$ call pg_temp.key('bad', 'p', array['project:read', 'project:admin']) $$, '22023',
                 'unknown permission ''project:admin''; permissions are {project:read,project:write,project:manage,'
                 || 'configuration:read,configuration:write,members:read,members:write,memory:review}',
                 'an unknown permission is refused, naming it and the vocabulary');
select throws_ok($$ call pg_temp.key('intruder', 'pb', array['project:manage']) $$, 'P0002', null,
                 'scoped to A, a key for org B''s project: not found');

-- B. Authentication.
select is(pg_temp.auth(pg_temp.tok('reader')),
          jsonb_build_object('org', pg_temp.id('org_a'), 'project', pg_temp.id('p'), 'key', pg_temp.kid('reader'),
                             'permissions', '["project:read"]'::jsonb, 'scope', pg_temp.id('org_a')),
          'a valid token: its org, project, key id and permissions, and the transaction scoped to its org');
select is((select array_agg(distinct pg_temp.auth(t)) from unnest(array[
             'not a token', null, '',
             left(pg_temp.tok('reader'), 100),                    -- secret one digit short
             upper(pg_temp.tok('reader')),                        -- not lower-case hex
             pg_temp.tok('reader') || '0',                        -- one digit too many
             replace(pg_temp.tok('reader'), 'cmk_', 'cmx_')]) t),
          array[pg_temp.nobody()], 'malformed tokens (garbage, NULL, empty, short, upper-case, long, wrong prefix): all NULL, no org scope');
select is(pg_temp.auth('cmk_' || replace(gen_random_uuid()::text, '-', '') || '_' || right(pg_temp.tok('reader'), 64)),
          pg_temp.nobody(), 'an unknown key id (with a real secret): all NULL, no org scope');
select is(pg_temp.auth(left(pg_temp.tok('spare'), 37) || right(pg_temp.tok('reader'), 64)),
          pg_temp.nobody(), 'a real key id with another key''s secret: all NULL, no org scope');
call pg_temp.scope('org_a');
select is((select string_agg(l.name || ' ' || (l.last_used_at is not null), ', ' order by l.name)
             from memory_http.list_api_keys(pg_temp.id('p')) l where l.name in ('reader', 'spare')),
          'reader true, spare false', 'a successful authentication stamps last_used_at; failed ones with the key''s id do not');

-- C. Revoking (idempotent) and listing.
select is(pg_temp.auth(pg_temp.tok('doomed')), pg_temp.as_key('doomed', 'org_a', 'p'),
          'before revocation the key authenticates (control)');
call pg_temp.scope('org_a');
insert into pg_temp.res select 'revoke1', to_jsonb(x) from memory_http.revoke_api_key(pg_temp.id('p'), pg_temp.kid('doomed')) x;
insert into pg_temp.res select 'revoke2', to_jsonb(x) from memory_http.revoke_api_key(pg_temp.id('p'), pg_temp.kid('doomed')) x;
select ok(pg_temp.r('revoke1') - 'revoked_at' = jsonb_build_object('key_id', pg_temp.kid('doomed'), 'status', 'revoked')
          and pg_temp.r('revoke2') - 'revoked_at' = jsonb_build_object('key_id', pg_temp.kid('doomed'), 'status', 'already_revoked')
          and pg_temp.r('revoke1') ->> 'revoked_at' is not null
          and pg_temp.r('revoke2') -> 'revoked_at' = pg_temp.r('revoke1') -> 'revoked_at',
          'revoke_api_key: revoked; again: already_revoked, with the first revocation''s time');
select is(pg_temp.auth(pg_temp.tok('doomed')), pg_temp.nobody(), 'a revoked key: all NULL, no org scope');
select is(pg_temp.auth(pg_temp.tok('spare')), pg_temp.as_key('spare', 'org_a', 'p'),
          'another key of the same project still authenticates (control)');
call pg_temp.scope('org_a');
select is((select string_agg(l.name || ' ' || (l.revoked_at is not null), ', ' order by l.name)
             from memory_http.list_api_keys(pg_temp.id('p')) l),
          'doomed true, manager false, reader false, spare false, writer false',
          'list_api_keys: every key of the project, the revoked one included, no other project''s');
select is((select array_agg(c order by c) from jsonb_object_keys(
             (select to_jsonb(l) from memory_http.list_api_keys(pg_temp.id('p')) l limit 1)) c),
          array['created_at', 'created_by', 'key_id', 'last_used_at', 'name', 'permissions', 'prefix', 'project_id', 'revoked_at'],
          'list_api_keys columns: no token, secret or hash');
select is_empty($$ select l.name from memory_http.list_api_keys(pg_temp.id('p')) l, pg_temp.res r
                    where r.k like 'key.%'
                      and (position(right(r.r ->> 'token', 64) in to_jsonb(l)::text) > 0
                           or position(encode(sha256(decode(right(r.r ->> 'token', 64), 'hex')), 'hex') in to_jsonb(l)::text) > 0
                           or position(encode(sha256(decode(right(r.r ->> 'token', 64), 'hex')), 'base64') in to_jsonb(l)::text) > 0) $$,
                'no listed value contains a secret or its hash');
select throws_ok(format('select * from memory_http.revoke_api_key(%L, %L)', pg_temp.id('q'), pg_temp.kid('reader')), 'P0002',
                 format('API key %s not found in project %s', pg_temp.kid('reader'), pg_temp.id('q')),
                 'revoking p''s key through project q: not found');

-- D. Another org's key sees and revokes nothing of org A.
select is(pg_temp.check_key('authorize', pg_temp.tok('b_manager'), 'project:manage', pg_temp.id('pb'), 'org_a'),
          pg_temp.as_key('b_manager', 'org_b', 'pb'), 'org B''s manager key is authorized on its own project (control)');
select throws_ok($$ select * from memory_http.list_api_keys(pg_temp.id('p')) $$, 'P0002', null,
                 'under org B''s key, listing org A''s keys: not found');
select throws_ok($$ select * from memory_http.revoke_api_key(pg_temp.id('p'), pg_temp.kid('reader')) $$, 'P0002', null,
                 'under org B''s key, revoking org A''s key: not found');
select is((select array_agg(l.name) from memory_http.list_api_keys(pg_temp.id('pb')) l), array['b_manager'],
          'org B lists its own key, and only it (control)');
select is(pg_temp.auth(pg_temp.tok('reader')), pg_temp.as_key('reader', 'org_a', 'p'),
          'org A''s reader key still authenticates after org B''s attempts');

-- E. authorize: 28000 bad token, 22023 unknown permission, P0002 another
-- org's project, CM403 a permission the key lacks.
select throws_ok($$ select * from memory_http.authorize('cmk_nonsense', 'project:read', pg_temp.id('p')) $$,
                 '28000', 'invalid API key', 'authorize with a malformed token: 28000');
select throws_ok($$ select * from memory_http.authorize(pg_temp.tok('reader'), 'project:admin', pg_temp.id('p')) $$,
                 '22023', 'unknown permission ''project:admin''', 'authorize with an unknown permission: 22023');
select is(pg_temp.check_key('authorize', pg_temp.tok('reader'), 'project:read', pg_temp.id('p')),
          pg_temp.as_key('reader', 'org_a', 'p'),
          'the reader key on its own project for project:read: authorized, scoped to org A (control)');
select throws_ok($$ select * from memory_http.authorize(pg_temp.tok('reader'), 'project:write', pg_temp.id('p')) $$,
                 'CM403', 'this API key does not grant project:write on project ' || pg_temp.id('p'),
                 'the reader key asking project:write on its project: CM403');
select is(pg_temp.check_key('authorize', pg_temp.tok('writer'), 'project:write', pg_temp.id('p')),
          pg_temp.as_key('writer', 'org_a', 'p'), 'the writer key asking project:write: authorized (control)');
select throws_ok($$ select * from memory_http.authorize(pg_temp.tok('reader'), 'project:read', pg_temp.id('q')) $$,
                 'CM403', null, 'the reader key on another project of its org: CM403');
select is(pg_temp.check_key('authorize', pg_temp.tok('manager'), 'project:write', pg_temp.id('q')),
          pg_temp.as_key('manager', 'org_a', 'p'), 'a project:manage key on another project of its org: authorized');
select throws_ok($$ select * from memory_http.authorize(pg_temp.tok('manager'), 'project:read', pg_temp.id('pb')) $$,
                 'P0002', null, 'a project:manage key on another org''s project: not found, not forbidden');
select throws_ok($$ select * from memory_http.authorize(pg_temp.tok('writer'), 'project:write') $$,
                 'CM403', 'this API key does not grant project:write on this org', 'an org-level request without project:manage: CM403');
select is(pg_temp.check_key('authorize', pg_temp.tok('manager'), 'project:manage'),
          pg_temp.as_key('manager', 'org_a', 'p'), 'an org-level request with project:manage: authorized (control)');

-- E2. authorize_call: the permission is the one memory_http.call_permissions()
-- gives the call, so a route and an MCP tool calling it ask the same.
select is(memory_http.call_permission('memory_http.assert_facts'), 'project:write',
          'assert_facts needs project:write');
select is(memory_http.call_permission('memory_http.org'), null, 'the org needs any valid key (NULL)');
select throws_ok($$ select memory_http.call_permission('memory.facts_at') $$, '22023', null,
                 'a call the HTTP layer does not make is not listed: 22023');
select throws_ok($$ select memory_http.authorize_call(pg_temp.tok('reader'), 'memory_http.assert_facts', pg_temp.id('p')) $$,
                 'CM403', 'this API key does not grant project:write on project ' || pg_temp.id('p'),
                 'the reader key for assert_facts: CM403, naming the permission the list gives');
select is(memory_http.authorize_call(pg_temp.tok('reader'), 'memory.list_facts', pg_temp.id('p')),
          (pg_temp.r('key.reader') ->> 'key_id')::uuid, 'the reader key for list_facts: authorized (control)');
select throws_ok($$ select memory_http.authorize_call(pg_temp.tok('reader'), 'memory.webhook_event_types', null, true) $$,
                 'CM403', null, 'a configuration:read call with a project:read key on its own project: CM403');
select is(memory_http.authorize_call(pg_temp.tok('reader'), 'memory_http.list_projects'),
          (pg_temp.r('key.reader') ->> 'key_id')::uuid, 'any valid key may list its projects');
select is((select count(*)::int from memory_http.call_permissions() c
            where c.permission is not null and not c.permission = any (memory_http.permissions())), 0,
          'every permission the list names is in the vocabulary');

-- F. authorize_own_project: the key's own project, no project named.
select throws_ok($$ select * from memory_http.authorize_own_project(left(pg_temp.tok('reader'), 37) || repeat('f', 64), 'project:read') $$,
                 '28000', 'invalid API key', 'authorize_own_project with a wrong secret: 28000');
select is(pg_temp.check_key('authorize_own_project', pg_temp.tok('q_reader'), 'project:read'),
          pg_temp.as_key('q_reader', 'org_a', 'q'), 'authorize_own_project: the key''s own project (q), scoped to org A');
select throws_ok($$ select * from memory_http.authorize_own_project(pg_temp.tok('q_reader'), 'configuration:read') $$,
                 'CM403', 'this API key does not grant configuration:read', 'authorize_own_project without the permission: CM403');
select is(pg_temp.check_key('authorize_own_project', pg_temp.tok('manager'), 'configuration:write'),
          pg_temp.as_key('manager', 'org_a', 'p'), 'project:manage covers every permission on its own project (control)');

-- G. authorize_key: any valid key, whatever its permissions.
select throws_ok($$ select * from memory_http.authorize_key('cmk_' || repeat('0', 32) || '_' || repeat('0', 64)) $$,
                 '28000', 'invalid API key', 'authorize_key with an unknown key: 28000');
select is(pg_temp.check_key('authorize_key', pg_temp.tok('reader')), pg_temp.as_key('reader', 'org_a', 'p'),
          'authorize_key with a read-only key: authorized, scoped to its org');

-- H. bootstrap_api_key (the CLI's create-key): an org, a project and a key.
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
insert into pg_temp.res values ('boot1', memory_http.bootstrap_api_key(null, 'keys org C', 'main', 'cli', array['project:manage']));
insert into pg_temp.ids values ('org_c', (pg_temp.r('boot1') ->> 'org_id')::uuid), ('main', (pg_temp.r('boot1') ->> 'project_id')::uuid);
select ok(memory_internal.current_org() = pg_temp.id('org_c')
          and (pg_temp.r('boot1') -> 'org_created')::boolean and (pg_temp.r('boot1') -> 'project_created')::boolean
          and pg_temp.r('boot1') -> 'permissions' = '["project:manage"]',
          'bootstrap by org name: a new org and project, and the transaction left scoped to it');
select is(pg_temp.auth(pg_temp.r('boot1') ->> 'token'),
          jsonb_build_object('org', pg_temp.id('org_c'), 'project', pg_temp.id('main'), 'key', pg_temp.r('boot1') -> 'key_id',
                             'permissions', '["project:manage"]'::jsonb, 'scope', pg_temp.id('org_c')),
          'the bootstrapped token authenticates to that org, project and key');
do $$ begin perform set_config('chronomem.org_id', '', true); end $$;
insert into pg_temp.res values ('boot2', memory_http.bootstrap_api_key(pg_temp.id('org_c'), null, ' main ', 'cli 2', array['project:read']));
select is(pg_temp.r('boot2') - 'key_id' - 'token' - 'prefix',
          jsonb_build_object('org_id', pg_temp.id('org_c'), 'org_created', false, 'project_id', pg_temp.id('main'),
                             'project_created', false, 'permissions', '["project:read"]'::jsonb),
          'bootstrap by org id: the existing project found by name, a second key');
call pg_temp.scope('org_a');
select throws_ok($$ select memory_http.bootstrap_api_key(pg_temp.id('org_c'), null, 'main', 'sneaky', array['project:manage']) $$,
                 'P0002', 'org ' || pg_temp.id('org_c') || ' not found', 'scoped to org A, bootstrapping into org C: not found');
select is(memory_http.bootstrap_api_key(pg_temp.id('org_a'), null, 'q', 'cli q', array['project:read']) - 'key_id' - 'token' - 'prefix',
          jsonb_build_object('org_id', pg_temp.id('org_a'), 'org_created', false, 'project_id', pg_temp.id('q'),
                             'project_created', false, 'permissions', '["project:read"]'::jsonb),
          'scoped to org A, bootstrapping into org A: allowed (control)');
select throws_ok($$ select memory_http.bootstrap_api_key(pg_temp.id('org_a'), 'both', 'main', 'k', array['project:read']) $$,
                 '22023', 'give an org id or a new org''s name, not both or neither', 'bootstrap with an org id and a name: refused');

-- I. Webhook endpoints.
call pg_temp.scope('org_b');
call pg_temp.hook('b', 'pb', 'https://example.net/b', null);
call pg_temp.scope('org_a');
call pg_temp.hook('p1', 'p', 'https://example.com/hooks/one', array['fact.superseded']);
call pg_temp.hook('p2', 'p', '  https://example.com/hooks/all  ', null);
call pg_temp.hook('q', 'q', 'http://example.org/q', array['memory.wiped']);
select is(pg_temp.r('wh.p1') - 'endpoint_id' - 'created_at' - 'updated_at' - 'secret',
          jsonb_build_object('project_id', pg_temp.id('p'), 'url', 'https://example.com/hooks/one',
                             'event_types', '["fact.superseded"]'::jsonb, 'enabled', true),
          'create_webhook: the endpoint, enabled, with its event types');
select ok(pg_temp.r('wh.p1') ->> 'secret' ~ '^whsec_[A-Za-z0-9+/]{32}$'
          and pg_temp.r('wh.p2') ->> 'secret' ~ '^whsec_[A-Za-z0-9+/]{32}$'
          and pg_temp.r('wh.p1') ->> 'secret' <> pg_temp.r('wh.p2') ->> 'secret',
          'create_webhook returns a whsec_ signing secret of 24 random bytes, one per endpoint');
select is(pg_temp.r('wh.p2') -> 'event_types' || jsonb_build_array(pg_temp.r('wh.p2') -> 'url'),
          '["*", "https://example.com/hooks/all"]', 'no event types: every type ({*}); the URL trimmed');
select set_eq($$ select endpoint_id from memory.list_webhooks(pg_temp.id('p')) $$,
              $$ values (pg_temp.eid('p1')), (pg_temp.eid('p2')) $$,
              'list_webhooks: the project''s two endpoints, not q''s nor org B''s');
select is((select array_agg(c order by c) from jsonb_object_keys(
             (select to_jsonb(l) from memory.list_webhooks(pg_temp.id('p')) l limit 1)) c),
          array['created_at', 'enabled', 'endpoint_id', 'event_types', 'updated_at', 'url'],
          'list_webhooks columns: no secret');
select is((select array_agg(to_jsonb(t)) from memory_worker.webhook_target(pg_temp.eid('p1')) t),
          array[jsonb_build_object('url', 'https://example.com/hooks/one', 'secret', pg_temp.r('wh.p1') ->> 'secret', 'enabled', true)],
          'webhook_target: the URL, the secret create_webhook showed, enabled');
select is(memory.update_webhook(pg_temp.id('p'), pg_temp.eid('p1'),
                                p_event_types => array['fact.retracted', 'fact.superseded', 'fact.retracted']) #> '{event_types}'
          || jsonb_build_array(pg_temp.r('wh.p1') -> 'url'),
          '["fact.retracted", "fact.superseded", "https://example.com/hooks/one"]',
          'update_webhook event types: de-duplicated and sorted; the URL kept');
insert into pg_temp.res values ('disabled', memory.update_webhook(pg_temp.id('p'), pg_temp.eid('p1'), p_enabled => false));
select is(pg_temp.r('disabled') -> 'enabled'
          || to_jsonb(array(select to_jsonb(t.enabled) from memory_worker.webhook_target(pg_temp.eid('p1')) t))
          || to_jsonb(array(select to_jsonb(l.enabled) from memory.list_webhooks(pg_temp.id('p')) l
                              where l.endpoint_id = pg_temp.eid('p1'))),
          '[false, false, false]', 'update_webhook enabled => false: disabled in the answer, the target and the list');
select is(memory.update_webhook(pg_temp.id('p'), pg_temp.eid('p1'), 'https://example.com/hooks/new', null, true)
            - 'endpoint_id' - 'created_at' - 'updated_at',
          jsonb_build_object('project_id', pg_temp.id('p'), 'url', 'https://example.com/hooks/new',
                             'event_types', '["fact.retracted", "fact.superseded"]'::jsonb, 'enabled', true),
          'update_webhook URL and enabled => true; NULL keeps the event types');
select throws_ok($$ select memory.create_webhook(pg_temp.id('p'), 'ftp://example.com/x') $$, '22023',
                 'url must be an absolute http or https URL, not "ftp://example.com/x"', 'a non-http URL is refused, naming it');
select throws_ok($$ select memory.create_webhook(pg_temp.id('p'), 'https://example.com/x', array['fact.created']) $$, '22023',
                 'unknown event type "fact.created"', 'an unknown event type is refused, naming it');
select throws_ok($$ select memory.update_webhook(pg_temp.id('p'), pg_temp.eid('p1'), p_event_types => array['*', 'fact.retracted']) $$,
                 '22023', 'event_types: "*" (every type) cannot be combined with other types', '"*" with other types is refused');
select is((select array_agg(l.url || ' ' || l.event_types::text) from memory.list_webhooks(pg_temp.id('p')) l
            where l.endpoint_id = pg_temp.eid('p1')),
          array['https://example.com/hooks/new {fact.retracted,fact.superseded}'], 'the refused updates changed nothing');

-- Rotation.
insert into pg_temp.res values ('rotated', memory.rotate_webhook_secret(pg_temp.id('p'), pg_temp.eid('p1')));
select ok(pg_temp.r('rotated') ->> 'secret' ~ '^whsec_[A-Za-z0-9+/]{32}$'
          and pg_temp.r('rotated') ->> 'secret' <> pg_temp.r('wh.p1') ->> 'secret'
          and pg_temp.r('rotated') ->> 'endpoint_id' = pg_temp.eid('p1')::text,
          'rotate_webhook_secret: a new secret, unlike the old one');
select is((select t.secret from memory_worker.webhook_target(pg_temp.eid('p1')) t), pg_temp.r('rotated') ->> 'secret',
          'webhook_target signs with the new secret from now on');

-- Scoping: another project's and another org's endpoints.
select throws_ok($$ select memory.update_webhook(pg_temp.id('p'), pg_temp.eid('q'), p_enabled => false) $$, 'P0002',
                 format('webhook endpoint %s not found in project %s', pg_temp.eid('q'), pg_temp.id('p')),
                 'updating q''s endpoint through project p: not found');
select throws_ok($$ select memory.delete_webhook(pg_temp.id('p'), pg_temp.eid('q')) $$, 'P0002', null,
                 'deleting q''s endpoint through project p: not found');
select is(memory.update_webhook(pg_temp.id('q'), pg_temp.eid('q'), p_enabled => false) -> 'enabled', 'false',
          'through its own project, q''s endpoint is updated (control)');
select throws_ok($$ select memory.update_webhook(pg_temp.id('pb'), pg_temp.eid('b'), p_enabled => false) $$, 'P0002', null,
                 'scoped to A, updating org B''s endpoint: not found');
select throws_ok($$ select * from memory.list_webhooks(pg_temp.id('pb')) $$, 'P0002', null,
                 'scoped to A, listing org B''s endpoints: not found');
select is_empty($$ select from memory_worker.webhook_target(pg_temp.eid('b')) $$, 'scoped to A, webhook_target of B''s endpoint: no row');
call pg_temp.scope('org_b');
select is((select array_agg(to_jsonb(t)) from memory_worker.webhook_target(pg_temp.eid('b')) t),
          array[jsonb_build_object('url', 'https://example.net/b', 'secret', pg_temp.r('wh.b') ->> 'secret', 'enabled', true)],
          'scoped to B, B''s endpoint is there, enabled, with its secret: A''s attempts changed nothing (control)');
call pg_temp.scope('org_a');

-- Deletion.
select is(memory.delete_webhook(pg_temp.id('p'), pg_temp.eid('p2')),
          jsonb_build_object('endpoint_id', pg_temp.eid('p2'), 'deleted', true), 'delete_webhook');
select is((select array_agg(l.endpoint_id) from memory.list_webhooks(pg_temp.id('p')) l), array[pg_temp.eid('p1')],
          'a deleted endpoint is no longer listed; the other one is');
select is_empty($$ select from memory_worker.webhook_target(pg_temp.eid('p2')) t where t.enabled or t.secret is not null $$,
                'webhook_target of a deleted endpoint: no secret, nothing to send to');
select throws_ok($$ select memory.update_webhook(pg_temp.id('p'), pg_temp.eid('p2'), p_enabled => true) $$, 'P0002', null,
                 'a deleted endpoint cannot be enabled again');

select is((select array_agg(t.event_type order by t.event_type) from memory.webhook_event_types() t
            where length(btrim(t.description)) > 0),
          array['conflict.detected', 'conflict.resolved', 'episode.enriched', 'fact.asserted',
                'fact.contradicted', 'fact.expired', 'fact.restored', 'fact.retracted', 'fact.reviewed',
                'fact.superseded', 'memory.wiped', 'predicate.declared'],
          'webhook_event_types: the twelve types, each described');
-- The endpoints' check reads the same list (webhook_type_list): as the
-- owner, past create_webhook's own validation, every listed type is
-- stored and an unlisted one refused.
reset role;
select lives_ok($$ insert into memory.webhook_endpoints (org_id, project_id, url, event_types)
                   select pg_temp.id('org_a'), pg_temp.id('p'), 'https://example.com/all-listed',
                          array(select t.event_type from memory.webhook_event_types() t) $$,
                'memory.webhook_endpoints stores an endpoint listing every type webhook_event_types() has');
select throws_ok($$ insert into memory.webhook_endpoints (org_id, project_id, url, event_types)
                    values (pg_temp.id('org_a'), pg_temp.id('p'), 'https://example.com/x', '{fact.deleted}') $$,
                 '23514', null, 'and refuses a type it does not list');
delete from memory.webhook_endpoints where url = 'https://example.com/all-listed';
set local role chronomem_app;
call pg_temp.scope('org_a');

-- J. Deliveries: supersessions in project d enqueue deliver_webhook jobs for
-- the endpoint subscribed to fact.superseded, not for the one subscribed to
-- fact.retracted; a worker claims them and logs attempts.
do $$ begin perform memory.declare_predicate(pg_temp.id('d'), 'works at', 'one'); end $$;
call pg_temp.hook('ds', 'd', 'https://example.com/d/superseded', array['fact.superseded']);
call pg_temp.hook('dr', 'd', 'https://example.com/d/retracted', array['fact.retracted']);
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Acme", "valid_from": "2020-01-01T00:00:00Z"}');
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Globex", "valid_from": "2021-01-01T00:00:00Z"}');
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Initech", "valid_from": "2022-01-01T00:00:00Z"}');
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Umbrella", "valid_from": "2023-01-01T00:00:00Z"}');
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Hooli", "valid_from": "2024-01-01T00:00:00Z"}');
select is((select string_agg(x.n || ' ' || (select count(*) from memory.jobs j
                                              where j.project_id = pg_temp.id('d') and j.kind = 'deliver_webhook'
                                                and j.payload ->> 'event_type' = 'fact.superseded'
                                                and (j.payload ->> 'endpoint_id')::uuid = pg_temp.eid(x.n)), ', ' order by x.n)
             from unnest(array['dr', 'ds']) x(n)),
          'dr 0, ds 4', 'four supersessions: four deliver_webhook jobs for the subscribed endpoint, none for the other');
-- All four in flight at once: past the default cap per endpoint (2).
set local chronomem.webhook_max_in_flight_per_endpoint = 4;
insert into jid select 'd' || row_number() over (order by c.job_id), c.job_id
  from memory_worker.claim_jobs('w19', array['deliver_webhook'], 1000) c where c.project_id = pg_temp.id('d');
call pg_temp.set_job(pg_temp.j('d4'), 'max_attempts = 1');
select is(memory_worker.log_webhook_attempt(pg_temp.j('d1'), 200, null, 12, false), 'delivered', 'a 2xx: delivered');
select is(memory_worker.log_webhook_attempt(pg_temp.j('d2'), 503, 'Service Unavailable', 30, true), 'retrying',
          'a retryable failure with attempts left: retrying');
select is(memory_worker.log_webhook_attempt(pg_temp.j('d3'), 410, 'Gone', 5, false), 'failed', 'a failure that is not retryable: failed');
select is(memory_worker.log_webhook_attempt(pg_temp.j('d4'), null, 'connection refused', -3, true), 'failed',
          'a retryable failure on the last attempt: failed');
do $$ begin perform memory_worker.complete_job(pg_temp.id('org_a'), pg_temp.j('d1'), 'w19', '{"status": 200}'); end $$;
select throws_ok($$ select memory_worker.log_webhook_attempt(pg_temp.j('d1'), 200, null, 1, false) $$, 'P0002',
                 format('no running deliver_webhook job %s in this org', pg_temp.j('d1')),
                 'logging an attempt of a job that is no longer running: not found');
call pg_temp.scope('org_b');
select throws_ok($$ select memory_worker.log_webhook_attempt(pg_temp.j('d2'), 200, null, 1, false) $$, 'P0002', null,
                 'scoped to org B, logging an attempt of org A''s job: not found');
select throws_ok($$ select * from memory.webhook_deliveries(pg_temp.id('d')) $$, 'P0002', null,
                 'scoped to org B, org A''s delivery log: not found');
call pg_temp.scope('org_a');
select is((select string_agg(concat_ws(' ', x.outcome, coalesce(x.status_code::text, '-'), x.attempt,
                                       coalesce(x.error, '-'), x.duration_ms), ', ' order by x.ordinality)
             from memory.webhook_deliveries(pg_temp.id('d')) with ordinality x),
          'failed - 1 connection refused 0, failed 410 1 Gone 5, retrying 503 1 Service Unavailable 30, delivered 200 1 - 12',
          'webhook_deliveries: every attempt, newest first, with status, error and duration (never negative)');
select set_eq($$ select w.event_id, w.event_type, w.endpoint_id from memory.webhook_deliveries(pg_temp.id('d')) w $$,
              $$ select j.payload ->> 'event_id' as event_id, 'fact.superseded' as event_type, pg_temp.eid('ds') as endpoint_id
                   from memory.jobs j
                  where j.job_id in (select id from pg_temp.jid) $$,
              'each attempt names its job''s event id (webhook-id), type and endpoint');
select is((select array_agg(w.delivery_id order by w.delivery_id desc) from memory.webhook_deliveries(pg_temp.id('d'), pg_temp.eid('ds'), 2) w)
          || (select array_agg(w.delivery_id order by w.delivery_id desc)
                from memory.webhook_deliveries(pg_temp.id('d'), pg_temp.eid('ds'), 2,
                       (select min(v.delivery_id) from memory.webhook_deliveries(pg_temp.id('d'), pg_temp.eid('ds'), 2) v)) w),
          (select array_agg(w.delivery_id order by w.delivery_id desc) from memory.webhook_deliveries(pg_temp.id('d')) w),
          'pages of two (p_limit, p_before) give every attempt once, newest first');
select is_empty($$ select from memory.webhook_deliveries(pg_temp.id('d'), pg_temp.eid('dr'))
                   union all select from memory.webhook_deliveries(pg_temp.id('q')) $$,
                'no attempt listed for the other endpoint of d, nor for project q');
-- A disabled endpoint gets no more jobs; a deleted one keeps its log.
do $$ begin perform memory.update_webhook(pg_temp.id('d'), pg_temp.eid('ds'), p_enabled => false); end $$;
call pg_temp.fact('d', '{"subject": "Ann", "predicate": "works at", "object": "Pied Piper", "valid_from": "2025-01-01T00:00:00Z"}');
select is((select count(*) from memory.jobs j where j.project_id = pg_temp.id('d') and j.kind = 'deliver_webhook')
          || ' jobs, ' || (select count(*) from memory.fact_events e where e.project_id = pg_temp.id('d') and e.event_type = 'superseded')
          || ' supersessions', '4 jobs, 5 supersessions', 'a supersession while the endpoint is disabled enqueues no delivery');
do $$ begin perform memory.delete_webhook(pg_temp.id('d'), pg_temp.eid('ds')); end $$;
select is((select count(*)::int from memory.webhook_deliveries(pg_temp.id('d'), pg_temp.eid('ds'))), 4,
          'a deleted endpoint''s delivery log is kept');

select * from finish();
ROLLBACK;
