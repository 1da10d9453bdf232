/**
 * The descriptor limit (RLIMIT_NOFILE) the agent runs with.
 *
 * Nothing here raises it, because the runtimes already do: Node (and so the
 * single executable, which is Node's own binary) raises the soft limit to the
 * hard limit while it starts, before any JavaScript runs, and Deno does the
 * same. Node offers no setrlimit to JavaScript, and a native addon or a
 * `prlimit` child would only repeat that. What remains is to check the result
 * and say so when the hard limit itself is too low for the agent's caps.
 *
 * @example
 * ```ts
 * const limit = readDescriptorLimit(); // { soft: 524288, hard: 524288 } or null off Linux
 * ```
 */
import * as fs from "node:fs";
import { API_SOCKET_LIMITS, METRICS_LISTENER_LIMITS, POD_RESOURCES_SOCKET_LIMITS, REGISTRATION_SOCKET_LIMITS } from "./limits.ts";
import type { Logger } from "../log/logger.ts";
import type { Policy } from "../policy/types.ts";

export interface DescriptorLimit {
  /** The limit in force; Infinity for "unlimited". */
  soft: number;
  /** The ceiling the soft limit may be raised to. */
  hard: number;
}

/** Reads this process's RLIMIT_NOFILE from /proc; null where there is no /proc (not Linux). */
export function readDescriptorLimit(limitsFile = "/proc/self/limits"): DescriptorLimit | null {
  let text: string;
  try {
    text = fs.readFileSync(limitsFile, "utf8");
  } catch {
    return null;
  }
  return parseDescriptorLimit(text);
}

/** The "Max open files" row of a /proc/PID/limits text; null when it is missing or malformed. */
export function parseDescriptorLimit(limitsText: string): DescriptorLimit | null {
  const row = /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)\s/m.exec(limitsText);
  if (!row) return null;
  const value = (field: string) => (field === "unlimited" ? Infinity : Number(field));
  return { soft: value(row[1]!), hard: value(row[2]!) };
}

/**
 * Descriptors the agent may need at once: every connection its listeners
 * admit, two per plugin (its kept service connection and the pinned socket
 * it dials through), two per registration attempt running (the same pair for
 * the registration socket), one pidfd per owner held by a process, plus
 * `reserve` for watchers, logs, the checkpoint and the runtime itself.
 */
export function descriptorsNeeded(parts: { listenerConnections: number; maxPlugins: number; attemptsAtOnce: number; processOwners?: number; reserve?: number }): number {
  return parts.listenerConnections + 2 * parts.maxPlugins + 2 * parts.attemptsAtOnce + (parts.processOwners ?? 0) + (parts.reserve ?? 64);
}

/** Logs the limit the runtime set at start, warning when even the hard limit is below what `policy` may use. */
/**
 * The layers above hand in their own bounds: `attemptsAtOnce`, the plugin manager's REGISTRATION_ATTEMPTS_AT_ONCE;
 * `maxProcessOwners`, the device manager's OWNER_LIFETIME_LIMITS.maxProcessOwners.
 */
export function logDescriptorLimit(log: Logger, policy: Policy, bounds: { attemptsAtOnce: number; maxProcessOwners: number }, limit = readDescriptorLimit()): void {
  if (!limit) return;
  const needed = descriptorsNeeded({
    listenerConnections: (policy.api.socket === null ? 0 : API_SOCKET_LIMITS.maxConnections) +
      (policy.api.metrics === null ? 0 : METRICS_LISTENER_LIMITS.maxConnections) +
      (policy.devicePlugins.registrationSocket === null || !policy.handlers.has("DevicePlugin") ? 0 : REGISTRATION_SOCKET_LIMITS.maxConnections) +
      (policy.podResources.socket === null ? 0 : POD_RESOURCES_SOCKET_LIMITS.maxConnections),
    maxPlugins: policy.security.maxPlugins,
    attemptsAtOnce: bounds.attemptsAtOnce,
    processOwners: policy.handlers.has("DevicePlugin") ? bounds.maxProcessOwners : 0,
  });
  const fields = { soft: limit.soft, hard: limit.hard, needed };
  if (limit.soft < needed) log.warn("descriptor limit (RLIMIT_NOFILE) is below what the configured limits may use; raise LimitNOFILE", fields);
  else log.debug("descriptor limit", fields);
}
