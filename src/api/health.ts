/**
 * Liveness and readiness for `/healthz` and `/readyz` (docs/api.md, "Health and readiness").
 *
 * Liveness: each long-running loop (the reconciler, the watcher) calls
 * `heartbeat(source)` on every pass; the agent is unhealthy when a source has
 * not beaten for `stalePeriods` resync periods, which only happens when the
 * loop is stuck, since a resync pass runs at least once per period.
 * Readiness: named gates ("initial-walk", "api-serving", later
 * "checkpoint-restored") are marked done once; the agent is ready when all are.
 *
 * @example
 * ```ts
 * const health = createHealth({ resyncMs: 10_000, heartbeats: ["reconciler"], gates: ["initial-walk", "api-serving"] });
 * health.heartbeat("reconciler"); // every reconcile or resync pass
 * health.markDone("initial-walk");
 * ```
 */
import { formatDuration } from "../policy/duration.ts";

export interface HealthOptions {
  /** The reconciler's resync period (reconcile.resync). */
  resyncMs: number;
  /** Missed periods before a source counts as stalled (default 3). */
  stalePeriods?: number;
  /** Sources expected to beat; their clock starts now, so one that never beats goes stale too. */
  heartbeats?: readonly string[];
  /** Readiness gates, not done until markDone(). */
  gates?: readonly string[];
  /**
   * Milliseconds clock (default performance.now, monotonic as the loops'
   * timers are): a wall-clock step, such as NTP's first sync on a board
   * without a real-time clock, must neither fail liveness nor blind it.
   */
  now?: () => number;
}

export interface Check {
  name: string;
  ok: boolean;
  /** Why it failed, or "ok". */
  detail: string;
}

export interface Verdict {
  ok: boolean;
  checks: Check[];
}

export interface Health {
  /** Records a pass of `source`'s loop; an undeclared source is tracked from its first beat. */
  heartbeat(source: string): void;
  /** Marks a readiness gate done; an undeclared gate is added as done. */
  markDone(gate: string): void;
  /** Adds a gate that must be done before the agent is ready again (no-op if known). */
  addGate(gate: string): void;
  /** A new resync period (after a policy reload); staleness is judged against it from now on. */
  setResyncPeriod(ms: number): void;
  /** ok when every heartbeat source beat within the bound. */
  liveness(): Verdict;
  /** ok when every gate is done. */
  readiness(): Verdict;
  /**
   * Resolves once every gate is done (at once when they all are), whichever
   * gate is last: what a service manager's readiness notification waits for.
   */
  whenReady(): Promise<void>;
}

/** Creates the agent's health state. */
export function createHealth(options: HealthOptions): Health {
  const now = options.now ?? (() => performance.now());
  const stalePeriods = options.stalePeriods ?? 3;
  let resyncMs = validPeriod(options.resyncMs);
  const lastBeat = new Map<string, number>();
  for (const source of options.heartbeats ?? []) lastBeat.set(source, now());
  const gates = new Map<string, boolean>();
  for (const gate of options.gates ?? []) gates.set(gate, false);
  const allDone = () => [...gates.values()].every(Boolean);
  let readyWaiters: Array<() => void> = [];

  return {
    heartbeat(source) {
      lastBeat.set(source, now());
    },
    markDone(gate) {
      gates.set(gate, true);
      if (readyWaiters.length > 0 && allDone()) {
        const waiters = readyWaiters;
        readyWaiters = [];
        for (const wake of waiters) wake();
      }
    },
    addGate(gate) {
      if (!gates.has(gate)) gates.set(gate, false);
    },
    setResyncPeriod(ms) {
      resyncMs = validPeriod(ms);
    },
    liveness() {
      const boundMs = resyncMs * stalePeriods;
      const at = now();
      const checks = [...lastBeat].map(([name, beat]): Check => {
        const silentMs = Math.round(at - beat);
        return silentMs <= boundMs ? { name, ok: true, detail: "ok" } : {
          name,
          ok: false,
          detail: `no heartbeat for ${formatDuration(silentMs)} (bound ${formatDuration(boundMs)}: ${stalePeriods} resync periods of ${formatDuration(resyncMs)})`,
        };
      });
      return { ok: checks.every((check) => check.ok), checks };
    },
    readiness() {
      const checks = [...gates].map(([name, done]): Check => ({ name, ok: done, detail: done ? "ok" : "not done" }));
      return { ok: checks.every((check) => check.ok), checks };
    },
    whenReady() {
      if (allDone()) return Promise.resolve();
      return new Promise<void>((resolve) => readyWaiters.push(resolve));
    },
  };
}

/** What serveHealthRequest needs of an HTTP/1.1 or HTTP/2 request and response. */
export interface HealthRequest {
  readonly url?: string | undefined;
  readonly method?: string | undefined;
}
export interface HealthResponse {
  writeHead(status: number, headers: Record<string, string | number>): unknown;
  end(body: string): unknown;
}

/**
 * Answers `/healthz` and `/readyz` (GET or HEAD) from `health`; returns false
 * for any other path so the caller can serve it. 200 or 503, text/plain:
 * healthz says "ok" when healthy; otherwise, and always for readyz, one
 * `[+]name ok` / `[-]name reason` line per check and a verdict line.
 */
export function serveHealthRequest(health: Health, request: HealthRequest, response: HealthResponse): boolean {
  const pathname = new URL(request.url ?? "/", "http://localhost").pathname;
  if (pathname !== "/healthz" && pathname !== "/readyz") return false;
  const endpoint = pathname.slice(1);
  const { ok, checks } = endpoint === "healthz" ? health.liveness() : health.readiness();
  const body = endpoint === "healthz" && ok ? "ok" : checks.map((check) => `[${check.ok ? "+" : "-"}]${check.name} ${check.detail}\n`).join("") +
    `${endpoint} check ${ok ? "passed" : "failed"}\n`;
  response.writeHead(ok ? 200 : 503, {
    "content-type": "text/plain; charset=utf-8",
    "cache-control": "no-store",
    "content-length": Buffer.byteLength(body),
  });
  response.end(request.method === "HEAD" ? "" : body);
  return true;
}

function validPeriod(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0) throw new RangeError(`health: resync period must be a positive duration, got ${ms} ms`);
  return ms;
}
