import assert from "node:assert/strict";
import process from "node:process";
import { test } from "node:test";
import { manualClock } from "../../test/support/manual-clock.ts";
import { HeapReturn, runtimeFullCollection } from "./heap-return.ts";
import { runtimeName } from "./runtime.ts";

test("a burst of large garbage is collected once, a delay after its last part", () => {
  const clock = manualClock();
  let collections = 0;
  const heap = new HeapReturn({ clock, delayMs: 1000, minIntervalMs: 2000, collect: () => collections++ });
  heap.largeGarbage();
  clock.advance(600);
  heap.largeGarbage();
  clock.advance(999);
  assert.equal(collections, 0, "not while lists keep coming");
  clock.advance(1);
  assert.equal(collections, 1);
  assert.equal(clock.pendingTimers(), 0);
});

test("collections are at least the minimum interval apart, however often large garbage comes", () => {
  const clock = manualClock();
  const collectedAt: number[] = [];
  const heap = new HeapReturn({ clock, delayMs: 100, minIntervalMs: 2000, collect: () => collectedAt.push(clock.now()) });
  for (let i = 0; i < 50; i++) {
    heap.largeGarbage();
    clock.advance(150);
  }
  clock.advance(3000);
  assert.ok(collectedAt.length >= 3, `collected ${collectedAt.length} times`);
  for (let i = 1; i < collectedAt.length; i++) assert.ok(collectedAt[i]! - collectedAt[i - 1]! >= 2000, `collections at ${collectedAt.join(", ")}`);
});

test("stop cancels a collection not made yet, and later garbage sets no timer", () => {
  const clock = manualClock();
  let collections = 0;
  const heap = new HeapReturn({ clock, collect: () => collections++ });
  heap.largeGarbage();
  heap.stop();
  heap.largeGarbage();
  assert.equal(clock.pendingTimers(), 0);
  clock.advance(60_000);
  assert.equal(collections, 0);
});

test("where the runtime offers no collection, large garbage sets no timer", () => {
  const clock = manualClock();
  const heap = new HeapReturn({ clock, collect: null });
  heap.largeGarbage();
  assert.equal(clock.pendingTimers(), 0);
});

test("on Node the collection is V8's own and returns memory; on Deno there is none to call", () => {
  const collect = runtimeFullCollection();
  if (runtimeName() === "deno") {
    assert.equal(collect, null, "Deno's own reducer stays in charge");
    return;
  }
  assert.ok(collect, "Node lets the agent reach V8's full collection");
  let garbage: number[][] | null = Array.from({ length: 200_000 }, (_, i) => [i, i + 1]);
  assert.equal(garbage.length, 200_000);
  const holding = process.memoryUsage().heapUsed;
  garbage = null;
  collect();
  const after = process.memoryUsage().heapUsed;
  assert.ok(after < holding - 8 * 1024 * 1024, `heap ${holding} bytes before, ${after} after`);
  assert.equal(typeof (globalThis as { gc?: unknown }).gc, "undefined", "gc is not left on the agent's global object");
});
