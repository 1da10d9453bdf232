import { test } from "node:test";
import assert from "node:assert/strict";
import { durationFlag, outputFlag, parseCommandArgs, waitFlag } from "./args.ts";
import { UsageError } from "./command.ts";

const usage = (pattern: RegExp) => (error: unknown) => error instanceof UsageError && pattern.test(error.message);

test("flags parse strictly: an unknown flag or a stray argument is a usage error naming it", () => {
  const options = { config: { type: "string" }, watch: { type: "boolean" }, require: { type: "string", multiple: true } } as const;
  const parsed = parseCommandArgs("status", ["--config", "/p.yaml", "--watch", "--require", "a", "--require", "b"], options);
  assert.deepEqual({ ...parsed.values }, { config: "/p.yaml", watch: true, require: ["a", "b"] });
  assert.throws(() => parseCommandArgs("status", ["--colour"], options), usage(/^edgeplug status: .*--colour/));
  assert.throws(() => parseCommandArgs("status", ["extra"], options), usage(/^edgeplug status: unexpected argument "extra"$/));
  assert.deepEqual(parseCommandArgs("probe", ["/s.sock"], options, { positionals: true }).positionals, ["/s.sock"]);
});

test("a negative value is named as such, not as an ambiguous flag", () => {
  const options = { timeout: { type: "string" } } as const;
  assert.throws(() => parseCommandArgs("run", ["--timeout", "-1s"], options), usage(/--timeout: must not be negative, got "-1s"/));
});

test("waits are more than 0 and at most 2^31-1 ms; durations name the flag when they do not parse", () => {
  assert.equal(waitFlag("run", "timeout", "1m30s"), 90_000);
  assert.throws(() => waitFlag("run", "timeout", "0s"), usage(/--timeout: must be more than 0, got "0s"/));
  assert.throws(() => waitFlag("run", "timeout", "-5s"), usage(/--timeout: must not be negative/));
  assert.throws(() => waitFlag("run", "timeout", "1000h"), usage(/--timeout: must be at most 596h31m23\.647s \(2\^31-1 ms\), got "1000h"/));
  assert.throws(() => durationFlag("run", "timeout", "soon"), usage(/^edgeplug run: --timeout: /));
});

test("--output is text (the default) or json", () => {
  assert.deepEqual([outputFlag("status", undefined), outputFlag("status", "text"), outputFlag("status", "json")], ["text", "text", "json"]);
  assert.throws(() => outputFlag("status", "yaml"), usage(/--output: expected text or json, got "yaml"/));
});
