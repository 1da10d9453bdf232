/**
 * The desired-state populator (the kubelet's plugin watcher): creates each
 * watch directory, walks it once, then keeps the desired state of world in
 * step with filesystem events.
 *
 * One non-recursive `fs.watch` per directory, as the kubelet does with
 * inotify: Node's recursive mode is implemented in JavaScript on Linux and
 * has crashed on subtrees removed with `rm -r` (reference/runtime-notes.md).
 * Filesystem calls are synchronous on purpose: each event is handled to the
 * end before the next, so the desired state follows the filesystem's order,
 * and an lstat or a readdir of a registration directory costs microseconds.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import type { WatchDir } from "../policy/types.ts";
import type { DesiredStateOfWorld } from "./state.ts";
import { inodeOf } from "./state.ts";

export interface PluginWatcherOptions {
  dirs: readonly WatchDir[];
  dsw: DesiredStateOfWorld;
  log: Logger;
  now?: () => Date;
}

interface WatchedDir {
  watcher: fs.FSWatcher;
  inode: string;
}

export class PluginWatcher {
  #dirs: WatchDir[];
  readonly #dsw: DesiredStateOfWorld;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #watched = new Map<string, WatchedDir>();
  #running = false;

  constructor(options: PluginWatcherOptions) {
    this.#dirs = resolved(options.dirs);
    this.#dsw = options.dsw;
    this.#log = options.log;
    this.#now = options.now ?? (() => new Date());
  }

  /**
   * Creates every watch directory (throws naming the one it cannot create),
   * watches it and records the sockets already in it.
   */
  start(): void {
    if (this.#running) return;
    for (const dir of this.#dirs) {
      try {
        fs.mkdirSync(dir.path, { recursive: true, mode: 0o755 });
      } catch (error) {
        throw new Error(`cannot create watch directory ${dir.path}: ${messageOf(error)}`, { cause: error });
      }
    }
    this.#running = true;
    for (const dir of this.#dirs) this.#sync(dir.path);
  }

  /** Walks every watch directory again: adds what events missed, drops what vanished. */
  rescan(): void {
    if (!this.#running) return;
    for (const dir of this.#dirs) {
      try {
        fs.mkdirSync(dir.path, { recursive: true, mode: 0o755 });
      } catch (error) {
        this.#log.warn("cannot re-create watch directory", { dir: dir.path, error: messageOf(error) });
      }
      this.#sync(dir.path);
    }
  }

  /**
   * Watches `dirs` from now on (a policy reload): sockets and directories no
   * longer under a watch root are forgotten, then every root is created if
   * missing and walked, so added roots and changed `recursive` take effect.
   * A root that cannot be created is logged and tried again at each rescan.
   */
  setDirs(dirs: readonly WatchDir[]): void {
    this.#dirs = resolved(dirs);
    if (!this.#running) return;
    for (const socket of this.#dsw.paths()) {
      if (!this.#watchable(path.dirname(socket))) this.#dsw.remove(socket);
    }
    for (const dir of [...this.#watched.keys()]) {
      if (!this.#watchable(dir)) this.#unwatch(dir);
    }
    this.rescan();
  }

  /** Closes every directory watcher. Safe to call twice; the desired state is left as it is. */
  stop(): void {
    this.#running = false;
    for (const dir of [...this.#watched.keys()]) this.#unwatch(dir);
  }

  /** Directories whose sockets count: watch roots, and sub-directories of recursive roots. */
  #watchable(dir: string): boolean {
    return this.#dirs.some((root) => root.path === dir || (root.recursive && isUnder(dir, root.path)));
  }

  /** Directories worth walking: watchable ones and those that lead to another watch root. */
  #worthWalking(dir: string): boolean {
    return this.#watchable(dir) || this.#dirs.some((root) => isUnder(root.path, dir));
  }

  #onEvent(dir: string, filename: string | null): void {
    if (!this.#running) return;
    if (filename === null) return this.#sync(dir);
    if (path.basename(filename).startsWith(".")) return;
    this.#observe(path.join(dir, filename));
  }

  /** Brings the desired state in line with whatever is at `target` now. */
  #observe(target: string): void {
    const stat = lstatOrNull(target);
    if (stat?.isSocket()) {
      this.#forgetTree(target, { keepSelf: true });
      if (this.#watchable(path.dirname(target))) this.#dsw.addOrUpdate(target, inodeOf(stat), this.#now());
      return;
    }
    this.#dsw.remove(target);
    if (stat?.isDirectory() && this.#worthWalking(target)) {
      // Watched and walked at once: sockets created right after mkdir can
      // precede the watch (Deno misses them otherwise).
      this.#sync(target);
      return;
    }
    this.#forgetTree(target, { keepSelf: false });
  }

  /** Walks `dir`, records the sockets found and forgets those under it that are gone. */
  #sync(dir: string): void {
    const found = new Map<string, string>();
    const walked = new Set<string>();
    this.#walk(dir, found, walked);
    for (const [socket, inode] of found) this.#dsw.addOrUpdate(socket, inode, this.#now());
    for (const socket of this.#dsw.paths()) {
      if (isUnder(socket, dir) && !found.has(socket)) this.#dsw.remove(socket);
    }
    for (const watchedDir of [...this.#watched.keys()]) {
      if ((watchedDir === dir || isUnder(watchedDir, dir)) && !walked.has(watchedDir)) this.#unwatch(watchedDir);
    }
  }

  #walk(dir: string, found: Map<string, string>, walked: Set<string>): void {
    const stat = lstatOrNull(dir);
    if (!stat?.isDirectory()) return;
    const watchable = this.#watchable(dir);
    // Watch before reading, so that nothing created in between is missed.
    if (watchable && this.#watch(dir, inodeOf(stat))) walked.add(dir);
    let names: string[];
    try {
      names = fs.readdirSync(dir).sort();
    } catch (error) {
      this.#log.warn("cannot read watch directory", { dir, error: messageOf(error) });
      return;
    }
    for (const name of names) {
      if (name.startsWith(".")) continue;
      const entry = path.join(dir, name);
      const entryStat = lstatOrNull(entry);
      if (entryStat?.isSocket()) {
        if (watchable) found.set(entry, inodeOf(entryStat));
      } else if (entryStat?.isDirectory() && this.#worthWalking(entry)) {
        this.#walk(entry, found, walked);
      }
    }
  }

  /** Forgets sockets and watchers under `target` (and `target`'s own watcher unless keepSelf). */
  #forgetTree(target: string, options: { keepSelf: boolean }): void {
    for (const socket of this.#dsw.paths()) {
      if (isUnder(socket, target)) this.#dsw.remove(socket);
    }
    for (const dir of [...this.#watched.keys()]) {
      if (isUnder(dir, target) || (dir === target && !options.keepSelf)) this.#unwatch(dir);
    }
  }

  /** Watches `dir` (again when its inode changed); false when it cannot be watched. */
  #watch(dir: string, inode: string): boolean {
    const current = this.#watched.get(dir);
    if (current?.inode === inode) return true;
    if (current) this.#unwatch(dir);
    try {
      const watcher = fs.watch(dir, { persistent: true }, (_event, filename) => this.#onEvent(dir, filename));
      watcher.on("error", (error) => {
        // A watched directory that vanishes may report an error; the parent's
        // event or the next resync deals with its sockets.
        this.#log.debug("directory watch ended", { dir, error: messageOf(error) });
        if (this.#watched.get(dir)?.watcher === watcher) this.#unwatch(dir);
      });
      this.#watched.set(dir, { watcher, inode });
      return true;
    } catch (error) {
      this.#log.warn("cannot watch directory", { dir, error: messageOf(error) });
      return false;
    }
  }

  #unwatch(dir: string): void {
    this.#watched.get(dir)?.watcher.close();
    this.#watched.delete(dir);
  }
}

function resolved(dirs: readonly WatchDir[]): WatchDir[] {
  return dirs.map((dir) => ({ ...dir, path: path.resolve(dir.path) }));
}

function lstatOrNull(target: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(target, { bigint: true });
  } catch {
    return null;
  }
}

function isUnder(target: string, dir: string): boolean {
  return target.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
