/**
 * The policy after loading: every default filled in, durations in
 * milliseconds. The YAML shape is documented in docs/policy.md and
 * enforced by schema.ts.
 */
import type { LogFormat, LogLevel } from "../log/logger.ts";

export const BUILTIN_PLUGIN_TYPES = ["DevicePlugin", "CSIPlugin", "DRAPlugin"] as const;
export type BuiltinPluginType = (typeof BUILTIN_PLUGIN_TYPES)[number];

/** The kubelet's topology manager policies that edgeplug's device choice follows (devicePlugins.topologyPolicy). */
export const TOPOLOGY_POLICIES = ["none", "single-numa-node"] as const;
export type TopologyPolicy = (typeof TOPOLOGY_POLICIES)[number];

export function isBuiltinPluginType(type: string): type is BuiltinPluginType {
  return (BUILTIN_PLUGIN_TYPES as readonly string[]).includes(type);
}

export interface WatchDir {
  /** Absolute path of a registration directory. */
  path: string;
  /** Sub-directories are watched too (default true). */
  recursive: boolean;
  /** Plugin types accepted from this directory; null accepts every declared handler. */
  types: string[] | null;
}

export interface HandlerPolicy {
  /** The plugin type string it handles (PluginInfo.type). */
  type: string;
  /** "builtin" for DevicePlugin, CSIPlugin and DRAPlugin; "generic" for any declared type. */
  kind: "builtin" | "generic";
  /** Accepted versions; any one must match. null: the handler's own (built-ins) or any (generic). */
  versions: string[] | null;
  /** Plugin-name globs accepted; `*` matches any run of characters, `/` included. */
  allow: string[];
  /** Plugin-name globs refused; deny wins over allow. */
  deny: string[];
}

export interface Policy {
  version: 1;
  nodeName: string;
  watch: WatchDir[];
  /** Keyed by plugin type, in the order the policy declared them. */
  handlers: Map<string, HandlerPolicy>;
  devicePlugins: {
    /** v1beta1 Registration server socket; null disables it. */
    registrationSocket: string | null;
    gracePeriodMs: number;
    /** How allocation treats NUMA nodes: "none" (the kubelet's default) or "single-numa-node". */
    topologyPolicy: TopologyPolicy;
    /** At start, remove live plugin sockets in the registration socket's directory too, as the kubelet does. */
    removeSocketsAtStart: boolean;
  };
  podResources: {
    /** Socket of the kubelet's pod-resources API; null disables it. */
    socket: string | null;
  };
  checkpoint: { path: string };
  reconcile: {
    resyncMs: number;
    backoff: { initialMs: number; maxMs: number };
    timeouts: { dialMs: number; getInfoMs: number; notifyMs: number };
    /** 0: no periodic liveness dial of registered plugins. */
    liveness: { intervalMs: number };
  };
  security: {
    /** uids allowed to own a registration socket. */
    socketOwners: number[];
    maxPlugins: number;
    maxDevicesPerResource: number;
  };
  api: {
    socket: string | null;
    socketGroup: string | null;
    /** host:port of the Prometheus endpoint; null disables it. */
    metrics: string | null;
  };
  log: { level: LogLevel; format: LogFormat };
  /** Publishing to an MQTT broker (docs/fleet.md); null: off. */
  fleet: FleetPolicy | null;
  /** Where the policy came from: a file path, or "<embedded default>". */
  source: string;
}

export interface FleetPolicy {
  /** mqtt:// or mqtts:// URLs, tried in turn. */
  brokers: string[];
  clientId: string;
  prefix: string;
  qos: 0 | 1;
  keepaliveMs: number;
  usernameFile: string | null;
  passwordFile: string | null;
  tls: { ca: string | null; cert: string | null; key: string | null };
  /** 0: every change is published. */
  minIntervalMs: number;
  events: boolean;
}
