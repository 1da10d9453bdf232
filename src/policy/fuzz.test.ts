/**
 * Fuzz test of the policy loader (issue 7): thousands of random and mutated
 * policies, aliases, anchors, tags and broken syntax included, each of which
 * must yield either a valid policy or a PolicyError whose every issue is
 * located (FILE:LINE:COLUMN, or the whole file) and worded; never another
 * throw, never a hang. The seed is fixed, so a failure names an input that
 * reproduces. Time bound: each input must be decided within
 * PER_INPUT_BOUND_MS (parsing one takes about a millisecond, a 1 MiB one
 * at most about 200 ms of CPU; the bound only catches a hang or a blow-up on
 * a loaded machine, it measures nothing: bench/policy.ts does).
 *
 * The large inputs (test/support/large-policies.ts) fill the size cap with long lists, many
 * keys and errors, deep nesting, alias fan-out and comments, or sit just
 * inside the node and nesting bounds: the class of input that once
 * overflowed the stack (150k errors spread into one push) or took seconds.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { policyToData } from "./effective.ts";
import { PolicyError } from "./errors.ts";
import { inputsAtTheBounds, largeInputs } from "../../test/support/large-policies.ts";
import { MAX_POLICY_BYTES, parsePolicy } from "./load.ts";
import type { Policy } from "./types.ts";

const SEED = 0x5eed_7007;
const MUTATED_INPUTS = 2000;
const GENERATED_INPUTS = 600;
const PER_INPUT_BOUND_MS = 2000;

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const validCorpus = yamlFiles(path.join(repoRoot, "config"));
const corpus = [...validCorpus, ...yamlFiles(path.join(repoRoot, "test", "fixtures", "policies", "bad"))];

function yamlFiles(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith(".yaml"))
    .sort()
    .map((name) => fs.readFileSync(path.join(dir, name), "utf8"));
}

/** mulberry32: small, fast and deterministic. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const next = random(SEED);
const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
const int = (below: number) => Math.floor(next() * below);

/** Fragments that stress YAML and the loader: aliases, anchors, tags, indicators, odd characters. */
const FRAGMENTS = [
  "&a ",
  "*a",
  "&b [1, 2]",
  "*b",
  "*missing",
  "<<: *a",
  "!!binary aGk=",
  "!!str ",
  "!custom ",
  "!!map {}",
  "? [x]\n: y",
  "[",
  "]",
  "{",
  "}",
  ": ",
  "- ",
  "\t",
  "\n",
  "\r\n",
  "#",
  "'",
  '"',
  "|\n  text",
  ">-\n  text",
  "---\n",
  "...\n",
  "%YAML 1.2\n",
  "\u0000",
  "\u001b[31m",
  "\ufeff",
  "é",
  "🙂",
  "~",
  "null",
  "true",
  "0x1F",
  "1e999",
  "-1",
  "1.5",
  "596h31m23.648s",
  "0s",
  "1ns",
  "999999999999h",
  "__proto__: {}",
  "constructor: 1",
  "/",
  "//x",
  "*",
  "0o17",
  ".inf",
];

function mutate(text: string): string {
  let out = text;
  const steps = 1 + int(3);
  for (let step = 0; step < steps; step++) {
    const at = int(out.length + 1);
    switch (int(6)) {
      case 0: // insert a fragment
        out = out.slice(0, at) + pick(FRAGMENTS) + out.slice(at);
        break;
      case 1: // delete a range
        out = out.slice(0, at) + out.slice(at + int(20));
        break;
      case 2: // duplicate a range
        out = out.slice(0, at) + out.slice(at, at + int(60)) + out.slice(at);
        break;
      case 3: // replace one character
        out = out.slice(0, at) + String.fromCharCode(int(128)) + out.slice(at + 1);
        break;
      case 4: {
        // splice a line of another policy
        const lines = pick(corpus).split("\n");
        out = out.slice(0, at) + pick(lines) + "\n" + out.slice(at);
        break;
      }
      default: // anchor a value and alias it further down
        out = out.replace(/: (\S+)/, ": &x $1") + "\nextra: *x\n";
    }
  }
  return out;
}

/** A random policy-shaped document: mostly plausible values, sometimes the wrong type. */
function generated(): string {
  const value = (good: () => unknown): unknown => next() < 0.95 ? good() : pick([null, 7, -1, "text", [], {}, true, ["a"], { k: 1 }, 1.5, ""]);
  const duration = () => pick(["1s", "500ms", "2m2s", "0", "0s", "1h", "1.5s", "250µs", "596h31m23.647s", "600h"]);
  const maybe = (entries: [string, () => unknown][]) => Object.fromEntries(entries.filter(() => next() < 0.4).map(([key, make]) => [key, value(make)]));
  const policy: Record<string, unknown> = {
    version: next() < 0.95 ? 1 : pick([2, "1", null]),
    watch: next() < 0.95 ? [{ path: pick(["/a", "/b/"]) }] : value(() => []),
  };
  Object.assign(
    policy,
    maybe([
      ["nodeName", () => pick(["edge-01", "", "Node"])],
      [
        "watch",
        () =>
          Array.from(
            { length: int(3) },
            () => maybe([["path", () => pick(["/a", "/b/", "rel", "/a//"])], ["recursive", () => next() < 0.5], ["types", () => [pick(["CSIPlugin", "x.io/T", "DevicePlugin", ""])]]]),
          ),
      ],
      [
        "handlers",
        () =>
          maybe([["DevicePlugin", () => maybe([["allow", () => ["*"]], ["kind", () => "generic"]])], [
            "x.io/T",
            () => maybe([["kind", () => pick(["generic", "builtin"])], ["versions", () => [pick(["v1", ""])]]]),
          ]]),
      ],
      [
        "reconcile",
        () =>
          maybe([["resync", duration], ["backoff", () => maybe([["initial", duration], ["max", duration]])], [
            "timeouts",
            () => maybe([["dial", duration], ["getInfo", duration], ["notify", duration]]),
          ]]),
      ],
      ["security", () => maybe([["socketOwners", () => [int(3), pick([0, -1, 4294967296])]], ["maxPlugins", () => int(3)]])],
      ["api", () => maybe([["socket", () => pick(["/run/x.sock", null, "x"])], ["metrics", () => pick(["127.0.0.1:9478", ":0", "[::1]:70000", null])]])],
      ["log", () => maybe([["level", () => pick(["info", "debug", "loud"])], ["format", () => pick(["json", "text", "xml"])]])],
    ]),
  );
  if (next() < 0.1) policy[pick(["unknown", "wacth", "Version"])] = 1;
  const text = stringify(policy, { aliasDuplicateObjects: next() < 0.5 });
  return next() < 0.2 ? mutate(text) : text;
}

/** The loader's verdict on one input, checked; returns the policy when it was valid. */
function check(text: string, label: string): Policy | undefined {
  const file = "fuzz.yaml";
  const started = performance.now();
  let policy: Policy | undefined;
  try {
    policy = parsePolicy(text, file);
  } catch (error) {
    if (!(error instanceof PolicyError)) {
      assert.fail(`${label}: ${String((error as Error)?.stack ?? error)}\ninput: ${JSON.stringify(text)}`);
    }
    assert.ok(error.issues.length > 0, `${label}: a PolicyError without issues`);
    for (const issue of error.issues) {
      const where = `${label}: ${JSON.stringify(issue)}\ninput: ${JSON.stringify(text)}`;
      assert.equal(issue.file, file, where);
      const wholeFile = issue.line === 0 && issue.column === 0;
      assert.ok(wholeFile || (issue.line >= 1 && issue.column >= 1), where);
      assert.match(issue.message, /^(expected .+, got .+|invalid YAML: .+)/s, where);
      assert.doesNotMatch(issue.message, /\[object Object\]|undefined|NaN/, where);
    }
  }
  const elapsed = performance.now() - started;
  assert.ok(elapsed < PER_INPUT_BOUND_MS, `${label}: took ${Math.round(elapsed)} ms\ninput: ${JSON.stringify(text)}`);
  return policy;
}

test(`${MUTATED_INPUTS} mutated policies yield a valid policy or located errors, each within ${PER_INPUT_BOUND_MS} ms`, () => {
  let valid = 0;
  for (let index = 0; index < MUTATED_INPUTS; index++) {
    // Half from the valid policies in config/, half from every policy (the bad fixtures too).
    const original = index % 2 === 0 ? validCorpus[(index / 2) % validCorpus.length]! : corpus[index % corpus.length]!;
    if (check(mutate(original), `mutated input ${index}`)) valid++;
  }
  // The mutations must leave some policies valid, or the fuzz would test only the error path.
  assert.ok(valid > MUTATED_INPUTS / 20, `only ${valid} of ${MUTATED_INPUTS} mutated inputs were valid`);
});

test(`${GENERATED_INPUTS} generated policies: valid ones survive policy show's rendering unchanged`, () => {
  let valid = 0;
  for (let index = 0; index < GENERATED_INPUTS; index++) {
    const policy = check(generated(), `generated input ${index}`);
    if (policy === undefined) continue;
    valid++;
    const shown = parsePolicy(stringify(policyToData(policy)), policy.source);
    assert.deepEqual(shown, policy, `generated input ${index}: policy show's output loads to another policy`);
  }
  assert.ok(valid > GENERATED_INPUTS / 20, `only ${valid} of ${GENERATED_INPUTS} generated inputs were valid`);
});

test(`large inputs at the size cap and at the node and nesting bounds, each within ${PER_INPUT_BOUND_MS} ms`, () => {
  const inputs = [...largeInputs({ bytes: MAX_POLICY_BYTES - 64 }), ...inputsAtTheBounds()];
  let valid = 0;
  for (const input of inputs) {
    if (check(input.text, input.name)) valid++;
  }
  // The inputs at the bounds, mutated: what comes after the scan, at its largest, on broken input.
  for (const [index, input] of inputsAtTheBounds().entries()) check(mutate(input.text), `mutated ${input.name} (${index})`);
  assert.ok(valid >= 1, "the inputs at the bounds include a valid policy, so the bounds leave room for one");
});
