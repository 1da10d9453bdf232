import { test } from "node:test";
import assert from "node:assert/strict";
import { DURATION_PATTERN, formatDuration, isDuration, parseDuration } from "./duration.ts";

test("parses Go durations into milliseconds", () => {
  const cases: [string, number][] = [
    ["500ms", 500],
    ["10s", 10_000],
    ["2m2s", 122_000],
    ["1h30m", 5_400_000],
    ["1h0m0s", 3_600_000],
    ["1.5s", 1500],
    [".5s", 500],
    ["1.s", 1000],
    ["1us", 0.001],
    ["1µs", 0.001],
    ["250ns", 0.00025],
    ["0", 0],
    ["0s", 0],
    ["1m1m", 120_000],
  ];
  for (const [text, ms] of cases) {
    assert.ok(Math.abs(parseDuration(text) - ms) < 1e-9, `${text}: ${parseDuration(text)} != ${ms}`);
    assert.equal(isDuration(text), true, text);
  }
});

test("rejects what Go's time.ParseDuration rejects (and signs), naming the text", () => {
  for (const text of ["", "10", "fast", "1d", "s", "1 s", " 1s", "1s ", "1S", "-1s", "+1s", ".s", "1.5", "1sms"]) {
    assert.equal(isDuration(text), false, JSON.stringify(text));
    assert.throws(() => parseDuration(text), (error: unknown) => {
      assert.ok(error instanceof RangeError);
      assert.equal(error.message, `expected a duration like "30s", got ${JSON.stringify(text)}`);
      return true;
    });
  }
});

test("DURATION_PATTERN accepts exactly what parseDuration accepts, except the bare 0", () => {
  const pattern = new RegExp(DURATION_PATTERN, "u");
  for (const text of ["500ms", "2m2s", "1.5h", "3µs", "0s"]) assert.ok(pattern.test(text), text);
  for (const text of ["0", "fast", "10", "-1s", "1s!"]) assert.ok(!pattern.test(text), text);
});

test("formats milliseconds as Go prints a time.Duration", () => {
  const cases: [number, string][] = [
    [0, "0s"],
    [500, "500ms"],
    [1500, "1.5s"],
    [10_000, "10s"],
    [90_000, "1m30s"],
    [122_000, "2m2s"],
    [300_000, "5m0s"],
    [3_600_000, "1h0m0s"],
    [5_430_500, "1h30m30.5s"],
  ];
  for (const [ms, text] of cases) assert.equal(formatDuration(ms), text, String(ms));
});

test("format then parse gives the same duration back", () => {
  for (const ms of [1, 999, 1000, 59_999, 60_000, 122_000, 86_400_000, 3_723_456]) {
    assert.equal(parseDuration(formatDuration(ms)), ms, String(ms));
  }
});
