/**
 * The one manual clock of the tests: time moves only when a test says so,
 * and timers fire in `advance`, in order of their due time. It implements
 * src/platform/clock.ts, so anything that takes a clock (operations,
 * reconciler, registration, the device manager, health) can be driven by it.
 */
import type { Clock } from "../../src/platform/clock.ts";

export interface ManualClock extends Clock {
  /** Moves time forward by `ms`, firing every timer that falls due on the way (also those set meanwhile). */
  advance(ms: number): void;
  /** Moves time forward by `ms` and fires nothing, as if every loop were stuck; `advance(0)` then fires what is overdue. */
  skip(ms: number): void;
  /** Timers set and not yet fired or cancelled. */
  pendingTimers(): number;
}

/** A clock that reads `start` (milliseconds since the epoch, default 0) until advanced. */
export function manualClock(start = 0): ManualClock {
  let now = start;
  const timers = new Set<{ at: number; callback: () => void }>();
  return {
    now: () => now,
    setTimer(callback, ms) {
      const timer = { at: now + Math.max(0, ms), callback };
      timers.add(timer);
      return () => void timers.delete(timer);
    },
    advance(ms) {
      const target = now + ms;
      for (;;) {
        let next: { at: number; callback: () => void } | undefined;
        for (const timer of timers) if (timer.at <= target && (!next || timer.at < next.at)) next = timer;
        if (!next) break;
        timers.delete(next);
        now = Math.max(now, next.at);
        next.callback();
      }
      now = target;
    },
    skip(ms) {
      now += ms;
    },
    pendingTimers: () => timers.size,
  };
}
