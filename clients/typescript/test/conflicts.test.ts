// The conflict inbox through the TypeScript client, against a live `chronomem serve`
// (tests/py/test_client_typescript.py runs it with client.test.ts).
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChronomemError, Client } from "../src/client.js";

const base = process.env.CHRONOMEM_TEST_BASE_URL ?? "";
const memory = new Client(base, process.env.CHRONOMEM_TEST_TOKEN);
const stranger = new Client(base, process.env.CHRONOMEM_TEST_STRANGER_TOKEN);
const run = Math.random().toString(36).slice(2, 10);

test("two homes at once open a conflict; keep_both settles it; a stranger finds none", async () => {
  const project = (await memory.createProject(`ts conflicts ${run}`)).project_id;
  const lives = { subject: "ann", predicate: "lives in" };
  await memory.assertFacts(project, [{ ...lives, object: "paris", valid_from: "2024-01-01" }]);
  const second = await memory.assertFacts(project, [
    { ...lives, object: "rome", valid_from: "2024-03-01" },
  ]);
  assert.equal(second.conflicts?.length, 1, JSON.stringify(second));
  const id = second.conflicts![0]!;

  const open = await memory.listConflicts(project);
  assert.deepEqual(
    open.conflicts.map((c) => [c.conflict_id, c.cause, c.members]),
    [[id, "unknown_cardinality", 2]],
  );
  const conflict = await memory.getConflict(project, id);
  assert.deepEqual(conflict.members.map((m) => m.object).sort(), ["paris", "rome"]);

  const resolved = await memory.resolveConflict(project, id, "keep_both", { reason: "two homes" });
  assert.deepEqual([resolved.status, resolved.resolution], ["resolved", "kept"]);
  assert.deepEqual((await memory.listConflicts(project)).conflicts, []);
  assert.equal((await memory.listConflicts(project, { status: "all" })).conflicts.length, 1);

  const policy = await memory.setConflictPolicy(project, { learnMinEvidence: 3 });
  assert.equal(policy.learn_min_evidence, 3);
  assert.deepEqual(await memory.conflictPolicy(project), policy);

  try {
    await stranger.getConflict(project, id);
    assert.fail("a stranger read the conflict");
  } catch (err) {
    assert.ok(err instanceof ChronomemError, String(err));
    assert.deepEqual([err.status, err.code], [404, "not_found"]);
  }
});
