/**
 * `edgeplug fleet status` over 1,000 simulated nodes (test/support/simulated-nodes.ts: retained online and status
 * messages on a Mosquitto on loopback), text and JSON, run by dist/edgeplug: wall time and CPU time (user + system
 * of the command, from /proc/self/stat's waited-for children) per run. Target (docs/fleet.md): at most 1 s of each
 * for the fastest run. CPU time is what the command costs whatever else runs; wall time on a machine with more
 * runnable work than cores measures the queue, so the load average is reported beside it.
 *
 *   npm run bench -- fleet-status          BENCH_RUNS (default 10) runs of each output
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import process from "node:process";
import { EDGEPLUG_BINARY, requireBinary } from "../test/support/agent-process.ts";
import { startMosquitto } from "../test/support/brokers.ts";
import { healthyNodes, publishRetained } from "../test/support/simulated-nodes.ts";
import { clockTicksPerSecond } from "./support/proc.ts";

const NODES = 1000;
const RUNS = Math.max(3, Number(process.env.BENCH_RUNS) || 10);
const TARGET_MS = 1000;

/** CPU time (user + system) of this process's waited-for children so far, in ms. */
function childrenCpuMs(ticksPerSecond: number): number {
  const stat = fs.readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3; cutime and cstime are fields 16 and 17.
  return ((Number(fields[16 - 3]) + Number(fields[17 - 3])) * 1000) / ticksPerSecond;
}

function summary(samples: number[]) {
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (ms: number) => Math.round(ms);
  return { minMs: round(sorted[0]!), p50Ms: round(sorted[Math.floor((sorted.length - 1) / 2)]!), maxMs: round(sorted.at(-1)!) };
}

export async function run(): Promise<object> {
  requireBinary();
  const cleanups: Array<() => unknown> = [];
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) };
  try {
    const broker = await startMosquitto(t);
    await publishRetained(broker.url, healthyNodes("bench", NODES));
    const ticksPerSecond = clockTicksPerSecond();
    const outputs = { text: [] as string[], json: ["--output", "json"] };
    const results: Record<string, object> = {};
    for (const [output, flags] of Object.entries(outputs)) {
      const wall: number[] = [];
      const cpu: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const cpuBefore = childrenCpuMs(ticksPerSecond);
        const started = performance.now();
        const answer = spawnSync(EDGEPLUG_BINARY, ["fleet", "status", "--broker", broker.url, "--prefix", "bench", ...flags], { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
        wall.push(performance.now() - started);
        cpu.push(childrenCpuMs(ticksPerSecond) - cpuBefore);
        if (answer.status !== 0) throw new Error(`fleet status --output ${output} exited ${answer.status}: ${answer.stderr}`);
        if (output === "text" && !answer.stdout.includes(`${NODES} nodes: ${NODES} online`)) throw new Error(`fleet status did not see the ${NODES} nodes:\n${answer.stdout.slice(0, 400)}`);
      }
      const wallStats = summary(wall);
      const cpuStats = summary(cpu);
      results[output] = { wall: wallStats, cpu: cpuStats, meetsTarget: wallStats.minMs <= TARGET_MS && cpuStats.minMs <= TARGET_MS };
    }
    return { nodes: NODES, runs: RUNS, targetMs: TARGET_MS, loadAverage: os.loadavg().map((load) => Math.round(load * 100) / 100), cores: os.cpus().length, ...results };
  } finally {
    for (const fn of cleanups.reverse()) await fn();
  }
}
