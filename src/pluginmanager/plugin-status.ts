/**
 * The per-socket records that `status`, events and `--reconcile-once` show
 * (SPEC.md section 5), fed by desired-state changes and attempt outcomes.
 * It decides nothing: it logs each change of state once and tells subscribers.
 */
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import type { AttemptOutcome } from "./registration.ts";
import { type DesiredChange, type DesiredSocket, sortedBySocket } from "./state-of-world.ts";
import { type AttemptFailure, type AttemptState, type Failure, guarded, type PluginChange, type PluginRecord } from "./types.ts";

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
  /** Default: every known socket is registered (true when none is known). */
  predicate?: (plugins: PluginRecord[]) => boolean;
  /** Gives up (false) when it fires. */
  signal?: AbortSignal;
}

type SocketIdentity = Pick<DesiredSocket, "socket" | "inode">;

export class PluginStatusCache {
  readonly #records = new Map<string, { record: PluginRecord; inode: string }>();
  readonly #listeners = new Set<(change: PluginChange) => void>();
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #attemptEnded: (attempt: AttemptReport) => void;
  readonly #closed = new AbortController();

  constructor(options: { log: Logger; clock: Clock; attemptEnded?: (attempt: AttemptReport) => void }) {
    this.#log = options.log;
    this.#clock = options.clock;
    this.#attemptEnded = options.attemptEnded ?? (() => {});
  }

  /** One record per desired socket: a new one is pending, a re-created one replaces its predecessor. */
  track(change: DesiredChange): void {
    const previous = change.previous && this.#records.get(change.socket);
    if (previous) {
      this.#records.delete(change.socket);
      this.#log.info(change.current ? "plugin socket re-created" : "plugin socket removed", fieldsOf(previous.record));
      this.#emit(previous.record, true);
    }
    if (!change.current) return;
    const record: PluginRecord = {
      socket: change.socket, type: null, name: null, endpoint: null, versions: [], state: "pending", attempts: 0,
      registeredAt: null, error: null, reason: null, discoveredAt: change.current.discoveredAt, lastAttemptAt: null,
    };
    this.#records.set(change.socket, { record, inode: change.current.inode });
    this.#log.debug("plugin socket discovered", { socket: change.socket });
    this.#emit(record, false);
  }

  /** Counts an attempt; returns its start time for {@link attemptEnded}. */
  attemptStarted(desired: DesiredSocket): number {
    const record = this.#recordOf(desired);
    if (record) {
      record.attempts++;
      record.lastAttemptAt = new Date(this.#clock.now());
    }
    return this.#clock.now();
  }

  /** An aborted attempt changes nothing. */
  attemptEnded(desired: DesiredSocket, outcome: AttemptOutcome, startedAt: number): void {
    if (outcome.state === "aborted") return;
    const { state, reason, error, info } = outcome;
    const attempt = { socket: desired.socket, type: info?.type ?? null, name: info?.name ?? null, state, durationMs: this.#clock.now() - startedAt, reason, error };
    guarded(this.#log, "plugin manager observer failed", () => this.#attemptEnded(attempt), { hook: "attemptEnded" });
    const record = this.#recordOf(desired);
    if (!record) return;
    const changed = record.state !== state || record.error !== error;
    if (info) Object.assign(record, { ...info, versions: [...info.versions] });
    Object.assign(record, { state, reason, error, registeredAt: state === "registered" ? new Date(this.#clock.now()) : null });
    const fields = fieldsOf(record);
    if (!changed) return this.#log.debug("registration attempt failed again", fields);
    if (state === "registered") this.#log.info("plugin registered", fields);
    else this.#log.warn(state === "stale" ? "plugin socket is stale" : "plugin registration failed", fields);
    this.#emit(record, false);
  }

  /** Deregistered outside an attempt: `stale` (its connection or socket died) or `pending` (the policy now refuses it). */
  deregistered(socket: SocketIdentity, state: "stale" | "pending", failure: Failure, message: string): void {
    const record = this.#recordOf(socket);
    if (!record) return;
    Object.assign(record, { state, ...failure, registeredAt: null });
    this.#log[state === "stale" ? "warn" : "info"](message, fieldsOf(record));
    this.#emit(record, false);
  }

  /** Copies, sorted by socket path. */
  plugins(): PluginRecord[] {
    return sortedBySocket([...this.#records.values()].map(({ record }) => copyRecord(record)));
  }

  subscribe(listener: (change: PluginChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** True once `predicate` holds (checked now and after each change); false when `signal` fires or the cache closes. */
  whenSettled({ predicate = (plugins) => plugins.every((plugin) => plugin.state === "registered"), signal }: SettleOptions = {}): Promise<boolean> {
    return new Promise((resolve) => {
      const stops = [signal, this.#closed.signal];
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

  /** Ends every {@link whenSettled} wait (false); the records stay readable. */
  close(): void {
    this.#closed.abort();
  }

  #recordOf(socket: SocketIdentity): PluginRecord | undefined {
    const tracked = this.#records.get(socket.socket);
    return tracked?.inode === socket.inode ? tracked.record : undefined;
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
