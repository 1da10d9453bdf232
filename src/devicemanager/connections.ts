/**
 * The device manager's connected plugins: dialling one and opening its
 * ListAndWatch (the kubelet's connectClient), what its stream says, and its
 * end. It also knows which came through kubelet.sock (`security.maxPlugins`
 * counts them beside the plugin manager's) and which have not sent a good
 * device list yet (`--reconcile-once` waits for them).
 */
import { ConnectError } from "@connectrpc/connect";
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import { peerMessageOf } from "../log/error-message.ts";
import { failedToDial, grpcStatusText } from "../rpc/rpc-error.ts";
import { DevicePluginEndpoint, type EndpointListener } from "./endpoint.ts";
import type { ResourceTable } from "./resources.ts";
import type { ConnectOptions, DeviceSettings } from "./types.ts";

/**
 * A list this long leaves megabytes of garbage behind (its read, the event it
 * makes, the list it replaced): worth a collection soon (src/platform/heap-return.ts).
 */
export const LARGE_LIST_DEVICES = 10_000;

export interface PluginConnectionsOptions {
  resources: ResourceTable;
  log: Logger;
  /** Read at each dial: a reload may change them. */
  settings: () => Pick<DeviceSettings, "dialTimeoutMs" | "maxDevicesPerResource">;
  /** The checkpoint's data changed; `soon` false for device lists, whose writes are coalesced. */
  checkpointChanged: (soon: boolean) => void;
  /** Told when a large device list replaced another or was read: its garbage is worth collecting soon. */
  largeGarbage?: () => void;
  /**
   * Why `endpoint`, dialled for its resource, may not be attached (another
   * plugin took its socket while it was dialled), or null: the rules judged
   * it before the dial, and again here, since two registrations naming one
   * socket (by two paths) may have been dialled at once.
   */
  refusal?: (endpoint: DevicePluginEndpoint) => string | null;
  /** The endpoints' timers (default: the system's). */
  clock?: Clock;
}

export class PluginConnections {
  readonly #options: PluginConnectionsOptions;
  readonly #onLost = new Map<DevicePluginEndpoint, (reason: string) => void>();
  /** Connected endpoints that have not sent a good device list yet. */
  readonly #unlisted = new Set<DevicePluginEndpoint>();
  /** Connected endpoints that registered on kubelet.sock (the plugin manager counts the others). */
  readonly #viaRegistrationSocket = new Set<DevicePluginEndpoint>();
  /** The endpoint each registration connected: a newer one at the same socket is not its to close. */
  readonly #byRegistration = new WeakMap<object, DevicePluginEndpoint>();

  constructor(options: PluginConnectionsOptions) {
    this.#options = options;
  }

  /** Dials the plugin, reads its options and opens ListAndWatch; a plugin connected on the same socket is replaced. */
  async connect(resource: string, socket: string, options: ConnectOptions, stopped: () => boolean): Promise<void> {
    const { dialTimeoutMs, maxDevicesPerResource } = this.#options.settings();
    const endpoint = new DevicePluginEndpoint({ resource, socket, pinned: options.pinned, dialTimeoutMs, maxDevices: maxDevicesPerResource, clock: this.#options.clock });
    try {
      await endpoint.connect(options.signal);
    } catch (error) {
      endpoint.close();
      // The kubelet's texts, which a plugin reads inside its Register error: its dial's, then PluginConnected's.
      const text = failedToDial(error) ? `failed to dial device plugin: ${ConnectError.from(error).rawMessage}` : `failed to get device plugin options: ${grpcStatusText(error)}`;
      throw new Error(peerMessageOf(text));
    }
    if (stopped()) {
      endpoint.close();
      throw new Error("the device manager is stopping");
    }
    const refused = this.#options.refusal?.(endpoint) ?? options.admit?.() ?? null;
    if (refused !== null) {
      endpoint.close();
      throw new Error(refused);
    }
    const replaced = this.#options.resources.attach(endpoint);
    if (replaced) this.close(replaced);
    this.#unlisted.add(endpoint);
    if (options.viaRegistrationSocket) this.#viaRegistrationSocket.add(endpoint);
    if (options.onLost) this.#onLost.set(endpoint, options.onLost);
    if (options.for) this.#byRegistration.set(options.for, endpoint);
    this.#options.log.info("device plugin connected", { resource, socket, options: endpoint.options });
    endpoint.watch(this.#listener);
  }

  /** Disconnects the plugin on `socket` (deregistration); never dials. */
  disconnect(resource: string, socket: string): void {
    const endpoint = this.#options.resources.get(resource)?.endpoints.get(socket);
    if (endpoint) this.#disconnect(endpoint);
  }

  /** Disconnects the endpoint that `registration` connected, if it is still the one at its socket; never dials. */
  disconnectFor(registration: object): void {
    const endpoint = this.#byRegistration.get(registration);
    this.#byRegistration.delete(registration);
    // detach() changes nothing for an endpoint no longer at its socket; close() of a replaced one was done.
    if (endpoint) this.#disconnect(endpoint);
  }

  #disconnect(endpoint: DevicePluginEndpoint): void {
    this.close(endpoint);
    // Paced like a device list: a plugin coming and going changes only the healthy ids in the file.
    if (this.#options.resources.detach(endpoint)) this.#options.checkpointChanged(false);
  }

  /** Closes `endpoint` without telling anyone: its plugin was replaced, deregistered, or the agent is stopping. */
  close(endpoint: DevicePluginEndpoint): void {
    this.#onLost.delete(endpoint);
    this.#unlisted.delete(endpoint);
    this.#viaRegistrationSocket.delete(endpoint);
    endpoint.close();
  }

  closeAll(): void {
    for (const state of this.#options.resources.all()) for (const endpoint of state.endpoints.values()) this.close(endpoint);
  }

  get viaRegistrationSocket(): number {
    return this.#viaRegistrationSocket.size;
  }

  isViaRegistrationSocket(resource: string, socket: string): boolean {
    const endpoint = this.#options.resources.get(resource)?.endpoints.get(socket);
    return endpoint !== undefined && this.#viaRegistrationSocket.has(endpoint);
  }

  /** `resource at socket` of each connected plugin whose first good device list has not come yet. */
  awaitingFirstList(): string[] {
    return [...this.#unlisted].map((endpoint) => `${endpoint.resource} at ${endpoint.socket}`);
  }

  readonly #listener: EndpointListener = {
    devices: (endpoint, devices) => {
      if (devices.ids.length >= LARGE_LIST_DEVICES) this.#options.largeGarbage?.();
      const overNode = this.#options.resources.nodeDevicesRefusal(endpoint, devices);
      if (overNode !== null) return this.#listener.refused(endpoint, overNode);
      if (!this.#options.resources.update(endpoint, devices)) return;
      this.#unlisted.delete(endpoint);
      this.#options.checkpointChanged(false);
    },
    unchanged: (endpoint, devices) => {
      // The list this endpoint sent last may have been refused for the node's bound: it still is, until room is made.
      const overNode = this.#options.resources.nodeDevicesRefusal(endpoint, devices);
      if (overNode !== null) return this.#listener.refused(endpoint, overNode);
      this.#unlisted.delete(endpoint);
      if (this.#options.resources.unchanged(endpoint, devices)) this.#options.checkpointChanged(false);
    },
    refused: (endpoint, reason) => {
      // Once per reason: a plugin repeating a bad list must not flood the log.
      const repeated = this.#options.resources.refuse(endpoint, reason) === "repeated";
      const fields = { resource: endpoint.resource, socket: endpoint.socket, reason };
      if (repeated) this.#options.log.debug("device list refused again", fields);
      else this.#options.log.warn("device list refused; the last good list stays", fields);
    },
    ended: (endpoint, reason) => {
      const onLost = this.#onLost.get(endpoint);
      this.close(endpoint);
      if (!this.#options.resources.detach(endpoint)) return;
      this.#options.log.warn("device plugin disconnected", { resource: endpoint.resource, socket: endpoint.socket, reason });
      this.#options.checkpointChanged(false);
      onLost?.(reason);
    },
  };
}
