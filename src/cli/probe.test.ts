import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { leaveStaleSocket, sensor, startTestPlugin } from "../../test/support/fake-plugin.ts";
import { testPolicy } from "../../test/support/policy.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { handlerFactories } from "../agent.ts";
import { HandlerSet } from "../pluginmanager/handler-set.ts";
import { probePlugin } from "./probe.ts";

function context(dir: string) {
  const policy = testPolicy({ watch: [dir], handlers: { "acme.io/Sensor": {} } });
  return { policy, handlers: new HandlerSet(policy, handlerFactories(), { connectionLost() {} }) };
}

test("probe: a good plugin's info and the handler that would take it; no notification sent", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: { ...sensor(), endpoint: "/run/acme/temp.sock" } });
  const ctx = context(dir);
  assert.deepEqual(await probePlugin(socket, ctx.policy, ctx.handlers), {
    socket,
    info: { type: "acme.io/Sensor", name: "acme.io/temp", endpoint: "/run/acme/temp.sock", versions: ["v1"] },
    failure: null,
    error: null,
    handler: "acme.io/Sensor",
    refusal: null,
  });
  assert.deepEqual(fake.notifications(), []);
});

test("probe: an undeclared type says no handler would take it; a stale socket says stale", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  await startTestPlugin(t, { socketPath: socket, info: { type: "acme.io/Unknown", name: "x" } });
  const ctx = context(dir);
  const unknown = await probePlugin(socket, ctx.policy, ctx.handlers);
  assert.equal(unknown.handler, null);
  assert.equal(unknown.refusal, `RegisterPlugin error -- no handler registered for plugin type: acme.io/Unknown at socket ${socket}`);
  const dead = path.join(dir, "dead.sock");
  await leaveStaleSocket(dead);
  const stale = await probePlugin(dead, ctx.policy, ctx.handlers);
  assert.deepEqual([stale.failure, stale.info, stale.handler], ["stale", null, null]);
});

test("probe: an answer out of bounds says which bound it breaks; one over 64 KiB is not read", async (t) => {
  const dir = tempDir(t);
  const long = path.join(dir, "long.sock");
  await startTestPlugin(t, { socketPath: long, info: sensor("n".repeat(318)) });
  const ctx = context(dir);
  const refused = await probePlugin(long, ctx.policy, ctx.handlers);
  assert.match(refused.refusal!, /invalid plugin info: PluginInfo\.name is 318 bytes, more than 317/);
  const huge = path.join(dir, "huge.sock");
  await startTestPlugin(t, { socketPath: huge, info: sensor("n".repeat(100_000)) });
  const unread = await probePlugin(huge, ctx.policy, ctx.handlers);
  assert.deepEqual([unread.info, unread.failure], [null, "oversize"]);
});
