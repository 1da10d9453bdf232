import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import type { TestContext } from "node:test";
import { sensor, startTestPlugin } from "../../test/support/fake-plugin.ts";
import { testPolicy } from "../../test/support/policy.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { createLogger } from "../log/logger.ts";
import { HandlerSet } from "./handler-set.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import { OperationExecutor } from "../util/operation-executor.ts";
import { PluginStatusCache } from "../api/plugin-status.ts";
import { Reconciler } from "./reconciler.ts";
import { ActualStateOfWorld, DesiredStateOfWorld, inodeOf } from "./state-of-world.ts";
import type { PluginHandler } from "./types.ts";

const log = createLogger({ level: "error", format: "text" });

/**
 * A reconciler over real plugin sockets in `dir`, whose `acme.io/Sensor`
 * handler records what it is asked; `settled()` resolves once the executor
 * reported a socket ready after the last `expectSettled()`.
 */
function setUp(t: TestContext, dir: string, options: { clock?: Clock; resyncMs?: number; onResync?: () => void } = {}) {
  const calls: string[] = [];
  const handler: PluginHandler = {
    async validatePlugin() {},
    async registerPlugin(plugin) {
      calls.push(`register ${path.basename(plugin.socket)}`);
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${path.basename(plugin.socket)}`);
    },
  };
  const policy = testPolicy({ watch: [dir] });
  const context = { policy, handlers: new HandlerSet(policy, { generic: () => handler }, { connectionLost() {} }), asw: new ActualStateOfWorld(), log };
  const dsw = new DesiredStateOfWorld();
  const clock = options.clock ?? systemClock;
  const status = new PluginStatusCache({ log });
  dsw.subscribe((change) => status.socketChanged(change));
  let settle = () => {};
  const executor = new OperationExecutor({
    backoff: { initialMs: 500, maxMs: 122_000 },
    clock,
    onReady: (socket) => {
      reconciler.reconcile(socket);
      settle();
    },
  });
  // onReady runs only once operations finish, after this line.
  const reconciler = new Reconciler({ dsw, executor, context, observer: status, clock, resyncMs: options.resyncMs ?? 3_600_000, onResync: options.onResync });
  t.after(async () => {
    reconciler.stop();
    await executor.stop();
  });
  const expectSettled = () => new Promise<void>((resolve) => (settle = resolve));
  /** Records the socket at `socket` as desired, at its current inode. */
  const appear = (socket: string) => dsw.addOrUpdate(socket, inodeOf(fs.lstatSync(socket, { bigint: true })));
  return { dsw, asw: context.asw, status, calls, executor, reconciler, expectSettled, appear };
}

test("with nothing desired and nothing registered, nothing happens (reconciler_test.go)", (t) => {
  const { asw, calls, reconciler } = setUp(t, tempDir(t));
  reconciler.start();
  reconciler.reconcileAll();
  assert.deepEqual([asw.plugins(), calls], [[], []]);
});

test("a desired socket is registered at once, with the desired inode, and its outcome recorded (reconciler_test.go)", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "a.sock");
  await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const { asw, status, calls, reconciler, expectSettled, appear } = setUp(t, dir);
  reconciler.start();
  const settled = expectSettled();
  appear(socket);
  await settled;
  assert.deepEqual(asw.plugins().map((p) => [p.socket, p.inode]), [[socket, inodeOf(fs.lstatSync(socket, { bigint: true }))]]);
  assert.deepEqual(calls, ["register a.sock"]);
  assert.deepEqual(status.plugins().map((p) => [p.state, p.attempts, p.name]), [["registered", 1, "acme.io/temp"]]);
});

test("a socket that leaves the desired state is unregistered without dialing (reconciler_test.go)", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "a.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const { dsw, asw, calls, reconciler, expectSettled, appear } = setUp(t, dir);
  reconciler.start();
  const settled = expectSettled();
  appear(socket);
  await settled;
  await fake.stop();
  dsw.remove(socket);
  assert.deepEqual(asw.plugins(), []);
  assert.deepEqual(calls, ["register a.sock", "deregister a.sock"]);
});

test("a new inode at the path unregisters the old plugin then registers the new one; the same inode changes nothing (reconciler_test.go; inode, not UUID)", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "a.sock");
  let fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  const { asw, calls, reconciler, expectSettled, appear } = setUp(t, dir);
  reconciler.start();
  let settled = expectSettled();
  appear(socket);
  await settled;
  const first = asw.get(socket)!.inode;
  appear(socket);
  await fake.stop();
  fake = await startTestPlugin(t, { socketPath: socket, info: sensor() });
  settled = expectSettled();
  appear(socket);
  await settled;
  assert.notEqual(asw.get(socket)!.inode, first);
  assert.deepEqual(calls, ["register a.sock", "deregister a.sock", "register a.sock"]);
  assert.equal(fake.notifications().length, 1);
});

test("a socket removed while its registration runs: the attempt is aborted and nothing is recorded", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "hang.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor(), hangGetInfo: true });
  const { dsw, asw, status, calls, executor, reconciler, expectSettled, appear } = setUp(t, dir);
  reconciler.start();
  appear(socket);
  await fake.waitForGetInfo();
  assert.equal(executor.isRunning(socket), true);
  const settled = expectSettled();
  dsw.remove(socket);
  await settled;
  assert.equal(executor.isRunning(socket), false);
  assert.equal(executor.inBackoff(socket), false, "an aborted attempt opens no backoff window");
  assert.deepEqual([asw.plugins(), calls, status.plugins()], [[], [], []]);
});

test("the periodic resync runs the watcher's rescan and a full compare, without polling in between", (t) => {
  const clock = manualClock();
  let rescans = 0;
  const dir = tempDir(t);
  const { asw, calls, reconciler } = setUp(t, dir, { clock, resyncMs: 10_000, onResync: () => rescans++ });
  reconciler.start();
  assert.equal(clock.pendingTimers(), 1, "one resync timer");
  // A plugin the desired state does not know (its removal event was lost).
  const socket = path.join(dir, "lost.sock");
  const registration = { socket, type: "acme.io/Sensor", name: "x", endpoint: socket, versions: [] };
  asw.add({ socket, inode: "9", registration, handler: { async validatePlugin() {}, async registerPlugin() {}, deregisterPlugin: () => void calls.push("deregister lost.sock") } });
  clock.advance(10_000);
  assert.equal(rescans, 1);
  assert.deepEqual(calls, ["deregister lost.sock"]);
  assert.equal(asw.plugins().length, 0);
  assert.equal(clock.pendingTimers(), 1, "re-armed for the next resync");
  reconciler.stop();
  assert.equal(clock.pendingTimers(), 0, "stop clears the resync timer");
});
