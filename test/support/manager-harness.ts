/**
 * A PluginManager for tests: built from a test policy, wired to a liveness
 * dial as src/agent.ts wires them, stopped after the test, with its change
 * events recorded and helpers that wait on its records.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import type { TestContext } from "node:test";
import { createLogger } from "../../src/log/logger.ts";
import type { Logger } from "../../src/log/logger.ts";
import { handlerFactories } from "../../src/agent.ts";
import { LivenessDial } from "../../src/liveness/dial.ts";
import { PluginManager } from "../../src/pluginmanager/manager.ts";
import type { PluginManagerObserver } from "../../src/pluginmanager/manager.ts";
import type { Clock } from "../../src/platform/clock.ts";
import type { HandlerFactories, PluginChange, PluginRecord } from "../../src/pluginmanager/types.ts";
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

/** Starts a manager for `testPolicy(policy)`, stopped after `t`; `changes` collects every change it publishes. */
export async function startManager(
  t: TestContext,
  policy: TestPolicyOptions,
  options: StartManagerOptions = {},
): Promise<{ manager: PluginManager; changes: PluginChange[] }> {
  const effective = testPolicy(policy);
  const manager = new PluginManager({
    policy: effective,
    log: options.log ?? quietLog,
    handlers: Object.fromEntries(
      Object.entries({ ...handlerFactories(), ...options.handlers }).filter(([type]) => !options.without?.includes(type)),
    ),
    observer: options.observer,
    clock: options.clock,
  });
  const changes: PluginChange[] = [];
  manager.subscribe((change) => changes.push(change));
  const liveness = new LivenessDial(manager, effective, options.clock);
  t.after(() => {
    liveness.stop();
    return manager.stop();
  });
  await manager.start();
  liveness.start();
  return { manager, changes };
}

/** Waits (at most 5 s) until `predicate` holds over the manager's records; fails naming `what`. */
export async function until(manager: PluginManager, predicate: (plugins: PluginRecord[]) => boolean, what: string): Promise<void> {
  const settled = await manager.whenSettled({ predicate, signal: AbortSignal.timeout(5000) });
  assert.ok(settled, `timed out waiting for ${what}; records: ${JSON.stringify(manager.plugins(), null, 1)}`);
}

/**
 * Resolves once the operation that recorded the last outcome has ended too:
 * an outcome is recorded a few promise turns before its operation returns
 * (after which a socket counts as idle, e.g. for the liveness dial).
 */
export function operationsEnded(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** The manager's record of `socket`, if it has one. */
export function record(manager: PluginManager, socket: string): PluginRecord | undefined {
  return manager.plugins().find((p) => p.socket === socket);
}

/** The state of the manager's record of `socket`, if it has one. */
export function stateOf(manager: PluginManager, socket: string): PluginRecord["state"] | undefined {
  return record(manager, socket)?.state;
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
