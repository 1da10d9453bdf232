import assert from "node:assert/strict";
import { test } from "node:test";
import type { Clock } from "./operations.ts";
import { OperationExecutor } from "./operations.ts";
import { Reconciler } from "./reconciler.ts";
import { ActualStateOfWorld, DesiredStateOfWorld } from "./state.ts";
import type { DesiredSocket, RegisteredPlugin } from "./state.ts";
import type { PluginHandler } from "./types.ts";

const handler: PluginHandler = { async validatePlugin() {}, async registerPlugin() {}, deregisterPlugin() {} };

/** A reconciler whose register step records the plugin in the actual state, as a dummy handler would (A.7). */
function setUp(options: { register?: (desired: DesiredSocket, signal: AbortSignal) => Promise<void>; clock?: Clock } = {}) {
  const dsw = new DesiredStateOfWorld();
  const asw = new ActualStateOfWorld();
  const log: string[] = [];
  let settle = () => {};
  let settled = Promise.resolve();
  const expectSettled = () => (settled = new Promise<void>((resolve) => (settle = resolve)));
  let reconciler!: Reconciler;
  const executor = new OperationExecutor({
    backoff: { initialMs: 500, maxMs: 122_000 },
    clock: options.clock,
    onReady: (socket) => {
      reconciler.reconcile(socket);
      settle();
    },
  });
  reconciler = new Reconciler({
    dsw,
    asw,
    executor,
    resyncMs: 3_600_000,
    clock: options.clock,
    register:
      options.register ??
      (async (desired) => {
        log.push(`register ${desired.socket} ${desired.inode}`);
        asw.add(plugin(desired));
      }),
    unregister: (registered) => {
      log.push(`unregister ${registered.socket} ${registered.inode}`);
      asw.remove(registered.socket);
    },
  });
  return { dsw, asw, log, executor, reconciler, expectSettled, settled: () => settled };
}

function plugin(desired: DesiredSocket): RegisteredPlugin {
  const { socket, inode } = desired;
  return { socket, inode, handler, registration: { socket, type: "T", name: "n", endpoint: socket, versions: [] } };
}

test("with nothing desired and nothing registered, nothing happens (A.7)", async () => {
  const { dsw, asw, log, reconciler, executor } = setUp();
  reconciler.start();
  reconciler.reconcileAll();
  assert.deepEqual([dsw.sockets(), asw.plugins(), log], [[], [], []]);
  reconciler.stop();
  await executor.stop();
});

test("a desired socket is registered at once, with the desired inode (A.7)", async () => {
  const { dsw, asw, log, reconciler, executor, expectSettled } = setUp();
  reconciler.start();
  const settled = expectSettled();
  dsw.addOrUpdate("/r/a.sock", "1:2:3");
  await settled;
  assert.deepEqual(asw.plugins().map((p) => [p.socket, p.inode]), [["/r/a.sock", "1:2:3"]]);
  assert.deepEqual(log, ["register /r/a.sock 1:2:3"]);
  reconciler.stop();
  await executor.stop();
});

test("a socket that leaves the desired state is unregistered (A.7)", async () => {
  const { dsw, asw, log, reconciler, executor, expectSettled } = setUp();
  reconciler.start();
  const settled = expectSettled();
  dsw.addOrUpdate("/r/a.sock", "1:2:3");
  await settled;
  dsw.remove("/r/a.sock");
  assert.deepEqual(asw.plugins(), []);
  assert.deepEqual(log, ["register /r/a.sock 1:2:3", "unregister /r/a.sock 1:2:3"]);
  reconciler.stop();
  await executor.stop();
});

test("a new inode at the path unregisters the old plugin then registers the new one; the same inode changes nothing (A.7, SPEC)", async () => {
  const { dsw, asw, log, reconciler, executor, expectSettled } = setUp();
  reconciler.start();
  let settled = expectSettled();
  dsw.addOrUpdate("/r/a.sock", "1:2:3");
  await settled;
  dsw.addOrUpdate("/r/a.sock", "1:2:3");
  settled = expectSettled();
  dsw.addOrUpdate("/r/a.sock", "1:2:4");
  await settled;
  assert.deepEqual(asw.plugins().map((p) => p.inode), ["1:2:4"]);
  assert.deepEqual(log, ["register /r/a.sock 1:2:3", "unregister /r/a.sock 1:2:3", "register /r/a.sock 1:2:4"]);
  reconciler.stop();
  await executor.stop();
});

test("a socket removed while its registration runs: the registration is aborted, then the plugin is unregistered", async () => {
  let releaseRegister = () => {};
  let sawAbort = false;
  const fixture = setUp({
    register: async (desired, signal) => {
      fixture.asw.add(plugin(desired));
      await new Promise<void>((resolve) => {
        releaseRegister = resolve;
        signal.addEventListener("abort", () => ((sawAbort = true), resolve()));
      });
    },
  });
  const { dsw, asw, log, reconciler, executor, expectSettled } = fixture;
  reconciler.start();
  dsw.addOrUpdate("/r/a.sock", "1:2:3");
  assert.equal(executor.isRunning("/r/a.sock"), true);
  const settled = expectSettled();
  dsw.remove("/r/a.sock");
  assert.equal(log.length, 0, "no deregistration while the registration still runs");
  await settled;
  assert.equal(sawAbort, true);
  assert.deepEqual(asw.plugins(), []);
  assert.deepEqual(log, ["unregister /r/a.sock 1:2:3"]);
  releaseRegister();
  reconciler.stop();
  await executor.stop();
});

test("the periodic resync runs the watcher's rescan and a full compare, without polling in between", async () => {
  let now = 0;
  const timers = new Map<number, { at: number; callback: () => void }>();
  let nextId = 0;
  const clock: Clock = {
    now: () => now,
    setTimer(callback, ms) {
      const id = nextId++;
      timers.set(id, { at: now + ms, callback });
      return () => timers.delete(id);
    },
  };
  const dsw = new DesiredStateOfWorld();
  const asw = new ActualStateOfWorld();
  const executor = new OperationExecutor({ backoff: { initialMs: 500, maxMs: 1000 }, clock });
  const unregistered: string[] = [];
  let rescans = 0;
  const reconciler = new Reconciler({
    dsw,
    asw,
    executor,
    clock,
    resyncMs: 10_000,
    onResync: () => rescans++,
    register: async (desired) => asw.add(plugin(desired)),
    unregister: (registered) => {
      unregistered.push(registered.socket);
      asw.remove(registered.socket);
    },
  });
  reconciler.start();
  assert.equal(timers.size, 1, "one resync timer");
  // A plugin the desired state does not know (its removal event was lost).
  asw.add(plugin({ socket: "/r/lost.sock", inode: "9", discoveredAt: new Date(0) }));
  now = 10_000;
  for (const [id, timer] of [...timers]) if (timer.at <= now) (timers.delete(id), timer.callback());
  assert.equal(rescans, 1);
  assert.deepEqual(unregistered, ["/r/lost.sock"]);
  assert.equal(timers.size, 1, "re-armed for the next resync");
  reconciler.stop();
  assert.equal(timers.size, 0, "stop clears the resync timer");
  await executor.stop();
});
