/**
 * The desired-state populator (the kubelet's plugin watcher): creates each
 * watch directory, walks it once, then keeps the desired state of world in
 * step with filesystem events.
 *
 * One non-recursive `fs.watch` per directory, as the kubelet does with
 * inotify: Node's recursive mode is implemented in JavaScript on Linux and
 * has crashed on subtrees removed with `rm -r` (reference/runtime-notes.md).
 * Each root's parent is watched too, for the root's name alone, so that a
 * root removed and re-created by someone else is watched again at once
 * (watcher-roots.ts).
 * Filesystem calls are synchronous on purpose: each event is handled to the
 * end before the next, so the desired state follows the filesystem's order,
 * and an lstat or a readdir of a registration directory costs microseconds.
 *
 * Only a read that succeeds can drop a socket: a listing without it, or an
 * lstat that says ENOENT. A read that fails (EMFILE, EACCES, EIO) keeps
 * everything under that path as it was, and is retried (watcher-failures.ts).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import type { WatchDir } from "../policy/types.ts";
import type { DesiredStateOfWorld } from "./state.ts";
import { inodeOf } from "./state.ts";
import { ReadFailures } from "./watcher-failures.ts";
import {
  covered,
  isUnder,
  lstatOutcome,
  messageOf,
  readdirOutcome,
  realWatcherFileSystem,
  watchDirectory,
  type WatcherFileSystem,
} from "./watcher-fs.ts";
import { RootParentWatch } from "./watcher-roots.ts";

export interface PluginWatcherOptions {
  dirs: readonly WatchDir[];
  dsw: DesiredStateOfWorld;
  log: Logger;
  now?: () => Date;
  /** The reads the watcher decides with; default Node's. Tests inject read failures here. */
  fileSystem?: WatcherFileSystem;
}

interface WatchedDir {
  watcher: fs.FSWatcher;
  inode: string;
}

/** What one walk learnt: sockets present, directories watched, and paths it could not read. */
interface Walk {
  found: Map<string, string>;
  walked: Set<string>;
  /** Paths whose content is unknown: whatever is at or under them is kept as it was. */
  unknown: Set<string>;
}

export class PluginWatcher {
  #dirs: WatchDir[];
  readonly #dsw: DesiredStateOfWorld;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #fs: WatcherFileSystem;
  readonly #watched = new Map<string, WatchedDir>();
  readonly #rootParents: RootParentWatch;
  /** Roots the agent could not create, warned about once until it can. */
  readonly #uncreatable = new Set<string>();
  readonly #failures: ReadFailures;
  #running = false;

  constructor(options: PluginWatcherOptions) {
    this.#dirs = resolved(options.dirs);
    this.#dsw = options.dsw;
    this.#log = options.log;
    this.#now = options.now ?? (() => new Date());
    this.#fs = options.fileSystem ?? realWatcherFileSystem;
    this.#failures = new ReadFailures({ log: this.#log, retry: (paths) => this.#retry(paths) });
    this.#rootParents = new RootParentWatch({
      log: this.#log,
      fileSystem: this.#fs,
      onRoot: (root) => {
        if (this.#running) this.#observe(root);
      },
    });
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
    this.#watchRootParents();
    for (const dir of this.#dirs) this.#sync(dir.path);
  }

  /**
   * Walks every watch directory again: adds what events missed, drops what
   * vanished. A root that is missing is created again (plugins cannot bind
   * their sockets without it), but only here, at the resync, never at once
   * on its removal, so that an `rm -r` of the tree above it is not fought.
   */
  rescan(): void {
    if (!this.#running) return;
    for (const dir of this.#dirs) this.#create(dir.path);
    this.#watchRootParents();
    for (const dir of this.#dirs) this.#sync(dir.path);
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
    this.#failures.forget((target) => !this.#worthWalking(target) && !this.#watchable(path.dirname(target)));
    for (const root of [...this.#uncreatable]) {
      if (!this.#dirs.some((dir) => dir.path === root)) this.#uncreatable.delete(root);
    }
    this.rescan();
  }

  /** Closes every directory watcher and the retry timer. Safe to call twice; the desired state is left as it is. */
  stop(): void {
    this.#running = false;
    for (const dir of [...this.#watched.keys()]) this.#unwatch(dir);
    this.#rootParents.close();
    this.#failures.close();
  }

  /** Directories whose sockets count: watch roots, and sub-directories of recursive roots. */
  #watchable(dir: string): boolean {
    return this.#dirs.some((root) => root.path === dir || (root.recursive && isUnder(dir, root.path)));
  }

  /** Directories worth walking: watchable ones and those that lead to another watch root. */
  #worthWalking(dir: string): boolean {
    return this.#watchable(dir) || this.#dirs.some((root) => isUnder(root.path, dir));
  }

  #create(root: string): void {
    try {
      fs.mkdirSync(root, { recursive: true, mode: 0o755 });
      if (this.#uncreatable.delete(root)) this.#log.info("watch directory created again", { dir: root });
    } catch (error) {
      if (this.#uncreatable.has(root)) return;
      this.#uncreatable.add(root);
      this.#log.warn("cannot re-create watch directory; trying again at each resync", { dir: root, error: messageOf(error) });
    }
  }

  #onEvent(dir: string, filename: string | null): void {
    if (!this.#running) return;
    if (filename === null) return this.#sync(dir);
    if (path.basename(filename).startsWith(".")) return;
    this.#observe(path.join(dir, filename));
  }

  /** Brings the desired state in line with whatever is at `target` now; a failed lstat changes nothing. */
  #observe(target: string): void {
    const seen = lstatOutcome(this.#fs, target);
    if (seen.kind === "failed") return this.#failures.failed(target, "lstat", seen.error);
    const stat = seen.kind === "ok" ? seen.value : null;
    // A directory is settled by its walk, which reads it, not by this lstat.
    if (!stat?.isDirectory()) this.#failures.settled(target);
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

  /** Walks `dir`, records the sockets found and forgets those under it that are gone; keeps what it could not read. */
  #sync(dir: string): void {
    const walk: Walk = { found: new Map(), walked: new Set(), unknown: new Set() };
    this.#walk(dir, walk);
    const kept = (target: string) => covered(target, walk.unknown);
    for (const [socket, inode] of walk.found) this.#dsw.addOrUpdate(socket, inode, this.#now());
    for (const socket of this.#dsw.paths()) {
      if (isUnder(socket, dir) && !walk.found.has(socket) && !kept(socket)) this.#dsw.remove(socket);
    }
    for (const watchedDir of [...this.#watched.keys()]) {
      const inside = watchedDir === dir || isUnder(watchedDir, dir);
      if (inside && !walk.walked.has(watchedDir) && !kept(watchedDir)) this.#unwatch(watchedDir);
    }
    // Failing paths this walk did not reach any more are gone with a parent that was read.
    this.#failures.forget((target) => (target === dir || isUnder(target, dir)) && !kept(target));
  }

  #walk(dir: string, walk: Walk): void {
    const seen = lstatOutcome(this.#fs, dir);
    if (seen.kind === "failed") return this.#unknown(dir, "lstat", seen.error, walk);
    if (seen.kind === "gone" || !seen.value.isDirectory()) return this.#failures.settled(dir);
    const watchable = this.#watchable(dir);
    // Watch before reading, so that nothing created in between is missed.
    if (watchable && this.#watch(dir, inodeOf(seen.value))) walk.walked.add(dir);
    const listing = readdirOutcome(this.#fs, dir);
    if (listing.kind === "failed") return this.#unknown(dir, "readdir", listing.error, walk);
    this.#failures.settled(dir);
    if (listing.kind === "gone") return;
    for (const name of listing.value) {
      if (name.startsWith(".")) continue;
      const entry = path.join(dir, name);
      const entrySeen = lstatOutcome(this.#fs, entry);
      if (entrySeen.kind === "failed") {
        if (watchable || this.#worthWalking(entry)) this.#unknown(entry, "lstat", entrySeen.error, walk);
        continue;
      }
      if (entrySeen.kind === "ok" && entrySeen.value.isDirectory() && this.#worthWalking(entry)) {
        this.#walk(entry, walk);
        continue;
      }
      this.#failures.settled(entry);
      if (entrySeen.kind === "ok" && entrySeen.value.isSocket() && watchable) walk.found.set(entry, inodeOf(entrySeen.value));
    }
  }

  #unknown(target: string, operation: "lstat" | "readdir", error: string, walk: Walk): void {
    walk.unknown.add(target);
    this.#failures.failed(target, operation, error);
  }

  /** A retry of paths whose read failed: each is looked at again as if an event had named it. */
  #retry(paths: string[]): void {
    if (!this.#running) return;
    for (const target of paths) this.#observe(target);
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
    const watcher = watchDirectory(
      dir,
      this.#log,
      (filename) => this.#onEvent(dir, filename),
      (ended) => {
        if (this.#watched.get(dir)?.watcher === ended) this.#watched.delete(dir);
      },
    );
    if (watcher) this.#watched.set(dir, { watcher, inode });
    return watcher !== null;
  }

  #watchRootParents(): void {
    this.#rootParents.update(this.#dirs.map((dir) => dir.path), (dir) => this.#watchable(dir));
  }

  #unwatch(dir: string): void {
    this.#watched.get(dir)?.watcher.close();
    this.#watched.delete(dir);
  }
}

function resolved(dirs: readonly WatchDir[]): WatchDir[] {
  return dirs.map((dir) => ({ ...dir, path: path.resolve(dir.path) }));
}
