/**
 * Size and start-up time of each target's executable (`npm run build --
 * --target T` writes dist/edgeplug-T): `version` (the smallest command) and
 * `validate` of config/default.yaml (YAML and the policy schema loaded),
 * interleaved across executables so machine noise hits them alike, each run
 * with an empty environment from an empty directory. An executable for
 * another architecture runs under qemu user emulation (scripts/targets.ts):
 * its times measure the emulator, not the target CPU, and are labelled so.
 *
 *   npm run bench -- targets
 *   BENCH_EXECUTABLES=arm64-nocache=dist/x,... npm run bench -- targets   (label=path[@target] pairs instead)
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { elfMachine, type Runner, runnerFor, type Target, TARGETS } from "../scripts/targets.ts";

const root = fileURLToPath(new URL("../", import.meta.url));
const policy = path.join(root, "config", "default.yaml");
/** Timed runs per command; BENCH_RUNS overrides (at least 5). */
const RUNS = Math.max(5, Number(process.env.BENCH_RUNS) || 15);
const WARMUP_RUNS = 2;

interface Subject {
  label: string;
  file: string;
  target: Target;
  runner: Runner;
}

function subjects(): Subject[] {
  const listed = process.env.BENCH_EXECUTABLES;
  const pairs: Array<[string, string]> = listed
    ? listed.split(",").map((pair) => {
      const [label, file] = pair.split("=");
      if (!label || !file) throw new Error(`BENCH_EXECUTABLES: expected label=path, got ${JSON.stringify(pair)}`);
      return [label, path.resolve(root, file)];
    })
    : TARGETS.map((target): [string, string] => [target.name, path.join(root, "dist", `edgeplug-${target.name}`)]).filter(([, file]) => fs.existsSync(file));
  if (pairs.length === 0) throw new Error("no dist/edgeplug-TARGET: run npm run build -- --target linux-x64 (and linux-arm64) first");
  return pairs.map(([label, file]) => {
    const machine = elfMachine(file);
    const target = TARGETS.find((candidate) => candidate.elfMachine === machine);
    if (!target) throw new Error(`${file}: not an executable of a known target (ELF machine ${machine})`);
    const runner = runnerFor(target);
    if (!runner) throw new Error(`${file} (${target.name}) cannot run here: no qemu for it`);
    return { label, file, target, runner };
  });
}

function timeOnce(subject: Subject, args: string[], cwd: string): number {
  const [command, ...prefix] = [...subject.runner.prefix, subject.file];
  const started = performance.now();
  const result = spawnSync(command!, [...prefix, ...args], { cwd, env: {}, stdio: ["ignore", "ignore", "pipe"] });
  const elapsed = performance.now() - started;
  if (result.status !== 0) throw new Error(`${subject.label} ${args.join(" ")} exited ${result.status}: ${result.stderr?.toString() ?? ""}`);
  return elapsed;
}

function stats(samples: number[]) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (fraction: number) => sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
  const round = (ms: number) => Math.round(ms * 10) / 10;
  return { runs: samples.length, minMs: round(sorted[0]!), p50Ms: round(at(0.5)), p90Ms: round(at(0.9)) };
}

/** Size and start-up of every target executable found (or listed in BENCH_EXECUTABLES). */
export async function run(): Promise<object> {
  const list = subjects();
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ep-bench-targets-"));
  const commands: Array<[name: string, args: string[]]> = [
    ["version", ["version"]],
    ["validate", ["validate", "--config", policy]],
  ];
  const samples = new Map<string, number[]>();
  try {
    for (let round = 0; round < WARMUP_RUNS + RUNS; round++) {
      for (const subject of list) {
        for (const [name, args] of commands) {
          const elapsed = timeOnce(subject, args, cwd);
          if (round < WARMUP_RUNS) continue;
          const key = `${subject.label} ${name}`;
          samples.set(key, [...(samples.get(key) ?? []), elapsed]);
        }
      }
    }
  } finally {
    fs.rmSync(cwd, { recursive: true, force: true });
  }
  return {
    loadAverage: os.loadavg().map((load) => Math.round(load * 100) / 100),
    executables: list.map((subject) => ({
      label: subject.label,
      target: subject.target.name,
      file: path.relative(root, subject.file),
      bytes: fs.statSync(subject.file).size,
      runsUnder: subject.runner.prefix.length === 0 ? "native" : `${subject.runner.description} (emulated: not the target CPU's speed)`,
      ...Object.fromEntries(commands.map(([name]) => [name, stats(samples.get(`${subject.label} ${name}`)!)])),
    })),
  };
}
