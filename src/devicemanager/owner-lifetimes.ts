/**
 * How long an owner holds its devices. The kubelet frees the devices of a
 * pod that is gone; an edgeplug owner is only a name, so besides plain
 * owners (held until `release`) an allocation may name a process (held
 * while it runs, released once it exits) or carry a lease (held until it
 * lapses, renewed by asking again the same way).
 *
 * - A process is watched through a pidfd (src/platform/process-watch.ts):
 *   its exit wakes the agent once, nothing else does. It is pinned while
 *   the allocation is served, by PID and start time, so a PID the kernel
 *   hands to another process later neither keeps nor takes devices.
 * - Leases share one timer, set for the earliest expiry on the injected
 *   clock; none runs while no owner has a lease.
 * - The kubelet's checkpoint has no place for any of this, and its format
 *   stays the kubelet's: the process and lease owners live in a small side
 *   file next to it (`<checkpoint>.edgeplug-owners.json`), written before
 *   the allocation that needs it is answered. At start, an owner whose
 *   process is gone or whose lease lapsed while the agent was stopped is
 *   released, and the cause logged; entries for owners the checkpoint no
 *   longer holds are dropped.
 * - A failed automatic release (the checkpoint cannot be written) is tried
 *   again every {@link OWNER_LIFETIME_LIMITS}.retryMs on the same timer.
 *
 * A plain owner's age is known from when this agent recorded it; one
 * restored from the checkpoint has none (the kubelet's format keeps no time).
 */
import { Buffer } from "node:buffer";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import process from "node:process";
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import { messageOf } from "../log/error-message.ts";
import { MAX_PID, type ProcessIdentity, processIdentity, type ProcessWatch, type ProcessWatcher } from "../platform/process-watch.ts";
import { formatDuration } from "../policy/duration.ts";
import { AllocationError } from "./allocation.ts";

/** What an allocate request asks of its owner's lifetime. */
export type RequestedLifetime =
  | { kind: "plain" }
  /** `startTime`: the caller's reading of /proc/PID/stat; without it, the process holding the PID while the request is served. */
  | { kind: "process"; pid: number; startTime?: string }
  | { kind: "lease"; durationMs: number };

/** What status shows of an owner. */
export type OwnerLifetime =
  | { kind: "plain"; since: number | null }
  | { kind: "process"; pid: number; startTime: string; since: number }
  | { kind: "lease"; expiresAt: number; durationMs: number; since: number };

/** Why an owner was released without a `release` (the metric's label, the log's `cause`). */
export type AutomaticReleaseCause = "process_exited" | "lease_lapsed" | "process_gone_at_start" | "lease_lapsed_at_start";

export const AUTOMATIC_RELEASE_CAUSES: readonly AutomaticReleaseCause[] = ["process_exited", "lease_lapsed", "process_gone_at_start", "lease_lapsed_at_start"];

export const OWNER_LIFETIME_LIMITS = {
  /** Owners held by a process at once: each holds a pidfd. */
  maxProcessOwners: 1024,
  /** Owners with a lease at once. */
  maxLeasedOwners: 1024,
  minLeaseMs: 1_000,
  /** A lease longer than a day is a plain owner that forgot to say so. */
  maxLeaseMs: 24 * 3_600_000,
  /** A failed automatic release is tried again this much later. */
  retryMs: 10_000,
  /** The side file is at most this large (1,024 + 1,024 owners of at most 253 characters fit many times over). */
  maxFileBytes: 4 * 1024 * 1024,
} as const;

type Bound =
  | { kind: "process"; pid: number; startTime: string; since: number; watch: ProcessWatch }
  | { kind: "lease"; expiresAt: number; durationMs: number; since: number };

/** A lifetime set while its request runs: kept once the allocation is recorded, undone otherwise. */
export interface PendingLifetime {
  /** Writes the side file when the binding changed; the failure's text, or null. */
  commit(): Promise<string | null>;
  /** The request failed: whatever this binding changed is undone (an owner still holding devices keeps its previous one). */
  abandon(): void;
}

export interface OwnerLifetimesOptions {
  /** The side file; null keeps the bindings in memory only. */
  file: string | null;
  clock: Clock;
  log: Logger;
  watcher: ProcessWatcher;
  /** Whether `owner` holds devices now. */
  holdsDevices: (owner: string) => boolean;
  /** Releases `owner` (the allocator's release, written before it resolves); how many allocations were freed. */
  release: (owner: string, cause: AutomaticReleaseCause) => Promise<number>;
  /** Told of each automatic release that freed devices (metrics). */
  observe?: (cause: AutomaticReleaseCause) => void;
}

interface SideFile {
  version: 1;
  owners: Record<string, { pid: number; startTime: string; since: number } | { leaseExpiresAt: number; leaseMs: number; since: number }>;
}

export class OwnerLifetimes {
  readonly #options: OwnerLifetimesOptions;
  readonly #bound = new Map<string, Bound>();
  readonly #plainSince = new Map<string, number>();
  /** Owners whose automatic release is on its way, and those to try again, with their cause. */
  readonly #releasing = new Set<string>();
  readonly #retry = new Map<string, AutomaticReleaseCause>();
  #retryAt = Infinity;
  #cancelTimer: (() => void) | null = null;
  #timerAt = Infinity;
  #saving: Promise<string | null> = Promise.resolve(null);
  #stopped = false;

  constructor(options: OwnerLifetimesOptions) {
    this.#options = options;
  }

  /** Owners held by a process and owners with a lease now. */
  get counts(): { processes: number; leases: number } {
    let processes = 0;
    for (const bound of this.#bound.values()) if (bound.kind === "process") processes++;
    return { processes, leases: this.#bound.size - processes };
  }

  /** Whether a lease timer is set (tests: none while there are no leases). */
  get timerSet(): boolean {
    return this.#cancelTimer !== null;
  }

  describe(owner: string): OwnerLifetime {
    const bound = this.#bound.get(owner);
    if (bound === undefined) return { kind: "plain", since: this.#plainSince.get(owner) ?? null };
    if (bound.kind === "process") return { kind: "process", pid: bound.pid, startTime: bound.startTime, since: bound.since };
    return { kind: "lease", expiresAt: bound.expiresAt, durationMs: bound.durationMs, since: bound.since };
  }

  /**
   * Sets `owner`'s lifetime for a request about to run, or refuses it
   * (AllocationError): an owner keeps the kind it was first given; a
   * process is pinned now. The binding is in force at once, so a process
   * that exits while its request runs releases what the request records.
   */
  prepare(owner: string, requested: RequestedLifetime): PendingLifetime {
    const { clock, holdsDevices } = this.#options;
    const current = this.#bound.get(owner);
    const holds = holdsDevices(owner);
    const unchanged: PendingLifetime = { commit: () => Promise.resolve(null), abandon: () => {} };
    if (requested.kind === "plain") {
      if (current !== undefined) throw new AllocationError(`owner ${owner} holds its devices ${heldText(current)}; ask again ${askText(current)}, or release it first`);
      return {
        commit: () => {
          if (!this.#plainSince.has(owner)) this.#plainSince.set(owner, clock.now());
          return Promise.resolve(null);
        },
        abandon: () => {},
      };
    }
    if (current === undefined && holds) {
      throw new AllocationError(`owner ${owner} holds its devices until released; release it first to give it ${requested.kind === "process" ? "a process" : "a lease"}`);
    }
    if (requested.kind === "process") {
      const { pid } = requested;
      if (!Number.isInteger(pid) || pid < 1 || pid > MAX_PID) throw new AllocationError(`owner pid must be between 1 and ${MAX_PID}, got ${pid}`);
      if (current?.kind === "process") {
        if (current.pid === pid && (requested.startTime === undefined || requested.startTime === current.startTime)) return unchanged;
        throw new AllocationError(`owner ${owner} holds its devices ${heldText(current)}, not process ${pid}; release it first`);
      }
      if (current !== undefined) throw new AllocationError(`owner ${owner} holds its devices ${heldText(current)}; ask again ${askText(current)}, or release it first`);
      if (this.counts.processes >= OWNER_LIFETIME_LIMITS.maxProcessOwners) {
        throw new AllocationError(`${OWNER_LIFETIME_LIMITS.maxProcessOwners} owners are held by a process already (the limit); release some first`);
      }
      const identity: ProcessIdentity | null = requested.startTime === undefined ? processIdentity(pid) : { pid, startTime: requested.startTime };
      if (identity === null) throw new AllocationError(`process ${pid} is not running`);
      const watch = this.#options.watcher.watch(identity, () => this.#exited(owner, binding));
      if ("refused" in watch) throw new AllocationError(watch.refused);
      const binding: Bound = { kind: "process", pid, startTime: identity.startTime, since: clock.now(), watch };
      this.#bound.set(owner, binding);
      return {
        commit: () => this.#save(),
        abandon: () => {
          if (this.#bound.get(owner) !== binding || holdsDevices(owner)) return;
          watch.close();
          this.#bound.delete(owner);
        },
      };
    }
    const { durationMs } = requested;
    const { minLeaseMs, maxLeaseMs, maxLeasedOwners } = OWNER_LIFETIME_LIMITS;
    if (!Number.isFinite(durationMs) || durationMs < minLeaseMs || durationMs > maxLeaseMs) {
      throw new AllocationError(`a lease must be between ${formatDuration(minLeaseMs)} and ${formatDuration(maxLeaseMs)}, got ${formatDuration(durationMs)}`);
    }
    if (current?.kind === "process") throw new AllocationError(`owner ${owner} holds its devices ${heldText(current)}; it cannot take a lease`);
    if (current === undefined && this.counts.leases >= maxLeasedOwners) {
      throw new AllocationError(`${maxLeasedOwners} owners hold a lease already (the limit); release some first`);
    }
    const now = clock.now();
    const binding: Bound = { kind: "lease", expiresAt: now + durationMs, durationMs, since: current?.since ?? now };
    this.#bound.set(owner, binding);
    this.#arm();
    return {
      commit: () => this.#save(),
      abandon: () => {
        if (this.#bound.get(owner) !== binding) return;
        if (current !== undefined) this.#bound.set(owner, current);
        else if (!holdsDevices(owner)) this.#bound.delete(owner);
        this.#arm();
      },
    };
  }

  /** `owner` holds nothing any more (released, or its allocation undone): its binding goes, and the side file is written. */
  forget(owner: string): void {
    this.#plainSince.delete(owner);
    this.#retry.delete(owner);
    const bound = this.#bound.get(owner);
    if (bound === undefined || this.#options.holdsDevices(owner)) return;
    if (bound.kind === "process") bound.watch.close();
    this.#bound.delete(owner);
    this.#arm();
    void this.#save().then((failure) => {
      if (failure !== null) this.#options.log.warn("owner lifetimes file not written; the owner is dropped from it at the next start", { owner, error: failure });
    });
  }

  /**
   * Reads the side file after the checkpoint was restored, watches the
   * processes again, sets the lease timer, and releases at once the owners
   * whose process is gone or whose lease lapsed while the agent was stopped.
   */
  async restore(): Promise<void> {
    const { file, log, clock, holdsDevices, watcher } = this.#options;
    if (file === null) return;
    let parsed: SideFile;
    try {
      parsed = parseSideFile(await readSmallFile(file, OWNER_LIFETIME_LIMITS.maxFileBytes));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
      log.error("owner lifetimes file unreadable: its owners are held until released", { path: file, error: messageOf(error) });
      return;
    }
    const due: Array<[string, AutomaticReleaseCause, Record<string, unknown>]> = [];
    let dropped = 0;
    for (const [owner, entry] of Object.entries(parsed.owners)) {
      if (!holdsDevices(owner)) {
        dropped++;
        continue;
      }
      if ("pid" in entry) {
        const binding: Bound = { kind: "process", pid: entry.pid, startTime: entry.startTime, since: entry.since, watch: { close() {} } };
        const watch = watcher.watch({ pid: entry.pid, startTime: entry.startTime }, () => this.#exited(owner, binding));
        this.#bound.set(owner, binding);
        if ("refused" in watch) due.push([owner, "process_gone_at_start", { pid: entry.pid, reason: watch.refused }]);
        else binding.watch = watch;
      } else {
        this.#bound.set(owner, { kind: "lease", expiresAt: entry.leaseExpiresAt, durationMs: entry.leaseMs, since: entry.since });
        if (entry.leaseExpiresAt <= clock.now()) due.push([owner, "lease_lapsed_at_start", { leaseExpiredAt: new Date(entry.leaseExpiresAt).toISOString() }]);
      }
    }
    log.info("owner lifetimes restored", { processes: this.counts.processes, leases: this.counts.leases, droppedWithoutDevices: dropped });
    if (dropped > 0) await this.#save();
    for (const [owner] of due) this.#releasing.add(owner);
    this.#arm();
    await Promise.all(due.map(([owner, cause, fields]) => this.#autoRelease(owner, cause, fields)));
  }

  stop(): void {
    this.#stopped = true;
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    for (const bound of this.#bound.values()) if (bound.kind === "process") bound.watch.close();
  }

  #exited(owner: string, binding: Bound): void {
    if (this.#stopped || this.#bound.get(owner) !== binding || binding.kind !== "process") return;
    this.#releasing.add(owner);
    void this.#autoRelease(owner, "process_exited", { pid: binding.pid });
  }

  async #autoRelease(owner: string, cause: AutomaticReleaseCause, fields: Record<string, unknown>): Promise<void> {
    const { log, release, observe } = this.#options;
    try {
      const freed = await release(owner, cause);
      this.#retry.delete(owner);
      if (freed > 0) {
        log.info("devices released automatically", { owner, cause, ...fields });
        observe?.(cause);
      }
    } catch (error) {
      if (this.#stopped) return;
      log.warn("automatic release failed; tried again later", { owner, cause, retryInMs: OWNER_LIFETIME_LIMITS.retryMs, error: messageOf(error), ...fields });
      this.#retry.set(owner, cause);
      this.#retryAt = Math.min(this.#retryAt, this.#options.clock.now() + OWNER_LIFETIME_LIMITS.retryMs);
    } finally {
      this.#releasing.delete(owner);
      this.#arm();
    }
  }

  /** Sets the one timer for the earliest lease expiry or retry, or none. */
  #arm(): void {
    if (this.#stopped) return;
    let next = this.#retry.size > 0 ? this.#retryAt : Infinity;
    if (this.#retry.size === 0) this.#retryAt = Infinity;
    for (const [owner, bound] of this.#bound) {
      if (bound.kind === "lease" && !this.#releasing.has(owner) && !this.#retry.has(owner)) next = Math.min(next, bound.expiresAt);
    }
    if (next === this.#timerAt && this.#cancelTimer !== null) return;
    this.#cancelTimer?.();
    this.#cancelTimer = null;
    this.#timerAt = next;
    if (next === Infinity) return;
    const { clock } = this.#options;
    this.#cancelTimer = clock.setTimer(() => this.#fire(), Math.max(0, next - clock.now()));
  }

  #fire(): void {
    this.#cancelTimer = null;
    this.#timerAt = Infinity;
    const now = this.#options.clock.now();
    const retries = now >= this.#retryAt ? [...this.#retry] : [];
    if (retries.length > 0) {
      this.#retry.clear();
      this.#retryAt = Infinity;
    }
    for (const [owner, cause] of retries) {
      this.#releasing.add(owner);
      void this.#autoRelease(owner, cause, {});
    }
    for (const [owner, bound] of this.#bound) {
      if (bound.kind !== "lease" || bound.expiresAt > now || this.#releasing.has(owner) || this.#retry.has(owner)) continue;
      this.#releasing.add(owner);
      void this.#autoRelease(owner, "lease_lapsed", { leaseExpiredAt: new Date(bound.expiresAt).toISOString() });
    }
    this.#arm();
  }

  /** Writes the side file with every binding now (writes follow one another; each writes the latest). */
  #save(): Promise<string | null> {
    const { file } = this.#options;
    if (file === null) return Promise.resolve(null);
    this.#saving = this.#saving.then(() => writeSideFile(file, this.#sideFile()).then(() => null, (error: unknown) => messageOf(error)));
    return this.#saving;
  }

  #sideFile(): SideFile {
    const owners: SideFile["owners"] = {};
    for (const [owner, bound] of this.#bound) {
      owners[owner] = bound.kind === "process"
        ? { pid: bound.pid, startTime: bound.startTime, since: bound.since }
        : { leaseExpiresAt: bound.expiresAt, leaseMs: bound.durationMs, since: bound.since };
    }
    return { version: 1, owners };
  }
}

function heldText(bound: Bound): string {
  return bound.kind === "process" ? `while process ${bound.pid} runs` : `under a lease until ${new Date(bound.expiresAt).toISOString()}`;
}

function askText(bound: Bound): string {
  return bound.kind === "process" ? `with --owner-pid ${bound.pid}` : "with --lease";
}

/** The side file's path for a checkpoint at `checkpointPath`. */
export function ownerLifetimesFile(checkpointPath: string): string {
  return `${checkpointPath}.edgeplug-owners.json`;
}

async function readSmallFile(file: string, limit: number): Promise<string> {
  const handle = await fs.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new Error(`${file} is not a regular file`);
    const uid = process.getuid?.() ?? 0;
    if (info.uid !== 0 && info.uid !== uid) throw new Error(`${file} is owned by uid ${info.uid}, not by root or edgeplug's user`);
    if ((info.mode & 0o022) !== 0) throw new Error(`${file} may be written by others than its owner (mode ${(info.mode & 0o7777).toString(8)})`);
    if (info.size > limit) throw new Error(`${file} is ${info.size} bytes, over the limit of ${limit}`);
    const buffer = Buffer.alloc(info.size);
    const { bytesRead } = await handle.read(buffer, 0, info.size, 0);
    return buffer.subarray(0, bytesRead).toString("utf8");
  } finally {
    await handle.close();
  }
}

/** Parses the side file; throws naming what is wrong, never quoting the file. */
export function parseSideFile(text: string): SideFile {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error("not JSON");
  }
  const object = value as { version?: unknown; owners?: unknown };
  if (typeof object !== "object" || object === null || object.version !== 1 || typeof object.owners !== "object" || object.owners === null) {
    throw new Error("not a version 1 owners file");
  }
  const owners: SideFile["owners"] = {};
  for (const [owner, entry] of Object.entries(object.owners as Record<string, unknown>)) {
    const e = entry as Record<string, unknown>;
    const since = typeof e?.since === "number" && Number.isFinite(e.since) ? e.since : null;
    if (since !== null && typeof e.pid === "number" && Number.isInteger(e.pid) && e.pid >= 1 && e.pid <= MAX_PID && typeof e.startTime === "string" && /^[0-9]{1,20}$/.test(e.startTime)) {
      owners[owner] = { pid: e.pid, startTime: e.startTime, since };
    } else if (since !== null && typeof e.leaseExpiresAt === "number" && Number.isFinite(e.leaseExpiresAt) && typeof e.leaseMs === "number" && Number.isFinite(e.leaseMs)) {
      owners[owner] = { leaseExpiresAt: e.leaseExpiresAt, leaseMs: e.leaseMs, since };
    } else {
      throw new Error("an owner's entry is neither a process nor a lease");
    }
  }
  return { version: 1, owners };
}

/** Writes `content` to `file` atomically: a fresh temporary file beside it, synced, renamed over it. */
async function writeSideFile(file: string, content: SideFile): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 10)}`);
  const handle = await fs.open(temp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
  try {
    await handle.writeFile(JSON.stringify(content) + "\n");
    await handle.sync();
  } catch (error) {
    await handle.close();
    await fs.rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  try {
    await fs.rename(temp, file);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
}
