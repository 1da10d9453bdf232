/**
 * One operation per key at a time, keys in parallel, and after a failure a
 * per-key exponential backoff window in which the key's operations are
 * refused: the kubelet's goroutinemap with exponentialbackoff, which it
 * keeps in pkg/util, outside the plugin manager; so does edgeplug. A timer
 * per key in backoff tells the owner when the window ends; nothing polls.
 * Unlike goroutinemap, at most `maxRunning` operations run at once: each
 * registration attempt holds descriptors for up to its dial timeout, and
 * hundreds of sockets that never answer must not take those the API and
 * plugins need. Keys turned away wait in line, first attempts ahead of
 * retries, so that a new plugin does not queue behind failing sockets.
 */
import { type Clock, systemClock } from "../platform/clock.ts";
import { type Backoff, backoffDelay } from "./backoff.ts";

export type { Backoff } from "./backoff.ts";

/** `failed` opens (or doubles) the key's window, `aborted` leaves it, `succeeded` clears it. */
export type OperationResult = "succeeded" | "failed" | "aborted";

/** Its signal fires on abort and stop. */
export type Operation = (signal: AbortSignal) => Promise<OperationResult>;

export interface OperationExecutorOptions {
  backoff: Backoff;
  clock?: Clock;
  /** A key's operation ended, its window closed or its turn in line came: the owner may run again. */
  onReady?: (key: string) => void;
  /** Operations running at once; default: no limit. */
  maxRunning?: number;
}

interface KeyState {
  running?: { controller: AbortController; done: Promise<void> };
  failures: number;
  /** Set while the key's backoff window is open: the window ends when this timer fires. */
  cancelTimer?: () => void;
}

export class OperationExecutor {
  #backoff: Backoff;
  readonly #clock: Clock;
  readonly #onReady: (key: string) => void;
  readonly #keys = new Map<string, KeyState>();
  readonly #maxRunning: number;
  #running = 0;
  /** Keys turned away at the limit, in arrival order (a Set: a key waits once). */
  readonly #waitingFirst = new Set<string>();
  readonly #waitingRetry = new Set<string>();
  #stopped = false;

  constructor(options: OperationExecutorOptions) {
    this.#backoff = options.backoff;
    this.#clock = options.clock ?? systemClock;
    this.#onReady = options.onReady ?? (() => {});
    this.#maxRunning = options.maxRunning ?? Infinity;
  }

  /**
   * Starts `operation` unless `key` is busy or in backoff, or `maxRunning`
   * operations run: then `key` waits in line and its onReady comes when a
   * slot frees. A rejection counts as `failed`; an aborted operation never fails.
   */
  run(key: string, operation: Operation): "started" | "already-running" | "backoff" | "waiting" | "stopped" {
    if (this.#stopped) return "stopped";
    const state = this.#state(key);
    if (state.running) return "already-running";
    if (this.inBackoff(key)) return "backoff";
    if (this.#running >= this.#maxRunning) {
      (state.failures === 0 ? this.#waitingFirst : this.#waitingRetry).add(key);
      return "waiting";
    }
    this.#waitingFirst.delete(key);
    this.#waitingRetry.delete(key);
    const controller = new AbortController();
    const ended = (result: OperationResult) => {
      if (result === "succeeded") this.resetBackoff(key);
      else if (result !== "aborted" && !controller.signal.aborted && !this.#stopped) this.#openWindow(key, state);
    };
    let result: Promise<OperationResult>;
    try {
      // Called now, so that it sees an abort that follows at once; no extra
      // ticks, so that the key is free as soon as the observers hear it ended.
      result = Promise.resolve(operation(controller.signal));
    } catch (error) {
      result = Promise.reject(error);
    }
    const done = result
      .then(ended, () => ended("failed"))
      .finally(() => {
        state.running = undefined;
        this.#running--;
        this.#forgetIfIdle(key, state);
        if (this.#stopped) return;
        this.#onReady(key);
        this.#admitWaiting();
      });
    state.running = { controller, done };
    this.#running++;
    return "started";
  }

  /** Keys waiting for a slot. */
  get waiting(): number {
    return this.#waitingFirst.size + this.#waitingRetry.size;
  }

  /** Counts a failure without running anything (the plugin manager's: a registered plugin's connection dropped). */
  backOff(key: string): void {
    if (!this.#stopped) this.#openWindow(key, this.#state(key));
  }

  /** For the failures to come; windows already open keep their end. */
  setBackoff(backoff: Backoff): void {
    this.#backoff = backoff;
  }

  isRunning(key: string): boolean {
    return this.#keys.get(key)?.running !== undefined;
  }

  inBackoff(key: string): boolean {
    return this.#keys.get(key)?.cancelTimer !== undefined;
  }

  /** Forgets `key`'s failures: its next run starts at once. */
  resetBackoff(key: string): void {
    const state = this.#keys.get(key);
    if (!state) return;
    state.failures = 0;
    state.cancelTimer?.();
    state.cancelTimer = undefined;
    this.#forgetIfIdle(key, state);
  }

  abort(key: string): void {
    this.#keys.get(key)?.running?.controller.abort(new Error("operation aborted"));
  }

  /** Refuses new operations, clears timers, aborts and awaits running ones at most `graceMs` (exit within 2 s of SIGTERM). */
  async stop(graceMs = 1500): Promise<void> {
    this.#stopped = true;
    this.#waitingFirst.clear();
    this.#waitingRetry.clear();
    const running: Promise<void>[] = [];
    for (const state of this.#keys.values()) {
      state.cancelTimer?.();
      state.cancelTimer = undefined;
      state.running?.controller.abort(new Error("stopping"));
      if (state.running) running.push(state.running.done);
    }
    if (running.length === 0) return;
    let cancelGrace = () => {};
    const grace = new Promise<void>((resolve) => (cancelGrace = this.#clock.setTimer(resolve, graceMs)));
    await Promise.race([Promise.allSettled(running), grace]);
    cancelGrace();
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, state = { failures: 0 });
    return state;
  }

  #openWindow(key: string, state: KeyState): void {
    state.failures++;
    const delay = backoffDelay(this.#backoff, state.failures);
    state.cancelTimer?.();
    state.cancelTimer = this.#clock.setTimer(() => {
      state.cancelTimer = undefined;
      if (!this.#stopped) this.#onReady(key);
    }, delay);
  }

  /** Offers free slots to waiting keys in turn; a key whose owner no longer runs it just leaves the line. */
  #admitWaiting(): void {
    while (this.#running < this.#maxRunning) {
      const key = first(this.#waitingFirst) ?? first(this.#waitingRetry);
      if (key === undefined) return;
      this.#waitingFirst.delete(key);
      this.#waitingRetry.delete(key);
      this.#onReady(key);
    }
  }

  #forgetIfIdle(key: string, state: KeyState): void {
    if (!state.running && state.failures === 0) this.#keys.delete(key);
  }
}

function first<T>(set: Set<T>): T | undefined {
  for (const item of set) return item;
  return undefined;
}
