/**
 * One log line per change of a resource's device health: which devices
 * turned unhealthy or healthy (the first few by ID) and the counts after.
 * An operator grepping the agent's log for a device that failed finds when
 * it did; the resource's connection changes have lines of their own.
 *
 * Bounded: at most one line per resource per {@link HEALTH_LOG_INTERVAL_MS}
 * (changes inside the interval are told together, against the state last
 * logged, so a device that flaps back within it makes no line), at most
 * {@link MAX_IDS_PER_LINE} IDs per list in a line, and the state remembered
 * per resource is its unhealthy IDs only. A list that adds or drops
 * devices without a change of health makes no line.
 */
import type { Logger } from "../log/logger.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import type { DeviceManager } from "./device-manager.ts";

export const HEALTH_LOG_INTERVAL_MS = 1000;
export const MAX_IDS_PER_LINE = 10;

interface Logged {
  unhealthy: Set<string>;
  at: number;
  /** Cancels the timer that tells the changes held back by the interval; null when none is set. */
  timer: (() => void) | null;
}

/** Logs the health changes of `devices`' resources until the returned stop() (which clears every timer). */
export function logDeviceHealth(devices: DeviceManager, log: Logger, clock: Clock = systemClock): () => void {
  const logged = new Map<string, Logged>();
  const check = (resource: string) => {
    const entry = logged.get(resource);
    const now = clock.now();
    if (entry !== undefined && entry.timer === null && now - entry.at < HEALTH_LOG_INTERVAL_MS) {
      entry.timer = clock.setTimer(() => {
        entry.timer = null;
        check(resource);
      }, entry.at + HEALTH_LOG_INTERVAL_MS - now);
      return;
    }
    if (entry?.timer) return;
    const status = devices.resource(resource);
    if (status === undefined || !status.connected) {
      // Gone or disconnected (its own line says so): the next list starts afresh.
      logged.delete(resource);
      return;
    }
    const unhealthy = new Set(status.unhealthy);
    const before = entry ?? { unhealthy: new Set<string>(), at: -Infinity, timer: null };
    const turnedUnhealthy = status.unhealthy.filter((id) => !before.unhealthy.has(id));
    const healthyNow = before.unhealthy.size > 0 ? new Set(status.healthy) : null;
    const turnedHealthy = healthyNow === null ? [] : [...before.unhealthy].filter((id) => healthyNow.has(id));
    // Devices coming or going healthy are the plugin's list changing, not their health.
    const changed = turnedUnhealthy.length > 0 || turnedHealthy.length > 0;
    logged.set(resource, { unhealthy, at: changed ? now : before.at, timer: null });
    if (!changed) return;
    const idsLeftOut = Math.max(0, turnedUnhealthy.length - MAX_IDS_PER_LINE) + Math.max(0, turnedHealthy.length - MAX_IDS_PER_LINE);
    log.info("device health changed", {
      resource,
      healthy: status.healthy.length,
      unhealthy: status.unhealthy.length,
      turnedUnhealthy: turnedUnhealthy.slice(0, MAX_IDS_PER_LINE),
      turnedHealthy: turnedHealthy.slice(0, MAX_IDS_PER_LINE),
      ...(idsLeftOut > 0 ? { idsLeftOut } : {}),
    });
  };
  const unsubscribe = devices.subscribe((change) => {
    if (change.kind === "resource") check(change.resource);
  });
  return () => {
    unsubscribe();
    for (const entry of logged.values()) entry.timer?.();
    logged.clear();
  };
}
