/**
 * The one exponential backoff every retry in edgeplug follows: the first
 * delay `initialMs`, doubling after each failure in a row, never above
 * `maxMs` (the kubelet's exponentialbackoff, used by its goroutinemap).
 * The operation executor keeps one per key; a stream reopened after a bad
 * message, a checkpoint write retried and the fleet's reconnects keep their
 * own.
 */
export interface Backoff {
  initialMs: number;
  maxMs: number;
}

/** The delay after `failures` failures in a row (1 for the first). */
export function backoffDelay(backoff: Backoff, failures: number): number {
  // Past 2^40 every delay is at its cap; the bound keeps the power finite.
  return Math.min(backoff.initialMs * 2 ** Math.min(Math.max(failures, 1) - 1, 40), backoff.maxMs);
}

/** Failures in a row of one retried thing, and the delay they call for. */
export class BackoffCount {
  readonly #backoff: () => Backoff;
  #failures = 0;

  /** `backoff` is read at each failure, so that a reloaded policy applies to the next delay. */
  constructor(backoff: Backoff | (() => Backoff)) {
    this.#backoff = typeof backoff === "function" ? backoff : () => backoff;
  }

  get failures(): number {
    return this.#failures;
  }

  /** Counts a failure; returns the delay before the next try. */
  failed(): number {
    this.#failures++;
    return backoffDelay(this.#backoff(), this.#failures);
  }

  /** The delay the next failure will call for, without counting it. */
  peek(): number {
    return backoffDelay(this.#backoff(), this.#failures + 1);
  }

  succeeded(): void {
    this.#failures = 0;
  }
}
