/**
 * Startup benchmark of the single executable: its size, and the wall time of
 * `dist/edgeplug version` (the smallest command) and of `validate` on
 * config/dev.yaml (YAML + JSON Schema loaded), against `node -e 0` of the
 * very Node binary the executable embeds, measured in the same run with the
 * commands interleaved so machine noise hits them alike. Every process runs
 * with an empty environment from an empty directory, as `env -i` would.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../", import.meta.url));
const executable = path.join(root, "dist", "edgeplug");
const embeddedNode = path.join(root, "node_modules", "node", "bin", "node");
const devPolicy = path.join(root, "config", "dev.yaml");
/** Timed runs per command; BENCH_RUNS overrides (at least 20). */
const RUNS = Math.max(20, Number(process.env.BENCH_RUNS) || 30);
const WARMUP_RUNS = 3;

interface Stats {
  runs: number;
  minMs: number;
  p50Ms: number;
  p90Ms: number;
  meanMs: number;
}

function timeOnce(command: string[], cwd: string): number {
  const started = performance.now();
  const result = spawnSync(command[0]!, command.slice(1), { cwd, env: {}, stdio: ["ignore", "ignore", "pipe"] });
  const elapsed = performance.now() - started;
  if (result.status !== 0) {
    throw new Error(`${command.join(" ")} exited ${result.status}: ${result.stderr?.toString() ?? ""}`);
  }
  return elapsed;
}

function percentile(sorted: number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
}

function summarize(samples: number[]): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  const round = (ms: number) => Math.round(ms * 10) / 10;
  return {
    runs: samples.length,
    minMs: round(sorted[0]!),
    p50Ms: round(percentile(sorted, 0.5)),
    p90Ms: round(percentile(sorted, 0.9)),
    meanMs: round(samples.reduce((sum, ms) => sum + ms, 0) / samples.length),
  };
}

/** Size and start-up times of dist/edgeplug; throws when it has not been built. */
export async function run(): Promise<object> {
  if (!fs.existsSync(executable)) throw new Error(`${executable} is missing: run npm run build first`);
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ep-bench-"));
  try {
    const commands: Record<string, string[]> = {
      "edgeplug version": [executable, "version"],
      "node -e 0": [embeddedNode, "-e", "0"],
      "edgeplug validate": [executable, "validate", "--config", devPolicy],
    };
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(commands).map((name) => [name, []]));
    for (let i = 0; i < WARMUP_RUNS + RUNS; i++) {
      for (const [name, command] of Object.entries(commands)) {
        const ms = timeOnce(command, cwd);
        if (i >= WARMUP_RUNS) samples[name]!.push(ms);
      }
    }
    const stats = Object.fromEntries(Object.entries(samples).map(([name, list]) => [name, summarize(list)]));
    const version = stats["edgeplug version"]!;
    const bare = stats["node -e 0"]!;
    const bytes = fs.statSync(executable).size;
    return {
      executable: path.relative(root, executable),
      sizeBytes: bytes,
      sizeMiB: Math.round((bytes / 2 ** 20) * 10) / 10,
      embeddedNode: spawnSync(embeddedNode, ["--version"], { encoding: "utf8" }).stdout.trim(),
      wallTime: stats,
      versionOverNodeP50Ms: Math.round((version.p50Ms - bare.p50Ms) * 10) / 10,
      versionOverNodeP50Ratio: Math.round((version.p50Ms / bare.p50Ms) * 100) / 100,
    };
  } finally {
    fs.rmSync(cwd, { recursive: true, force: true });
  }
}
