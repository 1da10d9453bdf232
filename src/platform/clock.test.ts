import assert from "node:assert/strict";
import { test } from "node:test";
import { manualClock } from "../../test/support/manual-clock.ts";
import { pause } from "./clock.ts";

test("pause resolves true once its time has passed on the clock, and leaves no timer", async () => {
  const clock = manualClock();
  let elapsed: boolean | undefined;
  const paused = pause(clock, 50, new AbortController().signal).then((value) => (elapsed = value));
  clock.advance(49);
  await Promise.resolve();
  assert.equal(elapsed, undefined, "still waiting 1 ms early");
  clock.advance(1);
  await paused;
  assert.equal(elapsed, true);
  assert.equal(clock.pendingTimers(), 0);
});

test("pause resolves false as soon as its signal aborts, or at once when it was aborted already, and cancels its timer", async () => {
  const clock = manualClock();
  const controller = new AbortController();
  const paused = pause(clock, 60_000, controller.signal);
  controller.abort();
  assert.equal(await paused, false);
  assert.equal(clock.pendingTimers(), 0, "the timer is cancelled with the abort");
  assert.equal(await pause(clock, 60_000, controller.signal), false);
  assert.equal(clock.pendingTimers(), 0, "an aborted signal sets no timer");
});
