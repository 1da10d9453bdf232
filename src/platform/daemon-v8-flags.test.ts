import assert from "node:assert/strict";
import { test } from "node:test";
import { daemonV8Flags } from "./daemon-v8-flags.ts";

test("the daemon limits heap growth once started, unless --node-options set that flag itself", () => {
  assert.deepEqual(daemonV8Flags(["--disable-sigusr1", "--max-semi-space-size=2"]), ["--heap-growing-percent=10"]);
  assert.deepEqual(daemonV8Flags(["--max-semi-space-size=2", "--heap-growing-percent=0"]), []);
  assert.deepEqual(daemonV8Flags(["--heap_growing_percent=50"]), [], "V8 takes either spelling");
});
