/**
 * Knowing when a process exits without polling: a pidfd (pidfd_open(2),
 * Linux 5.3) watched on the agent's event loop, from native/pidfd.c, a
 * Node-API module of four functions (Node 24 has no pidfd API). The single
 * executable carries the module for its own target as an asset
 * (scripts/build.ts); it is written to a fresh directory only root can
 * enter, loaded with process.dlopen, and the file removed at once. From
 * source (`node src/main.ts`) the module the last build made for this
 * machine is loaded, if there is one.
 *
 * A PID alone names no process: the kernel hands a PID out again once its
 * process is gone. A process is named by its PID and its start time (field
 * 22 of /proc/PID/stat, clock ticks since boot), and a watch is opened only
 * when the process holding the PID right after the pidfd was opened started
 * at that time: the pidfd then refers to that very process, however soon
 * the PID is reused afterwards.
 *
 * @example
 * ```ts
 * const watcher = loadProcessWatcher();
 * const identity = processIdentity(pid); // { pid, startTime } or null
 * const watch = watcher.watch(identity, () => log.info("it exited"));
 * if ("refused" in watch) throw new Error(watch.refused);
 * // ... watch.close() when no longer wanted
 * ```
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { messageOf } from "../log/error-message.ts";
import { isSingleExecutable, platformTag } from "./runtime.ts";

/** A process as the kernel knows it across PID reuse. */
export interface ProcessIdentity {
  pid: number;
  /** Clock ticks after boot at which it started (/proc/PID/stat field 22), as a decimal string. */
  startTime: string;
}

export interface ProcessWatch {
  /** Stops watching; safe to call twice, and after the process exited. */
  close(): void;
}

export interface ProcessWatcher {
  /** Null when processes can be watched; otherwise why not (no module for this machine, an older kernel). */
  readonly unavailable: string | null;
  /**
   * Watches `identity`: `onExit` is called once, on the event loop, after
   * the process exited. Refused when it is not running now or another
   * process holds its PID (with the reason), or when watching is unavailable.
   */
  watch(identity: ProcessIdentity, onExit: () => void): ProcessWatch | { refused: string };
}

/** The asset's name in the executable and the module's file name in a build's directory. */
export const PIDFD_MODULE_ASSET = "pidfd.node";

/** The largest PID Linux hands out (PID_MAX_LIMIT on 64-bit). */
export const MAX_PID = 4_194_304;

/** The identity of the process holding `pid` now, or null when none does (or there is no /proc). */
export function processIdentity(pid: number, procRoot = "/proc"): ProcessIdentity | null {
  if (!Number.isInteger(pid) || pid < 1 || pid > MAX_PID) return null;
  let stat: string;
  try {
    stat = fs.readFileSync(path.join(procRoot, String(pid), "stat"), "latin1");
  } catch {
    return null;
  }
  const startTime = startTimeOf(stat);
  return startTime === null ? null : { pid, startTime };
}

/** Field 22 of a /proc/PID/stat line; the command name (field 2) may hold spaces and parentheses, so fields are counted after its last ")". */
export function startTimeOf(statLine: string): string | null {
  const end = statLine.lastIndexOf(")");
  if (end < 0) return null;
  const fields = statLine.slice(end + 2).split(" ");
  // fields[0] is field 3 (state), so field 22 is fields[19].
  const value = fields[19];
  return value !== undefined && /^[0-9]{1,20}$/.test(value) ? value : null;
}

interface PidfdModule {
  open(pid: number): number;
  watch(fd: number, onExit: () => void): unknown;
  close(handle: unknown): void;
  closeFd(fd: number): void;
}

let loaded: ProcessWatcher | null = null;

/** A watcher that loads the module on first use: an agent whose owners never name a process never loads it. */
export function lazyProcessWatcher(): ProcessWatcher {
  return {
    get unavailable() {
      return loadProcessWatcher().unavailable;
    },
    watch: (identity, onExit) => loadProcessWatcher().watch(identity, onExit),
  };
}

/** The watcher for this process: the native module loaded once, or one that refuses every watch saying why. */
export function loadProcessWatcher(): ProcessWatcher {
  loaded ??= createWatcher();
  return loaded;
}

function createWatcher(): ProcessWatcher {
  let native: PidfdModule;
  try {
    native = loadModule();
  } catch (error) {
    return unavailableWatcher(`processes cannot be watched: ${messageOf(error)}`);
  }
  const probe = native.open(process.pid);
  if (probe < 0) return unavailableWatcher(`processes cannot be watched: pidfd_open failed (${errnoName(-probe)}; Linux 5.3 or later is needed)`);
  native.closeFd(probe);
  return {
    unavailable: null,
    watch(identity, onExit) {
      const fd = native.open(identity.pid);
      if (fd < 0) return { refused: -fd === ESRCH ? `process ${identity.pid} is not running` : `process ${identity.pid} cannot be watched: pidfd_open failed (${errnoName(-fd)})` };
      // Read after the pidfd was opened: if the process holding the PID now started when the caller's did, the pidfd refers to it.
      const now = processIdentity(identity.pid);
      if (now === null || now.startTime !== identity.startTime) {
        native.closeFd(fd);
        return {
          refused: now === null
            ? `process ${identity.pid} is not running`
            : `process ${identity.pid} is not the process named: it started at ${now.startTime}, not ${identity.startTime} (clock ticks after boot): the PID was reused`,
        };
      }
      let open = true;
      const handle = native.watch(fd, () => {
        if (!open) return;
        open = false;
        onExit();
      });
      return {
        close() {
          if (!open) return;
          open = false;
          native.close(handle);
        },
      };
    },
  };
}

function unavailableWatcher(reason: string): ProcessWatcher {
  return { unavailable: reason, watch: () => ({ refused: reason }) };
}

const ESRCH = 3;
const ERRNO_NAMES: Record<number, string> = { 1: "EPERM", 3: "ESRCH", 22: "EINVAL", 24: "EMFILE", 23: "ENFILE", 38: "ENOSYS", 12: "ENOMEM" };

function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}

/** Loads the module: from the executable's asset, or from source, the last build's for this machine. */
function loadModule(): PidfdModule {
  if (process.platform !== "linux") throw new Error(`pidfds are Linux's, this is ${process.platform}`);
  const module = { exports: {} as PidfdModule };
  if (isSingleExecutable()) {
    // Looked up, not imported: Deno has no node:sea (src/platform/runtime.ts).
    const sea = process.getBuiltinModule("node:sea") as { getAssetKeys(): string[]; getRawAsset(key: string): ArrayBuffer };
    if (!sea.getAssetKeys().includes(PIDFD_MODULE_ASSET)) throw new Error("this executable was built without its pidfd module");
    loadFromPrivateCopy(module, new Uint8Array(sea.getRawAsset(PIDFD_MODULE_ASSET)));
  } else {
    const entry = process.argv[1];
    const file = entry ? path.resolve(path.dirname(entry), "..", "dist", `build-${platformTag()}`, PIDFD_MODULE_ASSET) : "";
    if (!entry || !fs.existsSync(file)) throw new Error(`no pidfd module built for ${platformTag()} (npm run build makes ${file || "it"})`);
    process.dlopen(module, file);
  }
  return module.exports;
}

/**
 * Writes the module to a directory made for it alone (mode 0700, a random
 * name), loads it and removes the directory: nobody but root can replace
 * the file between the write and the load. The system's temporary directory
 * first; where that forbids executing (noexec), the agent's working directory.
 */
function loadFromPrivateCopy(module: { exports: unknown }, bytes: Uint8Array): void {
  const failures: string[] = [];
  for (const parent of [os.tmpdir(), process.cwd()]) {
    let dir: string | null = null;
    try {
      dir = fs.mkdtempSync(path.join(parent, "edgeplug-pidfd-"));
      const file = path.join(dir, PIDFD_MODULE_ASSET);
      fs.writeFileSync(file, bytes, { mode: 0o500, flag: "wx" });
      process.dlopen(module, file);
      return;
    } catch (error) {
      failures.push(`${parent}: ${messageOf(error)}`);
    } finally {
      if (dir !== null) fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  throw new Error(`the pidfd module could not be loaded (${failures.join("; ")})`);
}
