/**
 * The plugin manager end to end: real @grpc/grpc-js plugins on real unix
 * sockets in a watched temp directory (the kubelet's plugin_manager_test.go,
 * and its known issues).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { handlerFactories } from "../src/agent/agent.ts";
import type { GenericHandler } from "../src/handlers/generic.ts";
import { PluginStatusCache } from "../src/api/plugin-status.ts";
import { PluginManager } from "../src/pluginmanager/manager.ts";
import { systemClock } from "../src/platform/clock.ts";
import type { PluginHandler } from "../src/pluginmanager/types.ts";
import { leaveStaleSocket, sensor, startFakePlugin, startTestPlugin } from "./support/fake-plugin.ts";
import type { FakePlugin } from "./support/fake-plugin.ts";
import { quietLog, startManager, stateOf, until } from "./support/manager-harness.ts";
import { manualClock } from "./support/manual-clock.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";
import { waitUntil } from "./support/wait.ts";

/** A handler recording its calls, as plugin_manager_test.go's does. */
function recordingHandler() {
  const calls: string[] = [];
  const handler: PluginHandler = {
    async validatePlugin(plugin) {
      calls.push(`validate ${plugin.name}`);
    },
    async registerPlugin(plugin) {
      calls.push(`register ${plugin.name}`);
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${plugin.name}`);
    },
  };
  return { calls, factories: { generic: () => handler } };
}

test("plugins in sub-directories created after start, at depth 0, 1 and 2, are validated then registered (plugin_manager_test.go)", async (t) => {
  const dir = tempDir(t);
  for (let depth = 0; depth <= 2; depth++) {
    await t.test(`depth ${depth}`, async (t) => {
      const root = path.join(dir, `d${depth}`);
      const { calls, factories } = recordingHandler();
      const { status } = await startManager(t, { watch: [root] }, { handlers: factories });
      const subdir = path.join(root, ...Array.from({ length: depth }, (_, i) => String(i)));
      fs.mkdirSync(subdir, { recursive: true });
      const name = `acme.io/depth-${depth}`;
      const fake = await startTestPlugin(t, { socketPath: path.join(subdir, "p.sock"), info: sensor(name) });
      assert.equal((await fake.waitForNotify()).registered, true);
      await until(status, (plugins) => plugins[0]?.state === "registered", "registered");
      assert.deepEqual(calls, [`validate ${name}`, `register ${name}`]);
    });
  }
});

test("plugins listening before start are registered; until GetInfo answers a record has null type, name and endpoint", async (t) => {
  const dir = tempDir(t);
  const fakes: FakePlugin[] = [];
  for (let i = 0; i < 10; i++) fakes.push(await startTestPlugin(t, { socketPath: path.join(dir, `p${i}.sock`), info: sensor(`acme.io/p${i}`) }));
  await startTestPlugin(t, { socketPath: path.join(dir, "slow.sock"), info: sensor("acme.io/slow"), hangGetInfo: true });
  const { status } = await startManager(t, { watch: [dir], timeouts: { getInfoMs: 10_000 } });
  const slow = path.join(dir, "slow.sock");
  assert.equal(status.plugins().length, 11, "every socket is known when start() resolves");
  await until(status, (plugins) => plugins.filter((p) => p.state === "registered").length === 10, "ten registered");
  for (const fake of fakes) assert.equal((await fake.waitForNotify()).registered, true);
  const pending = status.plugins().find((p) => p.socket === slow)!;
  assert.deepEqual(
    { type: pending.type, name: pending.name, endpoint: pending.endpoint, versions: pending.versions, state: pending.state, error: pending.error },
    { type: null, name: null, endpoint: null, versions: [], state: "pending", error: null },
  );
});

test("event-driven: with time standing still (no resync can run), a new socket is registered, also in a directory created after start", async (t) => {
  const dir = tempDir(t);
  // How fast is bench/registration.ts's to say; here the clock never moves, so only events can bring it.
  const clock = manualClock(Date.now());
  await startManager(t, { watch: [dir], resyncMs: 10_000 }, { clock });
  const fake = await startTestPlugin(t, { socketPath: path.join(dir, "new.sock"), info: sensor("acme.io/new") });
  assert.equal((await fake.waitForNotify()).registered, true);
  fs.mkdirSync(path.join(dir, "later", "deeper"), { recursive: true });
  const nested = await startTestPlugin(t, { socketPath: path.join(dir, "later", "deeper", "p.sock"), info: sensor("acme.io/nested") });
  assert.equal((await nested.waitForNotify()).registered, true);
  assert.equal(clock.pendingTimers(), 1, "the resync timer alone, never fired");
});

test("registration is retried after a transient GetInfo failure; the record keeps the error and counts attempts", async (t) => {
  const dir = tempDir(t);
  const { status, changes } = await startManager(t, { watch: [dir], backoff: { initialMs: 10, maxMs: 40 } });
  const socket = path.join(dir, "flaky.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), failGetInfoTimes: 2 });
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered after retries");
  const [record] = status.plugins();
  assert.equal(record!.attempts, 3);
  assert.equal(record!.error, null);
  assert.equal(fake.getInfoCalls(), 3);
  const states = changes.map((c) => c.plugin.state);
  assert.deepEqual(states, ["pending", "failed", "registered"], "the same failure twice is one state change");
  const failed = changes[1]!.plugin;
  assert.match(failed.error!, /failed to get plugin info using RPC GetInfo .*plugin not ready yet/);
  assert.equal(failed.attempts, 1);
});

test("a socket re-created at the same path re-registers exactly once, also when the events coalesce", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const { calls, factories } = recordingHandler();
  const { status } = await startManager(t, { watch: [dir] }, { handlers: factories });
  const first = await startFakePlugin({ socketPath: socket, info: sensor("acme.io/v1") });
  await first.waitForNotify();

  // Delete and re-create: the plugin restarts on the same path.
  await first.stop();
  const second = await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/v2") });
  await second.waitForNotify();

  // Replace in one step (the watcher only ever sees the new socket): a
  // plugin binds a dot-name, then renames it over the old socket.
  const third = await startTestPlugin(t, { socketPath: path.join(dir, ".next.sock"), info: sensor("acme.io/v3") });
  fs.renameSync(path.join(dir, ".next.sock"), socket);
  await third.waitForNotify();

  // Events are handled in order: once a later socket is registered, no late
  // event for p.sock can be pending.
  const marker = await startTestPlugin(t, { socketPath: path.join(dir, "z-marker.sock"), info: sensor("acme.io/marker") });
  await marker.waitForNotify();
  await until(status, (plugins) => plugins.every((p) => p.state === "registered"), "all registered");
  assert.deepEqual(calls, [
    "validate acme.io/v1",
    "register acme.io/v1",
    "deregister acme.io/v1",
    "validate acme.io/v2",
    "register acme.io/v2",
    "deregister acme.io/v2",
    "validate acme.io/v3",
    "register acme.io/v3",
    "validate acme.io/marker",
    "register acme.io/marker",
  ]);
  for (const fake of [second, third]) assert.equal(fake.notifications().length, 1);
  assert.equal(status.plugins().find((p) => p.socket === socket)!.name, "acme.io/v3");
});

test("a stale socket is reported stale once its 100 ms listen grace is over and does not delay other plugins; a new socket at its path resets its backoff", async (t) => {
  const dir = tempDir(t);
  const stale = path.join(dir, "dead.sock");
  await leaveStaleSocket(stale);
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "good.sock"), info: sensor() });
  const clock = manualClock(Date.now());
  // A backoff of an hour: only a new socket at the path can bring a retry.
  const hour = { initialMs: 3_600_000, maxMs: 3_600_000 };
  const { status, changes } = await startManager(t, { watch: [dir], backoff: hour, timeouts: { dialMs: 5000, getInfoMs: 5000 } }, { clock });
  await until(status, () => stateOf(status, good.socketPath) === "registered", "the good plugin registered");
  assert.equal(stateOf(status, stale), "pending", "within its grace a refused socket may still be between bind() and listen()");
  clock.advance(99);
  assert.equal(stateOf(status, stale), "pending");
  clock.advance(1);
  await until(status, () => stateOf(status, stale) === "stale", "stale once the grace is over, not after the 5 s dial timeout");
  const record = status.plugins().find((p) => p.socket === stale)!;
  assert.deepEqual([record.reason, record.attempts], ["stale", 1]);
  assert.match(record.error!, /connection refused/);
  const order = changes.filter((c) => c.plugin.state !== "pending").map((c) => `${path.basename(c.plugin.socket)} ${c.plugin.state}`);
  assert.deepEqual(order, ["good.sock registered", "dead.sock stale"], "the good plugin did not wait for the stale one");

  fs.unlinkSync(stale);
  const revived = await startTestPlugin(t, { socketPath: stale, info: sensor("acme.io/revived") });
  assert.equal((await revived.waitForNotify()).registered, true);
  await until(status, () => stateOf(status, stale) === "registered", "the revived plugin registered");
});

test("plugins that bind their socket before they listen are registered without ever being reported stale", async (t) => {
  const dir = tempDir(t);
  // Time stands still for the listen grace while the re-dials wait on real timers, so a
  // loaded machine that delays a listen() past the 100 ms grace cannot end it.
  const graceNeverEnds = { now: () => 0, setTimer: systemClock.setTimer };
  const { status, changes } = await startManager(t, { watch: [dir] }, { clock: graceNeverEnds });
  // The watcher sees each file at bind(); the plugin listens 0 to 60 ms later.
  for (const [i, listenDelayMs] of [0, 1, 2, 5, 10, 20, 40, 60].entries()) {
    const fake = await startTestPlugin(t, { socketPath: path.join(dir, `p${i}.sock`), info: sensor(`acme.io/p${i}`), listenDelayMs });
    assert.equal((await fake.waitForNotify()).registered, true, `listening ${listenDelayMs} ms after bind`);
  }
  await until(status, (plugins) => plugins.length === 8 && plugins.every((p) => p.state === "registered"), "eight registered");
  assert.deepEqual(changes.filter((c) => c.plugin.state !== "pending" && c.plugin.state !== "registered"), []);
  assert.ok(status.plugins().every((p) => p.attempts === 1), "each registered at its first attempt");
});

test("a GetInfo that hangs does not delay other plugins", async (t) => {
  const dir = tempDir(t);
  const hang = await startTestPlugin(t, { socketPath: path.join(dir, "a-hang.sock"), info: sensor("acme.io/hang"), hangGetInfo: true });
  const { status } = await startManager(t, { watch: [dir], timeouts: { getInfoMs: 30_000 } });
  await hang.waitForGetInfo();
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "b-good.sock"), info: sensor("acme.io/good") });
  assert.equal((await good.waitForNotify()).registered, true);
  assert.equal(stateOf(status, hang.socketPath), "pending");
});

test("ten sockets with the same name are all registered and tracked by the generic handler", async (t) => {
  const dir = tempDir(t);
  const { manager, status } = await startManager(t, { watch: [dir] });
  for (let i = 0; i < 10; i++) await startTestPlugin(t, { socketPath: path.join(dir, `same-${i}.sock`), info: sensor("acme.io/same") });
  await until(status, (plugins) => plugins.length === 10 && plugins.every((p) => p.state === "registered"), "ten registered");
  const generic = manager.handlers.get("acme.io/Sensor")!.handler as GenericHandler;
  assert.equal(generic.plugins().length, 10);
  assert.ok(generic.plugins().every((p) => p.name === "acme.io/same"));
});

test("a watched subtree removed with rm -r while its plugins run drops them and breaks nothing", async (t) => {
  const dir = tempDir(t);
  const { status, changes } = await startManager(t, { watch: [dir] });
  fs.mkdirSync(path.join(dir, "a", "b"), { recursive: true });
  for (const sub of ["a", "a/b"]) await startTestPlugin(t, { socketPath: path.join(dir, sub, "p.sock"), info: sensor(`acme.io/${sub}`) });
  await until(status, (plugins) => plugins.length === 2 && plugins.every((p) => p.state === "registered"), "two registered");
  fs.rmSync(path.join(dir, "a"), { recursive: true });
  await until(status, (plugins) => plugins.length === 0, "the subtree's plugins removed");
  assert.equal(changes.filter((c) => c.removed).length, 2);
  const after = await startTestPlugin(t, { socketPath: path.join(dir, "after.sock"), info: sensor("acme.io/after") });
  assert.equal((await after.waitForNotify()).registered, true);
});

test("subscribers get one change per state change, in order, and a deleted socket leaves the list", async (t) => {
  const dir = tempDir(t);
  const { status, changes } = await startManager(t, { watch: [dir] });
  const socket = path.join(dir, "p.sock");
  const fake = await startFakePlugin({ socketPath: socket, info: sensor() });
  await until(status, () => stateOf(status, socket) === "registered", "registered");
  await fake.stop();
  await until(status, (plugins) => plugins.length === 0, "removed");
  assert.deepEqual(changes.map((c) => [c.plugin.state, c.removed]), [["pending", false], ["registered", false], ["registered", true]]);
  const registered = changes[1]!.plugin;
  assert.deepEqual(
    { type: registered.type, name: registered.name, endpoint: registered.endpoint, versions: registered.versions, attempts: registered.attempts },
    { type: "acme.io/Sensor", name: "acme.io/temp", endpoint: socket, versions: ["v1"], attempts: 1 },
  );
  assert.ok(registered.registeredAt instanceof Date);
});

test("stop aborts a hanging registration, closes every watcher, timer and connection, and is idempotent", async (t) => {
  const dir = tempDir(t);
  const descriptors = () => fs.readdirSync("/proc/self/fd").length;
  // Warm-up: libuv's inotify descriptor and http2 stay for the process's life.
  const warm = new PluginManager({ policy: testPolicy({ watch: [path.join(dir, "warm")] }), log: quietLog, handlers: handlerFactories() });
  await warm.start();
  await warm.stop();
  fs.mkdirSync(path.join(dir, "r"));
  const hang = await startTestPlugin(t, { socketPath: path.join(dir, "r", "hang.sock"), info: sensor(), hangGetInfo: true });
  const before = descriptors();
  const status = new PluginStatusCache({ log: quietLog });
  const policy = testPolicy({ watch: [path.join(dir, "r"), path.join(dir, "s")], timeouts: { getInfoMs: 30_000 } });
  const manager = new PluginManager({ policy, log: quietLog, handlers: handlerFactories(), observers: [status] });
  await manager.start();
  fs.mkdirSync(path.join(dir, "r", "sub"));
  await hang.waitForGetInfo();
  await manager.stop();
  await manager.stop();
  assert.equal(await status.whenSettled(), false, "nothing settles after stop");
  // The hanging attempt was aborted, not left to its 30 s GetInfo deadline: its connection is closed
  // (the plugin's end of it a moment after ours).
  await waitUntil(() => descriptors() <= before, "every descriptor the manager opened to be closed", 2000);
});

test("start fails naming a watch directory it cannot create", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "file"), "");
  const manager = new PluginManager({ policy: testPolicy({ watch: [path.join(dir, "file", "registry")] }), log: quietLog, handlers: handlerFactories() });
  await assert.rejects(manager.start(), /cannot create watch directory .*file\/registry/);
  await manager.stop();
});
