/**
 * What the plugin watcher holds at most, where the kubelet watches and keeps
 * whatever a recursive root holds: sub-directories watched (each an inotify
 * watch, walked at every resync, which grows with them: docs/performance.md,
 * "Costs behind choices in the code") and sockets in
 * the desired state (each a registration attempt, a status record). What is
 * past a limit is left out, warned once, and taken in by the first resync
 * that finds room.
 */
import type { Logger } from "../log/logger.ts";

/** Directories watched, roots included (a root is watched even past it); sockets per `maxPlugins` slot (upgrades, stale, refused). */
export const WATCH_LIMITS = { directories: 1024, socketsPerPluginSlot: 4 } as const;

/** What one walk left out. */
export interface Skipped {
  dirs: number;
  sockets: number;
}

/** Directories watched and sockets in the desired state. */
type Known = { directories: number; sockets: number };

/** Where the watcher stands against its limits while it leaves something out (status's `watchLimits`). */
export interface WatchLimitsReached {
  watchedDirectories: number;
  directoryLimit: number;
  knownSockets: number;
  socketLimit: number;
  skippedDirectories: number;
  skippedSockets: number;
}

export interface WatchLimitsOptions {
  directories?: number;
  sockets?: () => number;
  changed?: () => void;
}

export class WatchLimits {
  readonly directories: number;
  /** Read at each sync: a reload may change it. */
  readonly #sockets: () => number;
  readonly #log: Logger;
  /** Set from the first walk that leaves something out to the first resync that leaves nothing out. */
  #leftOut: Skipped | null = null;
  /** Told when what is left out starts, changes or ends (WatchEvents' `watchLimits`). */
  readonly #changed: () => void;

  constructor(log: Logger, options: WatchLimitsOptions) {
    this.#log = log;
    this.directories = options.directories ?? WATCH_LIMITS.directories;
    this.#sockets = options.sockets ?? (() => Infinity);
    this.#changed = options.changed ?? (() => {});
  }

  get sockets(): number {
    return this.#sockets();
  }

  /** After any walk; only the first that leaves something out sets the counts, which a resync then replaces. */
  walked(skipped: Skipped, known: Known): void {
    if (skipped.dirs + skipped.sockets === 0 || this.#leftOut !== null) return;
    this.#leftOut = { ...skipped };
    this.#log.warn("watch limits reached; what is past them is not watched until a resync finds room", { ...this.reached(known) });
    this.#changed();
  }

  /** After a full resync, with what all its walks left out (each walk warned already). */
  resynced(skipped: Skipped): void {
    const before = this.#leftOut;
    if (skipped.dirs + skipped.sockets > 0) {
      this.#leftOut = { ...skipped };
      if (before?.dirs !== skipped.dirs || before.sockets !== skipped.sockets) this.#changed();
      return;
    }
    if (before === null) return;
    this.#leftOut = null;
    this.#log.info("watch limits no longer reached: every directory and socket is watched again");
    this.#changed();
  }

  /** null while nothing is left out. */
  reached(known: Known): WatchLimitsReached | null {
    if (this.#leftOut === null) return null;
    return {
      watchedDirectories: known.directories,
      directoryLimit: this.directories,
      knownSockets: known.sockets,
      socketLimit: this.sockets,
      skippedDirectories: this.#leftOut.dirs,
      skippedSockets: this.#leftOut.sockets,
    };
  }
}
