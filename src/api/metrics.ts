/**
 * Prometheus metrics (SPEC.md section 4) and the HTTP endpoint on
 * `api.metrics` that serves them with `/healthz` and `/readyz`.
 *
 * Values that describe current state (plugins per socket, devices per
 * resource) are computed at scrape time from provider functions, so they
 * can never drift from the state they describe; events (registrations,
 * allocations) are counted as they happen.
 *
 * @example
 * ```ts
 * const metrics = createMetrics({ plugins: () => manager.plugins() });
 * metrics.observeRegistration("DevicePlugin", "success", 0.004);
 * const endpoint = await serveMetricsEndpoint({ address: "127.0.0.1:9478", metrics, health, log });
 * ```
 */
import * as http from "node:http";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Logger } from "../log/logger.ts";
import { PLUGIN_STATES, type PluginRecord } from "../pluginmanager/types.ts";
import { serveHealthRequest, type Health } from "./health.ts";

/** What the plugin gauges need of each known socket. */
export type PluginSample = Pick<PluginRecord, "socket" | "state">;

/** What the device gauge needs of each resource (the shape of a status resource). */
export interface ResourceSample {
  name: string;
  healthy: readonly string[];
  unhealthy: readonly string[];
}

export interface MetricsSources {
  /** Every socket the plugin manager knows (its desired state of the world). */
  plugins: () => Iterable<PluginSample>;
  /** Every device-plugin resource; absent until the device manager exists. */
  resources?: () => Iterable<ResourceSample>;
  /** Adds the process_* and nodejs_* metrics (default true). */
  processMetrics?: boolean;
}

export const REGISTRATION_RESULTS = ["success", "failure"] as const;
export type RegistrationResult = (typeof REGISTRATION_RESULTS)[number];

export interface AgentMetrics {
  /** This agent's registry (never prom-client's global one). */
  readonly registry: Registry;
  /**
   * Counts one registration attempt of a plugin of `type` (null before GetInfo
   * answered). A failure is also counted under `reason`, a short fixed word such
   * as `stale`, `getinfo`, `refused` (never an error message: each distinct value
   * is a time series). Successful attempts feed the latency histogram.
   */
  observeRegistration(type: string | null, result: RegistrationResult, seconds: number, reason?: string): void;
  /** Counts one allocation of devices of an existing `resource`. */
  observeAllocation(resource: string): void;
  /** Drops every metric from the registry. */
  close(): void;
}

/** Bounded buckets from 1 ms (a local registration) to 10 s (the dial timeout). */
const REGISTRATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Plugin types come from plugins; past this many distinct values, new ones are counted as "other". */
const MAX_TYPE_LABELS = 64;
const REASON_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,39}$/i;

/** Creates the agent's metrics in a registry of their own. */
export function createMetrics(sources: MetricsSources): AgentMetrics {
  const own = new Registry();
  const registers = [own];

  new Gauge({
    // The kubelet's name and labels, so existing dashboards keep working.
    name: "plugin_manager_total_plugins",
    help: "Number of plugins in Plugin Manager",
    labelNames: ["socket_path", "state"],
    registers,
    collect() {
      this.reset();
      for (const plugin of sources.plugins()) {
        this.inc({ socket_path: plugin.socket, state: "desired_state_of_world" });
        if (plugin.state === "registered") this.inc({ socket_path: plugin.socket, state: "actual_state_of_world" });
      }
    },
  });
  new Gauge({
    name: "edgeplug_plugins",
    help: "Known registration sockets by state (pending, registered, failed, stale).",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      for (const state of PLUGIN_STATES) this.set({ state }, 0);
      for (const plugin of sources.plugins()) this.inc({ state: plugin.state });
    },
  });
  new Gauge({
    name: "edgeplug_devices",
    help: "Devices advertised by device plugins, by resource and health.",
    labelNames: ["resource", "health"],
    registers,
    collect() {
      this.reset();
      for (const resource of sources.resources?.() ?? []) {
        this.set({ resource: resource.name, health: "healthy" }, resource.healthy.length);
        this.set({ resource: resource.name, health: "unhealthy" }, resource.unhealthy.length);
      }
    },
  });
  const registrations = new Counter({
    name: "edgeplug_registrations_total",
    help: "Plugin registration attempts by plugin type and result (success, failure).",
    labelNames: ["type", "result"],
    registers,
  });
  const failures = new Counter({
    name: "edgeplug_registration_failures_total",
    help: "Failed plugin registration attempts by plugin type and reason.",
    labelNames: ["type", "reason"],
    registers,
  });
  const latency = new Histogram({
    name: "edgeplug_registration_duration_seconds",
    help: "Duration of successful plugin registrations, from dialing to NotifyRegistrationStatus.",
    labelNames: ["type"],
    buckets: REGISTRATION_BUCKETS,
    registers,
  });
  const allocations = new Counter({
    name: "edgeplug_allocations_total",
    help: "Device allocations by resource.",
    labelNames: ["resource"],
    registers,
  });

  const seenTypes = new Set<string>();
  const typeLabel = (type: string | null) => {
    const value = type ?? "unknown";
    if (seenTypes.has(value)) return value;
    if (seenTypes.size >= MAX_TYPE_LABELS) return "other";
    seenTypes.add(value);
    return value;
  };

  const registry = sources.processMetrics === false ? own : Registry.merge([own, processRegistry()]);
  return {
    registry,
    observeRegistration(type, result, seconds, reason) {
      const label = typeLabel(type);
      registrations.inc({ type: label, result });
      if (result === "failure") {
        failures.inc({ type: label, reason: reason !== undefined && REASON_PATTERN.test(reason) ? reason : "other" });
      } else {
        latency.observe({ type: label }, seconds);
      }
    },
    observeAllocation(resource) {
      allocations.inc({ resource });
    },
    close() {
      registry.clear();
      own.clear();
    },
  };
}

let sharedProcessRegistry: Registry | undefined;

/**
 * prom-client's process metrics, created once per process: their event-loop
 * monitor and GC observer cannot be stopped, so each agent (and each test)
 * shares them instead of adding its own. Neither keeps the process alive.
 */
function processRegistry(): Registry {
  if (!sharedProcessRegistry) {
    sharedProcessRegistry = new Registry();
    collectDefaultMetrics({ register: sharedProcessRegistry });
  }
  return sharedProcessRegistry;
}

export interface MetricsEndpointOptions {
  /** api.metrics: `host:port`, `[v6 address]:port`, or `:port` for every interface; port 0 picks one. */
  address: string;
  metrics: AgentMetrics;
  health?: Health;
  log: Logger;
}

export interface MetricsEndpoint extends AsyncDisposable {
  /** Where it listens, with the port actually bound. */
  readonly host: string;
  readonly port: number;
  /** e.g. http://127.0.0.1:9478 */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves `/metrics` (Prometheus text), `/healthz` and `/readyz` on `address`.
 * Rejects with an Error naming api.metrics and the address when it cannot
 * listen (port in use, no such local address, permission denied).
 */
export async function serveMetricsEndpoint(options: MetricsEndpointOptions): Promise<MetricsEndpoint> {
  const { host, port } = parseListenAddress(options.address);
  const { metrics, health, log } = options;
  const server = http.createServer((request, response) => {
    if (request.method !== "GET" && request.method !== "HEAD") {
      response.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
      response.end("method not allowed\n");
      return;
    }
    if (health && serveHealthRequest(health, request, response)) return;
    const pathname = new URL(request.url ?? "/", "http://localhost").pathname;
    if (pathname !== "/metrics") {
      response.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
      response.end("not found: try /metrics, /healthz or /readyz\n");
      return;
    }
    metrics.registry.metrics().then(
      (text) => {
        response.writeHead(200, { "content-type": metrics.registry.contentType, "cache-control": "no-store" });
        response.end(request.method === "HEAD" ? undefined : text);
      },
      (error: unknown) => {
        log.warn("collecting metrics failed", { error });
        response.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
        response.end(`collecting metrics failed: ${(error as Error).message}\n`);
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error) => reject(describeListenError(options.address, error)));
    server.listen({ host, port }, () => resolve());
  });
  server.on("error", (error) => log.warn("metrics endpoint error", { error }));
  const bound = server.address() as { address: string; port: number };
  const shownHost = bound.address.includes(":") ? `[${bound.address}]` : bound.address;
  const url = `http://${shownHost}:${bound.port}`;
  log.info("metrics endpoint serving", { url });

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    return closing;
  };
  return { host: bound.address, port: bound.port, url, close, [Symbol.asyncDispose]: close };
}

/** Splits api.metrics into host and port; throws naming the setting on anything else. */
export function parseListenAddress(address: string): { host: string | undefined; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$/.exec(address);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) {
    throw new Error(`api.metrics: expected host:port like "127.0.0.1:9478", got ${JSON.stringify(address)}`);
  }
  const host = match[1] ?? match[2];
  return { host: host === "" ? undefined : host, port };
}

function describeListenError(address: string, error: Error): Error {
  const code = (error as { code?: string }).code;
  const why =
    code === "EADDRINUSE"
      ? "the address is already in use"
      : code === "EADDRNOTAVAIL" || code === "ENOTFOUND"
        ? "no such local address"
        : code === "EACCES"
          ? "permission denied"
          : error.message;
  return new Error(`api.metrics: cannot listen on ${address}: ${why}`, { cause: error });
}
