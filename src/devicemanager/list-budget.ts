/**
 * How much of the event loop one plugin's lists may take: each list spends
 * this budget (endpoint.ts charges what it measured, and at least what such
 * a list costs in all, decoding, events and checkpoint included), which
 * refills at a quarter of a core; a plugin that overspends it (sending big
 * lists back to back) is not read until it is back in credit. A plugin
 * sending a list now and then never waits, nor do two lists of 100,000
 * devices in a row; a flood cannot take more than about a quarter of the
 * agent's time from other plugins' registrations.
 */
export class ListBudget {
  static readonly PER_MS = 0.25;
  static readonly CAPACITY_MS = 2000;
  readonly #now: () => number;
  #credit = ListBudget.CAPACITY_MS;
  #at: number;

  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
    this.#at = now();
  }

  /** Spends `ms`; returns how long to wait before reading the next list (0 while in credit). */
  spend(ms: number): number {
    const now = this.#now();
    this.#credit = Math.min(ListBudget.CAPACITY_MS, this.#credit + (now - this.#at) * ListBudget.PER_MS) - ms;
    this.#at = now;
    if (this.#credit >= 0) return 0;
    const wait = -this.#credit / ListBudget.PER_MS;
    this.#credit = 0;
    this.#at = now + wait;
    return wait;
  }
}
