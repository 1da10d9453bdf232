/**
 * Startup benchmark of the single executable: its size, and the wall time of
 * the commands people and scripts type, against `node -e 0` of the very Node
 * binary the executable embeds, in the same run with the commands interleaved
 * so machine noise hits them alike:
 *   version; validate and policy show on config/dev.yaml (YAML + the policy
 *   validator); status against a running agent (`--api`, and `--config`,
 *   which reads the policy first); probe against a running registration
 *   plugin (GetInfo through Connect).
 * Every process runs with an empty environment from an empty directory, as
 * `env -i` would. Targets (issue 9): status, validate and probe at most
 * 100 ms wall at the median. BENCH_STARTUP_BASELINE=<another build's
 * executable> times its commands too, interleaved with these ("baseline ...").
 * Besides wall time it reports each command's CPU time (user + system, Linux),
 * which the machine's load does not inflate, and its minor page faults: on a
 * VM whose host hands memory back lazily (this Firecracker VM: about 20 us
 * per first touch of a page) start time follows the pages a command touches,
 * a count that neither load nor the host's mood changes.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { shortTempDir, startEdgeplug, writePolicy } from "../test/support/agent-process.ts";
import { type PluginHost, startPluginHost } from "./support/plugin-host-client.ts";

const root = fileURLToPath(new URL("../", import.meta.url));
const executable = path.join(root, "dist", "edgeplug");
const embeddedNode = path.join(root, "node_modules", "node", "bin", "node");
const devPolicy = path.join(root, "config", "dev.yaml");
/** Timed runs per command; BENCH_RUNS overrides (at least 10). */
const RUNS = Math.max(10, Number(process.env.BENCH_RUNS) || 30);
const WARMUP_RUNS = 3;
const TARGET_MS = 100;
const TARGETED = ["edgeplug status --api", "edgeplug status --config", "edgeplug validate", "edgeplug probe"];

interface Stats {
  runs: number;
  minMs: number;
  p50Ms: number;
  p90Ms: number;
  meanMs: number;
}

/** Linux's clock ticks per second (`getconf CLK_TCK`), the unit of /proc's CPU times. */
const CLOCK_TICKS_PER_S = 100;

/**
 * CPU time (user + system, in ms) and minor page faults of this process's
 * waited-for children so far, from /proc/self/stat (cutime, cstime,
 * cminflt); null off Linux. Wall time on a loaded machine is mostly waiting
 * for a core; CPU time is what a command costs whatever else runs, at 10 ms
 * resolution.
 */
function childrenUsage(): { cpuMs: number; minorFaults: number } | null {
  let stat: string;
  try {
    stat = fs.readFileSync("/proc/self/stat", "utf8");
  } catch {
    return null;
  }
  // Fields after the command name in parentheses, which may itself hold spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { cpuMs: ((Number(fields[13]) + Number(fields[14])) * 1000) / CLOCK_TICKS_PER_S, minorFaults: Number(fields[8]) };
}

function timeOnce(command: string[], cwd: string): { wallMs: number; cpuMs: number | null; minorFaults: number | null } {
  const before = childrenUsage();
  const started = performance.now();
  const result = spawnSync(command[0]!, command.slice(1), { cwd, env: {}, stdio: ["ignore", "ignore", "pipe"] });
  const elapsed = performance.now() - started;
  const after = childrenUsage();
  if (result.status !== 0) {
    throw new Error(`${command.join(" ")} exited ${result.status}: ${result.stderr?.toString() ?? ""}`);
  }
  if (before === null || after === null) return { wallMs: elapsed, cpuMs: null, minorFaults: null };
  return { wallMs: elapsed, cpuMs: after.cpuMs - before.cpuMs, minorFaults: after.minorFaults - before.minorFaults };
}

function percentile(sorted: number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
}

const round = (ms: number) => Math.round(ms * 10) / 10;

function summarize(samples: number[]): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    runs: samples.length,
    minMs: round(sorted[0]!),
    p50Ms: round(percentile(sorted, 0.5)),
    p90Ms: round(percentile(sorted, 0.9)),
    meanMs: round(samples.reduce((sum, ms) => sum + ms, 0) / samples.length),
  };
}

/** An agent on its own temp policy with one registered plugin, for status and probe to talk to. */
async function startTargets(dir: string) {
  const policy = writePolicy(dir);
  const agent = startEdgeplug(["run", "--config", policy.path]);
  let host: PluginHost | undefined;
  try {
    await agent.waitForLog("edgeplug running");
    host = await startPluginHost();
    const socket = path.join(policy.registry, "probed.sock");
    const { plugins } = await host.start([socket], 10_000);
    if (plugins.length !== 1) throw new Error("the benchmark's plugin did not register");
    const stop = async () => {
      await host?.close();
      agent.child.kill("SIGTERM");
      await agent.exited;
    };
    return { policy, socket, stop };
  } catch (error) {
    await host?.close();
    agent.child.kill("SIGKILL");
    throw error;
  }
}

/** Size and start-up times of dist/edgeplug; throws when it has not been built. */
export async function run(): Promise<object> {
  if (!fs.existsSync(executable)) throw new Error(`${executable} is missing: run npm run build first`);
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ep-bench-"));
  const { dir, cleanup } = shortTempDir("ep-bench-");
  const loadAtStart = os.loadavg()[0]!;
  const targets = await startTargets(dir);
  try {
    const commands: Record<string, string[]> = {
      "node -e 0": [embeddedNode, "-e", "0"],
      "edgeplug version": [executable, "version"],
      "edgeplug validate": [executable, "validate", "--config", devPolicy],
      "edgeplug policy show": [executable, "policy", "show", "--config", devPolicy],
      "edgeplug status --api": [executable, "status", "--api", targets.policy.apiSocket],
      "edgeplug status --config": [executable, "status", "--config", targets.policy.path],
      "edgeplug probe": [executable, "probe", targets.socket, "--config", targets.policy.path],
    };
    const baseline = process.env.BENCH_STARTUP_BASELINE;
    if (baseline) {
      for (const [name, command] of Object.entries(commands)) {
        if (name.startsWith("edgeplug ")) commands[`baseline ${name}`] = [baseline, ...command.slice(1)];
      }
    }
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(commands).map((name) => [name, []]));
    const cpuSamples: Record<string, number[]> = Object.fromEntries(Object.keys(commands).map((name) => [name, []]));
    const faultSamples: Record<string, number[]> = Object.fromEntries(Object.keys(commands).map((name) => [name, []]));
    for (let i = 0; i < WARMUP_RUNS + RUNS; i++) {
      for (const [name, command] of Object.entries(commands)) {
        const { wallMs, cpuMs, minorFaults } = timeOnce(command, cwd);
        if (i < WARMUP_RUNS) continue;
        samples[name]!.push(wallMs);
        if (cpuMs !== null) cpuSamples[name]!.push(cpuMs);
        if (minorFaults !== null) faultSamples[name]!.push(minorFaults);
      }
    }
    const stats = Object.fromEntries(Object.entries(samples).map(([name, list]) => [name, summarize(list)]));
    const cpuStats = Object.fromEntries(
      Object.entries(cpuSamples).filter(([, list]) => list.length > 0).map(([name, list]) => [name, summarize(list)]),
    );
    const bareCpu = cpuStats["node -e 0"];
    const bare = stats["node -e 0"]!;
    const bytes = fs.statSync(executable).size;
    return {
      executable: path.relative(root, executable),
      sizeBytes: bytes,
      sizeMiB: Math.round((bytes / 2 ** 20) * 10) / 10,
      embeddedNode: spawnSync(embeddedNode, ["--version"], { encoding: "utf8" }).stdout.trim(),
      // Anything else running on the machine shows here and in the numbers: compare ratios within one run.
      loadAverage1m: { atStart: round(loadAtStart), atEnd: round(os.loadavg()[0]!) },
      wallTime: stats,
      p50OverNodeMs: Object.fromEntries(Object.entries(stats).map(([name, s]) => [name, round(s.p50Ms - bare.p50Ms)])),
      p50OverNodeRatio: Object.fromEntries(Object.entries(stats).map(([name, s]) => [name, Math.round((s.p50Ms / bare.p50Ms) * 100) / 100])),
      // User + system time of each command (Linux; 10 ms resolution): what load does not inflate.
      cpuTime: cpuStats,
      cpuP50OverNodeRatio: bareCpu ? Object.fromEntries(Object.entries(cpuStats).map(([name, s]) => [name, Math.round((s.p50Ms / bareCpu.p50Ms) * 100) / 100])) : {},
      // Median minor page faults of each command, and that over `node -e 0`'s.
      minorPageFaultsP50: Object.fromEntries(
        Object.entries(faultSamples).filter(([, list]) => list.length > 0).map(([name, list]) => [name, percentile([...list].sort((a, b) => a - b), 0.5)]),
      ),
      targets: Object.fromEntries(
        TARGETED.map((name) => [name, { targetP50Ms: TARGET_MS, p50Ms: stats[name]!.p50Ms, meetsTarget: stats[name]!.p50Ms <= TARGET_MS }]),
      ),
    };
  } finally {
    await targets.stop();
    fs.rmSync(cwd, { recursive: true, force: true });
    cleanup();
  }
}
