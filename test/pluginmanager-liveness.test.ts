/**
 * Liveness of registered plugins: a handler reports a lost service
 * connection through its HandlerContext, and the plugin manager moves the
 * plugin to `stale` at once, then registers it again with backoff. With
 * `reconcile.liveness.interval` set, the other registered plugins are dialled
 * (connect only) that often, and one that refuses becomes `stale` too.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { createLogger } from "../src/log/logger.ts";
import type { HandlerContext, PluginHandler, PluginRegistration } from "../src/pluginmanager/types.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { spawnRegistrationPlugin } from "./support/grpc-peers.ts";
import { operationsEnded, startManager, until, type StartManagerOptions } from "./support/manager-harness.ts";
import { manualClock } from "./support/manual-clock.ts";
import { tempDir } from "./support/temp-dir.ts";
import { waitUntil } from "./support/wait.ts";

/** A handler that keeps its context and the plugins it holds, as a device plugin handler would. */
function connectionHandler() {
  const calls: string[] = [];
  const held = new Map<string, PluginRegistration>();
  let context: HandlerContext | undefined;
  const handler: PluginHandler = {
    async validatePlugin(plugin) {
      calls.push(`validate ${plugin.name}`);
    },
    async registerPlugin(plugin) {
      calls.push(`register ${plugin.name}`);
      held.set(plugin.socket, plugin);
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${plugin.name}`);
      held.delete(plugin.socket);
    },
  };
  const factories = { generic: (_policy: unknown, given: HandlerContext) => ((context = given), handler) };
  return { calls, held, factories, lose: (socket: string, reason: string) => context!.connectionLost(held.get(socket)!, reason) };
}

test("connectionLost: the plugin is stale at once with the reason, deregistered, then registered again after backoff", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const { calls, factories, lose } = connectionHandler();
  const { manager, changes } = await startManager(t, { watch: [dir], backoff: { initialMs: 20, maxMs: 20 } }, { handlers: factories });
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/p") });
  await fake.waitForNotify();
  await until(manager, (plugins) => plugins[0]?.state === "registered", "registered");

  const before = changes.length;
  lose(socket, "ListAndWatch stream ended");
  // At once, or as soon as the registration's operation has ended.
  await until(manager, () => changes.length > before, "an event");
  const stale = changes[before]!.plugin;
  assert.equal(stale.state, "stale");
  assert.equal(stale.error, "ListAndWatch stream ended");
  assert.deepEqual(calls.slice(0, 3), ["validate acme.io/p", "register acme.io/p", "deregister acme.io/p"]);

  await until(manager, (plugins) => plugins[0]?.state === "registered", "registered again");
  assert.deepEqual(calls.slice(3), ["validate acme.io/p", "register acme.io/p"]);
  assert.equal((await fake.waitForNotify()).registered, true);
});

test("connectionLost for a plugin the manager does not hold (never registered, or gone) changes nothing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const { factories, lose, held } = connectionHandler();
  const { manager } = await startManager(t, { watch: [dir] }, { handlers: factories });
  await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/p") });
  await until(manager, (plugins) => plugins[0]?.state === "registered", "registered");
  const plugin = held.get(socket)!;
  held.set(socket, { ...plugin, endpoint: "/elsewhere.sock" });
  lose(socket, "another instance");
  held.set(path.join(dir, "unknown.sock"), { ...plugin, socket: path.join(dir, "unknown.sock") });
  lose(path.join(dir, "unknown.sock"), "unknown");
  assert.equal(manager.plugins()[0]!.state, "registered");
});

/**
 * A plugin in a process of its own (so that it can be killed with SIGKILL),
 * listening before its socket appears where the manager looks: the listen
 * grace, which the manual clock would hold, is not what these tests are about.
 */
async function spawnListening(t: TestContext, socketPath: string, name: string) {
  const hidden = path.join(path.dirname(socketPath), `.${path.basename(socketPath)}`);
  const plugin = await spawnRegistrationPlugin(hidden, { type: "acme.io/Sensor", name, supported_versions: ["v1"] });
  t.after(() => plugin.kill());
  fs.renameSync(hidden, socketPath);
  return plugin;
}

/** A manager whose liveness dial runs every `livenessMs` of a manual clock, with a JSON log kept. */
async function livenessManager(t: TestContext, dir: string, livenessMs: number, handlers?: StartManagerOptions["handlers"]) {
  const clock = manualClock(Date.now());
  const logs: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: "info", format: "json", write: (line) => void logs.push(JSON.parse(line)) });
  const started = await startManager(t, { watch: [dir], livenessMs, backoff: { initialMs: 1000, maxMs: 1000 } }, { clock, log, handlers });
  return { ...started, clock, logs };
}

test("liveness on: a registration-only plugin killed with kill -9 becomes stale at the next dial, with one event and one log line, then is retried with backoff", async (t) => {
  const dir = tempDir(t);
  const { manager, changes, clock, logs } = await livenessManager(t, dir, 30_000);
  const plugin = await spawnListening(t, path.join(dir, "p.sock"), "acme.io/p");
  await until(manager, (plugins) => plugins[0]?.state === "registered", "registered");
  await operationsEnded();
  await plugin.kill();
  assert.equal(manager.plugins()[0]!.state, "registered", "nothing notices before the next dial");

  const before = changes.length;
  clock.advance(30_000);
  await until(manager, (plugins) => plugins[0]?.state === "stale", "stale after the liveness dial");
  const stale = manager.plugins()[0]!;
  assert.deepEqual([stale.reason, stale.registeredAt], ["stale", null]);
  assert.match(stale.error!, /connection refused \(stale socket: no plugin is listening\)/);
  assert.deepEqual(changes.slice(before).map((change) => change.plugin.state), ["stale"], "one event");

  // The backoff window ends: the socket is retried, refuses again, and stays stale without another warning.
  clock.advance(1000);
  await until(manager, (plugins) => plugins[0]!.attempts === 2, "retried once the backoff window closed");
  assert.equal(manager.plugins()[0]!.state, "stale");
  assert.deepEqual(changes.slice(before).map((change) => change.plugin.state), ["stale"], "still one event");
  assert.equal(logs.filter((line) => line.msg === "plugin socket is stale").length, 1, "logged once");
});

test("liveness dials are connect-only: a live plugin sees one GetInfo and one Notify however many passes run", async (t) => {
  const dir = tempDir(t);
  // Its own listener (listenDelayMs), so that the test can count connections; listening (its 0 ms
  // timer, then this one) before the manager's walk finds it.
  const fake = await startTestPlugin(t, { socketPath: path.join(dir, "p.sock"), info: sensor("acme.io/p"), listenDelayMs: 0 });
  await new Promise((resolve) => setTimeout(resolve, 0));
  const { manager, clock } = await livenessManager(t, dir, 10_000);
  await until(manager, (plugins) => plugins[0]?.state === "registered", "registered");
  await operationsEnded();
  for (let pass = 0; pass < 5; pass++) {
    clock.advance(10_000);
    await fake.waitForConnections(pass + 2);
    // The next pass is due an interval after this one ended: wait for its timer beside the resync's.
    await waitUntil(() => clock.pendingTimers() === 2, `pass ${pass + 1} to end`);
  }
  assert.deepEqual([fake.getInfoCalls(), fake.notifications().length], [1, 1]);
  assert.equal(manager.plugins()[0]!.state, "registered");
});

test("liveness off (the default), and plugins whose handler watches its connection: a killed plugin stays registered", async (t) => {
  const dir = tempDir(t);
  const watchingHandler: PluginHandler = { watchesConnection: true, async validatePlugin() {}, async registerPlugin() {}, deregisterPlugin() {} };
  const watchingFactories = { generic: () => watchingHandler };
  for (const [livenessMs, handlers] of [[0, undefined], [10_000, watchingFactories]] as const) {
    const sub = path.join(dir, String(livenessMs));
    const { manager, clock } = await livenessManager(t, sub, livenessMs, handlers);
    const plugin = await spawnListening(t, path.join(sub, "p.sock"), "acme.io/p");
    await until(manager, (plugins) => plugins[0]?.state === "registered", "registered");
    await plugin.kill();
    clock.advance(3_600_000);
    assert.equal(clock.pendingTimers(), 1, "only the resync timer: no liveness pass is due");
    assert.equal(manager.plugins()[0]!.state, "registered", `liveness ${livenessMs} ms`);
  }
});
