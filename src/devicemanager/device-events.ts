/**
 * Tells subscribers of the device manager's changes. Allocations and a
 * resource's connection changes (a plugin instance comes or goes, the
 * resource is removed) go out at once, so no flap goes unseen. New device
 * lists are coalesced per resource: at most one event per resource every
 * {@link RESOURCE_EVENT_INTERVAL_MS}, always for its latest state, so a
 * plugin that floods ListAndWatch costs each watcher (WatchEvents) a bounded
 * number of events, and other resources' events are not held back by it.
 */
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import type { DeviceChange } from "./types.ts";

export const RESOURCE_EVENT_INTERVAL_MS = 50;

export class DeviceEvents {
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #listeners = new Set<(change: DeviceChange) => void>();
  /** Resources with an event to send, and whether the latest change removed them. */
  readonly #pending = new Map<string, boolean>();
  readonly #lastSent = new Map<string, number>();
  /** Cancels the pending flush (an immediate, or a timer on the clock). */
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
      if (removed) this.#lastSent.delete(resource);
      else this.#lastSent.set(resource, this.#clock.now());
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
      const immediate = setImmediate(flush);
      this.#scheduled = () => clearImmediate(immediate);
    }
  }

  #flush(): void {
    const now = this.#clock.now();
    let nextDue = Infinity;
    for (const [resource, removed] of [...this.#pending]) {
      const due = (this.#lastSent.get(resource) ?? -Infinity) + RESOURCE_EVENT_INTERVAL_MS;
      // A due time more than one interval away means the clock stepped back: the event goes now.
      if (due > now && due - now <= RESOURCE_EVENT_INTERVAL_MS) {
        nextDue = Math.min(nextDue, due);
        continue;
      }
      this.#pending.delete(resource);
      if (removed) this.#lastSent.delete(resource);
      else this.#lastSent.set(resource, now);
      this.#send({ kind: "resource", resource, removed });
    }
    if (this.#pending.size > 0 && !this.#stopped) this.#schedule(Math.max(1, nextDue - now));
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
