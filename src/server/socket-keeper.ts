/**
 * Keeps one of edgeplug's listening sockets (the API socket, kubelet.sock)
 * at its path while the agent runs. The kubelet serves an unlinked socket
 * forever once its file is removed, and no plugin can register again until
 * it restarts. edgeplug serves it again instead: device plugins watch for
 * kubelet.sock to be created (what they see after a kubelet restart) and
 * register again.
 *
 * A file removed from a directory that is still there is served again
 * within moments (the directory is watched). When the directory itself
 * went, the socket comes back at the next periodic check, so that an
 * `rm -r` still running is not fought. A file another process put at the path is never
 * replaced: that is logged once.
 *
 * @example
 * ```ts
 * const api = await SocketKeeper.start({ socketPath, what: "api socket", log, serve: () => serveApiSocket(options) });
 * await api.close();
 * ```
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import { messageOf } from "../log/error-message.ts";

export interface KeptServer {
  close(): Promise<void>;
}

export interface SocketKeeperOptions<Server extends KeptServer> {
  socketPath: string;
  /** Serves at `socketPath`: at start, and again after the file was removed. */
  serve: () => Promise<Server>;
  /** Names the socket in log messages, e.g. "api socket". */
  what: string;
  log: Logger;
  /** Period of the check that catches what the directory watch cannot see, read at each check (default 10 s). */
  checkIntervalMs?: () => number;
  /**
   * Instead of a timer of its own, the check rides this periodic tick (the
   * agent's resync): subscribes `check`, returns the unsubscribe. Two timers
   * of the same period armed moments apart wake an idle process twice.
   */
  ticks?: (check: () => void) => () => void;
  clock?: Clock;
}

/** Device, inode and birth time: ext4 hands a freed inode number to the next file at once. */
type FileIdentity = { dev: bigint; ino: bigint; birthtimeNs: bigint };

const DEFAULT_CHECK_INTERVAL_MS = 10_000;
/** From a directory event to the look at the path: longer than an `rm -r` takes between a socket and its directory. */
const SETTLE_MS = 200;

export class SocketKeeper<Server extends KeptServer> {
  readonly #options: SocketKeeperOptions<Server>;
  readonly #clock: Clock;
  readonly #directory: string;
  readonly #name: string;
  #server: Server | null;
  #identity: FileIdentity | null;
  #watch: { watcher: fs.FSWatcher; directory: FileIdentity } | null = null;
  #cancelCheck: () => void = () => {};
  /** Cancels the look that follows a directory event, while one is pending. */
  #cancelSettle: (() => void) | null = null;
  #serving: Promise<void> | null = null;
  /** The last problem logged (the path taken by another file, serving failed), so that it is logged once. */
  #reported: string | null = null;
  #closed = false;

  /** Serves the socket (rejecting as `serve` does) and starts keeping it. */
  static async start<Server extends KeptServer>(options: SocketKeeperOptions<Server>): Promise<SocketKeeper<Server>> {
    const server = await options.serve();
    return new SocketKeeper(options, server);
  }

  private constructor(options: SocketKeeperOptions<Server>, server: Server) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#directory = path.dirname(options.socketPath);
    this.#name = path.basename(options.socketPath);
    this.#server = server;
    this.#identity = identityOf(options.socketPath) ?? null;
    this.#watchDirectory();
    this.#armCheck();
  }

  /** The server serving now; null while serving again failed (retried at each check). */
  get server(): Server | null {
    return this.#server;
  }

  /** Whether a server of this keeper listens at the path now (the socket there is the one it bound). */
  get serving(): boolean {
    if (this.#server === null || this.#identity === null) return false;
    const identity = identityOf(this.#options.socketPath);
    return identity !== null && identity !== undefined && sameFile(identity, this.#identity);
  }

  /** Stops keeping and closes the server; waits for a serve in progress. Safe to call twice. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#cancelCheck();
    this.#cancelSettle?.();
    this.#watch?.watcher.close();
    this.#watch = null;
    await this.#serving;
    const server = this.#server;
    this.#server = null;
    await server?.close();
  }

  /** Looks at the path now (the directory watch and the periodic check call it). */
  check(): void {
    if (this.#closed || this.#serving) return;
    const identity = identityOf(this.#options.socketPath);
    if (identity === undefined) return;
    // Serving again also after a failed attempt: what held the path then may have gone.
    if (identity === null || this.#server === null) {
      this.#serving = this.#serveAgain().finally(() => (this.#serving = null));
      return;
    }
    if (this.#identity !== null && sameFile(identity, this.#identity)) {
      this.#reported = null;
    } else {
      this.#report(`${this.#options.what} was replaced by a file edgeplug did not create; it is left alone`);
    }
    this.#watchDirectory();
  }

  async #serveAgain(): Promise<void> {
    const { log, socketPath, what } = this.#options;
    if (this.#server !== null) log.warn(`${what} was removed; serving it again`, { socket: socketPath });
    // Its clients are cut: they reconnect to the new socket, and one server's limits never count twice.
    const previous = this.#server;
    this.#server = null;
    this.#identity = null;
    await previous?.close();
    if (this.#closed) return;
    try {
      const server = await this.#options.serve();
      if (this.#closed) return void (await server.close());
      this.#server = server;
      this.#identity = identityOf(socketPath) ?? null;
      this.#reported = null;
      log.info(`${what} serving again`, { socket: socketPath });
    } catch (error) {
      this.#report(`cannot serve the ${what} again; trying again every ${this.#intervalMs / 1000} s: ${messageOf(error)}`);
    }
    this.#watchDirectory();
  }

  #report(problem: string): void {
    if (this.#reported === problem) return;
    this.#reported = problem;
    this.#options.log.error(problem, { socket: this.#options.socketPath });
  }

  get #intervalMs(): number {
    return this.#options.checkIntervalMs?.() ?? DEFAULT_CHECK_INTERVAL_MS;
  }

  #armCheck(): void {
    if (this.#options.ticks) {
      this.#cancelCheck = this.#options.ticks(() => this.check());
      return;
    }
    this.#cancelCheck = this.#clock.setTimer(() => {
      this.check();
      if (!this.#closed) this.#armCheck();
    }, this.#intervalMs);
  }

  /** Watches the socket's directory, again when it was re-created; a missing one is left to the periodic check. */
  #watchDirectory(): void {
    if (this.#closed) return;
    const directory = identityOf(this.#directory);
    if (this.#watch && directory && sameFile(directory, this.#watch.directory)) return;
    this.#watch?.watcher.close();
    this.#watch = null;
    if (!directory) return;
    try {
      const watcher = fs.watch(this.#directory, { persistent: false }, (_event, filename) => {
        if (filename !== null && filename !== this.#name) return;
        // Looked at a moment later, and only if the directory is still there then: an `rm -r` removes the
        // socket first and the directory last, and a socket served again in between would make it fail.
        this.#cancelSettle ??= this.#clock.setTimer(() => {
          this.#cancelSettle = null;
          const still = identityOf(this.#directory);
          if (still && sameFile(still, directory)) this.check();
        }, SETTLE_MS);
      });
      watcher.on("error", () => {
        watcher.close();
        if (this.#watch?.watcher === watcher) this.#watch = null;
      });
      this.#watch = { watcher, directory };
    } catch (error) {
      this.#options.log.debug(`cannot watch the ${this.#options.what}'s directory; checking every ${this.#intervalMs / 1000} s`, {
        directory: this.#directory,
        error: messageOf(error),
      });
    }
  }
}

/** null: nothing there; undefined: it could not be read, which proves nothing. */
function identityOf(target: string): FileIdentity | null | undefined {
  try {
    const stat = fs.lstatSync(target, { bigint: true });
    return { dev: stat.dev, ino: stat.ino, birthtimeNs: stat.birthtimeNs };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === "ENOENT" || code === "ENOTDIR" ? null : undefined;
  }
}

function sameFile(a: FileIdentity, b: FileIdentity): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.birthtimeNs === b.birthtimeNs;
}
