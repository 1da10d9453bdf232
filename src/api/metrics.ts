/**
 * Prometheus metrics (docs/metrics.md) and the HTTP endpoint on
 * `api.metrics` that serves them with `/healthz` and `/readyz`.
 *
 * Events (registrations, allocations, checkpoint writes, reloads) are
 * counted here as they happen; values that describe current state are
 * computed at scrape time (state-gauges.ts).
 *
 * @example
 * ```ts
 * const metrics = createMetrics({ plugins: () => pluginStatus.plugins() });
 * metrics.observeRegistration("DevicePlugin", 0.004, null);
 * const endpoint = await serveMetricsEndpoint({ address: "127.0.0.1:9478", metrics, health, log });
 * ```
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { AttemptFailure } from "../pluginmanager/types.ts";
import { AUTOMATIC_RELEASE_CAUSES, type AutomaticReleaseCause } from "../devicemanager/owner-lifetimes.ts";
import { registerStateGauges, type StateSources } from "./state-gauges.ts";
import type { RequestCounters } from "../rpc/request-reports.ts";

export type { AllocationSample, PluginSample, ResourceSample, SocketSample } from "./state-gauges.ts";

/** How the checkpoint was read at start. */
export const CHECKPOINT_RESTORE_RESULTS = ["missing", "restored", "corrupt"] as const;
export type CheckpointRestoreResult = (typeof CHECKPOINT_RESTORE_RESULTS)[number];

export interface MetricsSources extends StateSources {
  /** Adds the process_* and nodejs_* metrics (default true). */
  processMetrics?: boolean;
  /** What edgeplug_build_info says; absent, the gauge is not exported. */
  build?: BuildInfo;
  /** Seconds since the epoch clock for the reload timestamp (default Date.now() / 1000). */
  nowSeconds?: () => number;
}

export interface BuildInfo {
  version: string;
  commit: string;
  /** e.g. `node v24.21.0` */
  runtime: string;
}

/** A listener that enforces limits: the API socket or the metrics endpoint. */
export type LimitedListener = "api" | "metrics" | "pod-resources";

export const REGISTRATION_RESULTS = ["success", "failure"] as const;
export type RegistrationResult = (typeof REGISTRATION_RESULTS)[number];

export interface AgentMetrics {
  /** This agent's registry (never prom-client's global one). */
  readonly registry: Registry;
  /**
   * Counts one registration attempt of a plugin of `type` (null before GetInfo
   * answered) that took `seconds`: a success when `failure` is null (it feeds
   * the latency histogram), otherwise a failure counted under that reason,
   * one of the fixed ATTEMPT_FAILURES, so the series stay bounded.
   */
  observeRegistration(type: string | null, seconds: number, failure: AttemptFailure | null): void;
  /** Counts one allocation of devices of an existing `resource`. */
  observeAllocation(resource: string): void;
  /** Counts one allocation request refused on arrival because the allocation queue was full. */
  observeAllocationQueueFull(): void;
  /** Counts one owner released by the agent itself, by cause. */
  observeAutomaticRelease(cause: AutomaticReleaseCause): void;
  /** Counts one checkpoint write (success or failure) and its duration. */
  observeCheckpointWrite(ok: boolean, seconds: number): void;
  /** Counts how the checkpoint was read at start. */
  observeCheckpointRestore(result: CheckpointRestoreResult): void;
  /**
   * Records the outcome of a policy reload (SIGHUP). The policy loaded at
   * start counts as the first successful load.
   */
  observeConfigReload(success: boolean): void;
  /** Counts a connection or request that `listener`'s limits refused or ended, by `action` (a fixed word). */
  observeLimit(listener: LimitedListener, action: string): void;
  /** Counts one request on `listener` whose `:authority` or `Host` was no host and that was served as `localhost`. */
  /** What a listener counts of the requests it could not take as they came (src/rpc/request-reports.ts). */
  requestCounters(listener: "api" | "registration" | "pod-resources"): RequestCounters;
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

  registerStateGauges(sources, registers);
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
  const allocationQueueFull = new Counter({
    name: "edgeplug_allocation_queue_full_total",
    help: "Allocation requests refused on arrival because the allocation queue was full (ResourceExhausted).",
    registers,
  });
  const automaticReleases = new Counter({
    name: "edgeplug_automatic_releases_total",
    help: "Owners released by the agent itself, by cause (process_exited, lease_lapsed, process_gone_at_start, lease_lapsed_at_start).",
    labelNames: ["cause"],
    registers,
  });
  for (const cause of AUTOMATIC_RELEASE_CAUSES) automaticReleases.inc({ cause }, 0);
  const checkpointWrites = new Counter({
    name: "edgeplug_checkpoint_writes_total",
    help: "Checkpoint writes by result (success, failure).",
    labelNames: ["result"],
    registers,
  });
  const checkpointWriteLatency = new Histogram({
    name: "edgeplug_checkpoint_write_duration_seconds",
    help: "Duration of checkpoint writes (encode, write, fsync, rename, fsync of the directory), failed ones included.",
    buckets: REGISTRATION_BUCKETS,
    registers,
  });
  const checkpointRestores = new Counter({
    name: "edgeplug_checkpoint_restores_total",
    help: "How the checkpoint was read at start: missing, restored, or corrupt (moved aside).",
    labelNames: ["result"],
    registers,
  });
  for (const result of REGISTRATION_RESULTS) checkpointWrites.inc({ result }, 0);
  for (const result of CHECKPOINT_RESTORE_RESULTS) checkpointRestores.inc({ result }, 0);

  if (sources.build) {
    new Gauge({
      name: "edgeplug_build_info",
      help: "Always 1; the labels say which edgeplug runs: version, commit and JavaScript runtime.",
      labelNames: ["version", "commit", "runtime"],
      registers,
    }).set({ ...sources.build }, 1);
  }
  const nowSeconds = sources.nowSeconds ?? (() => Date.now() / 1000);
  const reloadSuccessful = new Gauge({
    name: "edgeplug_config_last_reload_successful",
    help: "1 when the last policy load or reload (SIGHUP) succeeded, 0 when it was refused and the previous policy stayed.",
    registers,
  });
  const reloadTimestamp = new Gauge({
    name: "edgeplug_config_last_reload_success_timestamp_seconds",
    help: "When the policy in force was loaded, in seconds since the Unix epoch.",
    registers,
  });
  reloadSuccessful.set(1);
  reloadTimestamp.set(nowSeconds());
  const limited = new Counter({
    name: "edgeplug_limited_total",
    help: "Connections and requests refused or ended by a listener's limits, by listener (api, metrics) and action.",
    labelNames: ["listener", "action"],
    registers,
  });

  const authorityReplaced = new Counter({
    name: "edgeplug_request_authority_replaced_total",
    help: "Requests whose :authority or Host was no host (a grpc-go client's socket path), served as localhost, by listener (api, registration, pod-resources).",
    labelNames: ["listener"],
    registers,
  });
  const refusedByHttp2 = new Counter({
    name: "edgeplug_request_reset_by_http2_total",
    help: "Requests node:http2 reset before edgeplug saw them (a header block HTTP/2 forbids), by listener (api, registration, pod-resources).",
    labelNames: ["listener"],
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
    observeRegistration(type, seconds, failure) {
      const label = typeLabel(type);
      registrations.inc({ type: label, result: failure === null ? "success" : "failure" });
      if (failure === null) latency.observe({ type: label }, seconds);
      else failures.inc({ type: label, reason: failure });
    },
    observeAllocation(resource) {
      allocations.inc({ resource });
    },
    observeAllocationQueueFull() {
      allocationQueueFull.inc();
    },
    observeAutomaticRelease(cause) {
      automaticReleases.inc({ cause });
    },
    observeCheckpointWrite(ok, seconds) {
      checkpointWrites.inc({ result: ok ? "success" : "failure" });
      checkpointWriteLatency.observe(seconds);
    },
    observeCheckpointRestore(result) {
      checkpointRestores.inc({ result });
    },
    observeConfigReload(success) {
      reloadSuccessful.set(success ? 1 : 0);
      if (success) reloadTimestamp.set(nowSeconds());
    },
    observeLimit(listener, action) {
      limited.inc({ listener, action: REASON_PATTERN.test(action) ? action : "other" });
    },
    requestCounters(listener) {
      return {
        authorityReplaced: () => authorityReplaced.inc({ listener }),
        refusedByHttp2: (count) => refusedByHttp2.inc({ listener }, count),
      };
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

export { type MetricsEndpoint, type MetricsEndpointOptions, parseListenAddress, serveMetricsEndpoint } from "./metrics-endpoint.ts";
