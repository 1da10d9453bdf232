/**
 * The fleet link's event queue: in order, at most 1,000 waiting, the oldest
 * unsent dropped for one gap that counts them and says where they were;
 * unacknowledged events sent again after a reconnect.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { EventQueue, gapPayload, MAX_QUEUED_EVENTS } from "./event-queue.ts";

test("past the bound the oldest unsent events become one gap, before the newest, which stay in order", () => {
  let drops = 0;
  const queue = new EventQueue(() => (drops += 1));
  for (let sequence = 1; sequence <= MAX_QUEUED_EVENTS + 250; sequence++) queue.add(sequence, `{"sequence":${sequence}}`);
  assert.equal(drops, 250);
  assert.equal(queue.waiting, MAX_QUEUED_EVENTS);
  const sent = queue.nextToSend(Number.MAX_SAFE_INTEGER);
  const [gap, first] = sent;
  assert.equal(gap!.payload, null);
  assert.deepEqual(JSON.parse(gapPayload(gap!, new Date(0))), { sequence: 1, time: "1970-01-01T00:00:00.000Z", kind: "gap", dropped: 250 });
  assert.equal(first!.sequence, 251, "the next event follows the gap's sequence + dropped");
  assert.deepEqual(sent.slice(1).map((entry) => entry.sequence), Array.from({ length: MAX_QUEUED_EVENTS }, (_, i) => 251 + i));
});

test("a window of unacknowledged events; what was not acknowledged is sent again after a reconnect, in order", () => {
  const queue = new EventQueue(() => assert.fail("nothing is dropped"));
  for (let sequence = 1; sequence <= 5; sequence++) queue.add(sequence, `{"sequence":${sequence}}`);
  const window = queue.nextToSend(2);
  assert.deepEqual(window.map((entry) => entry.sequence), [1, 2]);
  assert.deepEqual(queue.nextToSend(2), [], "the window is full");
  queue.settle(window[0]!, true);
  assert.deepEqual(queue.nextToSend(2).map((entry) => entry.sequence), [3]);
  queue.resend();
  assert.deepEqual(queue.nextToSend(10).map((entry) => entry.sequence), [2, 3, 4, 5]);
  assert.equal(queue.waiting, 4);
});

test("events missed without a count make a gap whose dropped is null", () => {
  const queue = new EventQueue(() => assert.fail("nothing counted"));
  queue.addUnknownGap(7);
  assert.equal(JSON.parse(gapPayload(queue.nextToSend(1)[0]!, new Date(0))).dropped, null);
});

test("an event the broker refuses is dropped and counted; one over the payload bound is never queued", () => {
  let drops = 0;
  const queue = new EventQueue(() => (drops += 1));
  queue.add(1, "{}");
  queue.settle(queue.nextToSend(1)[0]!, false);
  assert.equal(drops, 1);
  assert.equal(queue.waiting, 0);
  queue.add(2, "x".repeat(4 * 1024 * 1024 + 1));
  assert.equal(drops, 2);
  assert.equal(queue.waiting, 0);
  assert.equal(queue.nextToSend(1)[0]!.payload, null, "a gap stands for it");
});
