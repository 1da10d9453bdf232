/**
 * What a grpc-go client's `:authority` costs on the built daemon
 * (dist/edgeplug run): unary Status calls on the API socket over one HTTP/2
 * connection, once with `:authority: localhost` (grpc-js, Connect: the
 * connection is Node's own socket) and once with the bare socket path that
 * grpc-go before 1.50 sends (the connection is read through
 * src/rpc/authority-rewrite.ts), in alternating rounds. Reported per kind:
 * call latency seen by the client and the daemon's CPU per call, and the ratio
 * of the two kinds.
 *
 * Calls are paced under the API socket's rate limit (100 a second per
 * connection), so the CPU figure is the daemon's, not the client's. Env:
 * BENCH_AUTHORITY_CALLS (calls per kind and round, 600 by default),
 * BENCH_AUTHORITY_ROUNDS (3).
 */
import * as http2 from "node:http2";
import * as net from "node:net";
import process from "node:process";
import { shortTempDir, startEdgeplug, writePolicy } from "../test/support/agent-process.ts";
import { clockTicksPerSecond, cpuTicks } from "./support/proc.ts";
import { summarize } from "./support/stats.ts";

const CALLS = Number(process.env.BENCH_AUTHORITY_CALLS) || 600;
const ROUNDS = Number(process.env.BENCH_AUTHORITY_ROUNDS) || 3;
/** Under the API socket's 100 calls a second per connection. */
const CALL_INTERVAL_MS = 12;
const KINDS = { localhost: "localhost", barePath: "/var/lib/kubelet/device-plugins/kubelet.sock" } as const;
type Kind = keyof typeof KINDS;

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `calls` paced Status calls on one connection with `authority`; latencies and the daemon's CPU ticks. */
async function callRound(apiSocket: string, pid: number, authority: string, calls: number) {
  const session = http2.connect("http://localhost", { createConnection: () => net.connect(apiSocket) });
  session.on("error", () => {});
  const call = () =>
    new Promise<void>((resolve, reject) => {
      const request = session.request({ ":method": "POST", ":path": "/edgeplug.v1.Agent/Status", ":authority": authority, "content-type": "application/grpc", te: "trailers" });
      let grpcStatus: unknown;
      request.on("trailers", (trailers) => (grpcStatus = trailers["grpc-status"]));
      request.on("error", reject);
      request.resume();
      request.on("close", () => (grpcStatus === "0" ? resolve() : reject(new Error(`Status answered grpc-status ${String(grpcStatus)}`))));
      request.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  // The connection's first calls settle it (and its kind of handover) before anything is counted.
  for (let i = 0; i < 5; i++) await call();
  const latenciesMs: number[] = [];
  const ticksBefore = cpuTicks(pid);
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    await call();
    latenciesMs.push(performance.now() - started);
    await pause(CALL_INTERVAL_MS);
  }
  const ticks = cpuTicks(pid) - ticksBefore;
  session.destroy();
  return { latenciesMs, ticks };
}

export async function run(): Promise<object> {
  const { dir, cleanup } = shortTempDir("ep-bench-auth-");
  const policy = writePolicy(dir);
  const agent = startEdgeplug(["run", "--config", policy.path]);
  try {
    await agent.waitForLog("edgeplug running");
    const pid = agent.child.pid!;
    const samples: Record<Kind, { latenciesMs: number[]; ticks: number; calls: number }> = {
      localhost: { latenciesMs: [], ticks: 0, calls: 0 },
      barePath: { latenciesMs: [], ticks: 0, calls: 0 },
    };
    for (let round = 0; round < ROUNDS; round++) {
      const order: Kind[] = round % 2 === 0 ? ["localhost", "barePath"] : ["barePath", "localhost"];
      for (const kind of order) {
        process.stderr.write(`authority: round ${round + 1}/${ROUNDS}, ${kind}\n`);
        const result = await callRound(policy.apiSocket, pid, KINDS[kind], CALLS);
        samples[kind].latenciesMs.push(...result.latenciesMs);
        samples[kind].ticks += result.ticks;
        samples[kind].calls += CALLS;
      }
    }
    const msPerTick = 1000 / clockTicksPerSecond();
    const report = (kind: Kind) => ({
      authority: KINDS[kind],
      latency: summarize(samples[kind].latenciesMs),
      agentCpuMsPerCall: Math.round((samples[kind].ticks * msPerTick * 1000) / samples[kind].calls) / 1000,
    });
    const localhost = report("localhost");
    const barePath = report("barePath");
    return {
      callsPerKind: CALLS * ROUNDS,
      localhost,
      barePath,
      barePathOverLocalhost: {
        latencyP50: Math.round((barePath.latency.p50Ms / localhost.latency.p50Ms) * 100) / 100,
        agentCpuPerCall: Math.round((barePath.agentCpuMsPerCall / localhost.agentCpuMsPerCall) * 100) / 100,
      },
    };
  } finally {
    await agent.terminate();
    cleanup();
  }
}
