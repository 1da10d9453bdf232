/**
 * The effective policy: the validated data, defaults filled in by ajv from
 * the schema, turned into the typed {@link Policy} (durations in
 * milliseconds, handlers in declared order, directories normalised), and back
 * into the YAML shape for `edgeplug policy show` and config/default.yaml.
 * The two defaults a schema cannot hold are computed here: the node name (the
 * host name) and the socket owners (root and the agent's own uid).
 *
 * @example
 * ```ts
 * policyToData(policy).reconcile; // { resync: "10s", backoff: { initial: "500ms", max: "2m2s" }, ... }
 * ```
 */
import { hostname } from "node:os";
import type { LogFormat, LogLevel } from "../log/logger.ts";
import { formatDuration, parseDuration } from "./duration.ts";
import { normalizeDir } from "./rules.ts";
import { HANDLER_LIST_DEFAULTS } from "./schema.ts";
import { type FleetPolicy, type HandlerPolicy, isBuiltinPluginType, type Policy } from "./types.ts";

interface FilledHandler {
  kind?: "generic";
  versions?: string[];
  allow: string[];
  deny: string[];
}

/** The YAML as the schema guarantees it once ajv has filled in every default. */
export interface FilledPolicy {
  version: 1;
  nodeName?: string;
  watch: { path: string; recursive: boolean; types?: string[] }[];
  /** null for a built-in given as `DevicePlugin:` (ajv fills mappings only). */
  handlers: Record<string, FilledHandler | null>;
  devicePlugins: { registrationSocket: string | null; gracePeriod: string; topologyPolicy: "none" | "single-numa-node"; removeSocketsAtStart: boolean };
  podResources: { socket: string | null };
  checkpoint: { path: string };
  reconcile: {
    resync: string;
    backoff: { initial: string; max: string };
    timeouts: { dial: string; getInfo: string; notify: string };
    liveness: { interval: string };
  };
  security: { socketOwners?: number[]; maxPlugins: number; maxDevicesPerResource: number };
  api: { socket: string | null; socketGroup: string | null; metrics: string | null };
  log: { level: LogLevel; format: LogFormat };
  fleet?: FilledFleet;
}

interface FilledFleet {
  brokers: string[];
  clientId?: string;
  prefix: string;
  qos: 0 | 1;
  keepalive: string;
  usernameFile: string | null;
  passwordFile: string | null;
  tls: { ca: string | null; cert: string | null; key: string | null };
  minInterval: string;
  events: boolean;
}

/** The typed policy of valid, filled data; `handlerOrder` is the YAML's order of `handlers` (JS puts "42" first). */
export function toPolicy(data: FilledPolicy, handlerOrder: readonly string[], source: string): Policy {
  const handlers = new Map<string, HandlerPolicy>();
  const order = handlerOrder.length > 0 ? handlerOrder : Object.keys(data.handlers);
  for (const type of order) {
    const spec: FilledHandler = data.handlers[type] ?? HANDLER_LIST_DEFAULTS;
    handlers.set(type, {
      type,
      kind: isBuiltinPluginType(type) ? "builtin" : "generic",
      versions: spec.versions ? [...spec.versions] : null,
      allow: [...spec.allow],
      deny: [...spec.deny],
    });
  }
  const { devicePlugins, reconcile, security, api } = data;
  const nodeName = data.nodeName ?? hostname().trim().toLowerCase();
  return {
    version: 1,
    // The kubelet's node name from the host name: trimmed and lower-cased.
    nodeName,
    watch: data.watch.map((entry) => ({
      path: normalizeDir(entry.path),
      recursive: entry.recursive,
      types: entry.types ? [...entry.types] : null,
    })),
    handlers,
    devicePlugins: {
      registrationSocket: devicePlugins.registrationSocket,
      gracePeriodMs: parseDuration(devicePlugins.gracePeriod),
      topologyPolicy: devicePlugins.topologyPolicy,
      removeSocketsAtStart: devicePlugins.removeSocketsAtStart,
    },
    podResources: { socket: data.podResources.socket },
    checkpoint: { path: data.checkpoint.path },
    reconcile: {
      resyncMs: parseDuration(reconcile.resync),
      backoff: { initialMs: parseDuration(reconcile.backoff.initial), maxMs: parseDuration(reconcile.backoff.max) },
      timeouts: {
        dialMs: parseDuration(reconcile.timeouts.dial),
        getInfoMs: parseDuration(reconcile.timeouts.getInfo),
        notifyMs: parseDuration(reconcile.timeouts.notify),
      },
      liveness: { intervalMs: parseDuration(reconcile.liveness.interval) },
    },
    security: {
      socketOwners: security.socketOwners ? [...security.socketOwners] : defaultSocketOwners(),
      maxPlugins: security.maxPlugins,
      maxDevicesPerResource: security.maxDevicesPerResource,
    },
    api: { socket: api.socket, socketGroup: api.socketGroup, metrics: api.metrics },
    log: { ...data.log },
    fleet: data.fleet ? toFleetPolicy(data.fleet, nodeName) : null,
    source,
  };
}

/** The client id defaults to the node name, so a broker ACL keyed on the client id matches the node's topics. */
function toFleetPolicy(fleet: FilledFleet, nodeName: string): FleetPolicy {
  return {
    brokers: [...fleet.brokers],
    clientId: fleet.clientId ?? nodeName,
    prefix: fleet.prefix,
    qos: fleet.qos,
    keepaliveMs: parseDuration(fleet.keepalive),
    usernameFile: fleet.usernameFile,
    passwordFile: fleet.passwordFile,
    tls: { ...fleet.tls },
    minIntervalMs: parseDuration(fleet.minInterval),
    events: fleet.events,
  };
}

/** root and the agent's own uid (one entry when the agent runs as root). */
function defaultSocketOwners(): number[] {
  const own = process.getuid?.() ?? 0;
  return own === 0 ? [0] : [0, own];
}

/** The policy in its YAML shape with every key present: what `policy show` prints; it validates to the same policy. */
export function policyToData(policy: Policy): Record<string, unknown> {
  const ms = formatDuration;
  return {
    version: policy.version,
    nodeName: policy.nodeName,
    watch: policy.watch.map((dir) => ({
      path: dir.path,
      recursive: dir.recursive,
      ...(dir.types === null ? {} : { types: [...dir.types] }),
    })),
    handlers: Object.fromEntries(
      [...policy.handlers.values()].map((handler) => [
        handler.type,
        {
          ...(handler.kind === "generic" ? { kind: "generic" } : {}),
          ...(handler.versions === null ? {} : { versions: [...handler.versions] }),
          allow: [...handler.allow],
          deny: [...handler.deny],
        },
      ]),
    ),
    devicePlugins: {
      registrationSocket: policy.devicePlugins.registrationSocket,
      gracePeriod: ms(policy.devicePlugins.gracePeriodMs),
      topologyPolicy: policy.devicePlugins.topologyPolicy,
      removeSocketsAtStart: policy.devicePlugins.removeSocketsAtStart,
    },
    podResources: { socket: policy.podResources.socket },
    checkpoint: { path: policy.checkpoint.path },
    reconcile: {
      resync: ms(policy.reconcile.resyncMs),
      backoff: { initial: ms(policy.reconcile.backoff.initialMs), max: ms(policy.reconcile.backoff.maxMs) },
      timeouts: {
        dial: ms(policy.reconcile.timeouts.dialMs),
        getInfo: ms(policy.reconcile.timeouts.getInfoMs),
        notify: ms(policy.reconcile.timeouts.notifyMs),
      },
      liveness: { interval: ms(policy.reconcile.liveness.intervalMs) },
    },
    security: { ...policy.security, socketOwners: [...policy.security.socketOwners] },
    api: { ...policy.api },
    log: { ...policy.log },
    ...(policy.fleet === null ? {} : { fleet: fleetToData(policy.fleet) }),
  };
}

function fleetToData(fleet: FleetPolicy): Record<string, unknown> {
  const { keepaliveMs, minIntervalMs, ...rest } = fleet;
  return {
    brokers: [...rest.brokers],
    clientId: rest.clientId,
    prefix: rest.prefix,
    qos: rest.qos,
    keepalive: formatDuration(keepaliveMs),
    usernameFile: rest.usernameFile,
    passwordFile: rest.passwordFile,
    tls: { ...rest.tls },
    minInterval: formatDuration(minIntervalMs),
    events: rest.events,
  };
}
