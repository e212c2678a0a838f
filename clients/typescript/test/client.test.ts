// The TypeScript client against a live `chronomem serve`, under node's test runner.
// tests/py/test_client_typescript.py starts the server, makes two orgs with a key each,
// compiles this file and runs it with the URL and the keys in the environment.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { test } from "node:test";

import { ChronomemError, Client } from "../src/client.js";
import type { Id } from "../src/client.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: tests/py/test_client_typescript.py runs these tests`);
  }
  return value;
}

const base = env("CHRONOMEM_TEST_BASE_URL");
const memory = new Client(base, env("CHRONOMEM_TEST_TOKEN"));
const stranger = new Client(base, env("CHRONOMEM_TEST_STRANGER_TOKEN"));
const run = Math.random().toString(36).slice(2, 10);

/** A project of its own for each test (the key holds project:manage). */
async function fresh(name: string): Promise<Id> {
  return (await memory.createProject(`ts ${name} ${run}`)).project_id;
}

/** The error a call that must fail throws. */
async function refused(call: Promise<unknown>): Promise<ChronomemError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof ChronomemError, `not a ChronomemError: ${String(err)}`);
    return err;
  }
  return assert.fail("the call succeeded");
}

const pause = (ms: number) => new Promise((done) => setTimeout(done, ms));
const plan = { subject: "user 42", predicate: "plan" };

/** user 42's plan: basic from January, superseded by pro from March; `between` is an
 * instant of record time between the two writes. */
async function supersededPlan(project: Id) {
  await memory.declarePredicate(project, "plan", "one");
  const first = await memory.assertFacts(project, [
    { ...plan, object: "basic", valid_from: "2024-01-01" },
  ]);
  await pause(50);
  const between = new Date();
  await pause(50);
  const second = await memory.assertFacts(project, [
    { ...plan, object: "pro", valid_from: "2024-03-01T00:00:00Z" },
  ]);
  const basic = first.results[0]?.fact_id;
  const pro = second.results[0]?.fact_id;
  assert.ok(basic && pro, JSON.stringify({ first, second }));
  return { first, second, basic, pro, between };
}

test("a project round-trips: create, get, list, delete", async () => {
  const name = `ts round trip ${run}`;
  const created = await memory.createProject(name);
  assert.equal(created.name, name);
  assert.deepEqual(await memory.getProject(created.project_id), created);
  const listed = (await memory.listProjects()).projects.map((p) => p.project_id);
  assert.ok(listed.includes(created.project_id), JSON.stringify(listed));
  assert.equal((await memory.getOrg()).org_id, created.org_id);
  const deleted = await memory.deleteProject(created.project_id);
  assert.equal(deleted.deleted, true);
  const gone = await refused(memory.getProject(created.project_id));
  assert.deepEqual([gone.status, gone.code], [404, "not_found"]);
});

test("ingest appends to a session; the messages read back in order; a retry replays", async () => {
  const project = await fresh("ingest");
  const session = "chat 1 ü"; // a space and a non-ASCII letter in the path
  const messages = [
    { role: "user", content: "I moved to Berlin", occurred_at: new Date("2024-05-01T10:00:00Z") },
    { role: "assistant", content: "Noted.", metadata: { turn: 2 } },
  ] as const;
  const key = `ingest-${run}`;
  const first = await memory.ingest(project, session, messages, {
    idempotencyKey: key,
    sessionMetadata: { user: "42" },
  });
  assert.equal(first.episode_ids.length, 2);
  assert.equal(first.replayed, false);
  const again = await memory.ingest(project, session, messages, { idempotencyKey: key });
  assert.equal(again.replayed, true);
  assert.deepEqual(again.episode_ids, first.episode_ids);

  const page = await memory.sessionMessages(project, session);
  assert.equal(page.session, session);
  assert.deepEqual(page.metadata, { user: "42" });
  assert.deepEqual(
    page.messages.map((m) => [m.role, m.content, m.episode_id]),
    [
      ["user", "I moved to Berlin", first.episode_ids[0]],
      ["assistant", "Noted.", first.episode_ids[1]],
    ],
  );
  assert.equal(new Date(page.messages[0]!.occurred_at).toISOString(), "2024-05-01T10:00:00.000Z");
  assert.deepEqual(page.messages[1]!.metadata, { turn: 2 });
  const tail = await memory.sessionMessages(project, session, { after: page.messages[0]!.seq });
  assert.deepEqual(
    tail.messages.map((m) => m.content),
    ["Noted."],
  );
  const sessions = (await memory.sessions(project)).sessions.map((s) => s.session);
  assert.deepEqual(sessions, [session]);
});

test("a cardinality-one predicate supersedes: the new value now, the old one before", async () => {
  const project = await fresh("supersede");
  const { second, basic, pro, between } = await supersededPlan(project);
  assert.equal(second.inserted, 1);
  assert.equal(second.superseded_count, 1);
  assert.deepEqual(
    second.superseded_pairs.map((p) => p.old_fact_id),
    [basic],
  );

  const objects = async (options: Parameters<Client["listFacts"]>[1]) =>
    (
      await memory.listFacts(project, { ...options, subject: "user 42", predicate: "plan" })
    ).facts.map((f) => [f.fact_id, f.object]);
  assert.deepEqual(await objects({}), [[pro, "pro"]]);
  assert.deepEqual(await objects({ asOf: "2024-02-01" }), [[basic, "basic"]]);
  assert.deepEqual(await objects({ asOf: new Date("2024-02-01T00:00:00Z") }), [[basic, "basic"]]);
  // What the store believed between the writes: basic, open-ended.
  assert.deepEqual(await objects({ knownAt: between }), [[basic, "basic"]]);
  const then = await memory.listFacts(project, { subject: "user 42", asOf: "2024-02-01" });
  assert.equal(new Date(then.facts[0]!.valid_until!).toISOString(), "2024-03-01T00:00:00.000Z");

  const found = async (asOf?: string) =>
    (await memory.search(project, "user 42 plan", { asOf, k: 20 })).results.map((h) => h.id);
  const now = await found();
  assert.ok(now.includes(pro) && !now.includes(basic), JSON.stringify(now));
  const before = await found("2024-02-01");
  assert.ok(before.includes(basic) && !before.includes(pro), JSON.stringify(before));
  const context = await memory.context(project, "user 42 plan", { asOf: "2024-02-01" });
  assert.match(context.text, /basic/);
  assert.doesNotMatch(context.text, /\bpro\b/);
});

test("a fact's history holds every version of its identity", async () => {
  const project = await fresh("history");
  const { basic, pro } = await supersededPlan(project);
  const history = await memory.factHistory(project, basic);
  const events = history.events.map((e) => [e.event_type, e.fact_id, e.object]);
  assert.ok(
    events.some(([type, id]) => type === "asserted" && id === basic),
    JSON.stringify(events),
  );
  assert.ok(
    history.events.some(
      (e) => e.event_type === "superseded" && e.old_fact_id === basic && e.new_fact_id === pro,
    ),
    JSON.stringify(events),
  );
  assert.deepEqual(
    (await memory.factHistory(project, pro)).events.map((e) => e.event_id),
    history.events.map((e) => e.event_id),
  );
});

test("a retraction tombstones the claim and gives the old value its window back", async () => {
  const project = await fresh("retract");
  const { basic, pro } = await supersededPlan(project);
  const retracted = await memory.retractFact(project, pro, "entered by mistake");
  assert.equal(retracted.fact_id, pro);
  assert.equal(retracted.status, "retracted");
  assert.deepEqual(retracted.restored, [basic]);
  const now = await memory.listFacts(project, { subject: "user 42" });
  assert.deepEqual(
    now.facts.map((f) => [f.fact_id, f.valid_until]),
    [[basic, null]],
  );
  assert.equal((await memory.retractFact(project, pro)).status, "already_retracted");

  const claim = { ...plan, object: "pro", valid_from: "2024-03-01" };
  const again = await memory.assertFacts(project, [claim]);
  assert.deepEqual([again.inserted, again.refused], [0, 1]);
  assert.equal(again.results[0]?.status, "refused");
  const forced = await memory.assertFacts(project, [claim], { overrideTombstones: true });
  assert.deepEqual([forced.inserted, forced.refused], [1, 0]);
});

test("the timeline shows every version with its status and events", async () => {
  const project = await fresh("timeline");
  const { basic, pro } = await supersededPlan(project);
  await memory.assertFacts(project, [
    { subject: "user 42", predicate: "lives in", object: "Lisbon", valid_from: "2024-01-01" },
  ]);
  const timeline = await memory.timeline(project, "user 42", "plan");
  assert.equal(timeline.subject, "user 42");
  // basic's window ended where pro's begins; the event says which fact closed it.
  assert.deepEqual(
    timeline.facts.map((f) => [f.fact_id, f.object, f.status]),
    [
      [basic, "basic", "ended"],
      [pro, "pro", "current"],
    ],
  );
  const [first, last] = timeline.facts;
  assert.equal(new Date(first!.window_until!).toISOString(), "2024-03-01T00:00:00.000Z");
  assert.equal(last!.window_until, null);
  assert.ok(first!.events.some((e) => e.event === "superseded" && e.new_fact_id === pro));
  const every = await memory.timeline(project, "user 42");
  assert.deepEqual(every.facts.map((f) => f.object).sort(), ["Lisbon", "basic", "pro"]);
});

test("another org's key sees nothing of the project (positive control: its own)", async () => {
  const project = await fresh("tenancy");
  const { basic, pro } = await supersededPlan(project);
  const own = (await stranger.listProjects()).projects;
  assert.equal(own.length, 1, JSON.stringify(own));
  const theirs = own[0]!.project_id;
  assert.ok(!own.some((p) => p.project_id === project));

  // Positive control: the stranger writes and reads the very same claim in its project.
  await stranger.declarePredicate(theirs, "plan", "one");
  const wrote = await stranger.assertFacts(theirs, [
    { ...plan, object: "basic", valid_from: "2024-01-01" },
  ]);
  assert.equal(wrote.inserted, 1);
  const mine = wrote.results[0]!.fact_id;
  const read = await stranger.listFacts(theirs, { subject: "user 42", asOf: "2024-02-01" });
  assert.deepEqual(
    read.facts.map((f) => f.fact_id),
    [mine],
  );
  const hits = (await stranger.search(theirs, "user 42 plan", { k: 50 })).results.map((h) => h.id);
  assert.ok(hits.includes(mine!), JSON.stringify(hits));
  assert.ok(!hits.includes(basic) && !hits.includes(pro), JSON.stringify(hits));

  // The tenant's project and facts do not exist for it.
  for (const call of [
    () => stranger.getProject(project),
    () => stranger.listFacts(project, { subject: "user 42" }),
    () => stranger.factHistory(project, basic),
    () => stranger.factHistory(theirs, basic),
    () => stranger.timeline(project, "user 42"),
  ]) {
    const err = await refused(call());
    assert.deepEqual([err.status, err.code], [404, "not_found"]);
  }
});

test("bad input throws a ChronomemError with the 4xx status and the field", async () => {
  const project = await fresh("bad input");
  const cases: [() => Promise<unknown>, number, string][] = [
    [() => memory.search(project, "plan", { k: 500 }), 422, "k"],
    [() => memory.listFacts(project, { asOf: "not an instant" }), 422, "as_of"],
    [() => memory.listFacts(project, { limit: 0 }), 422, "limit"],
    [
      // @ts-expect-error the generated types know the roles; the server refuses others too
      () => memory.ingest(project, "s", [{ role: "robot", content: "hi" }]),
      422,
      "messages[0].role",
    ],
    [() => memory.ingest(project, "", [{ role: "user", content: "hi" }]), 422, "session"],
  ];
  for (const [call, status, field] of cases) {
    const err = await refused(call());
    assert.deepEqual([err.status, err.field], [status, field], err.toString());
    assert.equal(err.code, "invalid_request");
    assert.ok(err.message.length > 0);
  }
  // A fact the server cannot read is reported in its outcome; the batch's others land.
  const batch = await memory.assertFacts(project, [
    { ...plan, object: "basic", valid_from: "yesterday" },
    { ...plan, object: "pro", valid_from: "2024-01-01" },
  ]);
  assert.deepEqual([batch.invalid, batch.inserted], [1, 1]);
  assert.equal(batch.results[0]?.error?.field, "valid_from");

  const anonymous = await refused(new Client(base, "cmk_not_a_key").listProjects());
  assert.deepEqual(
    [anonymous.status, anonymous.code, anonymous.field],
    [401, "unauthorized", null],
  );
  assert.match(anonymous.toString(), /^ChronomemError: 401 unauthorized: /);
});

test("a wipe of a subject, then of the project, leaves nothing at any instant", async () => {
  const project = await fresh("wipe");
  await supersededPlan(project);
  await memory.assertFacts(project, [
    { subject: "user 7", predicate: "plan", object: "basic", valid_from: "2024-01-01" },
  ]);
  await memory.ingest(project, "chat", [{ role: "user", content: "I am on the pro plan" }]);

  const subjects = async (asOf?: string) =>
    (await memory.listFacts(project, { asOf })).facts.map((f) => f.subject).sort();
  const wiped = await memory.wipe(project, { subject: "user 42" });
  assert.equal(wiped.scope, "subject");
  assert.equal(wiped.facts, 2);
  assert.deepEqual(await subjects(), ["user 7"]); // positive control: the other subject stays
  assert.deepEqual(await subjects("2024-02-01"), ["user 7"]);

  const all = await memory.wipe(project);
  assert.equal(all.scope, "project");
  assert.equal(all.episodes, 1);
  assert.deepEqual(await subjects(), []);
  assert.deepEqual(await subjects("2024-02-01"), []);
  assert.deepEqual((await memory.sessions(project)).sessions, []);
});

test("a request past the timeout is aborted (control: the server answers in time)", async () => {
  // A listener that accepts and never answers: only the client's timeout ends the call.
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  silent.listen(0, "127.0.0.1");
  await once(silent, "listening");
  const { port } = silent.address() as AddressInfo;
  try {
    const started = Date.now();
    const hung = new Client(`http://127.0.0.1:${port}`, "cmk_x", { timeoutMs: 200 });
    await assert.rejects(hung.getOrg(), { name: "TimeoutError" });
    assert.ok(Date.now() - started < 5_000);
    const live = new Client(base, env("CHRONOMEM_TEST_TOKEN"), { timeoutMs: 5_000 });
    assert.ok((await live.getOrg()).org_id);
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});
