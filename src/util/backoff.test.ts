import assert from "node:assert/strict";
import { test } from "node:test";
import { BackoffCount, backoffDelay } from "./backoff.ts";

test("delays start at initialMs, double after each failure in a row and stop at maxMs; a success starts over", () => {
  const backoff = { initialMs: 500, maxMs: 122_000 };
  assert.deepEqual([1, 2, 3, 8, 9, 1000].map((failures) => backoffDelay(backoff, failures)), [500, 1000, 2000, 64_000, 122_000, 122_000]);
  const count = new BackoffCount(backoff);
  assert.equal(count.peek(), 500);
  assert.deepEqual([count.failed(), count.failed(), count.failed()], [500, 1000, 2000]);
  assert.equal(count.peek(), 4000);
  count.succeeded();
  assert.equal(count.failed(), 500);
});

test("a backoff given as a function is read at each failure, so a reloaded setting applies to the next delay", () => {
  let backoff = { initialMs: 100, maxMs: 1000 };
  const count = new BackoffCount(() => backoff);
  assert.equal(count.failed(), 100);
  backoff = { initialMs: 100, maxMs: 150 };
  assert.equal(count.failed(), 150);
});
