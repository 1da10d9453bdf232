/**
 * The per-socket records that `status`, events, metrics and `--reconcile-once`
 * show (docs/status-json.md). The kubelet's plugin manager keeps none: this
 * cache is one of the plugin manager's observers, fed by its desired-state
 * changes and attempt outcomes, and built by the composition root. It decides
 * nothing: it logs each change of state once and tells subscribers.
 */
import { guarded, type Logger } from "../log/logger.ts";
import type { AttemptReport, PluginManagerObserver, SocketIdentity } from "../pluginmanager/manager.ts";
import { type DesiredChange, sortedBySocket } from "../pluginmanager/state-of-world.ts";
import type { Failure, FailureReason } from "../pluginmanager/types.ts";

/** docs/status-json.md: `pending` until the first attempt ends. */
export const PLUGIN_STATES = ["pending", "registered", "failed", "stale"] as const;
export type PluginState = (typeof PLUGIN_STATES)[number];

/** One registration socket as `status` shows it. */
export interface PluginRecord {
  socket: string;
  /** type, name, endpoint: null until GetInfo answered; endpoint defaults to `socket`. */
  type: string | null;
  name: string | null;
  endpoint: string | null;
  versions: string[];
  state: PluginState;
  /** Attempts since this socket (path and inode) was discovered. */
  attempts: number;
  registeredAt: Date | null;
  /** The last attempt's error, kept while retrying; `reason` is null exactly when it is. */
  error: string | null;
  reason: FailureReason | null;
  discoveredAt: Date;
  lastAttemptAt: Date | null;
}

export interface PluginChange {
  plugin: PluginRecord;
  /** The socket left the list (deleted, re-created, or no longer watched). */
  removed: boolean;
}

export interface SettleOptions {
  /** Default: every known socket is registered (true when none is known). */
  predicate?: (plugins: PluginRecord[]) => boolean;
  /** Gives up (false) when it fires. */
  signal?: AbortSignal;
}

/** What is known of a plugin socket just discovered: nothing yet but its path, pending its first attempt. */
export function pendingRecord(socket: string, discoveredAt: Date): PluginRecord {
  return {
    socket,
    type: null,
    name: null,
    endpoint: null,
    versions: [],
    state: "pending",
    attempts: 0,
    registeredAt: null,
    error: null,
    reason: null,
    discoveredAt,
    lastAttemptAt: null,
  };
}

export class PluginStatusCache implements PluginManagerObserver {
  /** `cause`: why the socket's last answered attempt failed, named again once the socket goes stale. */
  readonly #records = new Map<string, { record: PluginRecord; inode: string; cause: string | null }>();
  readonly #listeners = new Set<(change: PluginChange) => void>();
  readonly #log: Logger;
  readonly #stopped = new AbortController();

  constructor(options: { log: Logger }) {
    this.#log = options.log;
  }

  /** One record per desired socket: a new one is pending, a re-created one replaces its predecessor. */
  socketChanged(change: DesiredChange): void {
    const previous = change.previous && this.#records.get(change.socket);
    if (previous) {
      this.#records.delete(change.socket);
      this.#log.info(change.current ? "plugin socket re-created" : "plugin socket removed", fieldsOf(previous.record));
      this.#emit(previous.record, true);
    }
    if (!change.current) return;
    const record = pendingRecord(change.socket, change.current.discoveredAt);
    this.#records.set(change.socket, { record, inode: change.current.inode, cause: null });
    this.#log.debug("plugin socket discovered", { socket: change.socket });
    this.#emit(record, false);
  }

  attemptStarted(socket: SocketIdentity, at: number): void {
    const record = this.#recordOf(socket);
    if (!record) return;
    record.attempts++;
    record.lastAttemptAt = new Date(at);
  }

  attemptEnded({ socket, inode, state, info, reason, error: attemptError, endedAt }: AttemptReport): void {
    const tracked = this.#trackedOf({ socket, inode });
    if (!tracked) return;
    const { record } = tracked;
    // A plugin that exits when refused (a CSI registrar whose NodeGetInfo failed) leaves a stale socket:
    // status goes on naming what it was refused for, not only that nothing listens there now.
    if (state === "failed") tracked.cause = attemptError;
    else if (state === "registered") tracked.cause = null;
    const error = state === "stale" && tracked.cause !== null ? `${attemptError} (before that: ${tracked.cause})` : attemptError;
    const changed = record.state !== state || record.error !== error;
    if (info) Object.assign(record, { ...info, versions: [...info.versions] });
    Object.assign(record, { state, reason, error, registeredAt: state === "registered" ? new Date(endedAt) : null });
    const fields = fieldsOf(record);
    if (!changed) return this.#log.debug("registration attempt failed again", fields);
    if (state === "registered") this.#log.info("plugin registered", fields);
    else this.#log.warn(state === "stale" ? "plugin socket is stale" : "plugin registration failed", fields);
    this.#emit(record, false);
  }

  deregistered(socket: SocketIdentity, state: "stale" | "pending", failure: Failure): void {
    const record = this.#recordOf(socket);
    if (!record) return;
    Object.assign(record, { state, ...failure, registeredAt: null });
    if (state === "pending") this.#log.info("plugin deregistered: the policy now refuses it", fieldsOf(record));
    else this.#log.warn(failure.reason === "connection_lost" ? "plugin connection lost" : "plugin socket is stale", fieldsOf(record));
    this.#emit(record, false);
  }

  /** Ends every {@link whenSettled} wait (false); the records stay readable. */
  stopped(): void {
    this.#stopped.abort();
  }

  /** Copies, sorted by socket path. */
  plugins(): PluginRecord[] {
    return sortedBySocket([...this.#records.values()].map(({ record }) => copyRecord(record)));
  }

  /** `listener` hears each state change of a socket, in order. */
  subscribe(listener: (change: PluginChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** True once `predicate` holds (checked now and after each change); false when `signal` fires or the manager stops. */
  whenSettled({ predicate = (plugins) => plugins.every((plugin) => plugin.state === "registered"), signal }: SettleOptions = {}): Promise<boolean> {
    return new Promise((resolve) => {
      const stops = [signal, this.#stopped.signal];
      const finish = (settled: boolean) => {
        unsubscribe();
        for (const stop of stops) stop?.removeEventListener("abort", onStop);
        resolve(settled);
      };
      const onStop = () => finish(false);
      const unsubscribe = this.subscribe(() => predicate(this.plugins()) && finish(true));
      for (const stop of stops) stop?.addEventListener("abort", onStop, { once: true });
      if (stops.some((stop) => stop?.aborted)) finish(false);
      else if (predicate(this.plugins())) finish(true);
    });
  }

  #recordOf(socket: SocketIdentity): PluginRecord | undefined {
    return this.#trackedOf(socket)?.record;
  }

  #trackedOf(socket: SocketIdentity) {
    const tracked = this.#records.get(socket.socket);
    return tracked?.inode === socket.inode ? tracked : undefined;
  }

  #emit(record: PluginRecord, removed: boolean): void {
    for (const listener of [...this.#listeners]) guarded(this.#log, "plugin change listener failed", () => listener({ plugin: copyRecord(record), removed }));
  }
}

function copyRecord(record: PluginRecord): PluginRecord {
  return { ...record, versions: [...record.versions] };
}

function fieldsOf({ socket, type, name, state, attempts, reason, error }: PluginRecord): Record<string, unknown> {
  return { socket, type, name, state, attempts, ...(reason === null ? {} : { reason, error }) };
}
