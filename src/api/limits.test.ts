import { test } from "node:test";
import assert from "node:assert/strict";
import { ApiRateLimiter, TokenBucket } from "./limits.ts";

test("a token bucket gives its burst at once, then refills at its rate and never beyond the burst", () => {
  let now = 0;
  const bucket = new TokenBucket({ perSecond: 100, burst: 10 }, () => now);
  const taken = () => Array.from({ length: 12 }, () => bucket.take()).filter(Boolean).length;
  assert.equal(taken(), 10);
  now += 25; // 2.5 tokens
  assert.equal(taken(), 2);
  now += 60_000;
  assert.equal(taken(), 10, "an hour idle still allows only the burst");
  assert.throws(() => new TokenBucket({ perSecond: 0, burst: 10 }), /positive rate/);
});

test("the API limiter keeps a bucket per connection and one for the whole socket", () => {
  let now = 0;
  const limiter = new ApiRateLimiter({ perConnection: { perSecond: 100, burst: 2 }, listener: { perSecond: 100, burst: 3 } }, () => now);
  const first = {};
  const second = {};
  assert.deepEqual([limiter.admit(first), limiter.admit(first), limiter.admit(first)], [true, true, false]);
  assert.equal(limiter.admit(second), true);
  assert.equal(limiter.admit(second), false, "the socket's bucket is empty now");
  now += 10;
  assert.equal(limiter.admit(second), true);
  assert.match(limiter.describe(), /100 requests\/s with bursts of 2 per connection, 100\/s for the whole socket/);
});
