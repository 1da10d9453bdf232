/** A time source, injectable so that tests drive timers with test/support/manual-clock.ts. */
export interface Clock {
  now(): number;
  /** Calls `callback` after `ms`; returns a function that cancels it. */
  setTimer(callback: () => void, ms: number): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(callback, ms) {
    const timer = setTimeout(callback, ms);
    return () => clearTimeout(timer);
  },
};
