import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { sensor, startFakePlugin, startTestPlugin } from "../../test/support/fake-plugin.ts";
import type { FakePluginOptions } from "../../test/support/fake-plugin.ts";
import type { TestPolicyOptions } from "../../test/support/policy.ts";
import { context, desired, log, recordingHandler, signal } from "../../test/support/registration-harness.ts";
import { registerPlugin, unregisterPlugin } from "./registration.ts";
import type { AttemptFailure } from "./types.ts";
import { tempDir } from "../../test/support/temp-dir.ts";

test("a good plugin: GetInfo, validate, recorded, register, notify(true); endpoint defaults to the socket", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "temp.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const { handler, calls, registrations } = recordingHandler();
  const ctx = context(dir, handler);
  const outcome = await registerPlugin(desired(socket), ctx, signal());
  assert.deepEqual(outcome, {
    state: "registered",
    reason: null,
    error: null,
    info: { type: "acme.io/Sensor", name: "acme.io/temp", endpoint: socket, versions: ["v1"] },
  });
  assert.deepEqual(calls, ["validate acme.io/temp", "register acme.io/temp"]);
  assert.deepEqual(registrations, [{ socket, type: "acme.io/Sensor", name: "acme.io/temp", endpoint: socket, versions: ["v1"] }]);
  assert.deepEqual(ctx.asw.plugins().map((p) => p.socket), [socket]);
  assert.deepEqual(fake.notifications().map((n) => [n.registered, n.error]), [[true, ""]]);
  assert.equal(fake.getInfoCalls(), 1);
});

const refusals: [string, FakePluginOptions["info"], Partial<TestPolicyOptions>, AttemptFailure, (socket: string, dir: string) => string][] = [
  ["an undeclared type", { type: "acme.io/Unknown", name: "x" }, {}, "no_handler", (socket) => `RegisterPlugin error -- no handler registered for plugin type: acme.io/Unknown at socket ${socket}`],
  ["a built-in type not in this build", { type: "DevicePlugin", name: "acme.io/gpu", versions: ["v1beta1"] }, {}, "handler_unavailable", () => "handler DevicePlugin is not available in this build"],
  ["a type its directory does not accept", sensor(), { watch: [] }, "policy", (_socket, dir) => `plugin type acme.io/Sensor is not accepted from watch directory ${dir} (types ["DevicePlugin"])`],
  [
    "a name outside allow",
    sensor("other.io/x"),
    { handlers: { "acme.io/Sensor": { allow: ["acme.io/*"] } } },
    "policy",
    () => `plugin name other.io/x is not allowed by handler acme.io/Sensor (allow ["acme.io/*"])`,
  ],
  [
    "a denied name (deny wins over allow)",
    sensor("acme.io/beta"),
    { handlers: { "acme.io/Sensor": { allow: ["acme.io/*"], deny: ["*beta"] } } },
    "policy",
    () => `plugin name acme.io/beta is denied by handler acme.io/Sensor (deny "*beta")`,
  ],
  [
    "versions the policy does not accept",
    { ...sensor(), versions: ["v2", "v3"] },
    { handlers: { "acme.io/Sensor": { versions: ["v1"] } } },
    "policy",
    () => `none of the plugin's versions ["v2","v3"] is accepted by handler acme.io/Sensor (versions ["v1"])`,
  ],
];

for (const [what, info, policy, reason, message] of refusals) {
  test(`refused after GetInfo: ${what}; the plugin is told why`, async (t) => {
    const dir = tempDir(t);
    const socket = path.join(dir, "p.sock");
    const fake = await startTestPlugin(t, { socketPath: socket, info });
    const { handler, calls } = recordingHandler();
    const options = policy.watch ? { ...policy, watch: [{ path: dir, types: ["DevicePlugin"] }] } : policy;
    const ctx = context(dir, handler, options);
    const outcome = await registerPlugin(desired(socket), ctx, signal());
    assert.deepEqual([outcome.state, outcome.reason], ["failed", reason]);
    assert.equal(outcome.error, message(socket, dir));
    assert.deepEqual(fake.notifications().map((n) => [n.registered, n.error]), [[false, message(socket, dir)]]);
    assert.deepEqual(calls, [], "the handler was not asked");
    assert.equal(ctx.asw.plugins().length, 0);
  });
}

test("maxPlugins: a slot is reserved before validation and released when validation fails", async (t) => {
  const dir = tempDir(t);
  const socketA = path.join(dir, "a.sock");
  const socketB = path.join(dir, "b.sock");
  const fakeB = await startTestPlugin(t, { socketPath: socketB, info: sensor("acme.io/b") });
  await startTestPlugin(t, { socketPath: socketA, info: sensor("acme.io/a") });
  let releaseValidation = () => {};
  const validating = new Promise<void>((resolve) => (releaseValidation = resolve));
  let validationStarted = () => {};
  const started = new Promise<void>((resolve) => (validationStarted = resolve));
  const { handler } = recordingHandler({
    validate: async () => {
      validationStarted();
      await validating;
      throw new Error("device busy");
    },
  });
  const ctx = context(dir, handler, { maxPlugins: 1 });
  const first = registerPlugin(desired(socketA), ctx, signal());
  await started;
  const second = await registerPlugin(desired(socketB), ctx, signal());
  assert.deepEqual([second.state, second.reason, second.error], ["failed", "max_plugins", "maxPlugins limit of 1 reached"]);
  assert.equal((await fakeB.waitForNotify()).error, "maxPlugins limit of 1 reached");
  releaseValidation();
  const firstOutcome = await first;
  assert.deepEqual([firstOutcome.reason, firstOutcome.error], ["validation", "RegisterPlugin error -- plugin validation failed with err: device busy"]);
  assert.notEqual(ctx.asw.reserveSlot(1), null, "the failed validation released its slot");
});

test("a failing RegisterPlugin leaves nothing registered, tells the plugin, and can be retried (kubernetes#133335)", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  let fail = true;
  const { handler } = recordingHandler({
    register: async () => {
      if (fail) throw new Error("apiserver unreachable");
    },
  });
  const ctx = context(dir, handler);
  const outcome = await registerPlugin(desired(socket), ctx, signal());
  assert.deepEqual([outcome.reason, outcome.error], ["register", "RegisterPlugin error -- plugin registration failed with err: apiserver unreachable"]);
  assert.equal(ctx.asw.plugins().length, 0);
  assert.deepEqual(fake.notifications().map((n) => n.registered), [false]);
  fail = false;
  assert.equal((await registerPlugin(desired(socket), ctx, signal())).state, "registered");
});

test("when the connection dropped before NotifyRegistrationStatus, the plugin is dialled again and told", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const { handler } = recordingHandler({
    // A slow handler (e.g. CSI's NodeGetInfo) during which the plugin closes every connection.
    register: async () => {
      fake.dropConnections();
      await new Promise((resolve) => setImmediate(resolve));
    },
  });
  const outcome = await registerPlugin(desired(socket), context(dir, handler), signal());
  assert.equal(outcome.state, "registered");
  assert.deepEqual(fake.notifications().map((n) => n.registered), [true]);
});

test("a plugin that cannot take NotifyRegistrationStatus(true) is failed with notify and left unregistered", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), failNotify: true });
  const { handler, calls } = recordingHandler();
  const ctx = context(dir, handler);
  const outcome = await registerPlugin(desired(socket), ctx, signal());
  assert.deepEqual([outcome.state, outcome.reason], ["failed", "notify"]);
  assert.match(outcome.error!, /failed to send registration status at socket .*cannot take a notification/);
  assert.equal(ctx.asw.plugins().length, 0);
  assert.deepEqual(calls, ["validate acme.io/temp", "register acme.io/temp", "deregister acme.io/temp"]);
  assert.deepEqual(fake.notifications().map((n) => n.registered), [true]);
});

test("unregistration never dials: it works when the plugin is gone", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startFakePlugin({ socketPath: socket, info: sensor() });
  const { handler, calls } = recordingHandler();
  const ctx = context(dir, handler);
  await registerPlugin(desired(socket), ctx, signal());
  await fake.stop();
  unregisterPlugin(ctx.asw.get(socket)!, ctx.asw, log);
  assert.equal(ctx.asw.plugins().length, 0);
  assert.deepEqual(calls, ["validate acme.io/temp", "register acme.io/temp", "deregister acme.io/temp"]);
});
