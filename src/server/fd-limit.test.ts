import { test } from "node:test";
import assert from "node:assert/strict";
import { descriptorsNeeded, parseDescriptorLimit } from "./fd-limit.ts";

test("the descriptor limit is read from the Max open files row of /proc/PID/limits", () => {
  const text = [
    "Limit                     Soft Limit           Hard Limit           Units     ",
    "Max processes             63704                63704                processes ",
    "Max open files            1024                 524288               files     ",
  ].join("\n");
  assert.deepEqual(parseDescriptorLimit(text), { soft: 1024, hard: 524288 });
  assert.deepEqual(parseDescriptorLimit("Max open files            unlimited            unlimited            files"), {
    soft: Infinity,
    hard: Infinity,
  });
  assert.equal(parseDescriptorLimit("Max processes 1 1 processes"), null);
  assert.equal(descriptorsNeeded({ listenerConnections: 192, maxPlugins: 100, attemptsAtOnce: 128 }), 192 + 200 + 256 + 64);
  assert.equal(descriptorsNeeded({ listenerConnections: 192, maxPlugins: 100, attemptsAtOnce: 128, processOwners: 1024 }), 192 + 200 + 256 + 1024 + 64);
});
