/**
 * The watcher's paths whose last read failed (EMFILE, EACCES, EIO), logged
 * when they start failing and read again with one doubling timer (200 ms
 * to 10 s) until none is left; the watcher keeps what is under them.
 */
import type { Logger } from "../log/logger.ts";
import { messageOf } from "../platform/error-message.ts";

const FIRST_RETRY_MS = 200;
const MAX_RETRY_MS = 10_000;

export class FailingPaths {
  readonly #log: Logger;
  /** Reads `targets` again, shorter paths first: reading a directory again may settle what is under it. */
  readonly #retry: (targets: string[]) => void;
  readonly #paths = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #round = 0;

  constructor(log: Logger, retry: (targets: string[]) => void) {
    this.#log = log;
    this.#retry = retry;
  }

  failed(target: string, operation: "lstat" | "readdir", error: unknown): void {
    if (!this.#paths.has(target)) {
      const what = operation === "readdir" ? "cannot read watch directory" : "cannot stat watch path";
      this.#log.warn(`${what}; what is registered under it stays until a read succeeds`, { path: target, error: messageOf(error) });
    }
    this.#paths.add(target);
    this.#timer ??= this.#arm();
  }

  /** `target` was read. */
  settled(target: string): void {
    if (!this.#paths.delete(target)) return;
    this.#log.info("watch path readable again", { path: target });
    if (this.#paths.size === 0) this.forget(() => true);
  }

  /** Drops, without a log, paths no longer watched or no longer there; the retry stops with the last. */
  forget(unwanted: (target: string) => boolean): void {
    for (const target of this.#paths) if (unwanted(target)) this.#paths.delete(target);
    if (this.#paths.size > 0) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#round = 0;
  }

  #arm(): NodeJS.Timeout {
    const delay = Math.min(FIRST_RETRY_MS * 2 ** Math.min(this.#round, 30), MAX_RETRY_MS);
    const timer = setTimeout(() => {
      this.#timer = undefined;
      this.#round++;
      this.#retry([...this.#paths].sort((a, b) => a.length - b.length));
      if (this.#paths.size > 0) this.#timer ??= this.#arm();
    }, delay);
    timer.unref();
    return timer;
  }
}
