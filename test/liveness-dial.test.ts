/**
 * The liveness dial (src/liveness/dial.ts), wired to the plugin manager as
 * src/agent/agent.ts wires it: with `reconcile.liveness.interval` set, registered
 * plugins whose handler does not watch its connection are dialled (connect
 * only) that often, and one that refuses becomes `stale`.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { createLogger } from "../src/log/logger.ts";
import type { PluginHandler } from "../src/pluginmanager/types.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { spawnRegistrationPlugin } from "./support/grpc-peers.ts";
import { operationsEnded, startManager, type StartManagerOptions, until } from "./support/manager-harness.ts";
import { manualClock } from "./support/manual-clock.ts";
import { tempDir } from "./support/temp-dir.ts";
import { waitUntil } from "./support/wait.ts";

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
  const { status, changes, clock, logs } = await livenessManager(t, dir, 30_000);
  const plugin = await spawnListening(t, path.join(dir, "p.sock"), "acme.io/p");
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered");
  await operationsEnded();
  await plugin.kill();
  assert.equal(status.plugins()[0]!.state, "registered", "nothing notices before the next dial");

  const before = changes.length;
  clock.advance(30_000);
  await until(status, (plugins) => plugins[0]?.state === "stale", "stale after the liveness dial");
  const stale = status.plugins()[0]!;
  assert.deepEqual([stale.reason, stale.registeredAt], ["stale", null]);
  assert.match(stale.error!, /connection refused \(stale socket: no plugin is listening\)/);
  assert.deepEqual(changes.slice(before).map((change) => change.plugin.state), ["stale"], "one event");

  // The backoff window ends: the socket is retried, refuses again, and stays stale without another warning.
  clock.advance(1000);
  await until(status, (plugins) => plugins[0]!.attempts === 2, "retried once the backoff window closed");
  assert.equal(status.plugins()[0]!.state, "stale");
  assert.deepEqual(changes.slice(before).map((change) => change.plugin.state), ["stale"], "still one event");
  assert.equal(logs.filter((line) => line.msg === "plugin socket is stale").length, 1, "logged once");
});

test("liveness dials are connect-only: a live plugin sees one GetInfo and one Notify however many passes run", async (t) => {
  const dir = tempDir(t);
  // Its own listener (listenDelayMs), so that the test can count connections; listening (its 0 ms
  // timer, then this one) before the manager's walk finds it.
  const fake = await startTestPlugin(t, { socketPath: path.join(dir, "p.sock"), info: sensor("acme.io/p"), listenDelayMs: 0 });
  await new Promise((resolve) => setTimeout(resolve, 0));
  const { status, clock } = await livenessManager(t, dir, 10_000);
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered");
  await operationsEnded();
  for (let pass = 0; pass < 5; pass++) {
    clock.advance(10_000);
    await fake.waitForConnections(pass + 2);
    // The next pass is due an interval after this one ended: wait for its timer beside the resync's.
    await waitUntil(() => clock.pendingTimers() === 2, `pass ${pass + 1} to end`);
  }
  assert.deepEqual([fake.getInfoCalls(), fake.notifications().length], [1, 1]);
  assert.equal(status.plugins()[0]!.state, "registered");
});

test("liveness off (the default), and plugins whose handler watches its connection: a killed plugin stays registered", async (t) => {
  const dir = tempDir(t);
  const watchingHandler: PluginHandler = { watchesConnection: true, async validatePlugin() {}, async registerPlugin() {}, deregisterPlugin() {} };
  const watchingFactories = { generic: () => watchingHandler };
  for (const [livenessMs, handlers] of [[0, undefined], [10_000, watchingFactories]] as const) {
    const sub = path.join(dir, String(livenessMs));
    const { status, clock } = await livenessManager(t, sub, livenessMs, handlers);
    const plugin = await spawnListening(t, path.join(sub, "p.sock"), "acme.io/p");
    await until(status, (plugins) => plugins[0]?.state === "registered", "registered");
    await plugin.kill();
    clock.advance(3_600_000);
    assert.equal(clock.pendingTimers(), 1, "only the resync timer: no liveness pass is due");
    assert.equal(status.plugins()[0]!.state, "registered", `liveness ${livenessMs} ms`);
  }
});
