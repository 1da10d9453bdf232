/**
 * Helpers of the policy loader tests: a minimal valid policy, the error a
 * text is rejected with, and an issue in the `LINE:COLUMN path: message`
 * form of the fixtures' `# expect:` lines.
 */
import assert from "node:assert/strict";
import { PolicyError, type PolicyIssue } from "../../src/policy/errors.ts";
import { parsePolicy } from "../../src/policy/load.ts";

export const minimal = "version: 1\nwatch:\n  - path: /var/lib/kubelet/plugins_registry\n";

/** The issues a policy text is rejected with; fails the test when it is accepted. */
export function rejection(text: string, file = "policy.yaml"): PolicyError {
  try {
    parsePolicy(text, file);
  } catch (error) {
    assert.ok(error instanceof PolicyError, `expected a PolicyError, got ${String(error)}`);
    return error;
  }
  assert.fail(`the policy was accepted:\n${text}`);
}

/** `LINE:COLUMN path: message`, the form of the `# expect:` lines of the fixtures. */
export function located(issue: PolicyIssue): string {
  return `${issue.line}:${issue.column} ${issue.path === "" ? "" : `${issue.path}: `}${issue.message}`;
}
