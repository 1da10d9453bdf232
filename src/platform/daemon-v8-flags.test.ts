import assert from "node:assert/strict";
import { test } from "node:test";
import { daemonV8Flags } from "./daemon-v8-flags.ts";

test("the daemon optimizes for size once started, unless --node-options turned that off", () => {
  assert.deepEqual(daemonV8Flags(["--disable-sigusr1", "--max-semi-space-size=2"]), ["--optimize-for-size"]);
  assert.deepEqual(daemonV8Flags(["--max-semi-space-size=2", "--no-optimize-for-size"]), []);
});
