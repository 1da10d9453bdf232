/**
 * The kubelet's two caches: the desired state of world (sockets on disk)
 * and the actual state of world (plugins registered with a handler), keyed
 * by socket path. A socket is its path and inode identity, instead of the
 * kubelet's UUID per event: a repeated event changes nothing, while a socket
 * re-created at the same path is a new plugin.
 */
import type { BigIntStats } from "node:fs";
import type { PluginHandler, PluginRegistration } from "./types.ts";

export interface DesiredSocket {
  socket: string;
  /** {@link inodeOf} the socket file. */
  inode: string;
  discoveredAt: Date;
}

export interface DesiredChange {
  kind: "added" | "replaced" | "removed";
  socket: string;
  /** Absent when removed. */
  current?: DesiredSocket;
  /** The entry replaced or removed. */
  previous?: DesiredSocket;
}

export class DesiredStateOfWorld {
  readonly #sockets = new Map<string, DesiredSocket>();
  readonly #listeners = new Set<(change: DesiredChange) => void>();

  /** The same inode again changes nothing; a new inode at a known path replaces the entry. */
  addOrUpdate(socket: string, inode: string, now: Date = new Date()): void {
    const previous = this.#sockets.get(socket);
    if (previous?.inode === inode) return;
    const current = { socket, inode, discoveredAt: now };
    this.#sockets.set(socket, current);
    this.#emit({ kind: previous ? "replaced" : "added", socket, current, previous });
  }

  remove(socket: string): void {
    const previous = this.#sockets.get(socket);
    if (!previous) return;
    this.#sockets.delete(socket);
    this.#emit({ kind: "removed", socket, previous });
  }

  get(socket: string): DesiredSocket | undefined {
    return this.#sockets.get(socket);
  }

  get size(): number {
    return this.#sockets.size;
  }

  /** Unsorted: the watcher scans them on every event and must not pay for a sort. */
  paths(): string[] {
    return [...this.#sockets.keys()];
  }

  sockets(): DesiredSocket[] {
    return sortedBySocket([...this.#sockets.values()]);
  }

  /** Calls `listener` after every change, in order. */
  subscribe(listener: (change: DesiredChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(change: DesiredChange): void {
    for (const listener of [...this.#listeners]) listener(change);
  }
}

export interface RegisteredPlugin {
  socket: string;
  inode: string;
  registration: PluginRegistration;
  handler: PluginHandler;
}

/** Registered plugins, and the `maxPlugins` slots held by registrations in flight. */
export class ActualStateOfWorld {
  readonly #plugins = new Map<string, RegisteredPlugin>();
  #reserved = 0;
  /** Slots of plugins registered outside this manager (device plugins on kubelet.sock). */
  readonly #heldElsewhere: () => number;

  constructor(heldElsewhere: () => number = () => 0) {
    this.#heldElsewhere = heldElsewhere;
  }

  add(plugin: RegisteredPlugin): void {
    this.#plugins.set(plugin.socket, plugin);
  }

  /** Only `plugin` itself: a newer registration at its socket stays. */
  remove(plugin: RegisteredPlugin): void {
    if (this.#plugins.get(plugin.socket) === plugin) this.#plugins.delete(plugin.socket);
  }

  get(socket: string): RegisteredPlugin | undefined {
    return this.#plugins.get(socket);
  }

  /** Whether this very socket (path and inode) is registered. */
  has(socket: string, inode: string): boolean {
    return this.#plugins.get(socket)?.inode === inode;
  }

  plugins(): RegisteredPlugin[] {
    return sortedBySocket([...this.#plugins.values()]);
  }

  /** Slots held here: registered plugins and registrations in flight. */
  get slotsHeld(): number {
    return this.#plugins.size + this.#reserved;
  }

  /** One of `limit` slots (held here or elsewhere): its release function, or null when none is left. */
  reserveSlot(limit: number): (() => void) | null {
    if (this.slotsHeld + this.#heldElsewhere() >= limit) return null;
    this.#reserved++;
    let released = false;
    return () => {
      if (!released) this.#reserved--;
      released = true;
    };
  }
}

/** Device, inode number and birth time: ext4 hands a freed inode number to the next file at once. */
export function inodeOf(stat: BigIntStats): string {
  return `${stat.dev}:${stat.ino}:${stat.birthtimeNs}`;
}

export function sortedBySocket<T extends { socket: string }>(items: T[]): T[] {
  return items.sort((a, b) => (a.socket < b.socket ? -1 : a.socket > b.socket ? 1 : 0));
}
