/**
 * systemd's readiness protocol (sd_notify) for `Type=notify` units:
 * READY=1 once the agent is ready, RELOADING=1 with MONOTONIC_USEC while a
 * SIGHUP reload runs and READY=1 after it, STOPPING=1 when it stops.
 *
 * The protocol is one datagram per message on the AF_UNIX SOCK_DGRAM socket
 * named by $NOTIFY_SOCKET. Node has no unix datagram sockets (`dgram` is UDP
 * only, `net` is stream only, and systemd's socket accepts nothing else), and
 * the executable loads no native code, so the datagram is sent by systemd's
 * own client, `systemd-notify`, which every systemd installation ships. It is
 * run from fixed absolute paths (never found through PATH, which is
 * untrusted), with an environment holding only NOTIFY_SOCKET, one at a time
 * so that messages arrive in order. systemd-notify waits until the service
 * manager has processed the message (its BARRIER=1 round trip), which is what
 * makes a message from a short-lived child process reliable; the unit sets
 * NotifyAccess=all because the sender is that child, not the main process.
 *
 * @example
 * ```ts
 * const notifier = serviceNotifier({ env: process.env, log });
 * notifier?.ready();       // after every readiness gate is done
 * notifier?.reloading();   // on SIGHUP, then ready() when applied
 * await notifier?.close(1000);
 * ```
 */
import { type ChildProcess, execFile } from "node:child_process";
import fs from "node:fs";
import process from "node:process";
import type { Logger } from "../log/logger.ts";
import { hasControlCharacter } from "../log/printable.ts";

/** Where systemd installs systemd-notify (merged /usr and split /usr systems). */
export const SYSTEMD_NOTIFY_PATHS: readonly string[] = ["/usr/bin/systemd-notify", "/bin/systemd-notify"];

/** sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_ADDRESS_BYTES = 107;
/** Longest a systemd-notify run may take; the service manager answers the barrier in milliseconds. */
const HELPER_TIMEOUT_MS = 5000;

export interface ServiceNotifier {
  /** READY=1: start-up (or a reload) is complete. */
  ready(): Promise<void>;
  /** RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC, µs): a reload has begun; ready() must follow. */
  reloading(): Promise<void>;
  /** STOPPING=1: the agent is shutting down. */
  stopping(): Promise<void>;
  /** Waits up to `graceMs` for messages in flight, then kills what is left and sends nothing more. */
  close(graceMs: number): Promise<void>;
}

export interface ServiceNotifierOptions {
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** Candidate paths of systemd-notify, first existing one wins (default SYSTEMD_NOTIFY_PATHS). */
  helperPaths?: readonly string[];
  /** CLOCK_MONOTONIC in microseconds (default: process.hrtime, which is CLOCK_MONOTONIC on Linux). */
  monotonicUsec?: () => bigint;
}

/**
 * The NOTIFY_SOCKET address when it is one systemd-notify can reach: a
 * filesystem path (`/...`) or an abstract socket (`@...`), short enough for
 * sun_path, without control characters. Otherwise a reason.
 */
export function parseNotifySocket(value: string | undefined): { address: string } | { invalid: string } | null {
  if (value === undefined || value === "") return null;
  if (!value.startsWith("/") && !value.startsWith("@")) return { invalid: "expected an absolute path or an @abstract name" };
  if (new TextEncoder().encode(value).length > MAX_SOCKET_ADDRESS_BYTES) return { invalid: `longer than ${MAX_SOCKET_ADDRESS_BYTES} bytes` };
  if (hasControlCharacter(value)) return { invalid: "contains control characters" };
  return { address: value };
}

function findHelper(candidates: readonly string[]): string | null {
  for (const candidate of candidates) {
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not installed there
    }
  }
  return null;
}

/**
 * A notifier when the agent runs under a service manager that asked for
 * notifications (NOTIFY_SOCKET set), otherwise null. A NOTIFY_SOCKET that is
 * malformed, or a missing systemd-notify, is logged once (systemd would then
 * time the start out) and yields null.
 */
export function serviceNotifier(options: ServiceNotifierOptions): ServiceNotifier | null {
  const { log } = options;
  const socket = parseNotifySocket(options.env.NOTIFY_SOCKET);
  if (socket === null) return null;
  if ("invalid" in socket) {
    log.warn("NOTIFY_SOCKET ignored: systemd will not hear that edgeplug is ready", { reason: socket.invalid });
    return null;
  }
  const helperPaths = options.helperPaths ?? SYSTEMD_NOTIFY_PATHS;
  const helper = findHelper(helperPaths);
  if (helper === null) {
    log.error("NOTIFY_SOCKET is set but systemd-notify is missing: systemd will not hear that edgeplug is ready (use Type=simple)", {
      looked: helperPaths,
    });
    return null;
  }
  const monotonicUsec = options.monotonicUsec ?? (() => process.hrtime.bigint() / 1000n);
  let queue = Promise.resolve();
  let running: ChildProcess | null = null;
  let closed = false;

  const runHelper = (assignments: string[]) =>
    new Promise<void>((resolve) => {
      if (closed) return resolve();
      running = execFile(
        helper,
        assignments,
        { env: { NOTIFY_SOCKET: socket.address }, timeout: HELPER_TIMEOUT_MS, killSignal: "SIGKILL", maxBuffer: 64 * 1024 },
        (error, _stdout, stderr) => {
          running = null;
          if (error && !closed) {
            log.warn("systemd notification failed", { message: assignments.join(" "), error: String(stderr).trim() || error.message });
          }
          resolve();
        },
      );
    });
  const send = (assignments: string[]): Promise<void> => {
    queue = queue.then(() => runHelper(assignments));
    return queue;
  };

  return {
    ready: () => send(["READY=1", "STATUS=ready"]),
    reloading: () => send(["RELOADING=1", `MONOTONIC_USEC=${monotonicUsec()}`, "STATUS=reloading the policy"]),
    stopping: () => send(["STOPPING=1", "STATUS=stopping"]),
    async close(graceMs) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([queue, grace]);
      clearTimeout(timer);
      closed = true;
      (running as ChildProcess | null)?.kill("SIGKILL");
    },
  };
}
