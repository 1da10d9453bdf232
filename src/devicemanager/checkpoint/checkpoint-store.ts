/**
 * The checkpoint on disk: restored once at start, then rewritten after every
 * change. A write goes to a temporary file in the same directory (O_SYNC: on
 * disk when written), is renamed over the checkpoint and the directory is
 * fsynced, so a crash at any moment leaves the old or the new checkpoint,
 * never a torn one. Writes are serialized and coalesced: while one is on its
 * way to disk, further calls only replace the data the next write takes, so
 * a burst of changes costs two writes and the latest data wins.
 *
 * A checkpoint that does not verify is renamed `<name>.corrupt-<timestamp>`
 * in the same directory with its bytes unchanged (never deleted) and
 * reported; the caller starts empty.
 *
 * @example
 * ```ts
 * const store = new CheckpointStore({ path: "/var/lib/edgeplug/kubelet_internal_checkpoint", log });
 * const restored = await store.restore();
 * await store.write({ podDeviceEntries: [], registeredDevices: new Map() });
 * ```
 */
import { randomBytes } from "node:crypto";
import * as fsCallbacks from "node:fs";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import process from "node:process";
import { promisify } from "node:util";
import type { Logger } from "../../log/logger.ts";
import { CheckpointCorruptError, type CheckpointData, decodeCheckpointWithChecksum, encodeCheckpoint } from "./checkpoint-codec.ts";
import { moveAside, readCheckpointBytes, removeAbandonedTempFiles, trustedOwners, warnIfWritableByOthers } from "./checkpoint-files.ts";
import { MAX_CHECKPOINT_BYTES } from "./checkpoint-codec.ts";

export type RestoreResult =
  | { kind: "missing" }
  /** `converted`: the file was a kubelet 1.19's (checkpoint-codec.ts), read as newer kubelets read it. */
  | { kind: "restored"; data: CheckpointData; converted?: boolean }
  | { kind: "corrupt"; error: string; movedTo: string };

/** What the device manager needs of the checkpoint store (CheckpointStore satisfies it). */
export interface DeviceStateStore {
  restore(): Promise<RestoreResult>;
  write(data: CheckpointData): Promise<void>;
  /** The size of the last checkpoint written or read, in bytes (0 before any). */
  readonly lastWriteBytes?: number;
}

export interface CheckpointStoreOptions {
  path: string;
  log: Logger;
  /** The clock that names a corrupt file's `.corrupt-<timestamp>`; tests pass their own. */
  now?: () => Date;
}

/** Mode of the directory when edgeplug creates it. */
const DIRECTORY_MODE = 0o750;
/** Mode of the checkpoint: os.CreateTemp's, which the kubelet's file store writes through. */
const FILE_MODE = 0o600;

interface Waiter {
  generation: number;
  resolve: () => void;
  reject: (error: Error) => void;
}

export class CheckpointStore {
  readonly path: string;
  readonly #directory: string;
  readonly #tempPrefix: string;
  readonly #log: Logger;
  readonly #now: () => Date;
  #pending: CheckpointData | undefined;
  #requested = 0;
  #waiters: Waiter[] = [];
  #draining: Promise<void> | undefined;
  #tempSequence = 0;
  #cleanup: Promise<void> | undefined;
  #writes = 0;
  #failures = 0;
  #lastWriteBytes = 0;

  constructor(options: CheckpointStoreOptions) {
    this.path = path.resolve(options.path);
    this.#directory = path.dirname(this.path);
    this.#tempPrefix = `.${path.basename(this.path)}.tmp-`;
    this.#log = options.log;
    this.#now = options.now ?? (() => new Date());
  }

  /** The size of the last checkpoint written (or read at start), in bytes. */
  get lastWriteBytes(): number {
    return this.#lastWriteBytes;
  }

  /** Checkpoints written and writes that failed since the store was created (for metrics). */
  get counts(): { writes: number; failures: number } {
    return { writes: this.#writes, failures: this.#failures };
  }

  /**
   * Reads the checkpoint. Creates the directory (0750) when missing and
   * removes temporary files that a crashed edgeplug left behind. Throws when
   * the file exists but cannot be read (permissions, not a regular file):
   * starting empty would overwrite state that may be good.
   */
  async restore(): Promise<RestoreResult> {
    try {
      await fs.mkdir(this.#directory, { recursive: true, mode: DIRECTORY_MODE });
    } catch (error) {
      throw new Error(`cannot create the checkpoint directory ${this.#directory}: ${(error as Error).message}`, { cause: error });
    }
    await warnIfWritableByOthers(this.#directory, this.#log);
    await removeAbandonedTempFiles(this.#directory, this.#tempPrefix, this.#log);
    let bytes: Uint8Array;
    try {
      bytes = await readCheckpointBytes(this.path, MAX_CHECKPOINT_BYTES, { uids: trustedOwners() });
      this.#lastWriteBytes = bytes.length;
      const { data, layout } = decodeCheckpointWithChecksum(bytes);
      if (layout === "1.19") {
        this.#log.warn("checkpoint written by a kubelet up to 1.19: converted, its allocated devices taken as on NUMA node 0 as newer kubelets do", {
          path: this.path,
          allocations: data.podDeviceEntries.length,
        });
        return { kind: "restored", data, converted: true };
      }
      return { kind: "restored", data };
    } catch (error) {
      if (errorCode(error) === "ENOENT") return { kind: "missing" };
      if (!(error instanceof CheckpointCorruptError)) {
        throw new Error(`cannot read the checkpoint ${this.path}: ${(error as Error).message}`, { cause: error });
      }
      const movedTo = await moveAside(this.path, this.#now());
      this.#log.error("checkpoint is corrupt: moved aside, starting with no allocations", {
        path: this.path,
        movedTo,
        error: error.message,
      });
      return { kind: "corrupt", error: error.message, movedTo };
    }
  }

  /**
   * Writes `data` atomically. Resolves once a write that started after this
   * call is on disk; rejects (naming the path) if that write failed. The store
   * keeps `data` until the write starts and encodes it then, so changes made
   * to it in between are written too.
   */
  write(data: CheckpointData): Promise<void> {
    this.#pending = data;
    const generation = ++this.#requested;
    const written = new Promise<void>((resolve, reject) => this.#waiters.push({ generation, resolve, reject }));
    this.#draining ??= this.#drain();
    return written;
  }

  /** Resolves when no write is in flight or pending and every file a write opened is closed (e.g. before the agent exits). */
  async idle(): Promise<void> {
    while (this.#draining !== undefined || this.#cleanup !== undefined) await (this.#draining ?? this.#cleanup);
  }

  async #drain(): Promise<void> {
    // Let the calls of the current burst (same tick) join the first write too.
    await Promise.resolve();
    try {
      while (this.#pending !== undefined) {
        const data = this.#pending;
        const generation = this.#requested;
        this.#pending = undefined;
        let failure: Error | undefined;
        try {
          const bytes = encodeCheckpoint(data);
          this.#lastWriteBytes = bytes.length;
          await this.#writeAtomically(bytes);
          this.#writes++;
        } catch (error) {
          this.#failures++;
          failure = new Error(`cannot write the checkpoint ${this.path}: ${(error as Error).message}`, { cause: error });
        }
        const settled = this.#waiters.filter((waiter) => waiter.generation <= generation);
        this.#waiters = this.#waiters.filter((waiter) => waiter.generation > generation);
        for (const waiter of settled) {
          if (failure === undefined) waiter.resolve();
          else waiter.reject(failure);
        }
      }
    } finally {
      this.#draining = undefined;
    }
  }

  /**
   * Temporary file written with O_SYNC, renamed over the checkpoint, fsync
   * of the directory. Only the two calls that wait for the disk go through
   * libuv's thread pool: the O_SYNC write (its data and the file's size on
   * disk when it returns) and the directory's fsync. The others only touch
   * directory entries and descriptors and are made in place, each far
   * cheaper than the trip through the thread pool it would cost the event
   * loop. The checkpoint being replaced is held open across the rename, so
   * the rename only swaps the entry; freeing the old file's blocks, which
   * made the rename grow with the file, happens when that descriptor is
   * closed, on the thread pool after the write ({@link idle} waits for it).
   * The figures: docs/performance.md, "Costs behind choices in the code".
   */
  async #writeAtomically(bytes: Uint8Array): Promise<void> {
    let temp = this.#tempName();
    let fd: number;
    try {
      fd = fsCallbacks.openSync(temp, SYNCED_NEW_FILE, FILE_MODE);
    } catch (error) {
      if (errorCode(error) !== "ENOENT" && errorCode(error) !== "EEXIST") throw error;
      if (errorCode(error) === "ENOENT") await fs.mkdir(this.#directory, { recursive: true, mode: DIRECTORY_MODE });
      temp = this.#tempName();
      fd = fsCallbacks.openSync(temp, SYNCED_NEW_FILE, FILE_MODE);
    }
    let replaced: number | null = null;
    try {
      try {
        await writeAll(fd, bytes);
      } finally {
        fsCallbacks.closeSync(fd);
      }
      replaced = openReplaced(this.path);
      fsCallbacks.renameSync(temp, this.path);
    } catch (error) {
      if (replaced !== null) this.#afterWrite(descriptors.close(replaced));
      fsCallbacks.rmSync(temp, { force: true });
      throw error;
    }
    try {
      const directory = fsCallbacks.openSync(this.#directory, fsCallbacks.constants.O_RDONLY);
      try {
        await descriptors.fsync(directory);
      } finally {
        fsCallbacks.closeSync(directory);
      }
    } finally {
      if (replaced !== null) this.#afterWrite(descriptors.close(replaced));
    }
  }

  /** Work a write leaves behind (closing the checkpoint it replaced), which {@link idle} waits for. */
  #afterWrite(work: Promise<void>): void {
    const previous = this.#cleanup;
    const all: Promise<void> = Promise.all([previous, work.catch(() => {})]).then(() => {
      if (this.#cleanup === all) this.#cleanup = undefined;
    });
    this.#cleanup = all;
  }

  /**
   * A name for the next write's temporary file: the pid (so a later start
   * knows whether its writer still runs) and a random part, so names made
   * in advance by someone who can write the directory are never the one
   * used (O_EXCL would refuse it, and the write would fail).
   */
  #tempName(): string {
    return path.join(this.#directory, `${this.#tempPrefix}${process.pid}-${++this.#tempSequence}-${randomBytes(6).toString("hex")}`);
  }
}

/** The calls made on the thread pool, on raw descriptors (without the FileHandle objects of node:fs/promises). */
const descriptors = {
  write: promisify(fsCallbacks.write),
  fsync: promisify(fsCallbacks.fsync),
  close: promisify(fsCallbacks.close),
};

/**
 * A new file whose every write returns once its data and the file's size are
 * on disk (O_SYNC: a write followed by fsync, in one call).
 */
const SYNCED_NEW_FILE = fsCallbacks.constants.O_WRONLY | fsCallbacks.constants.O_CREAT | fsCallbacks.constants.O_EXCL | fsCallbacks.constants.O_SYNC;

async function writeAll(fd: number, bytes: Uint8Array): Promise<void> {
  for (let offset = 0; offset < bytes.length;) {
    const { bytesWritten } = await descriptors.write(fd, bytes, offset, bytes.length - offset, offset);
    offset += bytesWritten;
  }
}

/**
 * The checkpoint a rename is about to replace, opened so that its blocks are
 * freed when it is closed rather than by the rename; null when there is none
 * or it cannot be opened (the rename then frees it, as it would anyway).
 * Not followed if it is a symbolic link, and without waiting should it be a FIFO.
 */
function openReplaced(file: string): number | null {
  try {
    return fsCallbacks.openSync(file, fsCallbacks.constants.O_RDONLY | fsCallbacks.constants.O_NOFOLLOW | fsCallbacks.constants.O_NONBLOCK);
  } catch {
    return null;
  }
}

export function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}
