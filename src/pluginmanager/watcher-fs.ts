/**
 * The two filesystem reads the plugin watcher decides with, and how their
 * failures are told apart: a path that is really gone (ENOENT, ENOTDIR) may
 * drop what was under it; any other failure (EMFILE, ENFILE, EACCES, EIO, ...)
 * says nothing about what is there, so the watcher keeps what it knew.
 *
 * @example
 * ```ts
 * const seen = lstatOutcome(realWatcherFileSystem, "/var/lib/kubelet/plugins_registry");
 * if (seen.kind === "failed") keepDesiredState(); // and try again later
 * ```
 */
import * as fs from "node:fs";
import type { Logger } from "../log/logger.ts";

/**
 * What the watcher reads from the filesystem. Replaceable so that a test can
 * make one directory's read fail the way a descriptor-starved or failing
 * disk does (EMFILE, EIO), which root cannot provoke with permissions, while
 * the sockets, the directories and their inotify events stay real.
 */
export interface WatcherFileSystem {
  lstat(target: string): fs.BigIntStats;
  readdir(dir: string): string[];
}

/** Node's synchronous calls, as the agent uses them. */
export const realWatcherFileSystem: WatcherFileSystem = {
  lstat: (target) => fs.lstatSync(target, { bigint: true }),
  readdir: (dir) => fs.readdirSync(dir),
};

/** What a read found: a value, a path that is gone, or a failure that proves nothing. */
export type ReadOutcome<T> = { kind: "ok"; value: T } | { kind: "gone" } | { kind: "failed"; error: string };

/** The entry at `target`, not following symlinks. */
export function lstatOutcome(fileSystem: WatcherFileSystem, target: string): ReadOutcome<fs.BigIntStats> {
  return attempt(() => fileSystem.lstat(target));
}

/** The names in `dir`, sorted. */
export function readdirOutcome(fileSystem: WatcherFileSystem, dir: string): ReadOutcome<string[]> {
  return attempt(() => fileSystem.readdir(dir).sort());
}

function attempt<T>(read: () => T): ReadOutcome<T> {
  try {
    return { kind: "ok", value: read() };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException | undefined)?.code;
    if (code === "ENOENT" || code === "ENOTDIR") return { kind: "gone" };
    return { kind: "failed", error: messageOf(error) };
  }
}

/** An error's message, for logs. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A non-recursive `fs.watch` of `dir` calling `onEvent` with each entry's
 * name (null when the kernel dropped events); `onEnd` runs once if the watch
 * fails later (the directory vanished). Null, logged, when it cannot be made.
 */
export function watchDirectory(
  dir: string,
  log: Logger,
  onEvent: (filename: string | null) => void,
  onEnd: (watcher: fs.FSWatcher) => void,
): fs.FSWatcher | null {
  try {
    const watcher = fs.watch(dir, { persistent: true }, (_event, filename) => onEvent(filename));
    watcher.on("error", (error) => {
      // The parent's event or the next resync deals with what was under it.
      log.debug("directory watch ended", { dir, error: messageOf(error) });
      watcher.close();
      onEnd(watcher);
    });
    return watcher;
  } catch (error) {
    log.warn("cannot watch directory", { dir, error: messageOf(error) });
    return null;
  }
}

/** Whether `target` is strictly under `dir`. */
export function isUnder(target: string, dir: string): boolean {
  return target.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

/** Whether `target` is one of `paths` or under one of them. */
export function covered(target: string, paths: ReadonlySet<string>): boolean {
  if (paths.size === 0) return false;
  if (paths.has(target)) return true;
  for (const dir of paths) if (isUnder(target, dir)) return true;
  return false;
}
