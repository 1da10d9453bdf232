/**
 * The one error type of the policy domain: every problem found in a policy
 * file, each located at a line and column, so `validate` and SIGHUP reload
 * can print them all at once.
 *
 * @example
 * ```ts
 * try { parsePolicy(text, "policy.yaml"); }
 * catch (error) { if (error instanceof PolicyError) console.error(error.message); }
 * // policy.yaml:12:5: reconcile.backoff.max: expected a duration like "30s", got "fast"
 * ```
 */

/** One located problem in a policy. Lines and columns count from 1 (0 when the file could not be read). */
export interface PolicyIssue {
  file: string;
  line: number;
  column: number;
  /** Dotted key path (`watch[1].path`, `handlers.acme.io/Sensor.kind`); "" for the document itself. */
  path: string;
  /** What was expected and what was found. */
  message: string;
}

/** Renders one issue in SPEC's `FILE:LINE:COLUMN: key.path: message` form. */
export function formatPolicyIssue(issue: PolicyIssue): string {
  const where = `${issue.file}:${issue.line}:${issue.column}`;
  return issue.path === "" ? `${where}: ${issue.message}` : `${where}: ${issue.path}: ${issue.message}`;
}

/** Thrown when a policy cannot be read or is invalid; `message` holds one line per issue. */
export class PolicyError extends Error {
  readonly issues: PolicyIssue[];

  constructor(issues: PolicyIssue[]) {
    super(issues.map(formatPolicyIssue).join("\n"));
    this.name = "PolicyError";
    this.issues = issues;
  }
}
