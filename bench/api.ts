/**
 * The API socket under a flood (issue 7), on the built daemon
 * (dist/edgeplug run): for each kind of flood (HTTP/1.1 keep-alive, HTTP/1.1
 * connection per request, gRPC with calls in flight), two flood processes
 * call Status as fast as they are answered while plugins register one at a
 * time. Reported per flood: answers per second (OK and rate-limited), request
 * latency, registration latency beside the same measure without a flood, and
 * the daemon's RSS and descriptors after it.
 *
 * Four processes share the machine (daemon, plugin host, two flooders): on
 * 2 cores the numbers say how the daemon shares its CPU, not its peak rate.
 * Compare ratios within one run. Env: BENCH_FLOOD_MS (each flood, 8 s by
 * default), BENCH_API_TRIALS (registrations without a flood, 20), BENCH_API_MODES
 * (the floods in order, comma-separated; all three by default).
 */
import { fork } from "node:child_process";
import { once } from "node:events";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { API_RATE_LIMITS, API_SOCKET_LIMITS } from "../src/server/limits.ts";
import { openDescriptors, requireBinary, shortTempDir, startEdgeplug, writePolicy } from "../test/support/agent-process.ts";
import type { FloodMode, FloodReply, FloodRequest } from "./support/api-flood.ts";
import { type PluginHost, startPluginHost } from "./support/plugin-host-client.ts";
import { clockTicksPerSecond, cpuTicks, residentKiB } from "./support/proc.ts";
import { roundMs, summarize } from "./support/stats.ts";

const FLOOD_ENTRY = fileURLToPath(new URL("./support/api-flood.ts", import.meta.url));
const FLOOD_MS = Number(process.env.BENCH_FLOOD_MS) || 8000;
const BASELINE_TRIALS = Number(process.env.BENCH_API_TRIALS) || 20;
const FLOOD_PROCESSES = 2;
const ALL_MODES: readonly FloodMode[] = ["keepalive", "per-request", "grpc"];
/** BENCH_API_MODES=grpc,grpc repeats a flood, e.g. to see whether RSS keeps growing. */
const MODES: FloodMode[] = (process.env.BENCH_API_MODES?.split(",") ?? ALL_MODES).map((mode) => {
  if (!ALL_MODES.includes(mode as FloodMode)) throw new Error(`BENCH_API_MODES: unknown flood ${mode}; known: ${ALL_MODES.join(", ")}`);
  return mode as FloodMode;
});
const CONNECTIONS: Record<FloodMode, number> = { keepalive: 8, "per-request": 8, grpc: 4 };
/** Registrations start after the flood is up to speed and stop before it winds down. */
const FLOOD_RAMP_MS = 1000;
const REGISTRATION_TIMEOUT_MS = 10_000;
const SETTLE_PAUSE_MS = 3000;
/** After a flood, connections still open are closed by the idle deadline at most this much later. */
const SETTLE_MS = API_SOCKET_LIMITS.idleTimeoutMs + 2000;

function progress(message: string): void {
  process.stderr.write(`api: ${message}\n`);
}

function loadAverage(): number[] {
  return os.loadavg().map((value) => Math.round(value * 100) / 100);
}

/** Registers plugins one at a time until `until` (performance.now()); returns their latencies and failures. */
async function registerOneByOne(host: PluginHost, registry: string, prefix: string, until: () => boolean) {
  const latenciesMs: number[] = [];
  let failures = 0;
  for (let i = 0; until(); i++) {
    const socket = path.join(registry, `${prefix}-${i}.sock`);
    const reply = await host.start([socket], REGISTRATION_TIMEOUT_MS);
    for (const plugin of reply.plugins) latenciesMs.push(plugin.notifyAt - plugin.listenAt);
    failures += reply.failures.length;
    await host.stop([socket]);
  }
  return { latenciesMs, failures };
}

/** Forks a flood process; resolves once it is loaded, with a function that starts it and resolves with its reply. */
async function forkFlood(): Promise<(request: FloodRequest) => Promise<FloodReply>> {
  const child = fork(FLOOD_ENTRY, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  await once(child, "message");
  return (request) => {
    const reply = once(child, "message").then(([message]) => message as FloodReply);
    child.send(request);
    return reply;
  };
}

function summary(latenciesMs: number[]) {
  return latenciesMs.length === 0 ? null : summarize(latenciesMs);
}

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<number> {
  const startedAt = performance.now();
  while (!check() && performance.now() - startedAt < timeoutMs) await new Promise((resolve) => setTimeout(resolve, 100));
  return roundMs(performance.now() - startedAt);
}

export async function run(): Promise<object> {
  requireBinary();
  const { dir, cleanup } = shortTempDir("ep-bench-api-");
  const policy = writePolicy(dir, { reconcile: "  resync: 1h", security: "  maxPlugins: 2048" });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  const pid = agent.child.pid!;
  const host = await startPluginHost();
  try {
    await agent.waitForLog("edgeplug running");
    const loadAtStart = loadAverage();
    const idle = { rssKiB: residentKiB(pid), descriptors: openDescriptors(pid) };

    progress(`${BASELINE_TRIALS} registrations without a flood`);
    let baselineLeft = BASELINE_TRIALS;
    const baseline = await registerOneByOne(host, policy.registry, "quiet", () => baselineLeft-- > 0);

    const floods: Record<string, object> = {};
    for (const [round, mode] of MODES.entries()) {
      progress(`flood: ${mode}, ${FLOOD_PROCESSES} processes x ${CONNECTIONS[mode]} connections, ${FLOOD_MS} ms`);
      const flooders = await Promise.all(Array.from({ length: FLOOD_PROCESSES }, forkFlood));
      const ticksBefore = cpuTicks(pid);
      const startedAt = performance.now();
      const replies = Promise.all(
        flooders.map((start) => start({ socket: policy.apiSocket, mode, connections: CONNECTIONS[mode], durationMs: FLOOD_MS })),
      );
      await new Promise((resolve) => setTimeout(resolve, FLOOD_RAMP_MS));
      const stopRegisteringAt = startedAt + FLOOD_MS - FLOOD_RAMP_MS;
      const registrations = await registerOneByOne(host, policy.registry, mode, () => performance.now() < stopRegisteringAt);
      const answers = await replies;
      const floodMs = performance.now() - startedAt;
      const cpuSeconds = (cpuTicks(pid) - ticksBefore) / clockTicksPerSecond();
      const after = { rssKiB: residentKiB(pid), descriptors: openDescriptors(pid) };
      const settledAfterMs = await waitUntil(() => openDescriptors(pid) <= idle.descriptors + 5, SETTLE_MS);
      // A pause with no traffic, so the RSS after it shows what the flood left behind rather than its garbage.
      await new Promise((resolve) => setTimeout(resolve, SETTLE_PAUSE_MS));
      const total = (key: "ok" | "limited" | "failed") => answers.reduce((sum, reply) => sum + reply[key], 0);
      const seconds = floodMs / 1000;
      floods[Object.hasOwn(floods, mode) ? `${mode}#${round + 1}` : mode] = {
        connections: FLOOD_PROCESSES * CONNECTIONS[mode],
        durationMs: Math.round(floodMs),
        answeredPerSecond: Math.round((total("ok") + total("limited")) / seconds),
        okPerSecond: Math.round(total("ok") / seconds),
        rateLimitedPerSecond: Math.round(total("limited") / seconds),
        failed: total("failed"),
        firstFailure: answers.find((reply) => reply.firstError)?.firstError ?? null,
        requestLatency: summary(answers.flatMap((reply) => reply.latenciesMs)),
        registrationDuringFlood: { ...summary(registrations.latenciesMs), failures: registrations.failures },
        daemonCpuPercent: Math.round((cpuSeconds / seconds) * 1000) / 10,
        daemonAfterFlood: after,
        descriptorsBackToIdleAfterMs: settledAfterMs,
        daemonAfterSettle: { rssKiB: residentKiB(pid), descriptors: openDescriptors(pid) },
      };
    }
    return {
      note: "daemon, plugin host and two flood processes share the machine; compare ratios within one run",
      loadAverage: { atStart: loadAtStart, atEnd: loadAverage() },
      limits: { ...API_SOCKET_LIMITS, rate: API_RATE_LIMITS },
      daemonIdle: idle,
      registrationWithoutFlood: { ...summary(baseline.latenciesMs), failures: baseline.failures },
      floods,
    };
  } finally {
    await host.close();
    agent.child.kill("SIGTERM");
    await agent.exited;
    cleanup();
  }
}
