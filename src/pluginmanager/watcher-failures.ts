/**
 * The watch paths the plugin watcher could not read. A failed read proves
 * nothing about what is there, so the watcher keeps what it knew and asks
 * again: each path is logged once when its failure starts and once when a
 * read settles it, and retried with a doubling delay (the periodic resync
 * retries too) instead of warning at every resync.
 *
 * @example
 * ```ts
 * const failures = new ReadFailures({ log, retry: (paths) => paths.forEach(observe) });
 * failures.failed("/registry", "readdir", "EMFILE: too many open files"); // warns once, retries in 200 ms
 * failures.settled("/registry"); // logs that it is readable again
 * ```
 */
import type { Logger } from "../log/logger.ts";

export type ReadOperation = "lstat" | "readdir";

export interface ReadFailuresOptions {
  log: Logger;
  /** Reads `paths` again (ancestors first); each read calls failed() or settled(). */
  retry: (paths: string[]) => void;
  /** First retry delay; it doubles per failed round up to `maxDelayMs`. */
  firstDelayMs?: number;
  maxDelayMs?: number;
}

export class ReadFailures {
  readonly #failing = new Map<string, ReadOperation>();
  readonly #log: Logger;
  readonly #retry: (paths: string[]) => void;
  readonly #firstDelayMs: number;
  readonly #maxDelayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #round = 0;

  constructor(options: ReadFailuresOptions) {
    this.#log = options.log;
    this.#retry = options.retry;
    this.#firstDelayMs = options.firstDelayMs ?? 200;
    this.#maxDelayMs = options.maxDelayMs ?? 10_000;
  }

  /** Records a failed read of `target`: logged when it starts an episode; a retry is armed. */
  failed(target: string, operation: ReadOperation, error: string): void {
    if (!this.#failing.has(target)) {
      const what = operation === "readdir" ? "cannot read watch directory" : "cannot stat watch path";
      this.#log.warn(`${what}; what is registered under it stays until a read succeeds`, { path: target, error });
    }
    this.#failing.set(target, operation);
    this.#timer ??= this.#arm();
  }

  /** A read of `target` succeeded (or showed it gone): ends its episode. */
  settled(target: string): void {
    if (!this.#failing.delete(target)) return;
    this.#log.info("watch path readable again", { path: target });
    if (this.#failing.size === 0) this.#reset();
  }

  /** Drops, without a log, the failing paths for which `unwanted` holds (no longer watched or no longer there). */
  forget(unwanted: (target: string) => boolean): void {
    for (const target of [...this.#failing.keys()]) {
      if (unwanted(target)) this.#failing.delete(target);
    }
    if (this.#failing.size === 0) this.#reset();
  }

  /** Cancels the retry and forgets every failure. */
  close(): void {
    this.#failing.clear();
    this.#reset();
  }

  #arm(): NodeJS.Timeout {
    const delay = Math.min(this.#firstDelayMs * 2 ** Math.min(this.#round, 30), this.#maxDelayMs);
    const timer = setTimeout(() => {
      this.#timer = undefined;
      this.#round++;
      // Shorter paths first: reading a directory again may settle what is under it.
      this.#retry([...this.#failing.keys()].sort((a, b) => a.length - b.length));
      if (this.#failing.size > 0) this.#timer ??= this.#arm();
    }, delay);
    timer.unref();
    return timer;
  }

  #reset(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#round = 0;
  }
}
