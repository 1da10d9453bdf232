/**
 * The generic handler: any plugin type the policy declares with
 * `kind: generic`. The plugin manager has already applied the policy's name
 * and version rules; this handler records each plugin by its registration
 * socket, so that several sockets carrying one name are all tracked.
 */
import type { HandlerPolicy } from "../policy/types.ts";
import type { PluginHandler, PluginRegistration } from "../pluginmanager/types.ts";

export class GenericHandler implements PluginHandler {
  readonly policy: HandlerPolicy;
  readonly #plugins = new Map<string, PluginRegistration>();

  constructor(policy: HandlerPolicy) {
    this.policy = policy;
  }

  async validatePlugin(): Promise<void> {}

  async registerPlugin(plugin: PluginRegistration): Promise<void> {
    this.#plugins.set(plugin.socket, { ...plugin, versions: [...plugin.versions] });
  }

  deregisterPlugin(plugin: PluginRegistration): void {
    this.#plugins.delete(plugin.socket);
  }

  /** The registered plugins, sorted by registration socket. */
  plugins(): PluginRegistration[] {
    return [...this.#plugins.values()].sort((a, b) => (a.socket < b.socket ? -1 : a.socket > b.socket ? 1 : 0));
  }
}

/** The {@link HandlerFactory} for `kind: generic`. */
export function createGenericHandler(policy: HandlerPolicy): GenericHandler {
  return new GenericHandler(policy);
}
