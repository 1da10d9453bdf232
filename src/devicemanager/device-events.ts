/**
 * Tells subscribers of the device manager's changes. Allocations and a
 * resource's connection changes (a plugin instance comes or goes, the
 * resource is removed) go out at once, so no flap goes unseen. New device
 * lists go out at once too while their resource has events to spend: each
 * resource holds up to {@link RESOURCE_EVENT_BURST} and gains one every
 * {@link RESOURCE_EVENT_REFILL_MS}. A plugin that floods ListAndWatch
 * overspends them, and its lists are then coalesced into one event for the
 * latest state as each event comes due, so it costs each watcher
 * (WatchEvents) a bounded number of events, and other resources' events are
 * not held back by it. A plugin registering, or a device's health going and
 * coming back, is a handful of events and is never delayed.
 */
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import type { DeviceChange } from "./types.ts";

/** Events a resource may send back to back. */
export const RESOURCE_EVENT_BURST = 8;
/** A resource earns one event per this, so a flood is held to 100 events a second per resource. */
export const RESOURCE_EVENT_REFILL_MS = 10;

/** A resource's unspent events, as of `at` (the clock's reading). */
interface EventAllowance {
  events: number;
  at: number;
}

export class DeviceEvents {
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #listeners = new Set<(change: DeviceChange) => void>();
  /** Resources with an event to send, and whether the latest change removed them. */
  readonly #pending = new Map<string, boolean>();
  readonly #allowances = new Map<string, EventAllowance>();
  /** Cancels the pending flush (a microtask, or a timer on the clock). */
  #scheduled: (() => void) | null = null;
  #stopped = false;

  constructor(log: Logger, clock: Clock) {
    this.#log = log;
    this.#clock = clock;
  }

  subscribe(listener: (change: DeviceChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  resourceChanged(resource: string, removed: boolean, connection: boolean): void {
    if (this.#stopped) return;
    if (connection) {
      // Whatever list change was pending is part of this event.
      this.#pending.delete(resource);
      this.#spend(resource, removed, this.#clock.now());
      this.#send({ kind: "resource", resource, removed });
      return;
    }
    this.#pending.set(resource, removed);
    this.#schedule(0);
  }

  allocationChanged(change: Extract<DeviceChange, { kind: "allocation" }>): void {
    this.#send(change);
  }

  /** Drops pending events and the timer. */
  stop(): void {
    this.#stopped = true;
    this.#pending.clear();
    this.#cancel();
  }

  #schedule(delayMs: number): void {
    if (this.#scheduled !== null) return;
    const flush = () => {
      this.#scheduled = null;
      this.#flush();
    };
    if (delayMs > 0) {
      this.#scheduled = this.#clock.setTimer(flush, delayMs);
    } else {
      // Once the code that made the change has run (the rest of a list's update), not a turn of the event loop later.
      let cancelled = false;
      queueMicrotask(() => {
        if (!cancelled) flush();
      });
      this.#scheduled = () => (cancelled = true);
    }
  }

  #flush(): void {
    const now = this.#clock.now();
    let nextDue = Infinity;
    for (const [resource, removed] of [...this.#pending]) {
      const waitMs = this.#spend(resource, removed, now);
      if (waitMs > 0) {
        nextDue = Math.min(nextDue, now + waitMs);
        continue;
      }
      this.#pending.delete(resource);
      this.#send({ kind: "resource", resource, removed });
    }
    if (this.#pending.size > 0 && !this.#stopped) this.#schedule(Math.max(1, nextDue - now));
  }

  /**
   * Takes one of `resource`'s events at `now` and returns 0, or, when it has
   * none left, how long until it earns one (nothing taken). A removed
   * resource's allowance goes with it: one coming back is new.
   */
  #spend(resource: string, removed: boolean, now: number): number {
    const allowance = this.#allowances.get(resource) ?? { events: RESOURCE_EVENT_BURST, at: now };
    // A clock stepped back earns nothing, rather than holding the resource's events for the step.
    const earned = Math.max(0, now - allowance.at) / RESOURCE_EVENT_REFILL_MS;
    allowance.events = Math.min(RESOURCE_EVENT_BURST, allowance.events + earned);
    allowance.at = now;
    if (allowance.events < 1) {
      this.#allowances.set(resource, allowance);
      return Math.ceil((1 - allowance.events) * RESOURCE_EVENT_REFILL_MS);
    }
    allowance.events -= 1;
    if (removed) this.#allowances.delete(resource);
    else this.#allowances.set(resource, allowance);
    return 0;
  }

  #send(change: DeviceChange): void {
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch (error) {
        this.#log.error("device change listener failed", { error: String(error) });
      }
    }
  }

  #cancel(): void {
    this.#scheduled?.();
    this.#scheduled = null;
  }
}
