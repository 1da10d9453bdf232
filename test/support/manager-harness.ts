/**
 * A PluginManager for tests: built from a test policy, wired to a status
 * cache and a liveness dial as src/agent/agent.ts wires them, stopped after the
 * test, with its change events recorded and helpers that wait on its records.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import type { TestContext } from "node:test";
import { createLogger } from "../../src/log/logger.ts";
import type { Logger } from "../../src/log/logger.ts";
import { handlerFactories } from "../../src/agent/agent.ts";
import { LivenessDial } from "../../src/liveness/dial.ts";
import { PluginManager } from "../../src/pluginmanager/manager.ts";
import type { PluginManagerObserver } from "../../src/pluginmanager/manager.ts";
import type { Clock } from "../../src/platform/clock.ts";
import type { HandlerFactories } from "../../src/pluginmanager/types.ts";
import { type PluginChange, type PluginRecord, PluginStatusCache } from "../../src/api/plugin-status.ts";
import { waitForEvent } from "./fake-plugin.ts";
import { testPolicy } from "./policy.ts";
import type { TestPolicyOptions } from "./policy.ts";

/** The manager's log when a test does not read it: errors only, as text on stderr. */
export const quietLog = createLogger({ level: "error", format: "text" });

export interface StartManagerOptions {
  /** Merged over the agent's handler factories. */
  handlers?: HandlerFactories;
  /** Built-in types left out, to play a build that lacks their handler. */
  without?: string[];
  observer?: PluginManagerObserver;
  /** Default: {@link quietLog}. */
  log?: Logger;
  /** Default: the system's. */
  clock?: Clock;
}

/** Starts a manager for `testPolicy(policy)`, stopped after `t`; `status` holds its records, `changes` every change of them. */
export async function startManager(
  t: TestContext,
  policy: TestPolicyOptions,
  options: StartManagerOptions = {},
): Promise<{ manager: PluginManager; status: PluginStatusCache; changes: PluginChange[] }> {
  const effective = testPolicy(policy);
  const log = options.log ?? quietLog;
  const status = new PluginStatusCache({ log });
  const manager = new PluginManager({
    policy: effective,
    log,
    handlers: Object.fromEntries(
      Object.entries({ ...handlerFactories(), ...options.handlers }).filter(([type]) => !options.without?.includes(type)),
    ),
    observers: options.observer ? [options.observer, status] : [status],
    clock: options.clock,
  });
  const changes: PluginChange[] = [];
  status.subscribe((change) => changes.push(change));
  const liveness = new LivenessDial(manager, effective, options.clock);
  t.after(() => {
    liveness.stop();
    return manager.stop();
  });
  await manager.start();
  liveness.start();
  return { manager, status, changes };
}

/** Waits (at most 5 s) until `predicate` holds over the records; fails naming `what`. */
export async function until(status: PluginStatusCache, predicate: (plugins: PluginRecord[]) => boolean, what: string): Promise<void> {
  const settled = await status.whenSettled({ predicate, signal: AbortSignal.timeout(5000) });
  assert.ok(settled, `timed out waiting for ${what}; records: ${JSON.stringify(status.plugins(), null, 1)}`);
}

/**
 * Resolves once the operation that recorded the last outcome has ended too:
 * an outcome is recorded a few promise turns before its operation returns
 * (after which a socket counts as idle, e.g. for the liveness dial).
 */
export function operationsEnded(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The record of `socket`, if there is one. */
export function record(status: PluginStatusCache, socket: string): PluginRecord | undefined {
  return status.plugins().find((p) => p.socket === socket);
}

/** The state of the record of `socket`, if there is one. */
export function stateOf(status: PluginStatusCache, socket: string): PluginRecord["state"] | undefined {
  return record(status, socket)?.state;
}

/** Counts the manager's reconciler heartbeats; `reach(n)` resolves once n have come (rejects after 5 s). */
export function heartbeatCounter() {
  const events = new EventEmitter();
  let beats = 0;
  const observer: PluginManagerObserver = {
    heartbeat: (source) => {
      if (source === "reconciler") beats++;
      events.emit("change");
    },
  };
  const reach = (count: number) => waitForEvent(events, `${count} heartbeats`, () => beats >= count, 5000);
  return { observer, reach, count: () => beats };
}
