/**
 * The policy's handlers by plugin type, built from the composition root's
 * factories, and the one place that picks a plugin's handler. A declared
 * type this build cannot handle stays as unavailable, so that its plugins
 * are told why they are refused.
 */
import { isDeepStrictEqual } from "node:util";
import type { Logger } from "../log/logger.ts";
import { nameRefusal, versionRefusal } from "../policy/admission.ts";
import type { HandlerPolicy, Policy } from "../policy/types.ts";
import type { PluginInfoSummary } from "./registration-client.ts";
import type { Refusal } from "./registration.ts";
import type { HandlerContext, HandlerFactories, PluginHandler } from "./types.ts";
import { isUnder } from "./watcher.ts";

/** A declared type's handler, or (`unavailable`: what its plugins are told) none in this build. */
export type HandlerEntry =
  & { type: string; policy: HandlerPolicy }
  & (
    | { handler: PluginHandler; unavailable?: undefined }
    | { handler?: undefined; unavailable: string }
  );
type AvailableHandler = Extract<HandlerEntry, { handler: PluginHandler }>;

export class HandlerSet {
  readonly #entries = new Map<string, HandlerEntry>();

  /** With `previous` (a reload), a type whose handler policy is unchanged keeps its handler instance. */
  constructor(policy: Policy, factories: HandlerFactories, context: HandlerContext, previous?: HandlerSet) {
    for (const [type, handlerPolicy] of policy.handlers) {
      const kept = previous?.get(type);
      const factory = factories[handlerPolicy.kind === "generic" ? "generic" : type];
      this.#entries.set(
        type,
        kept && isDeepStrictEqual(kept.policy, handlerPolicy)
          ? kept
          : factory
          ? { type, policy: handlerPolicy, handler: factory(handlerPolicy, context) }
          : { type, policy: handlerPolicy, unavailable: `handler ${type} is not available in this build` },
      );
    }
  }

  get(type: string): HandlerEntry | undefined {
    return this.#entries.get(type);
  }

  /** Warns of each declared type this build cannot handle, except those `previous` already had. */
  logUnavailable(log: Logger, previous?: HandlerSet): void {
    for (const entry of this.#entries.values()) {
      if (entry.unavailable && !previous?.get(entry.type)?.unavailable) log.warn("handler not available in this build", { type: entry.type });
    }
  }
}

/** The handler that takes a plugin, or why none does (type, the watch directory's `types`, allow/deny, versions). */
export function decideHandler(policy: Policy, handlers: HandlerSet, socket: string, info: PluginInfoSummary): { entry: AvailableHandler } | { refusal: Refusal } {
  const entry = handlers.get(info.type);
  if (!entry) {
    return { refusal: { reason: "no_handler", error: `RegisterPlugin error -- no handler registered for plugin type: ${info.type} at socket ${socket}` } };
  }
  if (!entry.handler) return { refusal: { reason: "handler_unavailable", error: entry.unavailable } };
  // The deepest watch directory holding the socket is the one it was found in.
  const dir = policy.watch.filter((watch) => isUnder(socket, watch.path)).sort((a, b) => b.path.length - a.path.length)[0];
  const error = dir?.types && !dir.types.includes(info.type)
    ? `plugin type ${info.type} is not accepted from watch directory ${dir.path} (types ${JSON.stringify(dir.types)})`
    : (nameRefusal(entry.policy, info.name) ?? versionRefusal(entry.policy, info.versions));
  return error ? { refusal: { reason: "policy", error } } : { entry };
}
