/**
 * The per-socket records that `status`, events and `--reconcile-once` show
 * (SPEC.md section 5): a small cache fed by the desired state (a socket
 * found, re-created or removed) and by operation outcomes. It decides
 * nothing; it logs each change of state once and tells its subscribers.
 */
import type { Logger } from "../log/logger.ts";
import type { Clock } from "./operations.ts";
import type { AttemptOutcome } from "./registration.ts";
import type { DesiredChange, DesiredSocket } from "./state.ts";
import type { AttemptFailure, AttemptState, Failure, PluginChange, PluginRecord } from "./types.ts";

/** One attempt that ended (aborted ones are not reported), for metrics. */
export interface AttemptReport {
  socket: string;
  type: string | null;
  name: string | null;
  state: Exclude<AttemptState, "aborted">;
  durationMs: number;
  /** null exactly when it registered. */
  reason: AttemptFailure | null;
  error: string | null;
}

export interface SettleOptions {
  /** What to wait for; default: every known socket is registered (true when none is known). */
  predicate?: (plugins: PluginRecord[]) => boolean;
  /** Gives up (resolving false) when it fires. */
  signal?: AbortSignal;
}

export class PluginStatusCache {
  readonly #records = new Map<string, { record: PluginRecord; inode: string }>();
  readonly #listeners = new Set<(change: PluginChange) => void>();
  readonly #onClose = new Set<() => void>();
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #attemptEnded: (attempt: AttemptReport) => void;
  #closed = false;

  constructor(options: { log: Logger; clock: Clock; attemptEnded?: (attempt: AttemptReport) => void }) {
    this.#log = options.log;
    this.#clock = options.clock;
    this.#attemptEnded = options.attemptEnded ?? (() => {});
  }

  /** Keeps one record per desired socket: a new one is pending, a re-created one replaces its predecessor. */
  track(change: DesiredChange): void {
    const previous = change.previous && this.#records.get(change.socket);
    if (previous) {
      this.#records.delete(change.socket);
      this.#log.info(change.current ? "plugin socket re-created" : "plugin socket removed", fieldsOf(previous.record));
      this.#emit(previous.record, true);
    }
    if (!change.current) return;
    const record: PluginRecord = {
      socket: change.socket,
      type: null,
      name: null,
      endpoint: null,
      versions: [],
      state: "pending",
      attempts: 0,
      registeredAt: null,
      error: null,
      reason: null,
      discoveredAt: change.current.discoveredAt,
      lastAttemptAt: null,
    };
    this.#records.set(change.socket, { record, inode: change.current.inode });
    this.#log.debug("plugin socket discovered", { socket: change.socket });
    this.#emit(record, false);
  }

  /** Counts an attempt on `desired`; returns its start time for {@link attemptEnded}. */
  attemptStarted(desired: DesiredSocket): number {
    const record = this.#recordOf(desired);
    if (record) {
      record.attempts++;
      record.lastAttemptAt = new Date(this.#clock.now());
    }
    return this.#clock.now();
  }

  /** Records how an attempt ended; an aborted one changes nothing. */
  attemptEnded(desired: DesiredSocket, outcome: AttemptOutcome, startedAt: number): void {
    if (outcome.state === "aborted") return;
    const { state, reason, error, info } = outcome;
    const durationMs = this.#clock.now() - startedAt;
    this.#report({ socket: desired.socket, type: info?.type ?? null, name: info?.name ?? null, state, durationMs, reason, error });
    const record = this.#recordOf(desired);
    if (!record) return;
    const changed = record.state !== state || record.error !== error;
    if (info) Object.assign(record, { ...info, versions: [...info.versions] });
    Object.assign(record, { state, reason, error, registeredAt: state === "registered" ? new Date(this.#clock.now()) : null });
    const fields = fieldsOf(record);
    if (!changed) this.#log.debug("registration attempt failed again", fields);
    else if (state === "registered") this.#log.info("plugin registered", fields);
    else this.#log.warn(state === "stale" ? "plugin socket is stale" : "plugin registration failed", fields);
    if (changed) this.#emit(record, false);
  }

  /**
   * A registered plugin was deregistered outside an attempt: `stale` (its
   * connection or socket died) or `pending` (the policy now refuses it).
   */
  deregistered(socket: { socket: string; inode: string }, state: "stale" | "pending", failure: Failure, message: string): void {
    const record = this.#recordOf(socket);
    if (!record) return;
    Object.assign(record, { state, ...failure, registeredAt: null });
    if (state === "stale") this.#log.warn(message, fieldsOf(record));
    else this.#log.info(message, fieldsOf(record));
    this.#emit(record, false);
  }

  /** Every known registration socket, sorted by path (copies). */
  plugins(): PluginRecord[] {
    return [...this.#records.values()]
      .map(({ record }) => copyRecord(record))
      .sort((a, b) => (a.socket < b.socket ? -1 : a.socket > b.socket ? 1 : 0));
  }

  /** Calls `listener` once per state change of a socket, in order; returns the unsubscribe function. */
  subscribe(listener: (change: PluginChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Resolves true as soon as `predicate` holds over {@link plugins} (checked
   * now and after every change), false when `signal` fires or the cache closes.
   */
  whenSettled(options: SettleOptions = {}): Promise<boolean> {
    const predicate = options.predicate ?? ((plugins) => plugins.every((plugin) => plugin.state === "registered"));
    const { signal } = options;
    return new Promise((resolve) => {
      const finish = (settled: boolean) => {
        unsubscribe();
        this.#onClose.delete(onClose);
        signal?.removeEventListener("abort", onClose);
        resolve(settled);
      };
      const onClose = () => finish(false);
      const unsubscribe = this.subscribe(() => {
        if (predicate(this.plugins())) finish(true);
      });
      this.#onClose.add(onClose);
      signal?.addEventListener("abort", onClose, { once: true });
      if (signal?.aborted || this.#closed) finish(false);
      else if (predicate(this.plugins())) finish(true);
    });
  }

  /** Ends every {@link whenSettled} wait (false); the records stay readable. */
  close(): void {
    this.#closed = true;
    for (const callback of [...this.#onClose]) callback();
  }

  #recordOf(socket: { socket: string; inode: string }): PluginRecord | undefined {
    const tracked = this.#records.get(socket.socket);
    return tracked?.inode === socket.inode ? tracked.record : undefined;
  }

  /** Metrics must not break registration: a failing observer is logged. */
  #report(attempt: AttemptReport): void {
    try {
      this.#attemptEnded(attempt);
    } catch (error) {
      this.#log.error("plugin manager observer failed", { hook: "attemptEnded", error: messageOf(error) });
    }
  }

  #emit(record: PluginRecord, removed: boolean): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener({ plugin: copyRecord(record), removed });
      } catch (error) {
        this.#log.error("plugin change listener failed", { error: messageOf(error) });
      }
    }
  }
}

function copyRecord(record: PluginRecord): PluginRecord {
  return { ...record, versions: [...record.versions] };
}

function fieldsOf(record: PluginRecord): Record<string, unknown> {
  const { socket, type, name, state, attempts, reason, error } = record;
  return { socket, type, name, state, attempts, ...(reason === null ? {} : { reason, error }) };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
