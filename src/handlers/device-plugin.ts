/**
 * The DevicePlugin handler of the watched-directory path (the kubelet's
 * plugin-watcher mode): a thin view of the long-lived {@link DeviceManager},
 * so a handler rebuilt by a policy reload sees the plugins registered with
 * the previous one. ValidatePlugin checks the version and the extended
 * resource name with the kubelet's texts; RegisterPlugin connects to the
 * plugin's endpoint; DeRegisterPlugin disconnects it without dialling.
 */
import * as path from "node:path";
import { canonicalSocketPath } from "../platform/canonical-path.ts";
import { pinSocket } from "../platform/pinned-socket.ts";
import type { PluginHandler, PluginRegistration } from "../pluginmanager/types.ts";
import type { HandlerPolicy } from "../policy/types.ts";
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import { validationRefusal } from "../devicemanager/names.ts";

/** The part of the plugin manager's HandlerContext this handler uses. */
export interface ConnectionLostContext {
  connectionLost(plugin: PluginRegistration, reason: string): void;
}

export class DevicePluginHandler implements PluginHandler {
  /** Its ListAndWatch stream reports the plugin's death (connectionLost). */
  readonly watchesConnection = true;
  readonly policy: HandlerPolicy;
  readonly #manager: DeviceManager;
  readonly #context: ConnectionLostContext | undefined;

  constructor(manager: DeviceManager, policy: HandlerPolicy, context?: ConnectionLostContext) {
    this.#manager = manager;
    this.policy = policy;
    this.#context = context;
  }

  async validatePlugin(plugin: PluginRegistration): Promise<void> {
    const refusal = validationRefusal(plugin.name, plugin.versions);
    if (refusal) throw new Error(refusal);
  }

  async registerPlugin(plugin: PluginRegistration, signal: AbortSignal): Promise<void> {
    const context = this.#context;
    const endpoint = pinSocket(endpointPath(plugin));
    if ("refused" in endpoint) throw new Error(endpoint.refused);
    const refused = this.#manager.watchedEndpointRefusal(plugin.name, endpoint, plugin.socket);
    if (refused) {
      endpoint.close();
      throw new Error(refused);
    }
    await this.#manager.connect(plugin.name, endpoint.realPath, {
      signal,
      onLost: context ? (reason) => context.connectionLost(plugin, reason) : undefined,
      pinned: endpoint,
      for: plugin,
    });
  }

  deregisterPlugin(plugin: PluginRegistration): void {
    // Only what this registration connected: another registration naming the same endpoint may have replaced it since.
    this.#manager.disconnectFor(plugin);
  }
}

/** The DevicePlugin socket: the endpoint as given, a relative one taken from the registration socket's directory. */
function endpointPath(plugin: PluginRegistration): string {
  return canonicalSocketPath(path.resolve(path.dirname(plugin.socket), plugin.endpoint));
}
