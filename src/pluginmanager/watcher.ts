/**
 * The plugin watcher (the kubelet's pluginwatcher) fills the desired state
 * of world: one non-recursive `fs.watch` per directory, as the kubelet's
 * inotify (Node's recursive mode is JavaScript on Linux and has crashed on
 * `rm -r`), each event handled to the end by synchronous calls, in the
 * filesystem's order. Beyond the kubelet's: a failed read (EMFILE, EIO)
 * keeps what is under it (only ENOENT or a listing without it drops a
 * socket) and is retried with a keyed backoff, 200 ms doubling to 10 s;
 * each root's parent is watched so that a root re-created is watched again
 * at once; what it holds is bounded (watch-limits.ts).
 * An event costs what it touched, not what is known: only a directory
 * walked before makes a sync look for entries gone.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import type { WatchDir } from "../policy/types.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import { messageOf } from "../log/error-message.ts";
import { OperationExecutor } from "../util/operation-executor.ts";
import { type DesiredStateOfWorld, inodeOf } from "./state-of-world.ts";
import { type Skipped, WatchLimits, type WatchLimitsOptions, type WatchLimitsReached } from "./watch-limits.ts";

/** The reads the watcher decides with. Tests inject EMFILE or EIO here, which root cannot provoke; sockets and inotify stay real. */
export interface WatcherFileSystem {
  lstat(target: string): fs.BigIntStats;
  readdir(dir: string): string[];
}

export const realWatcherFileSystem: WatcherFileSystem = { lstat: (target) => fs.lstatSync(target, { bigint: true }), readdir: (dir) => fs.readdirSync(dir) };

export interface PluginWatcherOptions {
  dirs: readonly WatchDir[];
  dsw: DesiredStateOfWorld;
  log: Logger;
  /** Discovery times and the re-read backoff. */
  clock?: Clock;
  fileSystem?: WatcherFileSystem;
  /** Defaults: WATCH_LIMITS.directories; no limit on sockets. */
  limits?: WatchLimitsOptions;
}

/** `roots`: for a root's parent, the names of the roots in it. */
type Watch = { watcher: fs.FSWatcher; inode: string; roots?: Set<string> };
/** What one walk learnt: sockets found, directories watched and read (or tried), left out; what is under `unknown` stays. */
type Walk = { found: Map<string, string>; watched: Set<string>; descended: Set<string>; unknown: Set<string>; skipped: Skipped };

export class PluginWatcher {
  #dirs: WatchDir[];
  readonly #dsw: DesiredStateOfWorld;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #fs: WatcherFileSystem;
  readonly #watched = new Map<string, Watch>();
  readonly #parents = new Map<string, Watch>();
  /** Roots that could not be created, warned about once until they can. */
  readonly #uncreatable = new Set<string>();
  /** Paths whose last read failed, each warned about once until it reads again. */
  readonly #failing = new Set<string>();
  /** Only its backoff windows are used: when one ends, the path is read again. */
  readonly #rereads: OperationExecutor;
  /** Directories walked into: only under these can a sync find something gone. */
  readonly #descended = new Set<string>();
  readonly #limits: WatchLimits;
  #running = false;

  constructor(options: PluginWatcherOptions) {
    this.#dirs = resolved(options.dirs);
    this.#dsw = options.dsw;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    const onReady = (target: string) => void (this.#running && this.#failing.has(target) && this.#sync(target));
    this.#rereads = new OperationExecutor({ backoff: { initialMs: 200, maxMs: 10_000 }, clock: this.#clock, onReady });
    this.#fs = options.fileSystem ?? realWatcherFileSystem;
    this.#limits = new WatchLimits(this.#log, options.limits ?? {});
  }

  /** Creates every watch directory (throws naming the one it cannot create), watches and walks it. */
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
    this.rescan();
  }

  /** Walks every root again. A missing root is re-created here only, so that an `rm -r` above it is not fought. */
  rescan(): void {
    if (!this.#running) return;
    for (const { path: root } of this.#dirs) {
      try {
        fs.mkdirSync(root, { recursive: true, mode: 0o755 });
        if (this.#uncreatable.delete(root)) this.#log.info("watch directory created again", { dir: root });
      } catch (error) {
        if (!this.#uncreatable.has(root)) this.#log.warn("cannot re-create watch directory; trying again at each resync", { dir: root, error: messageOf(error) });
        this.#uncreatable.add(root);
      }
    }
    this.#watchRootParents();
    const skipped = { dirs: 0, sockets: 0 };
    for (const dir of this.#dirs) {
      const walk = this.#sync(dir.path);
      skipped.dirs += walk.skipped.dirs;
      skipped.sockets += walk.skipped.sockets;
    }
    this.#limits.resynced(skipped);
  }

  /** A policy reload: forgets what is no longer under a root, then creates and walks every root. */
  setDirs(dirs: readonly WatchDir[]): void {
    const before = new Set(this.#dirs.map((dir) => dir.path));
    this.#dirs = resolved(dirs);
    if (!this.#running) return;
    const after = new Set(this.#dirs.map((dir) => dir.path));
    for (const dir of after) if (!before.has(dir)) this.#log.info("watch directory added", { dir });
    for (const dir of before) if (!after.has(dir)) this.#log.info("watch directory no longer watched", { dir });
    for (const socket of this.#dsw.paths()) if (!this.#watchable(path.dirname(socket))) this.#dsw.remove(socket);
    for (const dir of [...this.#watched.keys()]) if (!this.#watchable(dir)) this.#unwatch(this.#watched, dir);
    for (const dir of this.#descended) if (!this.#worthWalking(dir)) this.#descended.delete(dir);
    this.#forgetFailing((target) => !this.#worthWalking(target) && !this.#watchable(path.dirname(target)));
    for (const root of this.#uncreatable) if (!after.has(root)) this.#uncreatable.delete(root);
    this.rescan();
  }

  /** Where the watcher stands against WATCH_LIMITS while it leaves something out; null otherwise. */
  limitsReached(): WatchLimitsReached | null {
    return this.#limits.reached(this.#known());
  }

  /** Closes every watch and re-read timer; the desired state is left as it is. */
  stop(): void {
    this.#running = false;
    for (const watches of [this.#watched, this.#parents]) for (const dir of [...watches.keys()]) this.#unwatch(watches, dir);
    this.#descended.clear();
    this.#forgetFailing(() => true);
  }

  /** Directories whose sockets count: roots, and sub-directories of recursive roots. */
  #watchable(dir: string): boolean {
    return this.#dirs.some((root) => root.path === dir || (root.recursive && isUnder(dir, root.path)));
  }

  /** Watchable directories and those that lead to another root. */
  #worthWalking(dir: string): boolean {
    return this.#watchable(dir) || this.#dirs.some((root) => isUnder(root.path, dir));
  }

  /** Brings the desired state and the watches at and under `target` in line with the disk; what is unreadable stays. */
  #sync(target: string): Walk {
    // Nothing under a directory never walked into is known, so only `target` itself can be gone.
    const subtreeKnown = this.#descended.has(target);
    const walk: Walk = { found: new Map(), watched: new Set(), descended: new Set(), unknown: new Set(), skipped: { dirs: 0, sockets: 0 } };
    this.#walk(target, walk);
    const gone = (entry: string) =>
      (entry === target || isUnder(entry, target)) &&
      !(walk.unknown.size > 0 && [...walk.unknown].some((unknown) => entry === unknown || isUnder(entry, unknown)));
    // Gone first, so that the room they leave under the socket limit is there for the new ones.
    const known = subtreeKnown ? this.#dsw.paths() : this.#dsw.get(target) ? [target] : [];
    for (const socket of known) if (!walk.found.has(socket) && gone(socket)) this.#dsw.remove(socket);
    const watchedBefore = this.#watched.size;
    if (subtreeKnown) {
      for (const watched of [...this.#watched.keys()]) if (!walk.watched.has(watched) && gone(watched)) this.#unwatch(this.#watched, watched);
      for (const dir of this.#descended) if (!walk.descended.has(dir) && gone(dir)) this.#descended.delete(dir);
    }
    // The walk counted watches of directories it then found gone: walk again with their room.
    if (walk.skipped.dirs > 0 && this.#watched.size < watchedBefore) return this.#sync(target);
    for (const dir of walk.descended) this.#descended.add(dir);
    const socketLimit = this.#limits.sockets;
    for (const [socket, inode] of walk.found) {
      if (this.#dsw.get(socket) === undefined && this.#dsw.size >= socketLimit) walk.skipped.sockets++;
      else this.#dsw.addOrUpdate(socket, inode, new Date(this.#clock.now()));
    }
    // Failing paths this walk no longer reached went with a parent that was read.
    this.#forgetFailing(gone);
    this.#limits.walked(walk.skipped, this.#known());
    return walk;
  }

  #known() {
    return { directories: this.#watched.size, sockets: this.#dsw.size };
  }

  /** Records what is at `target`: a socket of a watchable directory, or a directory worth walking and its content. */
  #walk(target: string, walk: Walk): void {
    const inWatchable = this.#watchable(path.dirname(target));
    const worthWalking = this.#worthWalking(target);
    const stat = this.#read(target, () => this.#fs.lstat(target), "lstat", inWatchable || worthWalking ? walk : null);
    if (stat === undefined) return;
    if (!stat?.isDirectory() || !worthWalking) {
      this.#settled(target);
      if (stat?.isSocket() && inWatchable) walk.found.set(target, inodeOf(stat));
      return;
    }
    const isRoot = this.#dirs.some((root) => root.path === target);
    if (this.#watchable(target) && !isRoot && !this.#watched.has(target) && this.#watched.size >= this.#limits.directories) {
      walk.skipped.dirs++;
      return;
    }
    // Watched before it is read, so that nothing created in between is missed.
    if (this.#watchable(target) && this.#watch(this.#watched, target, inodeOf(stat))) walk.watched.add(target);
    walk.descended.add(target);
    const names = this.#read(target, () => this.#fs.readdir(target).sort(), "readdir", walk);
    if (names === undefined) return;
    this.#settled(target);
    for (const name of names ?? []) if (!name.startsWith(".")) this.#walk(path.join(target, name), walk);
  }

  /** null: `target` is gone (ENOENT, ENOTDIR); undefined: the read failed, recorded (and unknown to `walk`) unless `walk` is null. */
  #read<T>(target: string, read: () => T, operation: "lstat" | "readdir", walk: Walk | null): T | null | undefined {
    try {
      return read();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException | undefined)?.code;
      if (code === "ENOENT" || code === "ENOTDIR") return null;
      if (walk === null) return undefined;
      walk.unknown.add(target);
      const what = operation === "readdir" ? "cannot read watch directory" : "cannot stat watch path";
      if (!this.#failing.has(target)) this.#log.warn(`${what}; what is registered under it stays until a read succeeds`, { path: target, error: messageOf(error) });
      this.#failing.add(target);
      this.#rereads.backOff(target);
      return undefined;
    }
  }

  /** A failing path read again, or (`quietly`) no longer watched or no longer there. */
  #settled(target: string, quietly = false): void {
    if (!this.#failing.delete(target)) return;
    this.#rereads.resetBackoff(target);
    if (!quietly) this.#log.info("watch path readable again", { path: target });
  }

  #forgetFailing(unwanted: (target: string) => boolean): void {
    for (const target of this.#failing) if (unwanted(target)) this.#settled(target, true);
  }

  /** Watches each root's parent for the root's name, unless it is a plugin directory (which reports the root already). */
  #watchRootParents(): void {
    const wanted = new Map<string, Set<string>>();
    for (const { path: root } of this.#dirs) {
      const parent = path.dirname(root);
      if (parent !== root && !this.#watchable(parent)) wanted.set(parent, (wanted.get(parent) ?? new Set()).add(path.basename(root)));
    }
    for (const parent of [...this.#parents.keys()]) if (!wanted.has(parent)) this.#unwatch(this.#parents, parent);
    for (const [parent, roots] of wanted) {
      // A missing parent is left to the next resync.
      const stat = this.#read(parent, () => this.#fs.lstat(parent), "lstat", null);
      if (stat?.isDirectory() && this.#watch(this.#parents, parent, inodeOf(stat))) this.#parents.get(parent)!.roots = roots;
    }
  }

  /** Watches `dir` (again when its inode changed); false when it cannot be watched. */
  #watch(watches: Map<string, Watch>, dir: string, inode: string): boolean {
    if (watches.get(dir)?.inode === inode) return true;
    this.#unwatch(watches, dir);
    try {
      const watcher = fs.watch(dir, { persistent: true }, (_event, filename) => this.#onEvent(watches, dir, filename));
      watcher.on("error", (error) => {
        // The parent's event or the next resync deals with what was under it.
        this.#log.debug("directory watch ended", { dir, error: messageOf(error) });
        watcher.close();
        if (watches.get(dir)?.watcher === watcher) watches.delete(dir);
      });
      watches.set(dir, { watcher, inode });
      return true;
    } catch (error) {
      this.#log.warn("cannot watch directory", { dir, error: messageOf(error) });
      return false;
    }
  }

  #unwatch(watches: Map<string, Watch>, dir: string): void {
    watches.get(dir)?.watcher.close();
    watches.delete(dir);
  }

  #onEvent(watches: Map<string, Watch>, dir: string, filename: string | null): void {
    if (!this.#running) return;
    const roots = watches.get(dir)?.roots;
    if (watches === this.#parents) {
      for (const name of roots ?? []) if (filename === null || filename === name) this.#sync(path.join(dir, name));
    } else if (filename === null) this.#sync(dir);
    // A new directory is walked at once: sockets made right after its mkdir can precede its watch (Deno misses them).
    else if (!path.basename(filename).startsWith(".")) this.#sync(path.join(dir, filename));
  }
}

/** Whether `target` is strictly under `dir`. */
export function isUnder(target: string, dir: string): boolean {
  return target.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

function resolved(dirs: readonly WatchDir[]): WatchDir[] {
  return dirs.map((dir) => ({ ...dir, path: path.resolve(dir.path) }));
}
