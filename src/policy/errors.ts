/**
 * The one error type of the policy domain: every problem found in a policy
 * file, each located at a line and column, so `validate` and SIGHUP reload
 * can print them all at once. At most {@link MAX_REPORTED_ISSUES} are kept,
 * with a count of the rest: a file of 20k mistakes gets a readable answer.
 *
 * @example
 * ```ts
 * try { parsePolicy(text, "policy.yaml"); }
 * catch (error) { if (error instanceof PolicyError) console.error(error.message); }
 * // policy.yaml:12:5: reconcile.backoff.max: expected a duration like "30s", got "fast"
 * ```
 */

/** The most issues a {@link PolicyError} lists; the others are counted. */
export const MAX_REPORTED_ISSUES = 100;

/**
 * One located problem in a policy. Lines and columns count from 1; both are 0
 * for a problem of the file as a whole (it cannot be read, it is too large).
 */
export interface PolicyIssue {
  file: string;
  line: number;
  column: number;
  /** Dotted key path (`watch[1].path`, `handlers.acme.io/Sensor.kind`); "" for the document itself. */
  path: string;
  /** What was expected and what was found. */
  message: string;
}

/** Renders one issue in docs/policy.md's `FILE:LINE:COLUMN: key.path: message` form (`FILE: message` for the whole file). */
export function formatPolicyIssue(issue: PolicyIssue): string {
  const where = issue.line === 0 ? issue.file : `${issue.file}:${issue.line}:${issue.column}`;
  return issue.path === "" ? `${where}: ${issue.message}` : `${where}: ${issue.path}: ${issue.message}`;
}

/** Thrown when a policy cannot be read or is invalid; `message` holds one line per issue. */
export class PolicyError extends Error {
  /** The first {@link MAX_REPORTED_ISSUES} issues, in the order given. */
  readonly issues: PolicyIssue[];
  /** How many more issues were found and not listed. */
  readonly omitted: number;

  constructor(issues: PolicyIssue[]) {
    // Spread: an issue may build its message lazily (a getter); the listed ones are made plain.
    const listed = issues.slice(0, MAX_REPORTED_ISSUES).map((issue) => ({ ...issue }));
    const omitted = issues.length - listed.length;
    const lines = listed.map(formatPolicyIssue);
    if (omitted > 0) {
      lines.push(`${listed[0]!.file}: ${omitted} more errors not listed (only the first ${MAX_REPORTED_ISSUES} are)`);
    }
    super(lines.join("\n"));
    this.name = "PolicyError";
    this.issues = listed;
    this.omitted = omitted;
  }
}
