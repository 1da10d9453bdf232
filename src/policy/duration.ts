/**
 * Go-style durations (`500ms`, `10s`, `2m2s`, `1h30m`, `1.5s`), the format of
 * every time setting in the policy and on the command line.
 *
 * @example
 * ```ts
 * parseDuration("2m2s"); // 122000
 * formatDuration(122000); // "2m2s"
 * ```
 */

const unitMs: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const durationPattern = /^(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*$/;
const termPattern = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/g;

/**
 * The longest duration a timer can wait: Node (and browsers) keep delays in a
 * signed 32-bit millisecond count and run a longer timer after 1 ms instead.
 * Every duration that reaches a timer is checked against it.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A JSON Schema `pattern` that accepts exactly what {@link parseDuration} accepts. */
export const DURATION_PATTERN = durationPattern.source;

/** Whether `text` is a valid (non-negative) Go duration. `"0"` is accepted, as in Go. */
export function isDuration(text: string): boolean {
  return text === "0" || durationPattern.test(text);
}

/**
 * Parses a Go duration into milliseconds (fractions of a millisecond kept).
 * Throws a RangeError naming the text when it is not a duration.
 */
export function parseDuration(text: string): number {
  if (text === "0") return 0;
  if (!durationPattern.test(text)) {
    throw new RangeError(`expected a duration like "30s", got ${JSON.stringify(text)}`);
  }
  let total = 0;
  for (const [, amount, unit] of text.matchAll(termPattern)) {
    total += Number(amount) * unitMs[unit!]!;
  }
  return total;
}

/** Formats milliseconds the way Go prints a time.Duration (`2m2s`, `500ms`, `1h0m0s`). */
export function formatDuration(ms: number): string {
  if (ms === 0) return "0s";
  if (ms < 1000) return `${trim(ms)}ms`;
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const seconds = (ms % 60_000) / 1000;
  if (hours > 0) return `${hours}h${minutes}m${trim(seconds)}s`;
  if (minutes > 0) return `${minutes}m${trim(seconds)}s`;
  return `${trim(seconds)}s`;
}

function trim(value: number): string {
  return String(Number(value.toFixed(6)));
}
