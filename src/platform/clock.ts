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

/** Waits `ms` on `clock` unless `signal` aborts first; true when the time passed. */
export function pause(clock: Clock, ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (elapsed: boolean) => {
      cancel();
      signal.removeEventListener("abort", onAbort);
      resolve(elapsed);
    };
    const onAbort = () => done(false);
    const cancel = clock.setTimer(() => done(true), ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
