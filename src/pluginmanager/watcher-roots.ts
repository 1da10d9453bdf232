/**
 * Watches the parent directory of each watch root, for events naming that
 * root: when someone removes a root and creates it again, the watcher hears
 * of it at once and walks it, instead of at the next resync. The kubelet's
 * watcher has no such watch (a removed registration directory stays unwatched
 * until it restarts).
 *
 * @example
 * ```ts
 * const parents = new RootParentWatch({ log, fileSystem, onRoot: (root) => observe(root) });
 * parents.update(["/var/lib/kubelet/plugins_registry"], () => false); // watches /var/lib/kubelet
 * ```
 */
import type * as fs from "node:fs";
import * as path from "node:path";
import type { Logger } from "../log/logger.ts";
import { inodeOf } from "./state.ts";
import { lstatOutcome, watchDirectory, type WatcherFileSystem } from "./watcher-fs.ts";

export interface RootParentWatchOptions {
  log: Logger;
  fileSystem: WatcherFileSystem;
  /** Called with a root whose name an event in its parent carried (or every root there when events were dropped). */
  onRoot: (root: string) => void;
}

interface ParentWatch {
  watcher: fs.FSWatcher;
  inode: string;
  roots: Set<string>;
}

export class RootParentWatch {
  readonly #options: RootParentWatchOptions;
  readonly #parents = new Map<string, ParentWatch>();

  constructor(options: RootParentWatchOptions) {
    this.#options = options;
  }

  /**
   * Watches the parents of `roots`, except those `coveredElsewhere` (a parent
   * that is itself watched as a plugin directory already reports the root).
   * A parent that is missing is left to the next call (each resync makes one).
   * A parent that was replaced (another inode) is watched again.
   */
  update(roots: readonly string[], coveredElsewhere: (dir: string) => boolean): void {
    const wanted = new Map<string, Set<string>>();
    for (const root of roots) {
      const parent = path.dirname(root);
      if (parent === root || coveredElsewhere(parent)) continue;
      wanted.set(parent, (wanted.get(parent) ?? new Set()).add(path.basename(root)));
    }
    for (const [parent, watch] of [...this.#parents]) {
      if (!wanted.has(parent)) this.#close(parent, watch);
    }
    for (const [parent, names] of wanted) {
      const seen = lstatOutcome(this.#options.fileSystem, parent);
      if (seen.kind !== "ok" || !seen.value.isDirectory()) continue;
      const inode = inodeOf(seen.value);
      const current = this.#parents.get(parent);
      if (current?.inode === inode) {
        current.roots = names;
        continue;
      }
      if (current) this.#close(parent, current);
      const watcher = watchDirectory(
        parent,
        this.#options.log,
        (filename) => this.#onEvent(parent, filename),
        (ended) => {
          if (this.#parents.get(parent)?.watcher === ended) this.#parents.delete(parent);
        },
      );
      if (watcher) this.#parents.set(parent, { watcher, inode, roots: names });
    }
  }

  /** Closes every parent watch. */
  close(): void {
    for (const [parent, watch] of [...this.#parents]) this.#close(parent, watch);
  }

  #onEvent(parent: string, filename: string | null): void {
    const watch = this.#parents.get(parent);
    if (!watch) return;
    for (const name of watch.roots) {
      if (filename === null || filename === name) this.#options.onRoot(path.join(parent, name));
    }
  }

  #close(parent: string, watch: ParentWatch): void {
    watch.watcher.close();
    this.#parents.delete(parent);
  }
}
