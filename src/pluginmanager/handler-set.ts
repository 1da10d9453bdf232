/**
 * The set of handlers the policy declares, by plugin type, built from the
 * factories the composition root hands in. A declared type whose handler
 * this build does not have (a built-in not written yet) stays in the set as
 * unavailable, so that its plugins are told why they are refused. The
 * policy's name and version rules for a handler are checked here, once, for
 * every handler.
 */
import { isDeepStrictEqual } from "node:util";
import type { Logger } from "../log/logger.ts";
import { globMatch, nameAllowed } from "../policy/glob.ts";
import type { HandlerPolicy, Policy } from "../policy/types.ts";
import type { HandlerContext, HandlerFactories, PluginHandler } from "./types.ts";

/** A declared handler this build has. */
export interface AvailableHandler {
  type: string;
  policy: HandlerPolicy;
  handler: PluginHandler;
  unavailable?: undefined;
}

/** A declared handler this build does not have; `unavailable` is what its plugins are told. */
export interface UnavailableHandler {
  type: string;
  policy: HandlerPolicy;
  handler?: undefined;
  unavailable: string;
}

export type HandlerEntry = AvailableHandler | UnavailableHandler;

export class HandlerSet {
  readonly #entries = new Map<string, HandlerEntry>();

  /**
   * Builds a handler for each declared type. With `previous` (a policy
   * reload), a type whose handler policy is unchanged keeps its entry and
   * handler instance; the others get new ones.
   */
  constructor(policy: Policy, factories: HandlerFactories, context: HandlerContext, previous?: HandlerSet) {
    for (const [type, handlerPolicy] of policy.handlers) {
      const kept = previous?.get(type);
      if (kept && isDeepStrictEqual(kept.policy, handlerPolicy)) {
        this.#entries.set(type, kept);
        continue;
      }
      const factory = factories[handlerPolicy.kind === "generic" ? "generic" : type];
      this.#entries.set(
        type,
        factory
          ? { type, policy: handlerPolicy, handler: factory(handlerPolicy, context) }
          : { type, policy: handlerPolicy, unavailable: `handler ${type} is not available in this build` },
      );
    }
  }

  get(type: string): HandlerEntry | undefined {
    return this.#entries.get(type);
  }

  /** Every declared handler, in the policy's order. */
  entries(): HandlerEntry[] {
    return [...this.#entries.values()];
  }

  /** Logs each declared type that this build cannot handle, except those `previous` already had. */
  logUnavailable(log: Logger, previous?: HandlerSet): void {
    for (const entry of this.#entries.values()) {
      if (entry.unavailable && !previous?.get(entry.type)?.unavailable) log.warn("handler not available in this build", { type: entry.type });
    }
  }
}

/** Why the policy refuses a plugin name, or null when `allow`/`deny` accept it (deny wins). */
export function nameRefusal(policy: HandlerPolicy, name: string): string | null {
  if (nameAllowed(name, policy.allow, policy.deny)) return null;
  const denied = policy.deny.find((pattern) => globMatch(pattern, name));
  if (denied !== undefined) return `plugin name ${name} is denied by handler ${policy.type} (deny ${JSON.stringify(denied)})`;
  return `plugin name ${name} is not allowed by handler ${policy.type} (allow ${JSON.stringify(policy.allow)})`;
}

/** Why the policy refuses these advertised versions (none accepted), or null; `versions: null` accepts any. */
export function versionRefusal(policy: HandlerPolicy, versions: readonly string[]): string | null {
  if (policy.versions === null || versions.some((version) => policy.versions!.includes(version))) return null;
  return `none of the plugin's versions ${JSON.stringify(versions)} is accepted by handler ${policy.type} (versions ${JSON.stringify(policy.versions)})`;
}
