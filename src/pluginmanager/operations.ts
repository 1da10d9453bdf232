/**
 * The operation executor (the kubelet's goroutinemap with exponential
 * backoff): at most one operation per key (socket path) at a time, different
 * keys in parallel, and after a failed outcome a per-key backoff window
 * during which the key's operations are refused. One timer per key in
 * backoff tells the owner when the window ends; nothing polls.
 */
import type { AttemptState } from "./types.ts";

/** Time source, injectable so tests control backoff windows. */
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

export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
}

/**
 * What the executor reads of an operation's outcome: `failed` and `stale`
 * open (or double) the key's backoff window, `aborted` leaves it as it was,
 * `registered` clears it.
 */
export interface OperationOutcome {
  readonly state: AttemptState;
}

/** An operation on one key; its signal fires on abort and stop. */
export type Operation = (signal: AbortSignal) => Promise<OperationOutcome>;

/** `started`, or why the operation was not started. */
export type RunResult = "started" | "already-running" | "backoff" | "stopped";

export interface OperationExecutorOptions {
  backoff: BackoffPolicy;
  clock?: Clock;
  /** Called when a key's operation ended or its backoff window closed: the owner may want to run again. */
  onReady?: (key: string) => void;
}

interface KeyState {
  running?: { controller: AbortController; done: Promise<void> };
  failures: number;
  retryAt: number;
  cancelTimer?: () => void;
}

export class OperationExecutor {
  #backoff: BackoffPolicy;
  readonly #clock: Clock;
  readonly #onReady: (key: string) => void;
  readonly #keys = new Map<string, KeyState>();
  #stopped = false;

  constructor(options: OperationExecutorOptions) {
    this.#backoff = options.backoff;
    this.#clock = options.clock ?? systemClock;
    this.#onReady = options.onReady ?? (() => {});
  }

  /**
   * Starts `operation` for `key` unless one is running or the key is in its
   * backoff window. Its outcome sets the key's backoff (see
   * {@link OperationOutcome}); a rejection counts as `failed`, and an
   * operation whose signal fired never counts as a failure.
   */
  run(key: string, operation: Operation): RunResult {
    if (this.#stopped) return "stopped";
    const state = this.#keys.get(key) ?? { failures: 0, retryAt: 0 };
    if (state.running) return "already-running";
    if (state.failures > 0 && this.#clock.now() < state.retryAt) return "backoff";
    this.#keys.set(key, state);
    const controller = new AbortController();
    const done = invoke(operation, controller.signal)
      .then(
        (outcome) => this.#ended(key, state, controller.signal, outcome.state),
        () => this.#ended(key, state, controller.signal, "failed"),
      )
      .finally(() => {
        state.running = undefined;
        this.#forgetIfIdle(key, state);
        if (!this.#stopped) this.#onReady(key);
      });
    state.running = { controller, done };
    return "started";
  }

  /**
   * Counts a failure for `key` without running anything (a registered
   * plugin's connection dropped): its next operation waits out the window.
   */
  backOff(key: string): void {
    if (this.#stopped) return;
    const state = this.#keys.get(key) ?? { failures: 0, retryAt: 0 };
    this.#keys.set(key, state);
    this.#openWindow(key, state);
  }

  /** Backoff for the failures to come; windows already open keep their end. */
  setBackoff(backoff: BackoffPolicy): void {
    this.#backoff = backoff;
  }

  isRunning(key: string): boolean {
    return this.#keys.get(key)?.running !== undefined;
  }

  /** Whether `key`'s last operation failed and its backoff window is still open. */
  inBackoff(key: string): boolean {
    const state = this.#keys.get(key);
    return state !== undefined && state.failures > 0 && this.#clock.now() < state.retryAt;
  }

  /** Forgets `key`'s failures (a new socket appeared at the path): the next run starts at once. */
  resetBackoff(key: string): void {
    const state = this.#keys.get(key);
    if (!state) return;
    this.#clearFailures(state);
    this.#forgetIfIdle(key, state);
  }

  /** Fires the signal of `key`'s running operation, if any. */
  abort(key: string, reason = "socket removed"): void {
    this.#keys.get(key)?.running?.controller.abort(new Error(reason));
  }

  /**
   * Refuses new operations, aborts running ones, clears every timer and waits
   * for the running operations to end, at most `graceMs`. Safe to call twice.
   */
  async stop(graceMs = 1500): Promise<void> {
    this.#stopped = true;
    const running: Promise<void>[] = [];
    for (const state of this.#keys.values()) {
      state.cancelTimer?.();
      state.cancelTimer = undefined;
      if (state.running) {
        state.running.controller.abort(new Error("plugin manager stopping"));
        running.push(state.running.done);
      }
    }
    if (running.length === 0) return;
    let cancelGrace = () => {};
    const grace = new Promise<void>((resolve) => (cancelGrace = this.#clock.setTimer(resolve, graceMs)));
    await Promise.race([Promise.allSettled(running), grace]);
    cancelGrace();
  }

  #ended(key: string, state: KeyState, signal: AbortSignal, outcome: AttemptState): void {
    if (outcome === "registered") this.#clearFailures(state);
    else if (outcome !== "aborted" && !signal.aborted && !this.#stopped) this.#openWindow(key, state);
  }

  #openWindow(key: string, state: KeyState): void {
    state.failures++;
    const delay = Math.min(this.#backoff.initialMs * 2 ** (state.failures - 1), this.#backoff.maxMs);
    state.retryAt = this.#clock.now() + delay;
    state.cancelTimer?.();
    state.cancelTimer = this.#clock.setTimer(() => {
      state.cancelTimer = undefined;
      // The timer closes the window: timers may fire a millisecond before
      // Date.now() reaches retryAt, and a refused retry would have no timer left.
      state.retryAt = 0;
      if (!this.#stopped) this.#onReady(key);
    }, delay);
  }

  #clearFailures(state: KeyState): void {
    state.failures = 0;
    state.retryAt = 0;
    state.cancelTimer?.();
    state.cancelTimer = undefined;
  }

  #forgetIfIdle(key: string, state: KeyState): void {
    if (!state.running && state.failures === 0 && this.#keys.get(key) === state) this.#keys.delete(key);
  }
}

/** Calls `operation` now (so it sees an abort that follows at once), turning a synchronous throw into a rejection. */
function invoke(operation: Operation, signal: AbortSignal): Promise<OperationOutcome> {
  try {
    return Promise.resolve(operation(signal));
  } catch (error) {
    return Promise.reject(error);
  }
}
