/**
 * The kubelet's two caches: the desired state of world (sockets seen on disk)
 * and the actual state of world (plugins registered with a handler). Plain
 * maps keyed by socket path; nothing here knows about gRPC or the filesystem.
 *
 * A socket is identified by its path and its inode identity (see
 * {@link DesiredSocket.inode}); this replaces the kubelet's fresh UUID per
 * filesystem event, so a repeated event for the same socket changes nothing
 * while a socket re-created at the same path is a new plugin.
 */
import type { BigIntStats } from "node:fs";
import type { PluginHandler, PluginRegistration } from "./types.ts";

/** A registration socket found on disk. */
export interface DesiredSocket {
  socket: string;
  /**
   * Inode identity `dev:ino:birthtime`. Linux hands a freed inode number to
   * the next file at once (measured on ext4: a socket re-created at the same
   * path gets the same number), so the birth time is part of the identity.
   */
  inode: string;
  discoveredAt: Date;
}

/** What {@link DesiredStateOfWorld.addOrUpdate} did. */
export type DesiredChangeKind = "added" | "replaced" | "removed";

export interface DesiredChange {
  kind: DesiredChangeKind;
  socket: string;
  /** The entry now desired; absent when removed. */
  current?: DesiredSocket;
  /** The entry it replaced or removed. */
  previous?: DesiredSocket;
}

/** Sockets that should be registered, as the watcher sees the filesystem. */
export class DesiredStateOfWorld {
  readonly #sockets = new Map<string, DesiredSocket>();
  readonly #listeners = new Set<(change: DesiredChange) => void>();

  /**
   * Records a socket. The same inode again changes nothing and returns
   * "unchanged"; a new inode at a known path replaces the entry.
   */
  addOrUpdate(socket: string, inode: string, now: Date = new Date()): DesiredChangeKind | "unchanged" {
    requireSocketPath(socket);
    const previous = this.#sockets.get(socket);
    if (previous?.inode === inode) return "unchanged";
    const current = { socket, inode, discoveredAt: now };
    this.#sockets.set(socket, current);
    const kind = previous ? "replaced" : "added";
    this.#emit({ kind, socket, current, previous });
    return kind;
  }

  /** Forgets a socket; returns whether it was known. */
  remove(socket: string): boolean {
    const previous = this.#sockets.get(socket);
    if (!previous) return false;
    this.#sockets.delete(socket);
    this.#emit({ kind: "removed", socket, previous });
    return true;
  }

  get(socket: string): DesiredSocket | undefined {
    return this.#sockets.get(socket);
  }

  has(socket: string): boolean {
    return this.#sockets.has(socket);
  }

  /**
   * The desired socket paths in no particular order: for the watcher, which
   * scans them on every event and must not pay for a sort each time.
   */
  paths(): string[] {
    return [...this.#sockets.keys()];
  }

  /** Every desired socket, sorted by path. */
  sockets(): DesiredSocket[] {
    return [...this.#sockets.values()].sort((a, b) => compare(a.socket, b.socket));
  }

  /** Calls `listener` after every change, in the order the changes happened. */
  subscribe(listener: (change: DesiredChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(change: DesiredChange): void {
    for (const listener of [...this.#listeners]) listener(change);
  }
}

/** A plugin that a handler accepted. */
export interface RegisteredPlugin {
  socket: string;
  inode: string;
  registration: PluginRegistration;
  handler: PluginHandler;
}

/** Plugins registered with their handler, and the slots reserved for registrations in flight. */
export class ActualStateOfWorld {
  readonly #plugins = new Map<string, RegisteredPlugin>();
  #reserved = 0;

  /** Records a registered plugin, replacing any entry for the same socket. */
  add(plugin: RegisteredPlugin): void {
    requireSocketPath(plugin.socket);
    this.#plugins.set(plugin.socket, plugin);
  }

  remove(socket: string): RegisteredPlugin | undefined {
    const plugin = this.#plugins.get(socket);
    this.#plugins.delete(socket);
    return plugin;
  }

  get(socket: string): RegisteredPlugin | undefined {
    return this.#plugins.get(socket);
  }

  /** Whether this very socket (path and inode) is registered. */
  has(socket: string, inode: string): boolean {
    return this.#plugins.get(socket)?.inode === inode;
  }

  /** Every registered plugin, sorted by socket path. */
  plugins(): RegisteredPlugin[] {
    return [...this.#plugins.values()].sort((a, b) => compare(a.socket, b.socket));
  }

  get size(): number {
    return this.#plugins.size;
  }

  /**
   * Reserves one of `limit` plugin slots (registered plugins plus other
   * reservations). Returns the release function, or null when none is left.
   */
  reserveSlot(limit: number): (() => void) | null {
    if (this.#plugins.size + this.#reserved >= limit) return null;
    this.#reserved++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#reserved--;
    };
  }
}

/** The identity of a file: device, inode number and birth time (inode numbers are reused at once). */
export function inodeOf(stat: BigIntStats): string {
  return `${stat.dev}:${stat.ino}:${stat.birthtimeNs}`;
}

function requireSocketPath(socket: string): void {
  if (socket === "") throw new Error("socket path is empty");
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
