import assert from "node:assert/strict";
import { test } from "node:test";
import { createLogger } from "../log/logger.ts";
import { FAILURE_LINES_PER_WINDOW, FAILURE_WINDOW_MS, HandlerFailureLog } from "./node-handler.ts";

test("handler failures are one JSON line each, at most FAILURE_LINES_PER_WINDOW a window; the next window's first line counts those left out", () => {
  const lines: string[] = [];
  let now = 0;
  const failures = new HandlerFailureLog(createLogger({ write: (line) => lines.push(line) }), () => now);
  const error = new Error("write ECANCELED");
  error.stack = "Error: write ECANCELED\n    at afterWriteDispatched (node:internal/stream_base_commons:159:15)";
  for (let i = 0; i < FAILURE_LINES_PER_WINDOW + 5; i++) failures.failed("edgeplug.v1.Agent/WatchEvents", error);
  assert.equal(lines.length, FAILURE_LINES_PER_WINDOW);
  now += FAILURE_WINDOW_MS;
  failures.failed("edgeplug.v1.Agent/WatchEvents", error);
  assert.equal(lines.length, FAILURE_LINES_PER_WINDOW + 1);
  for (const line of lines) assert.equal(line.split("\n").length, 2, `one line: ${line}`);
  const last = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
  assert.deepEqual([last.msg, last.rpc, last.error, last.notLogged], ["rpc handler failed", "edgeplug.v1.Agent/WatchEvents", "write ECANCELED", 5]);
});
