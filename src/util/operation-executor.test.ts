import assert from "node:assert/strict";
import { test } from "node:test";
import type { Clock } from "../platform/clock.ts";
import type { OperationResult } from "./operation-executor.ts";
import { OperationExecutor } from "./operation-executor.ts";
import { manualClock } from "../../test/support/manual-clock.ts";

/** A promise the test settles by hand. */
function gate() {
  let open!: () => void;
  let fail!: (error: Error) => void;
  const promise = new Promise<void>((resolve, reject) => ((open = resolve), (fail = reject)));
  return { promise, open, fail };
}

/** Resolves after `executor`'s onReady fired for `key`. */
function readySignals() {
  const waiters: { key: string; resolve: () => void }[] = [];
  return {
    onReady(key: string) {
      for (const waiter of waiters.filter((w) => w.key === key)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    },
    next: (key: string) => new Promise<void>((resolve) => waiters.push({ key, resolve })),
  };
}

const backoff = { initialMs: 500, maxMs: 122_000 };
const succeeded: OperationResult = "succeeded";
const failed: OperationResult = "failed";

test("operations on two different sockets run at the same time (operation_executor_test.go)", async () => {
  const executor = new OperationExecutor({ backoff });
  const started: string[] = [];
  const release = gate();
  for (const key of ["/r/a.sock", "/r/b.sock"]) {
    assert.equal(
      executor.run(key, async () => {
        started.push(key);
        await release.promise;
        return succeeded;
      }),
      "started",
    );
  }
  await Promise.resolve();
  await Promise.resolve();
  assert.deepEqual(started.sort(), ["/r/a.sock", "/r/b.sock"], "both started while neither finished");
  release.open();
  await executor.stop();
});

test("a second operation on the same socket is refused while the first runs, and may start once it ended (operation_executor_test.go)", async () => {
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, onReady: ready.onReady });
  const release = gate();
  let runs = 0;
  const operation = async () => {
    runs++;
    await release.promise;
    return succeeded;
  };
  assert.equal(executor.run("/r/a.sock", operation), "started");
  assert.equal(executor.run("/r/a.sock", operation), "already-running");
  assert.equal(executor.isRunning("/r/a.sock"), true);
  const ended = ready.next("/r/a.sock");
  release.open();
  await ended;
  assert.equal(runs, 1);
  assert.equal(executor.isRunning("/r/a.sock"), false);
  assert.equal(
    executor.run("/r/a.sock", async () => {
      runs++;
      return succeeded;
    }),
    "started",
  );
  await executor.stop();
  assert.equal(runs, 2);
});

test("failures back off per socket: 500 ms, doubling, capped at the maximum; success resets (goroutinemap)", async () => {
  const clock = manualClock();
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, clock, onReady: ready.onReady });
  const key = "/r/a.sock";
  /** Runs `operation` as soon as the executor accepts it; returns how long the clock had to move first. */
  const runWhenAllowed = async (operation: () => Promise<OperationResult>) => {
    let waited = 0;
    while (executor.run(key, operation) === "backoff") {
      clock.advance(100);
      waited += 100;
    }
    await ready.next(key);
    return waited;
  };
  const failing = async () => failed;
  const windows: number[] = [];
  for (let attempt = 0; attempt < 11; attempt++) windows.push(await runWhenAllowed(failing));
  assert.deepEqual(windows, [0, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 122000, 122000]);

  assert.equal(await runWhenAllowed(async () => succeeded), 122000);
  assert.equal(executor.inBackoff(key), false, "success clears the window");
  assert.equal(await runWhenAllowed(failing), 0);
  assert.equal(await runWhenAllowed(failing), 500, "after a success the window starts again at 500 ms");
  await executor.stop();
});

test("a closing backoff window wakes the owner through one timer, without polling", async () => {
  const clock = manualClock();
  const woken: string[] = [];
  const executor = new OperationExecutor({ backoff, clock, onReady: (key) => woken.push(key) });
  executor.run("/r/a.sock", async () => failed);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(woken, ["/r/a.sock"], "woken once when the operation ended");
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(499);
  assert.deepEqual(woken, ["/r/a.sock"]);
  clock.advance(1);
  assert.deepEqual(woken, ["/r/a.sock", "/r/a.sock"], "woken again when the window closed");
  assert.equal(clock.pendingTimers(), 0);
  await executor.stop();
});

test("resetBackoff lets the next operation start at once", async () => {
  const clock = manualClock();
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, clock, onReady: ready.onReady });
  const ended = ready.next("/r/a.sock");
  executor.run("/r/a.sock", async () => failed);
  await ended;
  assert.equal(executor.inBackoff("/r/a.sock"), true);
  executor.resetBackoff("/r/a.sock");
  assert.equal(clock.pendingTimers(), 0, "the retry timer is cleared");
  assert.equal(executor.run("/r/a.sock", async () => succeeded), "started");
  await executor.stop();
});

test("a failing or hanging socket never delays another one", async () => {
  const clock = manualClock();
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, clock, onReady: ready.onReady });
  const badEnded = ready.next("/r/bad.sock");
  executor.run("/r/bad.sock", async () => failed);
  executor.run("/r/hang.sock", (signal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))));
  await badEnded;
  const good = ready.next("/r/good.sock");
  assert.equal(executor.run("/r/good.sock", async () => succeeded), "started");
  await good;
  assert.equal(executor.inBackoff("/r/good.sock"), false);
  assert.equal(executor.isRunning("/r/hang.sock"), true);
  await executor.stop();
});

test("abort fires the operation's signal and an aborted operation opens no backoff window", async () => {
  const clock = manualClock();
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, clock, onReady: ready.onReady });
  let reason: unknown;
  const ended = ready.next("/r/a.sock");
  executor.run("/r/a.sock", (signal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(reason = signal.reason))));
  executor.abort("/r/a.sock");
  await ended;
  assert.match(String(reason), /operation aborted/);
  assert.equal(executor.inBackoff("/r/a.sock"), false);
  assert.equal(clock.pendingTimers(), 0);
  await executor.stop();
});

test("an aborted outcome leaves the backoff window as it was", async () => {
  const clock = manualClock();
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, clock, onReady: ready.onReady });
  let ended = ready.next("/r/a.sock");
  executor.run("/r/a.sock", async () => failed);
  await ended;
  clock.advance(500);
  ended = ready.next("/r/a.sock");
  assert.equal(executor.run("/r/a.sock", async () => "aborted" as const), "started");
  await ended;
  assert.equal(executor.inBackoff("/r/a.sock"), false, "no new window");
  ended = ready.next("/r/a.sock");
  executor.run("/r/a.sock", async () => failed);
  await ended;
  clock.advance(999);
  assert.equal(executor.inBackoff("/r/a.sock"), true, "the failure before the aborted attempt still counts: the window doubled to 1 s");
  await executor.stop();
});

test("an operation that throws, at once or later, is a failure, not a crash", async () => {
  const ready = readySignals();
  const executor = new OperationExecutor({ backoff, onReady: ready.onReady });
  const ended = ready.next("/r/a.sock");
  executor.run("/r/a.sock", () => {
    throw new Error("boom");
  });
  await ended;
  assert.equal(executor.inBackoff("/r/a.sock"), true);
  const rejected = ready.next("/r/b.sock");
  executor.run("/r/b.sock", async () => {
    throw new Error("boom");
  });
  await rejected;
  assert.equal(executor.inBackoff("/r/b.sock"), true);
  await executor.stop();
});

test("stop aborts running operations, clears retry timers, refuses new ones and is idempotent", async () => {
  const clock = manualClock();
  const executor = new OperationExecutor({ backoff, clock });
  executor.run("/r/fail.sock", async () => failed);
  await new Promise((resolve) => setImmediate(resolve));
  let aborted = false;
  executor.run("/r/hang.sock", (signal) =>
    new Promise((_, reject) =>
      signal.addEventListener("abort", () => {
        aborted = true;
        reject(signal.reason);
      })
    ));
  assert.equal(clock.pendingTimers(), 1);
  await executor.stop();
  assert.equal(aborted, true);
  assert.equal(clock.pendingTimers(), 0);
  assert.equal(executor.run("/r/new.sock", async () => succeeded), "stopped");
  await executor.stop();
});

test("stop gives an operation that ignores its signal a bounded time", async () => {
  const clock = manualClock();
  const executor = new OperationExecutor({ backoff, clock });
  const never = gate();
  executor.run("/r/stubborn.sock", () => never.promise.then(() => succeeded));
  let stopped = false;
  const stopping = executor.stop(50).then(() => (stopped = true));
  clock.advance(49);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(stopped, false, "it waits for the operation within the grace");
  clock.advance(1);
  await stopping;
  assert.equal(clock.pendingTimers(), 0);
  never.open();
});

test("the retry timer closes the window even when it fires before the clock reaches the retry time", async () => {
  // Node's timers may fire a millisecond before Date.now() reaches the deadline.
  let now = 0;
  let fire = () => {};
  const clock: Clock = {
    now: () => now,
    setTimer(callback) {
      fire = callback;
      return () => {};
    },
  };
  const woken: string[] = [];
  const executor = new OperationExecutor({ backoff, clock, onReady: (key) => woken.push(key) });
  executor.run("/r/a.sock", async () => failed);
  await new Promise((resolve) => setImmediate(resolve));
  now = 499;
  fire();
  assert.deepEqual(woken, ["/r/a.sock", "/r/a.sock"]);
  assert.equal(executor.run("/r/a.sock", async () => succeeded), "started", "woken up and allowed to run");
  await executor.stop();
});

test("at most maxRunning operations run; the rest wait in line, first attempts ahead of retries", async () => {
  const clock = manualClock();
  const gates = new Map([["/r/a.sock", gate()], ["/r/b.sock", gate()], ["/r/new.sock", gate()]]);
  const started: string[] = [];
  const done = new Set<string>();
  const operation = (key: string) => async () => {
    started.push(key);
    await gates.get(key)?.promise;
    done.add(key);
    return succeeded;
  };
  const woken: string[] = [];
  // The owner runs a woken key again until it registered, as the reconciler does.
  const executor: OperationExecutor = new OperationExecutor({
    backoff,
    clock,
    maxRunning: 2,
    onReady: (key) => {
      woken.push(key);
      if (!done.has(key)) executor.run(key, operation(key));
    },
  });
  assert.equal(executor.run("/r/a.sock", operation("/r/a.sock")), "started");
  assert.equal(executor.run("/r/b.sock", operation("/r/b.sock")), "started");
  executor.backOff("/r/retry.sock");
  clock.advance(500);
  assert.deepEqual(woken, ["/r/retry.sock"]);
  assert.equal(executor.isRunning("/r/retry.sock"), false, "woken at the end of its window, it found both slots taken");
  assert.equal(executor.run("/r/new.sock", operation("/r/new.sock")), "waiting");
  assert.equal(executor.waiting, 2);

  gates.get("/r/a.sock")!.open();
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(woken, ["/r/retry.sock", "/r/a.sock", "/r/new.sock"], "the freed slot goes to the socket never tried before");
  assert.equal(executor.isRunning("/r/new.sock"), true);
  assert.equal(executor.isRunning("/r/retry.sock"), false, "the retry still waits: both slots are taken");

  gates.get("/r/b.sock")!.open();
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(started, ["/r/a.sock", "/r/b.sock", "/r/new.sock", "/r/retry.sock"], "then the retry runs");
  assert.equal(executor.waiting, 0);
  gates.get("/r/new.sock")!.open();
  await executor.stop();
});
