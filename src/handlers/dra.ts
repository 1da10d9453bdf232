/**
 * The DRAPlugin handler, as the kubelet's DRA plugin handler: a driver
 * advertises gRPC service names as its versions (the first one edgeplug
 * serves wins), may run several instances at once (a rolling upgrade: one
 * registration socket and one service endpoint each), and its service
 * connection is watched, not just its registration socket: when an
 * instance's connection drops, the plugin manager is told at once
 * (connectionLost), and a driver with no connected instance shows as
 * disconnected. Instances live in one long-lived registry, so that a policy
 * reload, which rebuilds the handler, keeps them. The endpoint must pass the
 * rules of endpoint-rules.ts, at ValidatePlugin (so that a refused one is
 * never dialled) and again at RegisterPlugin on the socket then opened,
 * which is the socket dialled.
 */
import { create } from "@bufbuild/protobuf";
import { type DraDriverStatus, DraDriverStatusSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../log/logger.ts";
import type { HandlerPolicy } from "../policy/types.ts";
import type { PluginHandler, PluginRegistration } from "../pluginmanager/types.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { dialUnix, type UnixChannel } from "../rpc/unix-channel.ts";
import { canonicalSocketPath } from "../platform/canonical-path.ts";
import { messageOf } from "../log/error-message.ts";
import { isSameSocket, type PinnedSocket, type SocketIdentity } from "../platform/pinned-socket.ts";
import { defaultEndpointRules, type EndpointHolder, type LiveEndpointLookup, pinServiceEndpoint, type WatchedEndpointRules } from "../endpoints/endpoint-rules.ts";

/** The DRA services edgeplug serves, as the kubelet lists them (newest first). */
export const SUPPORTED_DRA_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin"] as const;

/** What the handler needs of the plugin manager (HandlerContext). */
export interface DraHandlerContext {
  connectionLost(plugin: PluginRegistration, reason: string): void;
}

export interface DraDriversOptions {
  log: Logger;
  /** Bound on connecting to an instance's service endpoint (default 10 s). */
  dialTimeoutMs?: number;
  /** Read at each validation and registration: a reload may change them (default: {@link defaultEndpointRules}). */
  endpointRules?: () => WatchedEndpointRules;
  /** The live plugins of other kinds, whose endpoints an instance may not name. */
  liveElsewhere?: LiveEndpointLookup;
}

/** One registered instance of a driver. */
interface DraInstance {
  readonly plugin: PluginRegistration;
  /** The endpoint by its real path and inode, which a second registration of the same socket is compared with. */
  readonly realEndpoint: SocketIdentity;
  readonly service: string;
  /** Registration order: the newest connected instance is preferred. */
  readonly sequence: number;
  readonly channel: UnixChannel;
  /** The endpoint as opened, which `channel` dials; closed with it. */
  readonly endpoint: PinnedSocket;
  connected: boolean;
}

const DEFAULT_DIAL_TIMEOUT_MS = 10_000;

export class DraDrivers {
  /** Driver name -> registration socket -> instance. */
  readonly #drivers = new Map<string, Map<string, DraInstance>>();
  readonly #log: Logger;
  readonly #dialTimeoutMs: number;
  readonly #endpointRules: () => WatchedEndpointRules;
  readonly #liveElsewhere: LiveEndpointLookup | undefined;
  #sequence = 0;
  /** Connections closed and not yet gone. */
  readonly #closing = new Set<Promise<void>>();

  constructor(options: DraDriversOptions) {
    this.#log = options.log;
    this.#dialTimeoutMs = options.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    const rules = defaultEndpointRules();
    this.#endpointRules = options.endpointRules ?? (() => rules);
    this.#liveElsewhere = options.liveElsewhere;
  }

  /** The handler for the DRAPlugin type: a view of this registry. */
  handler(_policy: HandlerPolicy | undefined, context: DraHandlerContext): PluginHandler {
    return {
      // The service connection of each instance reports its loss (connectionLost).
      watchesConnection: true,
      validatePlugin: async (plugin) => {
        const endpoint = this.#openEndpoint(plugin, chooseService(plugin.versions));
        if ("pinned" in endpoint) endpoint.pinned.close();
        this.#refuseTakenEndpoint(plugin, "pinned" in endpoint ? endpoint.pinned : { realPath: canonicalSocketPath(plugin.endpoint) });
      },
      registerPlugin: (plugin, signal) => this.#register(plugin, signal, context),
      deregisterPlugin: (plugin) => this.#deregister(plugin),
    };
  }

  /** The instance calls for `driver` go to: the newest connected one, else the newest. */
  preferred(driver: string): PluginRegistration | undefined {
    return this.#preferredInstance(driver)?.plugin;
  }

  /** The driver of the registered instance whose endpoint is `endpoint` (by path or inode), for the other kinds' endpoint rule. */
  endpointHolder(endpoint: SocketIdentity): EndpointHolder | undefined {
    for (const [driver, instances] of this.#drivers) {
      for (const instance of instances.values()) if (isSameSocket(instance.realEndpoint, endpoint)) return { kind: "DRA driver", name: driver };
    }
    return undefined;
  }

  /** True when some instance of `driver` has its service connection up. */
  isConnected(driver: string): boolean {
    return [...(this.#drivers.get(driver)?.values() ?? [])].some((instance) => instance.connected);
  }

  /** What `status` shows for a DRAPlugin registration socket once GetInfo named its driver. */
  details(socket: string, name: string | null): DraDriverStatus | undefined {
    if (name === null) return undefined;
    const instances = this.#drivers.get(name);
    const instance = instances?.get(socket);
    return create(DraDriverStatusSchema, {
      service: instance?.service ?? "",
      connected: instance?.connected ?? false,
      driverConnected: this.isConnected(name),
      instances: instances?.size ?? 0,
      preferred: instance !== undefined && this.#preferredInstance(name) === instance,
    });
  }

  /**
   * Closes every instance's connection (the agent is stopping); nothing is
   * reported lost. Resolves once every connection this registry opened,
   * deregistered ones included, has closed.
   */
  async close(): Promise<void> {
    const instances = [...this.#drivers.values()].flatMap((bySocket) => [...bySocket.values()]);
    this.#drivers.clear();
    for (const instance of instances) this.#closeConnection(instance);
    await Promise.all(this.#closing);
  }

  #closeConnection({ channel, endpoint }: Pick<DraInstance, "channel" | "endpoint">): void {
    channel.close();
    // A closed channel dials no more: the opened endpoint can go now.
    endpoint.close();
    this.#closing.add(channel.closed);
    void channel.closed.then(() => this.#closing.delete(channel.closed));
  }

  /** The endpoint opened for dialling, or what says nothing is there yet; throws when the rules refuse it. */
  #openEndpoint(plugin: PluginRegistration, service: string): { pinned: PinnedSocket } | { missing: string } {
    const endpoint = pinServiceEndpoint("DRA", plugin.endpoint, plugin.socket, this.#endpointRules(), `the ${service} service`, this.#liveElsewhere);
    if ("refused" in endpoint) throw new Error(endpoint.refused);
    return endpoint;
  }

  #preferredInstance(driver: string): DraInstance | undefined {
    let best: DraInstance | undefined;
    for (const instance of this.#drivers.get(driver)?.values() ?? []) {
      const better = best === undefined || (instance.connected !== best.connected ? instance.connected : instance.sequence > best.sequence);
      if (better) best = instance;
    }
    return best;
  }

  /** The kubelet refuses a second registration of an endpoint; so does edgeplug, whichever driver holds it. */
  #refuseTakenEndpoint(plugin: PluginRegistration, endpoint: SocketIdentity): void {
    // Compared by real path and inode: the same socket named through a linked directory, or a hard link, is the same endpoint.
    for (const [driver, instances] of this.#drivers) {
      for (const instance of instances.values()) {
        if (isSameSocket(instance.realEndpoint, endpoint) && instance.plugin.socket !== plugin.socket) {
          throw new Error(`endpoint ${plugin.endpoint} already registered for DRA driver plugin ${driver}`);
        }
      }
    }
  }

  async #register(plugin: PluginRegistration, signal: AbortSignal, context: DraHandlerContext): Promise<void> {
    const service = chooseService(plugin.versions);
    const cannotConnect = (kind: string, why: string) => `cannot connect to the ${service} service of DRA driver ${plugin.name} at ${plugin.endpoint} (${kind}): ${why}`;
    // Judged again: the socket may have changed since ValidatePlugin, and the one opened now is the one dialled.
    const opened = this.#openEndpoint(plugin, service);
    if ("missing" in opened) throw new Error(cannotConnect("missing", opened.missing));
    const endpoint = opened.pinned;
    try {
      this.#refuseTakenEndpoint(plugin, endpoint);
    } catch (error) {
      endpoint.close();
      throw error;
    }
    const log = this.#log.with({ driver: plugin.name, endpoint: plugin.endpoint, socket: plugin.socket });
    const channel = dialUnix(plugin.endpoint, { connectPath: endpoint.dialPath, connectTimeoutMs: this.#dialTimeoutMs });
    let lost: Promise<void>;
    try {
      lost = (await abortable(channel.connect(), signal)).lost;
    } catch (error) {
      this.#closeConnection({ channel, endpoint });
      const kind = error instanceof Error && error.name === "AbortError" ? "canceled" : classifyRpcError(error);
      throw new Error(cannotConnect(kind, messageOf(error)), { cause: error });
    }
    this.#deregister(plugin, { quiet: true });
    const instance: DraInstance = {
      plugin: { ...plugin, versions: [...plugin.versions] },
      realEndpoint: { realPath: endpoint.realPath, stat: endpoint.stat },
      service,
      sequence: ++this.#sequence,
      channel,
      endpoint,
      connected: true,
    };
    const instances = this.#drivers.get(plugin.name) ?? new Map<string, DraInstance>();
    instances.set(plugin.socket, instance);
    this.#drivers.set(plugin.name, instances);
    log.info("DRA plugin instance registered", { service, instances: instances.size });
    void lost.then(() => this.#onConnectionLost(instance, context));
  }

  #onConnectionLost(instance: DraInstance, context: DraHandlerContext): void {
    const { plugin } = instance;
    // Closed by deregistration or stop: not a loss.
    if (this.#drivers.get(plugin.name)?.get(plugin.socket) !== instance) return;
    instance.connected = false;
    const log = this.#log.with({ driver: plugin.name, endpoint: plugin.endpoint, socket: plugin.socket });
    if (this.isConnected(plugin.name)) log.warn("DRA plugin instance lost its service connection; another instance serves the driver");
    else log.warn("DRA driver disconnected: no instance has a service connection");
    context.connectionLost(plugin, `DRA service connection to ${plugin.endpoint} lost`);
  }

  #deregister(plugin: PluginRegistration, options: { quiet?: boolean } = {}): void {
    const instances = this.#drivers.get(plugin.name);
    const instance = instances?.get(plugin.socket);
    if (instances === undefined || instance === undefined) return;
    instances.delete(plugin.socket);
    if (instances.size === 0) this.#drivers.delete(plugin.name);
    this.#closeConnection(instance);
    if (!options.quiet) this.#log.info("DRA plugin instance unregistered", { driver: plugin.name, socket: plugin.socket, instances: instances.size });
  }
}

/** The first advertised service edgeplug serves, or the kubelet's error. */
export function chooseService(versions: readonly string[]): string {
  if (versions.length === 0) throw new Error("empty list of supported gRPC services (aka supported versions)");
  const chosen = versions.find((version) => (SUPPORTED_DRA_SERVICES as readonly string[]).includes(version));
  if (chosen === undefined) {
    const quoted = (list: readonly string[]) => `[${list.map((item) => JSON.stringify(item)).join(" ")}]`;
    throw new Error(`none of services supported by the plugin (${quoted(versions)}) are supported by the kubelet (${quoted(SUPPORTED_DRA_SERVICES)})`);
  }
  return chosen;
}

/** `promise`, or a rejection as soon as `signal` aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
