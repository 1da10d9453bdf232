/**
 * Builds loaded-policy objects for tests, with the defaults of docs/policy.md
 * and short timeouts, without going through the YAML loader.
 */
import * as path from "node:path";
import type { HandlerPolicy, Policy, WatchDir } from "../../src/policy/types.ts";

export interface TestPolicyOptions {
  /** Watch dirs: paths (recursive, any type) or full entries. */
  watch: (string | Partial<WatchDir> & { path: string })[];
  /** Declared handlers by type; a string list declares generic handlers accepting anything. */
  handlers?: Record<string, Partial<HandlerPolicy>> | string[];
  resyncMs?: number;
  backoff?: { initialMs: number; maxMs: number };
  timeouts?: Partial<Policy["reconcile"]["timeouts"]>;
  /** reconcile.liveness.interval; default 0 (off). */
  livenessMs?: number;
  socketOwners?: number[];
  maxPlugins?: number;
  /** Default: `state/kubelet_internal_checkpoint` beside the first watch dir (tests watch `<tempDir>/registry`). */
  checkpointPath?: string;
}

/** A policy watching `options.watch`, handling `acme.io/Sensor` generically unless told otherwise. */
export function testPolicy(options: TestPolicyOptions): Policy {
  const declared = options.handlers ?? ["acme.io/Sensor"];
  const handlers = new Map<string, HandlerPolicy>();
  for (const [type, partial] of Array.isArray(declared) ? declared.map((type) => [type, {}] as const) : Object.entries(declared)) {
    const kind = ["DevicePlugin", "CSIPlugin", "DRAPlugin"].includes(type) ? "builtin" : "generic";
    handlers.set(type, { type, kind, versions: null, allow: ["*"], deny: [], ...partial });
  }
  return {
    version: 1,
    nodeName: "test-node",
    watch: options.watch.map((dir) => (typeof dir === "string" ? { path: dir, recursive: true, types: null } : { recursive: true, types: null, ...dir })),
    handlers,
    devicePlugins: { registrationSocket: null, gracePeriodMs: 300_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    podResources: { socket: null },
    checkpoint: { path: options.checkpointPath ?? defaultCheckpointPath(options.watch) },
    reconcile: {
      resyncMs: options.resyncMs ?? 3_600_000,
      backoff: options.backoff ?? { initialMs: 20, maxMs: 200 },
      timeouts: { dialMs: 2000, getInfoMs: 1000, notifyMs: 2000, ...options.timeouts },
      liveness: { intervalMs: options.livenessMs ?? 0 },
    },
    security: { socketOwners: options.socketOwners ?? [0], maxPlugins: options.maxPlugins ?? 1024, maxDevicesPerResource: 100_000 },
    api: { socket: null, socketGroup: null, metrics: null },
    log: { level: "warn", format: "text" },
    fleet: null,
    source: "<test>",
  };
}

function defaultCheckpointPath(watch: TestPolicyOptions["watch"]): string {
  const first = watch[0];
  if (first === undefined) throw new Error("testPolicy: at least one watch dir, or a checkpointPath");
  return path.join(path.dirname(typeof first === "string" ? first : first.path), "state", "kubelet_internal_checkpoint");
}
