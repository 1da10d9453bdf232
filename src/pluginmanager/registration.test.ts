import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { leaveStaleSocket, sensor, startFakePlugin, startGarbageListener, startTestPlugin } from "../../test/support/fake-plugin.ts";
import type { FakePluginOptions } from "../../test/support/fake-plugin.ts";
import { testPolicy } from "../../test/support/policy.ts";
import type { TestPolicyOptions } from "../../test/support/policy.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { waitUntil } from "../../test/support/wait.ts";
import { createLogger } from "../log/logger.ts";
import { HandlerSet } from "./handler-set.ts";
import { registerPlugin, unregisterPlugin } from "./registration.ts";
import type { AttemptOutcome, RegistrationContext } from "./registration.ts";
import { ActualStateOfWorld, inodeOf } from "./state.ts";
import type { DesiredSocket } from "./state.ts";
import type { AttemptFailure, PluginHandler, PluginRegistration } from "./types.ts";

const log = createLogger({ level: "error", format: "text" });

/** A handler that records what it is asked and fails where told to. */
function recordingHandler(behaviour: { validate?: () => Promise<void>; register?: () => Promise<void> } = {}) {
  const calls: string[] = [];
  const registrations: PluginRegistration[] = [];
  const handler: PluginHandler = {
    async validatePlugin(plugin) {
      calls.push(`validate ${plugin.name}`);
      await behaviour.validate?.();
    },
    async registerPlugin(plugin) {
      calls.push(`register ${plugin.name}`);
      registrations.push(plugin);
      await behaviour.register?.();
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${plugin.name}`);
    },
  };
  return { handler, calls, registrations };
}

function desired(socket: string): DesiredSocket {
  return { socket, inode: inodeOf(fs.lstatSync(socket, { bigint: true })), discoveredAt: new Date() };
}

/** A registration context for `dir` whose `acme.io/Sensor` handler is `handler`. */
function context(dir: string, handler: PluginHandler, policy: Partial<TestPolicyOptions> = {}): RegistrationContext {
  const full = testPolicy({ watch: [dir], handlers: { "acme.io/Sensor": {}, DevicePlugin: {} }, ...policy });
  return { policy: full, handlers: new HandlerSet(full, { generic: () => handler }, { connectionLost() {} }), asw: new ActualStateOfWorld(), log };
}

const signal = () => AbortSignal.timeout(10_000);

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

test("the registration connection is closed when the attempt ends", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "temp.sock");
  await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const ctx = context(dir, recordingHandler().handler);
  const descriptors = () => fs.readdirSync("/proc/self/fd").length;
  // Warm-up: the first attempt loads http2 and may keep process-wide descriptors.
  await registerPlugin(desired(socket), ctx, signal());
  ctx.asw.remove(socket);
  const before = descriptors();
  assert.equal((await registerPlugin(desired(socket), ctx, signal())).state, "registered");
  // Both ends live in this process; the plugin's end closes a moment after ours.
  await waitUntil(() => descriptors() === before, "both ends of the registration connection to close", 2000);
});

test("a socket owned by a uid outside security.socketOwners is refused without dialing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "foreign.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  fs.chownSync(socket, 4242, 4242);
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler), signal());
  assert.deepEqual(outcome, { state: "failed", reason: "socket_owner", error: "socket owned by uid 4242, not in security.socketOwners [0]", info: null });
  assert.equal(fake.getInfoCalls(), 0);
  assert.deepEqual(fake.notifications(), []);
});

test("a stale socket (its plugin was killed) is reported stale once 100 ms have passed since discovery, at once after that", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "dead.sock");
  await leaveStaleSocket(socket);
  const clock = manualClock(Date.now());
  const ctx = { ...context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 5000, dialMs: 5000 } }), clock };
  const justFound = { ...desired(socket), discoveredAt: new Date(clock.now()) };
  let outcome: AttemptOutcome | undefined;
  const attempt = registerPlugin(justFound, ctx, signal()).then((ended) => (outcome = ended));
  // Within its grace a refused socket may still be between bind() and listen(): it is dialled again.
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait before dialling again");
  clock.advance(99);
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait again, the grace not over");
  assert.equal(outcome, undefined, "not stale within the grace");
  clock.advance(1);
  await attempt;
  assert.deepEqual([outcome!.state, outcome!.reason], ["stale", "stale"]);
  assert.match(outcome!.error!, /connection refused/);

  // A socket known for a while is stale at the first refusal: no timer, no wait for the 5 s dial timeout.
  const retry = await registerPlugin({ ...justFound, discoveredAt: new Date(clock.now() - 1000) }, ctx, signal());
  assert.equal(retry.state, "stale");
  assert.equal(clock.pendingTimers(), 0);
});

test("an attempt aborted while it waits for a just-found socket to listen ends at once", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "dead.sock");
  await leaveStaleSocket(socket);
  const clock = manualClock(Date.now());
  const controller = new AbortController();
  // The clock never moves, so the grace never ends: only the abort can end the attempt.
  const justFound = { ...desired(socket), discoveredAt: new Date(clock.now()) };
  const attempt = registerPlugin(justFound, { ...context(dir, recordingHandler().handler), clock }, controller.signal);
  await waitUntil(() => clock.pendingTimers() === 1, "the attempt to wait before dialling again");
  controller.abort(new Error("socket removed"));
  assert.equal((await attempt).state, "aborted");
  assert.equal(clock.pendingTimers(), 0, "its timer cancelled");
});

test("a socket that accepts and answers garbage is failed, not stale", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "garbage.sock");
  const garbage = await startGarbageListener(socket);
  t.after(() => garbage.close());
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler), signal());
  assert.deepEqual([outcome.state, outcome.reason], ["failed", "get_info"]);
  assert.match(outcome.error!, /^RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket /);
});

test("a GetInfo that hangs fails after timeouts.getInfo", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "hang.sock");
  await startTestPlugin(t, { socketPath: socket, info: sensor(), hangGetInfo: true });
  const outcome = await registerPlugin(desired(socket), context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 50 } }), signal());
  assert.equal(outcome.state, "failed");
  assert.match(outcome.error!, /GetInfo at socket .*hang\.sock, err: no answer within 50ms/);
});

test("a plugin answering GetInfo with a gRPC error is told why it was not registered", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "early.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), failGetInfoTimes: 1 });
  const ctx = context(dir, recordingHandler().handler);
  const outcome = await registerPlugin(desired(socket), ctx, signal());
  assert.deepEqual([outcome.state, outcome.reason], ["failed", "get_info"]);
  assert.match(outcome.error!, /plugin not ready yet/);
  assert.equal((await fake.waitForNotify()).registered, false);
  assert.equal((await registerPlugin(desired(socket), ctx, signal())).state, "registered", "the retry succeeds");
});

const refusals: [string, FakePluginOptions["info"], Partial<TestPolicyOptions>, AttemptFailure, (socket: string, dir: string) => string][] = [
  ["an undeclared type", { type: "acme.io/Unknown", name: "x" }, {}, "no_handler", (socket) => `RegisterPlugin error -- no handler registered for plugin type: acme.io/Unknown at socket ${socket}`],
  ["a built-in type not in this build", { type: "DevicePlugin", name: "acme.io/gpu", versions: ["v1beta1"] }, {}, "handler_unavailable", () => "handler DevicePlugin is not available in this build"],
  ["a type its directory does not accept", sensor(), { watch: [] }, "policy", (_socket, dir) => `plugin type acme.io/Sensor is not accepted from watch directory ${dir} (types ["DevicePlugin"])`],
  ["a name outside allow", sensor("other.io/x"), { handlers: { "acme.io/Sensor": { allow: ["acme.io/*"] } } }, "policy", () => `plugin name other.io/x is not allowed by handler acme.io/Sensor (allow ["acme.io/*"])`],
  ["a denied name (deny wins over allow)", sensor("acme.io/beta"), { handlers: { "acme.io/Sensor": { allow: ["acme.io/*"], deny: ["*beta"] } } }, "policy", () => `plugin name acme.io/beta is denied by handler acme.io/Sensor (deny "*beta")`],
  ["versions the policy does not accept", { ...sensor(), versions: ["v2", "v3"] }, { handlers: { "acme.io/Sensor": { versions: ["v1"] } } }, "policy", () => `none of the plugin's versions ["v2","v3"] is accepted by handler acme.io/Sensor (versions ["v1"])`],
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
    assert.equal(ctx.asw.size, 0);
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
  assert.equal(ctx.asw.size, 0);
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

test("a socket gone, replaced or no longer a socket when its attempt starts is socket_missing, and is not dialled", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const ctx = context(dir, recordingHandler().handler);
  const replaced = { ...desired(socket), inode: "0:0:0" };
  const gone = { ...desired(socket), socket: path.join(dir, "gone.sock") };
  const file = path.join(dir, "file");
  fs.writeFileSync(file, "");
  const notSocket = { ...desired(socket), socket: file };
  const outcomes = await Promise.all([replaced, gone, notSocket].map((entry) => registerPlugin(entry, ctx, signal())));
  assert.deepEqual(outcomes.map((outcome) => [outcome.state, outcome.reason]), [["failed", "socket_missing"], ["failed", "socket_missing"], ["failed", "socket_missing"]]);
  assert.match(outcomes[0]!.error!, /re-created during registration/);
  assert.match(outcomes[1]!.error!, /no longer exists/);
  assert.match(outcomes[2]!.error!, /is not a unix socket/);
  assert.equal(fake.getInfoCalls(), 0);
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
  assert.equal(ctx.asw.size, 0);
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
  assert.equal(ctx.asw.size, 0);
  assert.deepEqual(calls, ["validate acme.io/temp", "register acme.io/temp", "deregister acme.io/temp"]);
});

test("an attempt aborted while GetInfo hangs ends at once, reporting nothing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "hang.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), hangGetInfo: true });
  const controller = new AbortController();
  const attempt = registerPlugin(desired(socket), context(dir, recordingHandler().handler, { timeouts: { getInfoMs: 10_000 } }), controller.signal);
  await fake.waitForGetInfo();
  controller.abort(new Error("socket removed"));
  assert.equal((await attempt).state, "aborted");
});
