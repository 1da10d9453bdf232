/**
 * A device plugin's ListAndWatch holds no memory per list, however long it
 * runs: a plugin flapping a device every 50 ms keeps its stream for months.
 * Connect 2.3.0 keeps every message of a streaming call until the call ends
 * (it races each read against the call's end); the soak showed the agent
 * growing 3 MiB a minute. The endpoint now ends and reopens its call every
 * LISTS_PER_CALL lists (src/devicemanager/endpoint.ts). Measured in a child
 * process with --expose-gc, after a full GC at both ends, the stream open.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

/** What 12,000 lists may leave behind: noise, far below the 17 MiB the 2.3.0 client kept. */
const MAX_GROWTH_BYTES = 3 * 1024 * 1024;

test("12,000 device lists read from one plugin leave the agent's heap where it was", async () => {
  const child = fileURLToPath(new URL("support/stream-memory-child.ts", import.meta.url));
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(process.execPath, ["--expose-gc", child], { timeout: 100_000 }, (error, out, err) => (error ? reject(new Error(`${error.message}\n${err}`)) : resolve(out)))
  );
  const result = JSON.parse(stdout) as { lists: number; measuredOver: number; grownBytes: number };
  assert.equal(result.lists, 14_000);
  assert.ok(result.grownBytes < MAX_GROWTH_BYTES, `the heap grew by ${(result.grownBytes / 1048576).toFixed(1)} MiB over ${result.measuredOver} lists`);
});
