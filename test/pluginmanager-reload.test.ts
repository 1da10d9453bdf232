/**
 * Live policy reload (docs/policy.md, "Reload"): PluginManager.applyPolicy
 * on real @grpc/grpc-js plugins on real unix sockets. Each test waits for
 * change events; backoffs of an hour make sure a result came from the reload
 * and not from a retry timer.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { GenericHandler } from "../src/handlers/generic.ts";
import { createLogger } from "../src/log/logger.ts";
import type { PluginChange, PluginStatusCache } from "../src/api/plugin-status.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import type { FakePlugin, FakePluginOptions } from "./support/fake-plugin.ts";
import { heartbeatCounter, record, startManager, until } from "./support/manager-harness.ts";
import { testPolicy } from "./support/policy.ts";
import type { TestPolicyOptions } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const HOUR = { initialMs: 3_600_000, maxMs: 3_600_000 };

const stateIs = (status: PluginStatusCache, socket: string, state: string) => () => record(status, socket)?.state === state;
const other = (name: string) => ({ type: "acme.io/Other", name, versions: ["v1"] });
/** The states a socket went through, as subscribers saw them. */
const statesOf = (changes: PluginChange[], socket: string) => changes.filter((c) => c.plugin.socket === socket).map((c) => (c.removed ? `${c.plugin.state} (removed)` : c.plugin.state));
const notified = (fake: FakePlugin) => fake.notifications().map((n) => n.registered);

test("a handler type added by a reload: a plugin refused for want of it registers at once; a plugin still accepted is not touched", async (t) => {
  const dir = tempDir(t);
  const { manager, status, changes } = await startManager(t, { watch: [dir], handlers: ["acme.io/Sensor"], backoff: HOUR });
  const kept = await startTestPlugin(t, { socketPath: path.join(dir, "kept.sock"), info: sensor("acme.io/kept") });
  const waiting = await startTestPlugin(t, { socketPath: path.join(dir, "waiting.sock"), info: other("acme.io/waiting") });
  assert.match((await waiting.waitForNotify()).error, /no handler registered for plugin type: acme.io\/Other/);
  await until(status, (plugins) => plugins.every((p) => p.state !== "pending"), "both attempted");
  const sensorHandler = manager.handlers.get("acme.io/Sensor")!.handler;

  manager.applyPolicy(testPolicy({ watch: [dir], handlers: ["acme.io/Sensor", "acme.io/Other"], backoff: HOUR }));
  assert.equal((await waiting.waitForNotify((n) => n.registered)).registered, true);
  await until(status, stateIs(status, waiting.socketPath, "registered"), "the waiting plugin registered");
  assert.deepEqual(statesOf(changes, waiting.socketPath), ["pending", "failed", "registered"]);
  assert.deepEqual(statesOf(changes, kept.socketPath), ["pending", "registered"]);
  assert.deepEqual(notified(kept), [true], "no second notification");
  assert.equal(kept.getInfoCalls(), 1, "never dialled again");
  assert.equal(manager.handlers.get("acme.io/Sensor")!.handler, sensorHandler, "an unchanged handler policy keeps its handler");
  assert.equal((sensorHandler as GenericHandler).plugins().length, 1);
});

test("a handler type removed by a reload: its plugins are deregistered, then fail naming why and are told; others are not touched", async (t) => {
  const dir = tempDir(t);
  const { manager, status, changes } = await startManager(t, { watch: [dir], handlers: ["acme.io/Sensor", "acme.io/Other"], backoff: HOUR });
  const kept = await startTestPlugin(t, { socketPath: path.join(dir, "kept.sock"), info: sensor("acme.io/kept") });
  const dropped = await startTestPlugin(t, { socketPath: path.join(dir, "dropped.sock"), info: other("acme.io/dropped") });
  await until(status, (plugins) => plugins.length === 2 && plugins.every((p) => p.state === "registered"), "both registered");
  const otherHandler = manager.handlers.get("acme.io/Other")!.handler as GenericHandler;
  assert.equal(otherHandler.plugins().length, 1);

  manager.applyPolicy(testPolicy({ watch: [dir], handlers: ["acme.io/Sensor"], backoff: HOUR }));
  const expected = `RegisterPlugin error -- no handler registered for plugin type: acme.io/Other at socket ${dropped.socketPath}`;
  assert.equal((await dropped.waitForNotify((n) => !n.registered)).error, expected);
  await until(status, stateIs(status, dropped.socketPath, "failed"), "the dropped plugin failed");
  assert.equal(record(status, dropped.socketPath)!.error, expected);
  assert.deepEqual(otherHandler.plugins(), [], "its handler was told");
  assert.deepEqual(statesOf(changes, dropped.socketPath), ["pending", "registered", "pending", "failed"]);
  assert.deepEqual(statesOf(changes, kept.socketPath), ["pending", "registered"]);
  assert.deepEqual(notified(kept), [true]);
});

test("watch dirs: one added by a reload is created and its sockets register; one removed takes its plugins off the list, undialled", async (t) => {
  const dir = tempDir(t);
  const [a, b] = [path.join(dir, "a"), path.join(dir, "b")];
  fs.mkdirSync(b);
  const { manager, status, changes } = await startManager(t, { watch: [a], backoff: HOUR });
  const inB = await startTestPlugin(t, { socketPath: path.join(b, "b.sock"), info: sensor("acme.io/b") });
  const generic = manager.handlers.get("acme.io/Sensor")!.handler as GenericHandler;
  const added = path.join(dir, "new", "registry");

  manager.applyPolicy(testPolicy({ watch: [a, b, added], backoff: HOUR }));
  assert.equal((await inB.waitForNotify()).registered, true);
  assert.ok(fs.statSync(added).isDirectory(), "the added dir was created");
  const inAdded = await startTestPlugin(t, { socketPath: path.join(added, "n.sock"), info: sensor("acme.io/n") });
  assert.equal((await inAdded.waitForNotify()).registered, true, "the added dir is watched");
  await until(status, (plugins) => plugins.length === 2 && plugins.every((p) => p.state === "registered"), "both registered");

  manager.applyPolicy(testPolicy({ watch: [a, added], backoff: HOUR }));
  assert.deepEqual(status.plugins().map((p) => p.socket), [inAdded.socketPath], "b's plugin left the list at once");
  assert.deepEqual(generic.plugins().map((p) => p.socket), [inAdded.socketPath], "and was deregistered");
  assert.deepEqual(statesOf(changes, inB.socketPath), ["pending", "registered", "registered (removed)"]);
  assert.deepEqual([inB.getInfoCalls(), notified(inB)], [1, [true]], "never dialled for it");
  // b is no longer watched: a new socket there goes unseen while the kept dirs still report.
  await startTestPlugin(t, { socketPath: path.join(b, "late.sock"), info: sensor("acme.io/late") });
  const marker = await startTestPlugin(t, { socketPath: path.join(a, "marker.sock"), info: sensor("acme.io/marker") });
  await marker.waitForNotify();
  assert.ok(!status.plugins().some((p) => p.socket.startsWith(b)));
});

test("security.socketOwners tightened: a plugin whose socket uid 4242 owns is deregistered and failed, and never dialled again", async (t) => {
  const dir = tempDir(t);
  const { manager, status, changes } = await startManager(t, { watch: [dir], socketOwners: [0, 4242], backoff: HOUR });
  const foreign = await startTestPlugin(t, { socketPath: path.join(dir, "foreign.sock"), info: sensor("acme.io/foreign") });
  const own = await startTestPlugin(t, { socketPath: path.join(dir, "own.sock"), info: sensor("acme.io/own") });
  fs.chownSync(foreign.socketPath, 4242, 4242);
  await until(status, (plugins) => plugins.length === 2 && plugins.every((p) => p.state === "registered"), "both registered");

  manager.applyPolicy(testPolicy({ watch: [dir], socketOwners: [0], backoff: HOUR }));
  await until(status, stateIs(status, foreign.socketPath, "failed"), "the foreign plugin failed");
  assert.equal(record(status, foreign.socketPath)!.error, "socket owned by uid 4242, not in security.socketOwners [0]");
  assert.deepEqual(statesOf(changes, foreign.socketPath), ["pending", "registered", "pending", "failed"]);
  assert.deepEqual([foreign.getInfoCalls(), notified(foreign)], [1, [true]], "a socket refused for its owner is never dialled");
  assert.deepEqual((manager.handlers.get("acme.io/Sensor")!.handler as GenericHandler).plugins().map((p) => p.socket), [own.socketPath]);
  assert.deepEqual(notified(own), [true]);
});

const refusals: [string, FakePluginOptions["info"], (dir: string) => Partial<TestPolicyOptions>, (dir: string) => string][] = [
  [
    "its dir's types now exclude its type",
    sensor("acme.io/s"),
    (dir) => ({ watch: [{ path: dir, types: ["acme.io/Other"] }], handlers: ["acme.io/Sensor", "acme.io/Other"] }),
    (dir) => `plugin type acme.io/Sensor is not accepted from watch directory ${dir} (types ["acme.io/Other"])`,
  ],
  [
    "its name is no longer allowed",
    sensor("acme.io/s"),
    () => ({ handlers: { "acme.io/Sensor": { allow: ["other.io/*"] } } }),
    () => `plugin name acme.io/s is not allowed by handler acme.io/Sensor (allow ["other.io/*"])`,
  ],
  [
    "its name is now denied",
    sensor("acme.io/s"),
    () => ({ handlers: { "acme.io/Sensor": { deny: ["acme.io/*"] } } }),
    () => `plugin name acme.io/s is denied by handler acme.io/Sensor (deny "acme.io/*")`,
  ],
  [
    "its versions are no longer accepted",
    sensor("acme.io/s"),
    () => ({ handlers: { "acme.io/Sensor": { versions: ["v2"] } } }),
    () => `none of the plugin's versions ["v1"] is accepted by handler acme.io/Sensor (versions ["v2"])`,
  ],
];

for (const [what, info, policy, reason] of refusals) {
  test(`a registered plugin is deregistered and told why when, after a reload, ${what}`, async (t) => {
    const dir = tempDir(t);
    const { manager, status, changes } = await startManager(t, { watch: [dir], handlers: ["acme.io/Sensor", "acme.io/Other"], backoff: HOUR });
    const fake = await startTestPlugin(t, { socketPath: path.join(dir, "p.sock"), info });
    await fake.waitForNotify();
    const before = manager.handlers.get("acme.io/Sensor")!.handler as GenericHandler;
    manager.applyPolicy(testPolicy({ watch: [dir], backoff: HOUR, ...policy(dir) }));
    assert.equal((await fake.waitForNotify((n) => !n.registered)).error, reason(dir));
    await until(status, stateIs(status, fake.socketPath, "failed"), "failed");
    assert.equal(record(status, fake.socketPath)!.error, reason(dir));
    assert.deepEqual(statesOf(changes, fake.socketPath), ["pending", "registered", "pending", "failed"]);
    assert.deepEqual(before.plugins(), [], "the handler that took it was told");
  });
}

test("a registration in flight during a reload is decided again under the new policy when it ends", async (t) => {
  const dir = tempDir(t);
  const { manager, status, changes } = await startManager(t, { watch: [dir], handlers: ["acme.io/Sensor", "acme.io/Other"], backoff: HOUR });
  const slow = await startTestPlugin(t, { socketPath: path.join(dir, "slow.sock"), info: other("acme.io/slow"), getInfoDelayMs: 30 });
  await slow.waitForGetInfo();
  manager.applyPolicy(testPolicy({ watch: [dir], handlers: ["acme.io/Sensor"], backoff: HOUR }));
  await until(status, stateIs(status, slow.socketPath, "failed"), "failed under the new policy");
  assert.deepEqual(notified(slow), [true, false], "registered under the old policy, then refused under the new one");
  assert.deepEqual(statesOf(changes, slow.socketPath), ["pending", "registered", "pending", "failed"]);
});

test("maxPlugins lowered below the registered count keeps the registered plugins and refuses new ones", async (t) => {
  const dir = tempDir(t);
  const { manager, status } = await startManager(t, { watch: [dir], maxPlugins: 3, backoff: HOUR });
  const registered = [];
  for (let i = 0; i < 2; i++) registered.push(await startTestPlugin(t, { socketPath: path.join(dir, `p${i}.sock`), info: sensor(`acme.io/p${i}`) }));
  await until(status, (plugins) => plugins.length === 2 && plugins.every((p) => p.state === "registered"), "two registered");
  manager.applyPolicy(testPolicy({ watch: [dir], maxPlugins: 1, backoff: HOUR }));
  const late = await startTestPlugin(t, { socketPath: path.join(dir, "late.sock"), info: sensor("acme.io/late") });
  assert.equal((await late.waitForNotify()).error, "maxPlugins limit of 1 reached");
  await until(status, stateIs(status, late.socketPath, "failed"), "the late plugin failed");
  assert.deepEqual(status.plugins().map((p) => [path.basename(p.socket), p.state]), [["late.sock", "failed"], ["p0.sock", "registered"], ["p1.sock", "registered"]]);
  for (const fake of registered) assert.deepEqual(notified(fake), [true]);
});

test("reconcile settings: a new backoff applies to the next attempts; a new resync period re-arms the timer", async (t) => {
  const dir = tempDir(t);
  const heartbeats = heartbeatCounter();
  const { manager, status } = await startManager(t, { watch: [dir], backoff: HOUR }, { observer: heartbeats.observer });
  // Three GetInfo failures: with the hour-long backoff it would wait an hour after the first.
  const flaky = await startTestPlugin(t, { socketPath: path.join(dir, "flaky.sock"), info: sensor("acme.io/flaky"), failGetInfoTimes: 3 });
  await flaky.waitForGetInfo(1);
  await until(status, stateIs(status, flaky.socketPath, "failed"), "the first failure");
  manager.applyPolicy(testPolicy({ watch: [dir], backoff: { initialMs: 5, maxMs: 10 }, resyncMs: 20 }));
  await until(status, stateIs(status, flaky.socketPath, "registered"), "registered after retries with the new backoff");
  assert.equal(record(status, flaky.socketPath)!.attempts, 4);

  // Resyncs every 20 ms now beat without any filesystem event.
  await heartbeats.reach(heartbeats.count() + 3);
});

test("a reload logs what it changed: dirs added and no longer watched, a handler newly unavailable (once), each deregistration with its reason", async (t) => {
  const dir = tempDir(t);
  const [a, b] = [path.join(dir, "a"), path.join(dir, "b")];
  const lines: Record<string, unknown>[] = [];
  const jsonLog = createLogger({ level: "info", format: "json", write: (line) => lines.push(JSON.parse(line)) });
  const { manager, status } = await startManager(t, { watch: [a], handlers: ["acme.io/Sensor", "acme.io/Other"], backoff: HOUR }, { log: jsonLog, without: ["DRAPlugin"] });
  const dropped = await startTestPlugin(t, { socketPath: path.join(a, "dropped.sock"), info: other("acme.io/dropped") });
  await dropped.waitForNotify();
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered");

  const handlers = { "acme.io/Sensor": {}, DRAPlugin: {} };
  manager.applyPolicy(testPolicy({ watch: [a, b], handlers, backoff: HOUR }));
  manager.applyPolicy(testPolicy({ watch: [b], handlers, backoff: HOUR }));
  const logged = (msg: string) => lines.filter((line) => line.msg === msg);
  assert.deepEqual(logged("watch directory added").map((line) => line.dir), [b]);
  assert.deepEqual(logged("watch directory no longer watched").map((line) => line.dir), [a]);
  assert.deepEqual(logged("handler not available in this build").map((line) => line.type), ["DRAPlugin"], "once, though declared by both reloads");
  const deregistered = logged("plugin deregistered: the policy now refuses it");
  assert.deepEqual(deregistered.map((line) => [line.socket, line.type, line.name, line.state]), [[dropped.socketPath, "acme.io/Other", "acme.io/dropped", "pending"]]);
  assert.equal(deregistered[0]!.reason, "no_handler");
  assert.match(String(deregistered[0]!.error), /no handler registered for plugin type: acme.io\/Other/);
});
