import { test } from "node:test";
import assert from "node:assert/strict";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { AllocateRequestSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { MAX_CONTAINER_LENGTH, MAX_OWNER_LENGTH, MAX_RESOURCES_PER_REQUEST } from "../devicemanager/allocation.ts";
import { ALLOCATION_REQUEST_MAX_BYTES, ApiRateLimiter, TokenBucket } from "./limits.ts";

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

test("the largest Allocate request that can be granted stays under half the allocation request limit, as protobuf and as JSON", () => {
  // Three bytes a character in UTF-8 and six as a JSON \u escape: the widest an owner and a container can be.
  const wide = (length: number) => "\u20ac".repeat(length);
  // Extended resource names are ASCII; 316 characters is checkRequest's bound on them.
  const resource = (index: number) => `${"r".repeat(308)}/${String(index).padStart(7, "0")}`;
  const request = create(AllocateRequestSchema, {
    owner: wide(MAX_OWNER_LENGTH),
    container: wide(MAX_CONTAINER_LENGTH),
    resources: Array.from({ length: MAX_RESOURCES_PER_REQUEST }, (_, index) => ({ resource: resource(index), count: 0xffff_ffff })),
  });
  assert.equal(request.resources[0]!.resource.length, 316);
  const escapedJson = toJsonString(AllocateRequestSchema, request).replaceAll("\u20ac", "\\u20ac");
  for (
    const [encoding, bytes] of [
      ["protobuf", toBinary(AllocateRequestSchema, request).length],
      ["JSON, escaped", Buffer.byteLength(escapedJson)],
    ] as const
  ) {
    assert.ok(bytes * 2 < ALLOCATION_REQUEST_MAX_BYTES, `${encoding}: ${bytes} bytes`);
  }
});
