import assert from "node:assert/strict";
import { test } from "node:test";
import { manualClock } from "../../test/support/manual-clock.ts";
import { createLogger } from "../log/logger.ts";
import { DeviceEvents, RESOURCE_EVENT_BURST, RESOURCE_EVENT_REFILL_MS } from "./device-events.ts";
import type { DeviceChange } from "./types.ts";

function recorder(clock = manualClock(1_000_000)) {
  const events = new DeviceEvents(createLogger({ level: "error", write: () => {} }), clock);
  const seen: DeviceChange[] = [];
  let wake = () => {};
  events.subscribe((change) => {
    seen.push(change);
    wake();
  });
  const next = () => new Promise<void>((resolve) => (wake = resolve));
  return { events, seen, next, clock };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

test("a plugin registering and a device's health flapping are told at once, with no time passing", async () => {
  const { events, seen } = recorder();
  events.resourceChanged("acme.io/gpu", false, true);
  for (let list = 0; list < RESOURCE_EVENT_BURST - 1; list++) {
    events.resourceChanged("acme.io/gpu", false, false);
    await tick();
    assert.equal(seen.length, list + 2, `list ${list + 1} after the connection is told without waiting`);
  }
  events.stop();
});

test("a flood of device lists for one resource gives a bounded number of events, the last one after the flood", async () => {
  const { events, seen, next, clock } = recorder();
  for (let i = 0; i < 1000; i++) events.resourceChanged("acme.io/flood", false, false);
  events.resourceChanged("acme.io/quiet", false, false);
  await next();
  assert.deepEqual(seen.map((c) => c.kind === "resource" && c.resource).sort(), ["acme.io/flood", "acme.io/quiet"], "one event each for the burst");
  for (let burst = 0; burst < 50; burst++) {
    for (let i = 0; i < 100; i++) events.resourceChanged("acme.io/flood", false, false);
    await tick();
  }
  assert.equal(seen.length, 1 + RESOURCE_EVENT_BURST, "once its events are spent, the flood waits");
  clock.advance(RESOURCE_EVENT_REFILL_MS - 1);
  assert.equal(seen.length, 1 + RESOURCE_EVENT_BURST);
  clock.advance(1);
  assert.equal(seen.length, 2 + RESOURCE_EVENT_BURST, "then the rest goes out as one trailing event");
  assert.equal(clock.pendingTimers(), 0, "nothing is left to send");
  for (let i = 0; i < 100; i++) events.resourceChanged("acme.io/flood", false, false);
  await tick();
  assert.equal(seen.length, 2 + RESOURCE_EVENT_BURST, "the flood goes on: its next list waits again");
  events.stop();
  assert.equal(clock.pendingTimers(), 0, "stop leaves no timer");
});

test("a wall clock stepped back holds a resource's events back by one refill at most, not by the step", async () => {
  const clock = manualClock(1_000_000);
  const { events, seen } = recorder(clock);
  for (let i = 0; i < RESOURCE_EVENT_BURST; i++) events.resourceChanged("acme.io/gpu", false, true);
  assert.equal(seen.length, RESOURCE_EVENT_BURST);
  // The same events, now reading an hour earlier: the next event is a refill away, not an hour.
  clock.advance(-3_600_000);
  events.resourceChanged("acme.io/gpu", false, false);
  await tick();
  assert.equal(seen.length, RESOURCE_EVENT_BURST);
  clock.advance(RESOURCE_EVENT_REFILL_MS);
  assert.equal(seen.length, RESOURCE_EVENT_BURST + 1);
  events.stop();
});

test("connection changes and allocations go out at once, carrying any pending list change", () => {
  const { events, seen } = recorder();
  events.resourceChanged("acme.io/gpu", false, false);
  events.resourceChanged("acme.io/gpu", false, true);
  events.resourceChanged("acme.io/gpu", true, true);
  events.allocationChanged({ kind: "allocation", owner: "job", released: false, resources: ["acme.io/gpu"] });
  assert.deepEqual(seen, [
    { kind: "resource", resource: "acme.io/gpu", removed: false },
    { kind: "resource", resource: "acme.io/gpu", removed: true },
    { kind: "allocation", owner: "job", released: false, resources: ["acme.io/gpu"] },
  ]);
  events.stop();
});
