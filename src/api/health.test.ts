import { test } from "node:test";
import assert from "node:assert/strict";
import { manualClock } from "../../test/support/manual-clock.ts";
import { createHealth } from "./health.ts";

test("healthy while the reconciler beats; stale after three silent resync periods, with the reason", () => {
  const time = manualClock(1_000_000);
  const health = createHealth({ resyncMs: 10_000, heartbeats: ["reconciler"], now: time.now });
  assert.equal(health.liveness().ok, true);
  time.advance(25_000);
  health.heartbeat("reconciler");
  time.advance(30_000);
  assert.equal(health.liveness().ok, true, "exactly three periods is still within the bound");
  time.advance(1);
  const verdict = health.liveness();
  assert.equal(verdict.ok, false);
  assert.deepEqual(verdict.checks, [
    {
      name: "reconciler",
      ok: false,
      detail: "no heartbeat for 30.001s (bound 30s: 3 resync periods of 10s)",
    },
  ]);
  health.heartbeat("reconciler");
  assert.equal(health.liveness().ok, true, "one heartbeat makes it healthy again");
});

test("a declared source that never beats goes stale; one that stalls alone fails alone", () => {
  const time = manualClock(1_000_000);
  const health = createHealth({ resyncMs: 1_000, heartbeats: ["reconciler", "watcher"], now: time.now });
  time.advance(2_000);
  health.heartbeat("watcher");
  time.advance(1_500);
  assert.deepEqual(
    health.liveness().checks.map((check) => [check.name, check.ok]),
    [["reconciler", false], ["watcher", true]],
  );
});

test("a longer resync period after a reload widens the bound", () => {
  const time = manualClock(1_000_000);
  const health = createHealth({ resyncMs: 1_000, heartbeats: ["reconciler"], now: time.now });
  time.advance(5_000);
  assert.equal(health.liveness().ok, false);
  health.setResyncPeriod(10_000);
  assert.equal(health.liveness().ok, true);
  assert.throws(() => health.setResyncPeriod(0), /resync period must be a positive duration, got 0 ms/);
});

test("ready only when every gate is done, including gates added later", () => {
  const health = createHealth({ resyncMs: 10_000, gates: ["initial-walk", "api-serving"] });
  assert.deepEqual(health.readiness(), {
    ok: false,
    checks: [
      { name: "initial-walk", ok: false, detail: "not done" },
      { name: "api-serving", ok: false, detail: "not done" },
    ],
  });
  health.markDone("initial-walk");
  assert.equal(health.readiness().ok, false);
  health.markDone("api-serving");
  assert.equal(health.readiness().ok, true);
  health.addGate("checkpoint-restored");
  assert.equal(health.readiness().ok, false);
  health.markDone("checkpoint-restored");
  health.addGate("checkpoint-restored");
  assert.equal(health.readiness().ok, true, "re-adding a done gate keeps it done");
});

test("whenReady resolves when the last gate is done, whichever it is, and waits again for a gate added later", async () => {
  const health = createHealth({ resyncMs: 10_000, gates: ["initial-walk", "api-serving"] });
  const order: string[] = [];
  const first = health.whenReady().then(() => order.push("ready"));
  health.markDone("api-serving");
  await Promise.resolve();
  order.push("api-serving done");
  health.markDone("initial-walk");
  await first;
  assert.deepEqual(order, ["api-serving done", "ready"]);

  await health.whenReady(); // already ready: at once
  health.addGate("checkpoint-restored");
  let readyAgain = false;
  const second = health.whenReady().then(() => (readyAgain = true));
  await Promise.resolve();
  assert.equal(readyAgain, false, "a new gate is not done yet");
  health.markDone("checkpoint-restored");
  await second;
  assert.equal(readyAgain, true);
});

test("a wall-clock step (NTP's first sync on a board without a real-time clock) neither fails liveness nor hides a stall", () => {
  const realNow = Date.now;
  const booted = realNow();
  const year = 365 * 24 * 3_600_000;
  try {
    const health = createHealth({ resyncMs: 10_000, heartbeats: ["reconciler"] });
    health.heartbeat("reconciler");
    Date.now = () => booted + year;
    assert.equal(health.liveness().ok, true, "a year forward is not a year of silence");

    const stalling = createHealth({ resyncMs: 1, stalePeriods: 1, heartbeats: ["reconciler"] });
    stalling.heartbeat("reconciler");
    Date.now = () => booted - year;
    const beatAt = performance.now();
    while (performance.now() < beatAt + 3) {
      // 3 ms of silence, past the 1 ms bound
    }
    assert.equal(stalling.liveness().ok, false, "a year back does not hide a silent loop");
  } finally {
    Date.now = realNow;
  }
});
