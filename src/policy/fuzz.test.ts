/**
 * Fuzz test of the policy loader (issue 7): thousands of random and mutated
 * policies (test/support/policy-fuzz.ts), aliases, anchors, tags and broken
 * syntax included, each of which must yield either a valid policy or a
 * PolicyError whose every issue is located (FILE:LINE:COLUMN, or the whole
 * file) and worded; never another throw. The seed is fixed, so a failure
 * names an input that reproduces. How long each input takes is
 * bench/policy.ts's to say: its `fuzzed` part times these very inputs
 * against a target. What keeps any input from taking long is the loader's
 * own bounds (size, YAML nodes, nesting), which the large inputs below reach.
 *
 * The large inputs (test/support/large-policies.ts) fill the size cap with long lists, many
 * keys and errors, deep nesting, alias fan-out and comments, or sit just
 * inside the node and nesting bounds: the class of input that once
 * overflowed the stack (150k errors spread into one push) or took seconds.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { policyToData } from "./effective.ts";
import { PolicyError } from "./errors.ts";
import { inputsAtTheBounds, largeInputs } from "../../test/support/large-policies.ts";
import { policyFuzzer } from "../../test/support/policy-fuzz.ts";
import { MAX_POLICY_BYTES, parsePolicy } from "./load.ts";
import type { Policy } from "./types.ts";

const MUTATED_INPUTS = 2000;
const GENERATED_INPUTS = 600;
/** One fuzzer for the whole file: its inputs follow from the seed and the order of the tests. */
const fuzzer = policyFuzzer();

/** The loader's verdict on one input, checked; returns the policy when it was valid. */
function check(text: string, label: string): Policy | undefined {
  const file = "fuzz.yaml";
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
  return policy;
}

test(`${MUTATED_INPUTS} mutated policies yield a valid policy or located errors`, () => {
  let valid = 0;
  for (const input of fuzzer.mutatedInputs(MUTATED_INPUTS)) {
    if (check(input.text, input.label)) valid++;
  }
  // The mutations must leave some policies valid, or the fuzz would test only the error path.
  assert.ok(valid > MUTATED_INPUTS / 20, `only ${valid} of ${MUTATED_INPUTS} mutated inputs were valid`);
});

test(`${GENERATED_INPUTS} generated policies: valid ones survive policy show's rendering unchanged`, () => {
  let valid = 0;
  for (const input of fuzzer.generatedInputs(GENERATED_INPUTS)) {
    const policy = check(input.text, input.label);
    if (policy === undefined) continue;
    valid++;
    const shown = parsePolicy(stringify(policyToData(policy)), policy.source);
    assert.deepEqual(shown, policy, `${input.label}: policy show's output loads to another policy`);
  }
  assert.ok(valid > GENERATED_INPUTS / 20, `only ${valid} of ${GENERATED_INPUTS} generated inputs were valid`);
});

test("large inputs at the size cap and at the node and nesting bounds yield a valid policy or located errors", () => {
  const inputs = [...largeInputs({ bytes: MAX_POLICY_BYTES - 64 }), ...inputsAtTheBounds()];
  let valid = 0;
  for (const input of inputs) {
    if (check(input.text, input.name)) valid++;
  }
  // The inputs at the bounds, mutated: what comes after the scan, at its largest, on broken input.
  for (const [index, input] of inputsAtTheBounds().entries()) check(fuzzer.mutate(input.text), `mutated ${input.name} (${index})`);
  assert.ok(valid >= 1, "the inputs at the bounds include a valid policy, so the bounds leave room for one");
});
