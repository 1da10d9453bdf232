/**
 * What the registration tests share: a handler that records what it is
 * asked, a socket's desired entry, and a registration context for a dir.
 */
import * as fs from "node:fs";
import { createLogger } from "../../src/log/logger.ts";
import { HandlerSet } from "../../src/pluginmanager/handler-set.ts";
import type { RegistrationContext } from "../../src/pluginmanager/registration.ts";
import { ActualStateOfWorld, inodeOf } from "../../src/pluginmanager/state-of-world.ts";
import type { DesiredSocket } from "../../src/pluginmanager/state-of-world.ts";
import type { PluginHandler, PluginRegistration } from "../../src/pluginmanager/types.ts";
import { testPolicy, type TestPolicyOptions } from "./policy.ts";

export const log = createLogger({ level: "error", format: "text" });

/** A handler that records what it is asked and fails where told to. */
export function recordingHandler(behaviour: { validate?: () => Promise<void>; register?: () => Promise<void> } = {}) {
  const calls: string[] = [];
  const registrations: PluginRegistration[] = [];
  const handler: PluginHandler = {
    async validatePlugin(plugin) {
      calls.push(`validate ${plugin.name}`);
      await behaviour.validate?.();
    },
    async registerPlugin(plugin) {
      calls.push(`register ${plugin.name}`);
      registrations.push(plugin);
      await behaviour.register?.();
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${plugin.name}`);
    },
  };
  return { handler, calls, registrations };
}

/** The desired entry of the socket at `socket`, at its current inode, discovered now. */
export function desired(socket: string): DesiredSocket {
  return { socket, inode: inodeOf(fs.lstatSync(socket, { bigint: true })), discoveredAt: new Date() };
}

/** A registration context for `dir` whose `acme.io/Sensor` handler is `handler`. */
export function context(dir: string, handler: PluginHandler, policy: Partial<TestPolicyOptions> = {}): RegistrationContext {
  const full = testPolicy({ watch: [dir], handlers: { "acme.io/Sensor": {}, DevicePlugin: {} }, ...policy });
  return { policy: full, handlers: new HandlerSet(full, { generic: () => handler }, { connectionLost() {} }), asw: new ActualStateOfWorld(), log };
}

/** A generous deadline for one attempt. */
export const signal = () => AbortSignal.timeout(10_000);
