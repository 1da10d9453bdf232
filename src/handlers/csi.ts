/**
 * The CSIPlugin handler, as the kubelet's CSI registration handler: a node
 * driver registers (usually through node-driver-registrar, whose
 * registration socket points at the driver's CSI socket), its advertised
 * versions are checked (1.x, highest wins), and NodeGetInfo tells which node
 * id, volume limit and topology the driver reports. Drivers are kept by name
 * in one long-lived registry, so that a policy reload, which rebuilds the
 * handler, keeps them. The endpoint must pass the rules of
 * endpoint-rules.ts, at ValidatePlugin (so that a refused one is never
 * dialled) and again at RegisterPlugin on the socket then opened, which is
 * the socket dialled.
 */
import { create } from "@bufbuild/protobuf";
import { type CsiDriverStatus, CsiDriverStatusSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../log/logger.ts";
import type { HandlerPolicy } from "../policy/types.ts";
import type { PluginHandler, PluginRegistration } from "../pluginmanager/types.ts";
import { messageOf } from "../log/error-message.ts";
import { isSameSocket, type PinnedSocket, type SocketIdentity } from "../platform/pinned-socket.ts";
import { type CsiNodeInfo, NodeGetInfoFailed, queryCsiNode } from "./csi-node.ts";
import { defaultEndpointRules, type EndpointHolder, type LiveEndpointLookup, pinServiceEndpoint, type WatchedEndpointRules } from "../endpoints/endpoint-rules.ts";
import { compareVersions, formatVersion, type GenericVersion, goQuotedList, highestSupportedVersion } from "./csi-versions.ts";

export interface CsiDriversOptions {
  log: Logger;
  /** Bound on connecting to the driver's CSI socket (default 10 s, the kubelet's dial timeout). */
  dialTimeoutMs?: number;
  /** Deadline of each CSI call at registration (default 2 min, the kubelet's CSI timeout). */
  callTimeoutMs?: number;
  /** Read at each validation and registration: a reload may change them (default: {@link defaultEndpointRules}). */
  endpointRules?: () => WatchedEndpointRules;
  /** The live plugins of other kinds, whose endpoints a driver may not name. */
  liveElsewhere?: LiveEndpointLookup;
}

/** One registered driver, as the kubelet's csiDrivers store keeps it (plus what NodeGetInfo said). */
interface CsiDriver {
  readonly name: string;
  readonly socket: string;
  readonly endpoint: string;
  /** The endpoint's socket by its real path and inode, as opened at RegisterPlugin. */
  readonly realEndpoint: SocketIdentity | null;
  readonly version: GenericVersion;
  /** Set once NodeGetInfo answered. */
  info: CsiNodeInfo | null;
}

/** The kubelet's prefix for the CSI plugin's messages. */
const CSI = "kubernetes.io/csi";
const DEFAULT_DIAL_TIMEOUT_MS = 10_000;
const DEFAULT_CALL_TIMEOUT_MS = 120_000;

export class CsiDrivers {
  /** By driver name: one driver per name, the highest version wins. */
  readonly #drivers = new Map<string, CsiDriver>();
  readonly #log: Logger;
  readonly #dialTimeoutMs: number;
  readonly #callTimeoutMs: number;
  readonly #endpointRules: () => WatchedEndpointRules;
  readonly #liveElsewhere: LiveEndpointLookup | undefined;

  constructor(options: CsiDriversOptions) {
    this.#log = options.log;
    this.#dialTimeoutMs = options.dialTimeoutMs ?? DEFAULT_DIAL_TIMEOUT_MS;
    this.#callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    const rules = defaultEndpointRules();
    this.#endpointRules = options.endpointRules ?? (() => rules);
    this.#liveElsewhere = options.liveElsewhere;
  }

  /** The handler for the CSIPlugin type: a view of this registry (the policy's name and version rules are the plugin manager's). */
  handler(_policy?: HandlerPolicy): PluginHandler {
    return {
      validatePlugin: async (plugin) => {
        this.#validate("ValidatePlugin", plugin);
        const endpoint = this.#openEndpoint("ValidatePlugin", plugin);
        if ("pinned" in endpoint) endpoint.pinned.close();
      },
      registerPlugin: (plugin, signal) => this.#register(plugin, signal),
      deregisterPlugin: (plugin) => this.#deregister(plugin),
    };
  }

  /** What `status` shows for a registration socket: set when it carries the registered driver of its name. */
  details(socket: string, name: string | null): CsiDriverStatus | undefined {
    const driver = name === null ? undefined : this.#drivers.get(name);
    if (driver === undefined || driver.socket !== socket || driver.info === null) return undefined;
    return create(CsiDriverStatusSchema, {
      version: formatVersion(driver.version),
      nodeId: driver.info.nodeId,
      maxVolumesPerNode: driver.info.maxVolumesPerNode,
      topology: driver.info.topology,
      vendorVersion: driver.info.vendorVersion,
      nodeCapabilities: driver.info.nodeCapabilities,
    });
  }

  /** The registered driver whose endpoint is `endpoint` (by path or inode), for the other kinds' endpoint rule. */
  endpointHolder(endpoint: SocketIdentity): EndpointHolder | undefined {
    for (const driver of this.#drivers.values()) {
      if (driver.realEndpoint !== null && isSameSocket(driver.realEndpoint, endpoint)) return { kind: "CSI driver", name: driver.name };
    }
    return undefined;
  }

  /** The highest acceptable version, or the kubelet's error for this caller. */
  #validate(caller: string, plugin: PluginRegistration): GenericVersion {
    const failed = `${CSI}: ${caller} for CSI driver ${JSON.stringify(plugin.name)} failed.`;
    if (plugin.versions.length === 0) throw new Error(`${failed} Plugin returned an empty list for supported versions`);
    let version: GenericVersion;
    try {
      version = highestSupportedVersion(plugin.versions);
    } catch (error) {
      throw new Error(`${failed} None of the versions specified ${goQuotedList(plugin.versions)} are supported. err=${messageOf(error)}`);
    }
    const existing = this.#drivers.get(plugin.name);
    // The same socket again (a retry after a failed registration) is not "another driver".
    if (existing !== undefined && existing.socket !== plugin.socket && compareVersions(existing.version, version) >= 0) {
      const registered = JSON.stringify(formatVersion(existing.version));
      throw new Error(`${failed} Another driver with the same name is already registered with a higher supported version: ${registered}`);
    }
    return version;
  }

  /** The endpoint opened for dialling, or what says nothing is there yet; throws this caller's refusal when the rules refuse it. */
  #openEndpoint(caller: string, plugin: PluginRegistration): { pinned: PinnedSocket } | { missing: string } {
    const endpoint = pinServiceEndpoint("CSI", plugin.endpoint, plugin.socket, this.#endpointRules(), "the CSI Identity and Node services", this.#liveElsewhere);
    if ("refused" in endpoint) throw new Error(`${CSI}: ${caller} for CSI driver ${JSON.stringify(plugin.name)} failed. ${endpoint.refused}`);
    return endpoint;
  }

  async #register(plugin: PluginRegistration, signal: AbortSignal): Promise<void> {
    const version = this.#validate("RegisterPlugin", plugin);
    // Judged again, before the registered driver of this name can be replaced: the one opened now is the one dialled.
    const endpoint = this.#openEndpoint("RegisterPlugin", plugin);
    const realEndpoint = "pinned" in endpoint ? { realPath: endpoint.pinned.realPath, stat: endpoint.pinned.stat } : null;
    const driver: CsiDriver = { name: plugin.name, socket: plugin.socket, endpoint: plugin.endpoint, realEndpoint, version, info: null };
    const replaced = this.#drivers.get(plugin.name);
    this.#drivers.set(plugin.name, driver);
    const log = this.#log.with({ driver: plugin.name, endpoint: plugin.endpoint, socket: plugin.socket });
    if (replaced !== undefined && replaced.socket !== plugin.socket) {
      log.info("CSI driver replaced by a higher version", { previousVersion: formatVersion(replaced.version), version: formatVersion(version) });
    }
    try {
      if ("missing" in endpoint) throw new Error(`NodeGetInfo on ${plugin.endpoint}: ${endpoint.missing}`);
      driver.info = await queryCsiNode(plugin.name, plugin.endpoint, endpoint.pinned, {
        dialTimeoutMs: this.#dialTimeoutMs,
        callTimeoutMs: this.#callTimeoutMs,
        signal,
        log: this.#log,
      });
    } catch (error) {
      // As the kubelet: a driver whose NodeGetInfo fails is unregistered; the plugin manager retries it.
      if (this.#drivers.get(plugin.name) === driver) this.#drivers.delete(plugin.name);
      // The kubelet hands the call's own error on, so the registrar reads `rpc error: code = ... desc = ...`.
      if (error instanceof NodeGetInfoFailed) throw error;
      throw new Error(`${CSI}: registrationHandler.RegisterPlugin failed at CSI.NodeGetInfo: ${messageOf(error)}`, { cause: error });
    } finally {
      // The queries are done and their channel closed: nothing dials it again.
      if ("pinned" in endpoint) endpoint.pinned.close();
    }
    log.info("CSI driver registered", {
      version: formatVersion(version),
      nodeId: driver.info.nodeId,
      maxVolumesPerNode: Number(driver.info.maxVolumesPerNode),
      topology: driver.info.topology,
      vendorVersion: driver.info.vendorVersion,
    });
  }

  #deregister(plugin: PluginRegistration): void {
    // Unlike the kubelet, which forgets the name whichever socket goes, only the
    // socket that holds the name removes it: an older driver leaving after an
    // upgrade must not unregister its successor.
    if (this.#drivers.get(plugin.name)?.socket !== plugin.socket) return;
    this.#drivers.delete(plugin.name);
    this.#log.info("CSI driver unregistered", { driver: plugin.name, socket: plugin.socket });
  }
}
