import assert from "node:assert/strict";
import { test } from "node:test";
import { createLogger } from "../log/logger.ts";
import { DeviceEvents } from "./device-events.ts";
import type { DeviceChange } from "./types.ts";

function recorder() {
  const events = new DeviceEvents(createLogger({ level: "error", write: () => {} }));
  const seen: DeviceChange[] = [];
  let wake = () => {};
  events.subscribe((change) => {
    seen.push(change);
    wake();
  });
  const next = () => new Promise<void>((resolve) => (wake = resolve));
  return { events, seen, next };
}

test("a flood of device lists for one resource gives a bounded number of events, the last one after the flood", async () => {
  const { events, seen, next } = recorder();
  for (let i = 0; i < 1000; i++) events.resourceChanged("acme.io/flood", false, false);
  events.resourceChanged("acme.io/quiet", false, false);
  await next();
  await (seen.length < 2 ? next() : Promise.resolve());
  assert.deepEqual(seen.map((c) => c.kind === "resource" && c.resource).sort(), ["acme.io/flood", "acme.io/quiet"], "one event each for the burst");
  for (let i = 0; i < 1000; i++) events.resourceChanged("acme.io/flood", false, false);
  await next();
  assert.equal(seen.length, 3, "the next burst within the interval is one trailing event");
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
