/**
 * The loader's bounds on untrusted policy files (issue 7, defects 4 and 7):
 * durations a timer can hold, aliases, size, nesting and the number of errors
 * listed, each refused with a located error and never a throw of another kind.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { MAX_TIMER_MS, parseDuration } from "./duration.ts";
import { MAX_REPORTED_ISSUES, PolicyError } from "./errors.ts";
import { loadPolicyFile, MAX_NESTING_DEPTH, MAX_POLICY_BYTES, MAX_YAML_NODES, MAX_YAML_TOKENS, parsePolicy } from "./load.ts";
import { located, minimal, rejection } from "../../test/support/policy-text.ts";

test("a duration above 2^31-1 ms is refused where it is written, one at the bound is kept", () => {
  const error = rejection(`${minimal}reconcile:\n  resync: 1000h\n  timeouts: { dial: 596h31m23.648s }\n`);
  assert.deepEqual(error.issues.map(located), [
    '5:11 reconcile.resync: expected a duration of at most 596h31m23.647s (2^31-1 ms, the longest timer), got "1000h"',
    '6:21 reconcile.timeouts.dial: expected a duration of at most 596h31m23.647s (2^31-1 ms, the longest timer), got "596h31m23.648s"',
  ]);
  assert.equal(parseDuration("596h31m23.647s"), MAX_TIMER_MS);
  const policy = parsePolicy(`${minimal}reconcile: { resync: 596h31m23.647s, backoff: { max: 596h } }\ndevicePlugins: { gracePeriod: 596h }\n`, "p.yaml");
  assert.equal(policy.reconcile.resyncMs, MAX_TIMER_MS);
  const huge = rejection(`${minimal}devicePlugins: { gracePeriod: 99999999999999999999h }\n`);
  assert.match(huge.issues[0]!.message, /^expected a duration of at most 596h31m23.647s/);
});

test("an alias without an anchor is a located YAML error", () => {
  const error = rejection("version: 1\nwatch: *nowhere\n");
  assert.deepEqual(error.issues.map(located), ["2:8 invalid YAML: alias *nowhere has no anchor &nowhere before it"]);
});

test("an alias bomb is refused at an alias, without expanding it", () => {
  const levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
  for (let i = 1; i < 9; i++) {
    const previous = String.fromCharCode(96 + i);
    levels.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill(`*${previous}`).join(", ")}]`);
  }
  const error = rejection(`${minimal}${levels.join("\n")}\n`);
  assert.equal(error.issues.length, 1);
  assert.match(located(error.issues[0]!), /^5:\d+ invalid YAML: aliases expand to more than 100 nodes/);
  // Modest aliases are still fine: one anchored list used twice.
  const policy = parsePolicy(
    "version: 1\nwatch:\n  - { path: /a, types: &t [CSIPlugin] }\n  - { path: /b, types: *t }\n",
    "p.yaml",
  );
  assert.deepEqual(policy.watch[1]!.types, ["CSIPlugin"]);
});

test("a file over 1 MiB is refused as a whole, unparsed; /dev/zero is not read at all", async () => {
  const big = `${minimal}# ${"x".repeat(MAX_POLICY_BYTES)}\n`;
  const error = rejection(big, "big.yaml");
  assert.equal(error.message, `big.yaml: expected a policy file of at most 1048576 bytes (1 MiB), got ${big.length} bytes`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ep-pol-"));
  try {
    const file = path.join(dir, "big.yaml");
    fs.writeFileSync(file, big);
    await assert.rejects(loadPolicyFile(file), (thrown: unknown) => {
      assert.ok(thrown instanceof PolicyError);
      assert.equal(thrown.message, `${file}: expected a policy file of at most 1048576 bytes (1 MiB), got a larger file`);
      return true;
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  if (fs.existsSync("/dev/zero")) await assert.rejects(loadPolicyFile("/dev/zero"), /\/dev\/zero: cannot read the policy file: expected a regular file, got a character device/);
});

test("an empty --config is named as such, not as a file at 0:0", async () => {
  await assert.rejects(loadPolicyFile(""), (error: unknown) => {
    assert.ok(error instanceof PolicyError);
    assert.equal(error.message, "--config: expected the path of a policy file, got an empty string");
    return true;
  });
});

test("collections nested too deep are refused at the first one past the bound, flow or block", () => {
  // The top-level mapping is the first level: `x: [[...` opens MAX_NESTING_DEPTH levels at its (MAX_NESTING_DEPTH - 1)th bracket.
  const brackets = MAX_NESTING_DEPTH;
  const error = rejection(`${minimal}x: ${"[".repeat(brackets)}${"]".repeat(brackets)}\n`);
  assert.deepEqual(error.issues.map(located), [`4:${3 + brackets} expected lists and mappings nested at most 64 deep, got deeper`]);
  // At the bound, the YAML is parsed (and the unknown key reported as usual).
  const atBound = rejection(`${minimal}x: ${"[".repeat(brackets - 1)}${"]".repeat(brackets - 1)}\n`);
  assert.match(atBound.issues[0]!.message, /got unknown key "x"/);
  // Block lists nest on one line too (`- - - x`): the composer would recurse once per level.
  const block = rejection(`${minimal}x:\n${"- ".repeat(100_000)}x\n`);
  assert.deepEqual(block.issues.map(located), [`5:${1 + 2 * (brackets - 1)} expected lists and mappings nested at most 64 deep, got deeper`]);
});

test("2000 unknown keys: the first 100 are listed in file order, the rest counted", () => {
  const keys = Array.from({ length: 2000 }, (_, index) => `unknown${index}: 1`).join("\n");
  const error = rejection(`${minimal}${keys}\n`, "many.yaml");
  assert.equal(error.issues.length, MAX_REPORTED_ISSUES);
  assert.equal(error.omitted, 2000 - MAX_REPORTED_ISSUES);
  assert.deepEqual(error.issues[0]!.path, "unknown0");
  assert.deepEqual(error.issues[99]!.line, 103);
  const lines = error.message.split("\n");
  assert.equal(lines.length, MAX_REPORTED_ISSUES + 1);
  assert.equal(lines.at(-1), "many.yaml: 1900 more errors not listed (only the first 100 are)");
});

test("a policy of more YAML nodes or tokens than the bounds is refused where it passes them, before it is composed", () => {
  // 150k list items (an 800 KB file under the size cap) once overflowed the stack collecting their errors.
  const items = rejection(`version: 1\nwatch:\n${"- 1\n".repeat(150_000)}`);
  const nodes = `expected a policy of at most ${MAX_YAML_NODES} YAML nodes (scalars, aliases, list items), got more`;
  // Two nodes per line ("- " and "1") after the 3 of the first two lines.
  assert.deepEqual(items.issues.map(located), [`${3 + Math.floor((MAX_YAML_NODES - 3) / 2)}:${(MAX_YAML_NODES - 3) % 2 === 0 ? 1 : 3} ${nodes}`]);
  const blankLines = rejection(`${minimal}${"\n".repeat(MAX_YAML_TOKENS)}`);
  assert.match(located(blankLines.issues[0]!), /^\d+:1 expected a policy of at most 100000 YAML tokens/);
  // Just under the node bound, a file is checked as usual.
  const most = Math.floor((MAX_YAML_NODES - 3) / 2);
  const under = rejection(`version: 1\nwatch:\n${"- 1\n".repeat(most)}`);
  assert.equal(under.omitted + under.issues.length, most);
});
