import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { leaveStaleSocket, sensor, startTestPlugin } from "../../test/support/fake-plugin.ts";
import { testPolicy } from "../../test/support/policy.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { handlerFactories } from "../agent/agent.ts";
import { decisionOnlyFactories, HANDLER_KINDS } from "../handlers/handler-kinds.ts";
import { HandlerSet } from "../pluginmanager/handler-set.ts";
import { probePlugin } from "./probe.ts";

function context(dir: string) {
  const policy = testPolicy({ watch: [dir], handlers: { "acme.io/Sensor": {} } });
  return { policy, handlers: new HandlerSet(policy, decisionOnlyFactories(), { connectionLost() {} }) };
}

test("probe: its handler set, built without any handler's code, decides every declared type as the agent's does", () => {
  const policy = testPolicy({ watch: ["/r"], handlers: { DevicePlugin: {}, CSIPlugin: {}, DRAPlugin: {}, "acme.io/Sensor": {} } });
  // A built-in type this build has no handler for (a policy from a newer edgeplug).
  policy.handlers.set("PodResourcesPlugin", { type: "PodResourcesPlugin", kind: "builtin", versions: null, allow: ["*"], deny: [] });
  const probes = new HandlerSet(policy, decisionOnlyFactories(), { connectionLost() {} });
  const agents = new HandlerSet(policy, handlerFactories(), { connectionLost() {} });
  const availability = (set: HandlerSet) => [...policy.handlers.keys()].map((type) => [type, set.get(type)?.unavailable ?? "available"]);
  assert.deepEqual(availability(probes), availability(agents));
  assert.deepEqual(availability(probes).filter(([, state]) => state === "available").length, HANDLER_KINDS.length);
  assert.deepEqual(Object.keys(handlerFactories()).sort(), [...HANDLER_KINDS].sort());
});

test("probe: a handler from its set refuses to validate or register, so it can never stand in for the agent's", async () => {
  const policy = testPolicy({ watch: ["/r"], handlers: { DevicePlugin: {} } });
  const entry = new HandlerSet(policy, decisionOnlyFactories(), { connectionLost() {} }).get("DevicePlugin");
  const plugin = { socket: "/r/p.sock", type: "DevicePlugin", name: "acme.io/gpu", endpoint: "/r/p.sock", versions: ["v1beta1"] };
  await assert.rejects(entry!.handler!.validatePlugin(plugin, AbortSignal.abort()), /cannot validate or register/);
  await assert.rejects(entry!.handler!.registerPlugin(plugin, AbortSignal.abort()), /cannot validate or register/);
});

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
