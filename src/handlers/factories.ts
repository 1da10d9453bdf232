/**
 * The plugin handlers of this build, by built-in type or `generic`: the one
 * place where concrete handlers meet the plugin manager. Built-ins join here
 * as they land (a factory returning a view of a long-lived manager, so that
 * a policy reload does not lose its state).
 *
 * A module of its own, apart from the agent (src/agent/agent.ts), so that
 * `--reconcile-once` loads the handlers without the API servers, metrics and
 * event stream. `probe`, which registers nothing, loads none of this
 * (handler-kinds.ts); the kinds here are exactly HANDLER_KINDS.
 *
 * @example
 * ```ts
 * const handlers = new HandlerSet(policy, handlerFactories(), { connectionLost() {} });
 * ```
 */
import { createLogger } from "../log/logger.ts";
import type { HandlerFactory } from "../pluginmanager/types.ts";
import { type CsiDraDrivers, csiDraDrivers } from "./csi-dra.ts";
import { DeviceManager } from "../devicemanager/device-manager.ts";
import { DevicePluginHandler } from "./device-plugin.ts";
import { GenericHandler } from "./generic.ts";
import type { HandlerKind } from "./handler-kinds.ts";

/** Handler factories over `devices` and `storage`; without them, over detached, in-memory ones. */
export function handlerFactories(
  devices: DeviceManager = detachedDeviceManager(),
  storage: CsiDraDrivers = csiDraDrivers(),
): Readonly<Record<HandlerKind, HandlerFactory>> {
  return {
    generic: (policy) => new GenericHandler(policy),
    DevicePlugin: (policy, context) => new DevicePluginHandler(devices, policy, context),
    CSIPlugin: (policy) => storage.csi.handler(policy),
    DRAPlugin: (policy, context) => storage.dra.handler(policy, context),
  };
}

/** A device manager for callers that only validate (probe) or bring no agent: in memory, quiet. */
function detachedDeviceManager(): DeviceManager {
  return new DeviceManager({
    log: createLogger({ level: "error" }),
    gracePeriodMs: 300_000,
    maxDevicesPerResource: 100_000,
    dialTimeoutMs: 10_000,
    store: null,
  });
}
