/**
 * The policy loader's errors: every bad fixture rejected with exactly its
 * `# expect:` issues, each located at a line and column (docs/policy.md).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import console from "node:console";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PolicyError } from "./errors.ts";
import { loadPolicyFile } from "./load.ts";
import { located, minimal, rejection } from "../../test/support/policy-text.ts";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const badDir = path.join(repoRoot, "test", "fixtures", "policies", "bad");

// lines: exactly those issues, in that order, must be reported.
const badFixtures = fs.readdirSync(badDir).filter((name) => name.endsWith(".yaml")).sort();

test("there are at least 15 distinct bad policies", () => {
  assert.ok(badFixtures.length >= 15, `only ${badFixtures.length} fixtures in ${badDir}`);
  const bodies = new Set(badFixtures.map((name) => fs.readFileSync(path.join(badDir, name), "utf8")));
  assert.equal(bodies.size, badFixtures.length);
});

for (const name of badFixtures) {
  test(`bad policy ${name} is rejected with each error located`, () => {
    const text = fs.readFileSync(path.join(badDir, name), "utf8");
    const expected = [...text.matchAll(/^# expect: (.*)$/gm)].map((match) => match[1]);
    assert.ok(expected.length > 0, `${name} has no "# expect:" line`);
    const error = rejection(text, name);
    assert.deepEqual(error.issues.map(located), expected);
    for (const issue of error.issues) {
      assert.equal(issue.file, name);
      assert.match(issue.message, /expected .+, got .+|invalid YAML: .+/);
    }
  });
}

test("a policy with three errors reports all three, each located, in file order", () => {
  const error = rejection(fs.readFileSync(path.join(badDir, "three-errors.yaml"), "utf8"), "/etc/edgeplug/policy.yaml");
  assert.deepEqual(
    error.issues.map(({ line, column, path }) => ({ line, column, path })),
    [
      { line: 4, column: 16, path: "watch[0].recursive" },
      { line: 6, column: 16, path: "devicePlugins.gracePeriod" },
      { line: 9, column: 3, path: "log.colour" },
    ],
  );
  assert.equal(
    error.message,
    [
      '/etc/edgeplug/policy.yaml:4:16: watch[0].recursive: expected true or false, got "maybe"',
      '/etc/edgeplug/policy.yaml:6:16: devicePlugins.gracePeriod: expected a duration like "30s", got "5 minutes"',
      '/etc/edgeplug/policy.yaml:9:3: log.colour: expected one of the keys level, format, got unknown key "colour"',
    ].join("\n"),
  );
});

test("errors are reported in the FILE:LINE:COLUMN: key.path: expected ..., got ... form", () => {
  const text = `${minimal}reconcile:\n  backoff:\n    initial: 1s\n    max: fast\n`;
  assert.equal(rejection(text).message, 'policy.yaml:7:10: reconcile.backoff.max: expected a duration like "30s", got "fast"');
});

test("an unknown key is located at the key, a wrong value at the value", () => {
  const error = rejection(`${minimal}security:\n  maxPlugin: 10\n  maxDevicesPerResource: lots\n`);
  assert.deepEqual(
    error.issues.map(({ line, column, path }) => ({ line, column, path })),
    [
      { line: 5, column: 3, path: "security.maxPlugin" },
      { line: 6, column: 26, path: "security.maxDevicesPerResource" },
    ],
  );
  assert.match(error.issues[0]!.message, /\(did you mean "maxPlugins"\?\)$/);
});

test("one wrong value is reported once even when it breaks two schema rules", () => {
  const error = rejection(`${minimal}log:\n  level: 3\n`);
  assert.deepEqual(error.issues.map(located), ["5:10 log.level: expected one of debug, info, warn, error, got 3"]);
});

test("a handler type with a key path containing dots and slashes is named verbatim", () => {
  const error = rejection(`${minimal}handlers:\n  acme.io/Sensor:\n    kind: generic\n    versions: v1\n`);
  assert.deepEqual(error.issues.map(located), [
    '7:15 handlers.acme.io/Sensor.versions: expected a non-empty list of version strings, got "v1"',
  ]);
});

test("a file that cannot be read is a PolicyError of the whole file that names the path and says cannot read", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ep-pol-"));
  const missing = path.join(dir, "nope.yaml");
  try {
    await assert.rejects(loadPolicyFile(missing), (error: unknown) => {
      assert.ok(error instanceof PolicyError);
      assert.equal(error.issues.length, 1);
      assert.equal(error.issues[0]!.file, missing);
      assert.equal(error.issues[0]!.line, 0);
      assert.equal(error.issues[0]!.column, 0);
      assert.ok(error.message.startsWith(`${missing}: cannot read the policy file`), error.message);
      return true;
    });
    await assert.rejects(loadPolicyFile(dir), (error: unknown) => error instanceof PolicyError && /cannot read/.test(error.message));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("handlers declared: built-ins not listed are not available to types", () => {
  const error = rejection(
    `${minimal}    types: [CSIPlugin]\nhandlers:\n  DevicePlugin: {}\n`,
  );
  assert.deepEqual(error.issues.map(located), ['4:13 watch[0].types[0]: expected a declared handler type (DevicePlugin), got "CSIPlugin"']);
});

test("backoff.max below the default initial is located at max", () => {
  const error = rejection(`${minimal}reconcile:\n  backoff:\n    max: 100ms\n`);
  assert.deepEqual(error.issues.map(located), [
    '6:10 reconcile.backoff.max: expected at least reconcile.backoff.initial (500ms), got "100ms"',
  ]);
});

test("an empty file and a file of comments are rejected at 1:1", () => {
  for (const text of ["", "# nothing here\n"]) {
    assert.deepEqual(rejection(text).issues.map(located), [
      "1:1 expected a mapping (the policy) with at least version and watch, got an empty document",
    ]);
  }
});

test("every YAML syntax error is reported, located", () => {
  const error = rejection("version: 1\nwatch:\n\t- path: /x\nlog: {level: info\n");
  assert.ok(error.issues.length >= 2, error.message);
  for (const issue of error.issues) {
    assert.ok(issue.line >= 3, error.message);
    assert.match(issue.message, /^invalid YAML: /);
  }
  assert.match(error.message, /^policy\.yaml:3:1: invalid YAML: Tabs are not allowed as indentation/);
});

test("a list used as a key is an error, located, and the yaml package prints nothing to stderr", () => {
  const printed: unknown[] = [];
  const { emitWarning } = process;
  const { warn } = console;
  process.emitWarning = ((warning: unknown) => void printed.push(warning)) as typeof process.emitWarning;
  console.warn = (...args: unknown[]) => void printed.push(args);
  try {
    const error = rejection(`${minimal}handlers:\n  ? [a, b]\n  : { kind: generic }\n`);
    assert.deepEqual(error.issues.map(located), ["5:5 handlers: expected a plain key, got a list as a key"]);
  } finally {
    process.emitWarning = emitWarning;
    console.warn = warn;
  }
  assert.deepEqual(printed, []);
});

test("an unknown key gets a suggestion only when a known key is close", () => {
  const close = rejection(`${minimal}reconcile: { resycn: 5s }\n`).issues[0]!.message;
  assert.match(close, /got unknown key "resycn" \(did you mean "resync"\?\)$/);
  const far = rejection(`${minimal}a: 1\n`).issues[0]!.message;
  assert.match(far, /got unknown key "a"$/);
});
