/**
 * Turns device-state changes into checkpoint writes. A change only marks the
 * state dirty; one write is in flight at a time and it snapshots the state
 * when it starts, so a burst of changes (a plugin flooding ListAndWatch, a
 * hundred allocations) costs at most two writes and the latest state wins.
 * Nothing is written until {@link CheckpointWriter.enable} (after the
 * restore), so a checkpoint is never overwritten before it has been read.
 *
 * A failed write is logged once (repeats at debug until a write succeeds)
 * and retried with backoff, so a full disk that frees up gets the current
 * state without waiting for the next change.
 *
 * Every change has a number ({@link CheckpointWriter.changed} returns it),
 * and {@link CheckpointWriter.written} tells whether the first write that
 * took that change along reached the disk: an allocation is answered, or
 * refused, on that write's outcome alone, whatever other changes come
 * meanwhile.
 */
import type { Logger } from "../../log/logger.ts";
import type { Clock } from "../../platform/clock.ts";
import { type Backoff, BackoffCount } from "../../util/backoff.ts";
import { messageOf } from "../../log/error-message.ts";
import type { CheckpointData, DeviceStateStore } from "./checkpoint.ts";

/** One write's outcome, for metrics. */
export interface CheckpointWriteOutcome {
  ok: boolean;
  seconds: number;
}

/** What status says about the writes. */
export interface CheckpointWriteStats {
  writes: number;
  failures: number;
  lastWriteAt: Date | null;
  /** The last write's error; null once a write succeeds. */
  lastError: string | null;
}

export interface CheckpointWriterOptions {
  store: DeviceStateStore;
  snapshot: () => CheckpointData;
  log: Logger;
  clock: Clock;
  observe?: (outcome: CheckpointWriteOutcome) => void;
}

/** How long a new device list waits for more before it is written, at the least. */
export const LIST_WRITE_DELAY_MS = 100;
/**
 * Rewrites for device lists alone (health, plugins coming and going) come
 * at most once per LIST_WRITE_INTERVAL_MS, and further apart for a large
 * file, so that they put at most LIST_WRITE_BYTES_PER_HOUR on disk: a
 * flapping plugin must not wear an edge node's flash. Allocations and
 * releases are written at once (they wait for their write) and take every
 * pending list along. What a crash loses meanwhile is the lists' latest
 * healthy ids, which after a restart only decide which resources come back
 * disconnected for the grace period: their plugins send fresh lists.
 */
export const LIST_WRITE_INTERVAL_MS = 10_000;
export const LIST_WRITE_BYTES_PER_HOUR = 16 * 1024 * 1024;
const RETRY_BACKOFF: Backoff = { initialMs: 1000, maxMs: 60_000 };

/** Why a change is not on disk, or null once a write holding it is. */
export type WriteOutcome = string | null;

interface ChangeWaiter {
  change: number;
  settle: (outcome: WriteOutcome) => void;
}

export class CheckpointWriter {
  readonly #options: CheckpointWriterOptions;
  readonly stats: CheckpointWriteStats = { writes: 0, failures: 0, lastWriteAt: null, lastError: null };
  #enabled = false;
  #stopped = false;
  #dirty = false;
  #running: Promise<void> | null = null;
  readonly #retries = new BackoffCount(RETRY_BACKOFF);
  /** A write waiting for its moment: a retry after a failure, or device lists settling. */
  #cancelTimer: (() => void) | null = null;
  /** Whether a change since the last write must not wait for lists to settle. */
  #urgent = false;
  /** Numbers the changes; a write covers every change numbered up to this when it took its snapshot. */
  #changes = 0;
  /** Callers waiting for a write holding their change, oldest first. */
  #waiters: ChangeWaiter[] = [];
  /** The last change a successful write took along; and the last one a failed write did, with its error. */
  #writtenUpTo = 0;
  #failedUpTo: { change: number; error: string } = { change: 0, error: "" };
  /** When the last write ended (the clock's time), from which list-only writes are paced. */
  #lastWriteEndedAt = Number.NEGATIVE_INFINITY;

  constructor(options: CheckpointWriterOptions) {
    this.#options = options;
  }

  /** Starts writing (the checkpoint has been read); writes at once if something changed meanwhile. */
  enable(): void {
    this.#enabled = true;
    if (this.#dirty) this.#start();
  }

  /**
   * The device state changed: it will be written at once, or, for a new
   * device list (`soon` false), paced ({@link LIST_WRITE_INTERVAL_MS}), so
   * that a plugin sending lists back to back costs a write every 10 s at
   * most and its encoding does not hold the event loop for every message.
   */
  changed(soon = true): number {
    this.#dirty = true;
    const change = ++this.#changes;
    if (soon) this.#urgent = true;
    if (!this.#enabled || this.#stopped || this.#running !== null) return change;
    if (soon) this.#start();
    else this.#later(this.#listWriteDelay());
    return change;
  }

  /**
   * Resolves with null once a write holding change number `change` is on
   * disk, or with why not: the error of the first write that took it along
   * (no later write is waited for), `not written within N s` after
   * `timeoutMs`, or that the writer stopped first. A write still on its way
   * at the timeout may yet put the change on disk.
   */
  written(change: number, timeoutMs: number): Promise<WriteOutcome> {
    if (change <= this.#writtenUpTo) return Promise.resolve(null);
    if (change <= this.#failedUpTo.change) return Promise.resolve(this.#failedUpTo.error);
    if (this.#stopped) return Promise.resolve("the agent is stopping");
    return new Promise<WriteOutcome>((resolve) => {
      const cancelTimer = this.#options.clock.setTimer(() => settle(`the checkpoint was not written within ${timeoutMs / 1000} s`), timeoutMs);
      const waiter: ChangeWaiter = { change, settle: (outcome) => settle(outcome) };
      const settle = (outcome: WriteOutcome) => {
        cancelTimer();
        const index = this.#waiters.indexOf(waiter);
        if (index >= 0) this.#waiters.splice(index, 1);
        resolve(outcome);
      };
      this.#waiters.push(waiter);
    });
  }

  /** Whether the last write failed (the disk is full, read-only, the path taken...); its error is in {@link stats}. */
  get failing(): boolean {
    return this.stats.lastError !== null;
  }

  /**
   * Writes what has not been written yet: waits for the write in flight, then
   * makes one more attempt if changes remain (a failed write counts as one).
   * Gives up after `timeoutMs`. True when everything is on disk.
   */
  async flush(timeoutMs: number): Promise<boolean> {
    if (!this.#enabled) return !this.#dirty;
    let cancelDeadline = () => {};
    const deadline = new Promise<false>((resolve) => (cancelDeadline = this.#options.clock.setTimer(() => resolve(false), timeoutMs)));
    try {
      for (let attempt = 0; attempt < 2; attempt++) {
        if (this.#running === null) {
          if (!this.#dirty) break;
          this.#start();
        }
        if ((await Promise.race([this.#running!.then(() => true), deadline])) === false) return false;
      }
      return !this.#dirty && this.stats.lastError === null;
    } finally {
      cancelDeadline();
    }
  }

  /** No more retries or writes after the ones {@link flush} waits for. */
  stop(): void {
    this.#stopped = true;
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    for (const waiter of [...this.#waiters]) waiter.settle("the agent is stopping");
  }

  /** Tells the waiters whose changes the write that covered up to `upTo` took along. */
  #settle(upTo: number, outcome: WriteOutcome): void {
    if (outcome === null) this.#writtenUpTo = upTo;
    else this.#failedUpTo = { change: upTo, error: outcome };
    for (const waiter of this.#waiters.filter((w) => w.change <= upTo)) waiter.settle(outcome);
  }

  #start(): void {
    if (this.#running !== null) return;
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      // Changes that arrived during the write. An urgent one (an allocation waits for it) is tried at once,
      // even after a failure, so a disk that was freed meanwhile takes it; otherwise a pending retry decides.
      if (!this.#dirty || this.#stopped) return;
      if (this.#urgent) this.#start();
      else if (this.#cancelTimer === null) this.#later(this.#listWriteDelay());
    });
  }

  async #drain(): Promise<void> {
    // The changes of the current turn of the event loop join this write.
    await new Promise((resolve) => setImmediate(resolve));
    // Changes made during a write are written straight after it only if one of them is urgent; device lists wait for their pace.
    for (let first = true; this.#dirty && (first || this.#urgent); first = false) {
      this.#dirty = false;
      this.#urgent = false;
      const upTo = this.#changes;
      const started = performance.now();
      try {
        await this.#options.store.write(this.#options.snapshot());
        this.#succeeded((performance.now() - started) / 1000);
        this.#settle(upTo, null);
      } catch (error) {
        this.#failed(error, (performance.now() - started) / 1000);
        this.#settle(upTo, this.stats.lastError);
        return;
      }
    }
  }

  /** How long list-only changes wait from now: until the pace allows the next write, 100 ms at the least. */
  #listWriteDelay(): number {
    const bytes = this.#options.store.lastWriteBytes ?? 0;
    const interval = Math.max(LIST_WRITE_INTERVAL_MS, Math.ceil((bytes * 3_600_000) / LIST_WRITE_BYTES_PER_HOUR));
    // Never longer than one interval: a wall clock stepped back must not hold the writes back.
    return Math.max(LIST_WRITE_DELAY_MS, Math.min(interval, this.#lastWriteEndedAt + interval - this.#options.clock.now()));
  }

  #succeeded(seconds: number): void {
    this.#lastWriteEndedAt = this.#options.clock.now();
    const { stats } = this;
    stats.writes++;
    stats.lastWriteAt = new Date();
    if (stats.lastError !== null) this.#options.log.info("checkpoint written again after failed writes", { failures: stats.failures });
    stats.lastError = null;
    this.#retries.succeeded();
    this.#options.observe?.({ ok: true, seconds });
  }

  #failed(error: unknown, seconds: number): void {
    this.#lastWriteEndedAt = this.#options.clock.now();
    const { stats } = this;
    const message = messageOf(error);
    const fields = { error: message, retryInMs: this.#retries.peek() };
    if (stats.lastError === null) this.#options.log.error("checkpoint write failed; retrying", fields);
    else this.#options.log.debug("checkpoint write failed again", fields);
    stats.failures++;
    stats.lastError = message;
    this.#options.observe?.({ ok: false, seconds });
    // The state is still unwritten: retry later even if nothing else changes.
    this.#dirty = true;
    if (this.#stopped) return;
    this.#later(this.#retries.failed());
  }

  #later(ms: number): void {
    if (this.#cancelTimer !== null) return;
    this.#cancelTimer = this.#options.clock.setTimer(() => {
      this.#cancelTimer = null;
      // The wait is over: a write still running when it ends starts the next one at once.
      this.#urgent = true;
      this.#start();
    }, ms);
  }
}
