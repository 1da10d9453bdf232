/**
 * Gives the heap's memory back soon after a large structure became garbage:
 * a device list of tens of thousands of devices read and the one before it
 * dropped. V8's memory reducer makes the same full collection, but only after
 * some 8 s of quiet, and until then the agent's RSS holds tens of megabytes of
 * garbage (docs/performance.md, "Costs behind choices in the code"). Here the collection comes
 * `delayMs` after the last large garbage, so a burst of lists costs one, and
 * never sooner than `minIntervalMs` after the one before, so a plugin sending
 * large lists without end costs a bounded share of a core.
 *
 * The collection is V8's own full one, reached through `--expose-gc` set for
 * one moment: the flag installs `gc` only in contexts created while it is
 * set, so a fresh context's `gc` is taken and the flag cleared again. Where
 * that is not available (Deno), nothing is collected early and the runtime's
 * own reducer stays in charge.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { type Clock, systemClock } from "./clock.ts";
import { runtimeName } from "./runtime.ts";

export interface HeapReturnOptions {
  delayMs?: number;
  minIntervalMs?: number;
  clock?: Clock;
  /** The full collection (default: V8's, where the runtime lets us reach it); tests count calls. */
  collect?: (() => void) | null;
  /** Told how long each collection took, in ms. */
  collected?: (durationMs: number) => void;
}

/** Quiet after the last large garbage before collecting: a registration's list and the event it makes are done by then. */
export const HEAP_RETURN_DELAY_MS = 1000;
/** At most one early collection per this long: with 100,000 to 300,000 devices known, one holds the agent 60 to 80 ms. */
export const HEAP_RETURN_MIN_INTERVAL_MS = 2000;

export class HeapReturn {
  readonly #delayMs: number;
  readonly #minIntervalMs: number;
  readonly #clock: Clock;
  /** "not yet" until first needed: looking it up creates a V8 context, which an agent with no large list never pays for. */
  #collect: (() => void) | null | "not yet";
  readonly #collected: ((durationMs: number) => void) | undefined;
  #cancel: (() => void) | null = null;
  #lastCollectedAt = -Infinity;
  #stopped = false;

  constructor(options: HeapReturnOptions = {}) {
    this.#delayMs = options.delayMs ?? HEAP_RETURN_DELAY_MS;
    this.#minIntervalMs = options.minIntervalMs ?? HEAP_RETURN_MIN_INTERVAL_MS;
    this.#clock = options.clock ?? systemClock;
    this.#collect = options.collect === undefined ? "not yet" : options.collect;
    this.#collected = options.collected;
  }

  /** A large structure just became garbage: collect once things are quiet. */
  largeGarbage(): void {
    if (this.#stopped) return;
    if (this.#collect === "not yet") this.#collect = runtimeFullCollection();
    const collect = this.#collect;
    if (collect === null) return;
    this.#cancel?.();
    const dueAt = Math.max(this.#clock.now() + this.#delayMs, this.#lastCollectedAt + this.#minIntervalMs);
    this.#cancel = this.#clock.setTimer(() => {
      this.#cancel = null;
      this.#lastCollectedAt = this.#clock.now();
      const startedAt = performance.now();
      collect();
      this.#collected?.(performance.now() - startedAt);
    }, dueAt - this.#clock.now());
  }

  stop(): void {
    this.#stopped = true;
    this.#cancel?.();
    this.#cancel = null;
  }
}

let fullCollection: (() => void) | null | undefined;

/** V8's full collection, or null where this runtime does not let us reach it. */
export function runtimeFullCollection(): (() => void) | null {
  if (fullCollection !== undefined) return fullCollection;
  fullCollection = null;
  if (runtimeName() !== "node") return fullCollection;
  try {
    setFlagsFromString("--expose-gc");
    const gc: unknown = runInNewContext("gc");
    if (typeof gc === "function") fullCollection = () => gc({ type: "major", execution: "sync", flavor: "last-resort" });
  } catch {
    // Left to the runtime's own reducer.
  } finally {
    setFlagsFromString("--no-expose-gc");
  }
  return fullCollection;
}
