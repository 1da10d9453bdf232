import assert from "node:assert/strict";
import { test } from "node:test";
import { manualClock } from "../../test/support/manual-clock.ts";
import { createLogger } from "../log/logger.ts";
import { DeviceEvents, RESOURCE_EVENT_INTERVAL_MS } from "./device-events.ts";
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

test("a flood of device lists for one resource gives a bounded number of events, the last one after the flood", async () => {
  const { events, seen, next, clock } = recorder();
  for (let i = 0; i < 1000; i++) events.resourceChanged("acme.io/flood", false, false);
  events.resourceChanged("acme.io/quiet", false, false);
  await next();
  assert.deepEqual(seen.map((c) => c.kind === "resource" && c.resource).sort(), ["acme.io/flood", "acme.io/quiet"], "one event each for the burst");
  for (let i = 0; i < 1000; i++) events.resourceChanged("acme.io/flood", false, false);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(seen.length, 2, "the next burst within the interval waits for it");
  clock.advance(RESOURCE_EVENT_INTERVAL_MS - 1);
  assert.equal(seen.length, 2);
  clock.advance(1);
  assert.equal(seen.length, 3, "then goes out as one trailing event");
  events.stop();
  assert.equal(clock.pendingTimers(), 0, "stop leaves no timer");
});

test("a wall clock stepped back does not hold a resource's events back", async () => {
  const clock = manualClock(1_000_000);
  const { events, seen, next } = recorder(clock);
  events.resourceChanged("acme.io/gpu", false, true);
  assert.equal(seen.length, 1);
  const stepped = manualClock(1_000_000 - 3_600_000);
  // The same events, now reading an hour earlier: its interval is long over, not an hour away.
  Object.assign(clock, { now: stepped.now });
  events.resourceChanged("acme.io/gpu", false, false);
  await next();
  assert.equal(seen.length, 2);
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
