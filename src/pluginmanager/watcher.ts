/**
 * The plugin watcher (the kubelet's pluginwatcher): creates each watch
 * directory, walks it, then keeps the desired state of world in step with
 * filesystem events. One non-recursive `fs.watch` per directory, as the
 * kubelet uses inotify: Node's recursive mode is JavaScript on Linux and has
 * crashed on `rm -r` (reference/runtime-notes.md). Calls are synchronous so
 * that each event is handled to the end, in the filesystem's order.
 *
 * Unlike the kubelet's: only a read that succeeds (a listing without the
 * socket, an lstat saying ENOENT) drops a socket; a failed read (EMFILE,
 * EACCES, EIO) proves nothing, so what is under it is kept, logged once and
 * read again with a doubling delay. Each root's parent is watched for the
 * root's name, so a root removed and re-created is watched again at once.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import type { WatchDir } from "../policy/types.ts";
import { type DesiredStateOfWorld, inodeOf } from "./state.ts";
import { messageOf } from "./types.ts";

/** The reads the watcher decides with. Tests inject EMFILE or EIO here, which root cannot provoke; sockets and inotify stay real. */
export interface WatcherFileSystem {
  lstat(target: string): fs.BigIntStats;
  readdir(dir: string): string[];
}

export const realWatcherFileSystem: WatcherFileSystem = {
  lstat: (target) => fs.lstatSync(target, { bigint: true }),
  readdir: (dir) => fs.readdirSync(dir),
};

export interface PluginWatcherOptions {
  dirs: readonly WatchDir[];
  dsw: DesiredStateOfWorld;
  log: Logger;
  now?: () => Date;
  fileSystem?: WatcherFileSystem;
}

/** `gone` (ENOENT, ENOTDIR) may drop what was there; `failed` says nothing about it. */
type Read<T> = { kind: "ok"; value: T } | { kind: "gone" } | { kind: "failed"; error: string };
type ReadOperation = "lstat" | "readdir";
interface Watch {
  watcher: fs.FSWatcher;
  inode: string;
}
/** What one walk learnt; whatever is at or under an `unknown` path is kept as it was. */
interface Walk {
  found: Map<string, string>;
  walked: Set<string>;
  unknown: Set<string>;
}

const FIRST_RETRY_MS = 200;
const MAX_RETRY_MS = 10_000;

export class PluginWatcher {
  #dirs: WatchDir[];
  readonly #dsw: DesiredStateOfWorld;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #fs: WatcherFileSystem;
  readonly #watched = new Map<string, Watch>();
  /** Parents of watch roots, watched only for the roots' names. */
  readonly #parents = new Map<string, Watch & { roots: Set<string> }>();
  /** Roots the agent could not create, warned about once until it can. */
  readonly #uncreatable = new Set<string>();
  /** Paths whose last read failed, each logged when it starts failing and when it reads again. */
  readonly #failing = new Map<string, ReadOperation>();
  #retryTimer: NodeJS.Timeout | undefined;
  #retryRound = 0;
  #running = false;

  constructor(options: PluginWatcherOptions) {
    this.#dirs = resolved(options.dirs);
    this.#dsw = options.dsw;
    this.#log = options.log;
    this.#now = options.now ?? (() => new Date());
    this.#fs = options.fileSystem ?? realWatcherFileSystem;
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

  /**
   * Walks every watch directory again. A missing root is re-created here
   * only, never at once on its removal, so an `rm -r` above it is not fought.
   */
  rescan(): void {
    if (!this.#running) return;
    for (const dir of this.#dirs) this.#create(dir.path);
    this.#watchRootParents();
    for (const dir of this.#dirs) this.#sync(dir.path);
  }

  /** A policy reload: forgets what is no longer under a root, then creates and walks every root. */
  setDirs(dirs: readonly WatchDir[]): void {
    const before = new Set(this.#dirs.map((dir) => dir.path));
    this.#dirs = resolved(dirs);
    if (!this.#running) return;
    const after = new Set(this.#dirs.map((dir) => dir.path));
    for (const dir of after) if (!before.has(dir)) this.#log.info("watch directory added", { dir });
    for (const dir of before) if (!after.has(dir)) this.#log.info("watch directory no longer watched", { dir });
    for (const socket of this.#dsw.paths()) {
      if (!this.#watchable(path.dirname(socket))) this.#dsw.remove(socket);
    }
    for (const dir of [...this.#watched.keys()]) {
      if (!this.#watchable(dir)) this.#unwatch(dir);
    }
    this.#forgetFailures((target) => !this.#worthWalking(target) && !this.#watchable(path.dirname(target)));
    for (const root of [...this.#uncreatable]) {
      if (!this.#dirs.some((dir) => dir.path === root)) this.#uncreatable.delete(root);
    }
    this.rescan();
  }

  /** Closes every watch and the retry timer; the desired state is left as it is. */
  stop(): void {
    this.#running = false;
    for (const dir of [...this.#watched.keys()]) this.#unwatch(dir);
    for (const parent of this.#parents.values()) parent.watcher.close();
    this.#parents.clear();
    this.#failing.clear();
    this.#resetRetry();
  }

  /** Directories whose sockets count: roots, and sub-directories of recursive roots. */
  #watchable(dir: string): boolean {
    return this.#dirs.some((root) => root.path === dir || (root.recursive && isUnder(dir, root.path)));
  }

  /** Watchable directories and those that lead to another root. */
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
    if (!path.basename(filename).startsWith(".")) this.#observe(path.join(dir, filename));
  }

  /** Brings the desired state in line with whatever is at `target` now; a failed lstat changes nothing. */
  #observe(target: string): void {
    const seen = this.#read(() => this.#fs.lstat(target));
    if (seen.kind === "failed") return this.#failed(target, "lstat", seen.error);
    const stat = seen.kind === "ok" ? seen.value : null;
    // A directory is settled by its walk, which reads it.
    if (!stat?.isDirectory()) this.#settled(target);
    if (stat?.isSocket()) {
      this.#forgetTree(target, true);
      if (this.#watchable(path.dirname(target))) this.#dsw.addOrUpdate(target, inodeOf(stat), this.#now());
      return;
    }
    this.#dsw.remove(target);
    // Walked at once: sockets created right after mkdir can precede the watch (Deno misses them otherwise).
    if (stat?.isDirectory() && this.#worthWalking(target)) return this.#sync(target);
    this.#forgetTree(target, false);
  }

  /** Walks `dir`: records the sockets found, forgets those under it that are gone, keeps what it could not read. */
  #sync(dir: string): void {
    const walk: Walk = { found: new Map(), walked: new Set(), unknown: new Set() };
    this.#walk(dir, walk);
    const kept = (target: string) => walk.unknown.size > 0 && [...walk.unknown].some((dir) => target === dir || isUnder(target, dir));
    for (const [socket, inode] of walk.found) this.#dsw.addOrUpdate(socket, inode, this.#now());
    for (const socket of this.#dsw.paths()) {
      if (isUnder(socket, dir) && !walk.found.has(socket) && !kept(socket)) this.#dsw.remove(socket);
    }
    for (const watched of [...this.#watched.keys()]) {
      if ((watched === dir || isUnder(watched, dir)) && !walk.walked.has(watched) && !kept(watched)) this.#unwatch(watched);
    }
    // Failing paths this walk no longer reached went with a parent that was read.
    this.#forgetFailures((target) => (target === dir || isUnder(target, dir)) && !kept(target));
  }

  #walk(dir: string, walk: Walk): void {
    const unknown = (target: string, operation: ReadOperation, error: string) => {
      walk.unknown.add(target);
      this.#failed(target, operation, error);
    };
    const seen = this.#read(() => this.#fs.lstat(dir));
    if (seen.kind === "failed") return unknown(dir, "lstat", seen.error);
    if (seen.kind === "gone" || !seen.value.isDirectory()) return this.#settled(dir);
    const watchable = this.#watchable(dir);
    // Watched before it is read, so that nothing created in between is missed.
    if (watchable && this.#watch(dir, inodeOf(seen.value))) walk.walked.add(dir);
    const listing = this.#read(() => this.#fs.readdir(dir).sort());
    if (listing.kind === "failed") return unknown(dir, "readdir", listing.error);
    this.#settled(dir);
    if (listing.kind === "gone") return;
    for (const name of listing.value) {
      if (name.startsWith(".")) continue;
      const entry = path.join(dir, name);
      const entrySeen = this.#read(() => this.#fs.lstat(entry));
      if (entrySeen.kind === "failed") {
        if (watchable || this.#worthWalking(entry)) unknown(entry, "lstat", entrySeen.error);
        continue;
      }
      const stat = entrySeen.kind === "ok" ? entrySeen.value : null;
      if (stat?.isDirectory() && this.#worthWalking(entry)) {
        this.#walk(entry, walk);
        continue;
      }
      this.#settled(entry);
      if (stat?.isSocket() && watchable) walk.found.set(entry, inodeOf(stat));
    }
  }

  #read<T>(read: () => T): Read<T> {
    try {
      return { kind: "ok", value: read() };
    } catch (error) {
      const code = (error as NodeJS.ErrnoException | undefined)?.code;
      return code === "ENOENT" || code === "ENOTDIR" ? { kind: "gone" } : { kind: "failed", error: messageOf(error) };
    }
  }

  #failed(target: string, operation: ReadOperation, error: string): void {
    if (!this.#failing.has(target)) {
      const what = operation === "readdir" ? "cannot read watch directory" : "cannot stat watch path";
      this.#log.warn(`${what}; what is registered under it stays until a read succeeds`, { path: target, error });
    }
    this.#failing.set(target, operation);
    this.#retryTimer ??= this.#armRetry();
  }

  #settled(target: string): void {
    if (!this.#failing.delete(target)) return;
    this.#log.info("watch path readable again", { path: target });
    if (this.#failing.size === 0) this.#resetRetry();
  }

  /** Drops, without a log, failing paths no longer watched or no longer there. */
  #forgetFailures(unwanted: (target: string) => boolean): void {
    for (const target of [...this.#failing.keys()]) if (unwanted(target)) this.#failing.delete(target);
    if (this.#failing.size === 0) this.#resetRetry();
  }

  #armRetry(): NodeJS.Timeout {
    const delay = Math.min(FIRST_RETRY_MS * 2 ** Math.min(this.#retryRound, 30), MAX_RETRY_MS);
    const timer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#retryRound++;
      // Shorter paths first: reading a directory again may settle what is under it.
      const targets = [...this.#failing.keys()].sort((a, b) => a.length - b.length);
      if (this.#running) for (const target of targets) this.#observe(target);
      if (this.#failing.size > 0) this.#retryTimer ??= this.#armRetry();
    }, delay);
    timer.unref();
    return timer;
  }

  #resetRetry(): void {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    this.#retryRound = 0;
  }

  /** Forgets sockets and watches under `target`, and `target`'s own watch unless `keepSelf`. */
  #forgetTree(target: string, keepSelf: boolean): void {
    for (const socket of this.#dsw.paths()) if (isUnder(socket, target)) this.#dsw.remove(socket);
    for (const dir of [...this.#watched.keys()]) {
      if (isUnder(dir, target) || (dir === target && !keepSelf)) this.#unwatch(dir);
    }
  }

  /** Watches `dir` (again when its inode changed); false when it cannot be watched. */
  #watch(dir: string, inode: string): boolean {
    const current = this.#watched.get(dir);
    if (current?.inode === inode) return true;
    if (current) this.#unwatch(dir);
    const watcher = this.#fsWatch(dir, this.#watched, (filename) => this.#onEvent(dir, filename));
    if (watcher) this.#watched.set(dir, { watcher, inode });
    return watcher !== null;
  }

  #unwatch(dir: string): void {
    this.#watched.get(dir)?.watcher.close();
    this.#watched.delete(dir);
  }

  /** Watches each root's parent (again when replaced) unless it is a plugin directory, which reports the root already. */
  #watchRootParents(): void {
    const wanted = new Map<string, Set<string>>();
    for (const { path: root } of this.#dirs) {
      const parent = path.dirname(root);
      if (parent !== root && !this.#watchable(parent)) wanted.set(parent, (wanted.get(parent) ?? new Set()).add(path.basename(root)));
    }
    for (const [parent, watch] of [...this.#parents]) {
      if (!wanted.has(parent)) this.#closeParent(parent, watch.watcher);
    }
    for (const [parent, roots] of wanted) {
      // A missing parent is left to the next resync.
      const seen = this.#read(() => this.#fs.lstat(parent));
      if (seen.kind !== "ok" || !seen.value.isDirectory()) continue;
      const inode = inodeOf(seen.value);
      const current = this.#parents.get(parent);
      if (current?.inode === inode) {
        current.roots = roots;
        continue;
      }
      if (current) this.#closeParent(parent, current.watcher);
      const watcher = this.#fsWatch(parent, this.#parents, (filename) => {
        if (!this.#running) return;
        for (const name of this.#parents.get(parent)?.roots ?? []) {
          if (filename === null || filename === name) this.#observe(path.join(parent, name));
        }
      });
      if (watcher) this.#parents.set(parent, { watcher, inode, roots });
    }
  }

  #closeParent(parent: string, watcher: fs.FSWatcher): void {
    watcher.close();
    this.#parents.delete(parent);
  }

  /** `fs.watch` of `dir` (null, logged, when it cannot be made); a watch that fails later leaves `owner`. */
  #fsWatch(dir: string, owner: Map<string, { watcher: fs.FSWatcher }>, onEvent: (filename: string | null) => void): fs.FSWatcher | null {
    try {
      const watcher = fs.watch(dir, { persistent: true }, (_event, filename) => onEvent(filename));
      watcher.on("error", (error) => {
        // The parent's event or the next resync deals with what was under it.
        this.#log.debug("directory watch ended", { dir, error: messageOf(error) });
        watcher.close();
        if (owner.get(dir)?.watcher === watcher) owner.delete(dir);
      });
      return watcher;
    } catch (error) {
      this.#log.warn("cannot watch directory", { dir, error: messageOf(error) });
      return null;
    }
  }
}

/** Whether `target` is strictly under `dir`. */
export function isUnder(target: string, dir: string): boolean {
  return target.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

function resolved(dirs: readonly WatchDir[]): WatchDir[] {
  return dirs.map((dir) => ({ ...dir, path: path.resolve(dir.path) }));
}
