/**
 * What the plugin manager tells its observer (health's heartbeats, the
 * registration metrics) and writes to its log: one beat per pass, one report
 * per attempt that ended, one log line per outcome.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { handlerFactories } from "../src/handlers/factories.ts";
import { createLogger } from "../src/log/logger.ts";
import { PluginStatusCache } from "../src/api/plugin-status.ts";
import { PluginManager } from "../src/pluginmanager/manager.ts";
import type { AttemptReport } from "../src/pluginmanager/manager.ts";
import { inodeOf } from "../src/pluginmanager/state-of-world.ts";
import { leaveStaleSocket, sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { heartbeatCounter, quietLog, startManager, stateOf, until } from "./support/manager-harness.ts";
import { manualClock } from "./support/manual-clock.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

test("observer: every reconcile pass beats, on desired-state events and on each resync", async (t) => {
  const dir = tempDir(t);
  const heartbeats = heartbeatCounter();
  const { observer } = heartbeats;
  // An empty directory and a 50 ms resync: only the start and the resyncs run passes.
  const clock = manualClock(Date.now());
  const { manager: quiet } = await startManager(t, { watch: [path.join(dir, "quiet")], resyncMs: 50 }, { observer, clock });
  const afterQuietStart = heartbeats.count();
  clock.advance(49);
  assert.equal(heartbeats.count(), afterQuietStart, "no pass between resyncs");
  clock.advance(1);
  clock.advance(100);
  assert.equal(heartbeats.count(), afterQuietStart + 3, "one pass per resync, 50 ms apart");
  await quiet.stop();

  // A resync of an hour: a new socket's event is a pass of its own.
  await startManager(t, { watch: [path.join(dir, "busy")] }, { observer });
  const afterStart = heartbeats.count();
  await startTestPlugin(t, { socketPath: path.join(dir, "busy", "p.sock"), info: sensor() });
  await heartbeats.reach(afterStart + 1);
});

test("observer: every attempt that ended reports its socket and inode, state, GetInfo's answer, reason, error, end and duration; aborted ones do not", async (t) => {
  const dir = tempDir(t);
  const attempts: AttemptReport[] = [];
  const startedAt = Date.now();
  const clock = manualClock(startedAt);
  const status = new PluginStatusCache({ log: quietLog });
  const manager = new PluginManager({
    policy: testPolicy({ watch: [dir], timeouts: { getInfoMs: 30_000 } }),
    log: quietLog,
    handlers: handlerFactories(),
    observers: [{ attemptEnded: (attempt) => attempts.push(attempt) }, status],
    clock,
  });
  t.after(() => manager.stop());
  const stale = path.join(dir, "dead.sock");
  await leaveStaleSocket(stale);
  const hang = await startTestPlugin(t, { socketPath: path.join(dir, "hang.sock"), info: sensor("acme.io/hang"), hangGetInfo: true });
  await manager.start();
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "good.sock"), info: sensor("acme.io/good") });
  await until(status, () => stateOf(status, good.socketPath) === "registered", "registered");
  // The stale socket's only attempt spans the 100 ms in which it might still start listening.
  clock.advance(100);
  await until(status, () => stateOf(status, stale) === "stale", "stale");
  await hang.waitForGetInfo();
  // Removing the hanging plugin's socket aborts its attempt.
  await hang.stop();
  await until(status, (plugins) => !plugins.some((p) => p.socket === hang.socketPath), "the hanging socket removed");
  // stop() waits for the aborted attempt to end.
  await manager.stop();

  const byName = Object.fromEntries(attempts.map((attempt) => [path.basename(attempt.socket), attempt]));
  assert.deepEqual(Object.keys(byName).sort(), ["dead.sock", "good.sock"], "the aborted attempt is not reported");
  assert.deepEqual(byName["good.sock"], {
    socket: good.socketPath,
    inode: inodeOf(fs.lstatSync(good.socketPath, { bigint: true })),
    state: "registered",
    info: { type: "acme.io/Sensor", name: "acme.io/good", endpoint: good.socketPath, versions: ["v1"] },
    reason: null,
    error: null,
    endedAt: startedAt,
    durationMs: 0,
  });
  const dead = byName["dead.sock"]!;
  assert.deepEqual([dead.state, dead.info, dead.reason, dead.endedAt, dead.durationMs], ["stale", null, "stale", startedAt + 100, 100]);
  assert.match(dead.error!, /connection refused/);
});

test("log lines: one per outcome, with socket, type, name and state; a reason only when there is one", async (t) => {
  const dir = tempDir(t);
  const lines: Record<string, unknown>[] = [];
  const jsonLog = createLogger({ level: "info", format: "json", write: (line) => lines.push(JSON.parse(line)) });
  const { status } = await startManager(t, { watch: [dir] }, { log: jsonLog });
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "good.sock"), info: sensor("acme.io/good") });
  const unknown = await startTestPlugin(t, { socketPath: path.join(dir, "unknown.sock"), info: { type: "acme.io/Unknown", name: "acme.io/u" } });
  await good.waitForNotify();
  await unknown.waitForNotify();
  await until(status, (plugins) => plugins.every((p) => p.state !== "pending"), "both attempted");
  const registered = lines.filter((line) => line.msg === "plugin registered");
  assert.deepEqual(registered.map(({ socket, type, name, state, attempts, reason }) => ({ socket, type, name, state, attempts, reason })), [
    { socket: good.socketPath, type: "acme.io/Sensor", name: "acme.io/good", state: "registered", attempts: 1, reason: undefined },
  ]);
  assert.ok(!("reason" in registered[0]!) && !("error" in registered[0]!), "no reason or error key on success");
  const failed = lines.filter((line) => line.msg === "plugin registration failed");
  assert.equal(failed.length, 1);
  assert.equal(failed[0]!.reason, "no_handler");
  assert.match(String(failed[0]!.error), /no handler registered for plugin type: acme.io\/Unknown/);
});
