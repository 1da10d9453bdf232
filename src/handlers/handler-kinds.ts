/**
 * The handler kinds this build has (built-in plugin types, and `generic`)
 * without any handler's code. `probe` only decides which handler would take
 * a plugin; it never validates or registers one, so it builds its handler
 * set from this list instead of from src/handlers/factories.ts, which would
 * evaluate the device manager, CSI and DRA (about 100 modules of the
 * executable's bundle) on every probe. factories.ts is typed to provide a
 * factory for exactly these kinds, so the two cannot drift apart.
 */
import type { HandlerFactories, PluginHandler } from "../pluginmanager/types.ts";

export const HANDLER_KINDS = ["generic", "DevicePlugin", "CSIPlugin", "DRAPlugin"] as const;
export type HandlerKind = (typeof HANDLER_KINDS)[number];

const DECISION_ONLY = "a handler built only to decide which handler would take a plugin (probe) cannot validate or register it";

/** Stands in for a handler that exists in this build, for a caller that never lets a plugin register. */
const decisionOnlyHandler: PluginHandler = {
  validatePlugin: () => Promise.reject(new Error(DECISION_ONLY)),
  registerPlugin: () => Promise.reject(new Error(DECISION_ONLY)),
  // Nothing was ever registered through it, so there is nothing to forget.
  deregisterPlugin: () => {},
};

/**
 * Factories for every kind in {@link HANDLER_KINDS} whose handlers refuse to
 * validate or register: a HandlerSet built from them says which declared
 * types this build can handle, as the agent's would, and nothing more.
 */
export function decisionOnlyFactories(): HandlerFactories {
  return Object.fromEntries(HANDLER_KINDS.map((kind) => [kind, () => decisionOnlyHandler]));
}
