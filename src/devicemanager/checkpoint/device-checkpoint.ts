/**
 * The device manager's side of its checkpoint: read once at start (plugins
 * wait for it, so nothing allocates or writes before the allocations are
 * back), then written after changes through a {@link CheckpointWriter}, and
 * flushed within a bound when the manager stops. Without a store it does
 * nothing; read-only, it reads but never writes (a daemon beside
 * `--reconcile-once` owns the file).
 */
import type { Logger } from "../../log/logger.ts";
import type { Clock } from "../../platform/clock.ts";
import { type CheckpointWriteOutcome, CheckpointWriter, type CheckpointWriteStats, type WriteOutcome } from "./checkpoint-writer.ts";
import type { CheckpointData, DeviceStateStore, RestoreResult } from "./checkpoint.ts";

/**
 * How long stop() waits for the last checkpoint write: 1 s, and 1 s more
 * per 8 MiB of file, at most 5 s (inside systemd's TimeoutStopSec=10s). Only
 * paced device-list changes can be pending then (allocations and releases
 * are on disk when answered), so a file under 8 MiB keeps the 2 s to exit.
 */
const STOP_FLUSH_BASE_MS = 1000;
const STOP_FLUSH_PER_8_MIB_MS = 1000;
const STOP_FLUSH_MAX_MS = 5000;
const MIB = 1024 * 1024;
const WRITE_WAIT_BASE_MS = 5000;
const WRITE_WAIT_PER_MIB_MS = 1000;

/** What status says about the checkpoint. */
export interface CheckpointState {
  /** How the checkpoint was read at start; null before restore() (or without a store). */
  restore: RestoreResult | null;
  writes: CheckpointWriteStats;
}

export interface DeviceCheckpointOptions {
  store: DeviceStateStore | null;
  readOnly?: boolean;
  snapshot: () => CheckpointData;
  log: Logger;
  clock: Clock;
  observe?: (outcome: CheckpointWriteOutcome) => void;
}

export class DeviceCheckpoint {
  readonly #store: DeviceStateStore | null;
  readonly #writer: CheckpointWriter | null;
  readonly #log: Logger;
  #result: RestoreResult | null = null;
  /** Settles once the checkpoint has been read (at once without a store, or when stopping). */
  readonly restored: Promise<void>;
  #markRestored: () => void = () => {};

  constructor(options: DeviceCheckpointOptions) {
    this.#store = options.store;
    this.#log = options.log;
    this.#writer = options.store && !options.readOnly
      ? new CheckpointWriter({ store: options.store, snapshot: options.snapshot, log: options.log, clock: options.clock, observe: options.observe })
      : null;
    this.restored = options.store ? new Promise<void>((resolve) => (this.#markRestored = resolve)) : Promise.resolve();
  }

  /** Reads the checkpoint once; `apply` puts its data back before any plugin may connect; writes start after. */
  async restore(apply: (data: CheckpointData) => void): Promise<RestoreResult> {
    if (!this.#store) return { kind: "missing" };
    if (this.#result) throw new Error("the checkpoint has already been restored");
    const result = await this.#store.restore();
    this.#result = result;
    if (result.kind === "restored") apply(result.data);
    this.#writer?.enable();
    // Written back at once in the current layout: the file then reads in every kubelet since 1.20 as it is.
    if (result.kind === "restored" && result.converted) this.#writer?.changed(true);
    this.#markRestored();
    return result;
  }

  /**
   * The device state changed; `soon` false for a new device list, which may
   * wait (checkpoint-writer.ts). Returns the change's number for {@link written}.
   */
  changed(soon = true): number {
    return this.#writer?.changed(soon) ?? 0;
  }

  /**
   * Null once the first write taking change `change` along is on disk, else
   * why not (that write's error, or no outcome within the wait, which grows
   * with the file: {@link writeWaitMs}). Null at once without a writer.
   */
  written(change: number): Promise<WriteOutcome> {
    return this.#writer?.written(change, this.writeWaitMs()) ?? Promise.resolve(null);
  }

  /**
   * How long an answer waits for its write: 5 s, and 1 s more per MiB the
   * last write took (a slow SD card writes a few MiB/s), so a 64 MiB file
   * gets 69 s, still inside the 90 s a request may run.
   */
  writeWaitMs(): number {
    return WRITE_WAIT_BASE_MS + Math.ceil((this.#store?.lastWriteBytes ?? 0) / MIB) * WRITE_WAIT_PER_MIB_MS;
  }

  /** Why the last write failed, or null when it succeeded (or none was made). */
  get writeError(): string | null {
    return this.#writer?.stats.lastError ?? null;
  }

  /** Writes what is not on disk yet; true when it is all there within `timeoutMs`. */
  flush(timeoutMs: number): Promise<boolean> {
    return this.#writer?.flush(timeoutMs) ?? Promise.resolve(true);
  }

  state(): CheckpointState | null {
    if (!this.#store) return null;
    const writes = this.#writer ? { ...this.#writer.stats } : { writes: 0, failures: 0, lastWriteAt: null, lastError: null };
    return { restore: this.#result, writes };
  }

  /** Lets waiting plugins go (they find the manager stopping), writes the last changes within the stop's bound, stops retrying. */
  async stop(): Promise<void> {
    this.#markRestored();
    if (!this.#writer) return;
    const stopFlushMs = Math.min(STOP_FLUSH_MAX_MS, STOP_FLUSH_BASE_MS + Math.floor((this.#store?.lastWriteBytes ?? 0) / (8 * MIB)) * STOP_FLUSH_PER_8_MIB_MS);
    const written = await this.#writer.flush(stopFlushMs);
    this.#writer.stop();
    if (!written) {
      this.#log.error("stopping with the last device changes not in the checkpoint", { error: this.#writer.stats.lastError ?? `not written within ${stopFlushMs} ms` });
    }
  }
}
