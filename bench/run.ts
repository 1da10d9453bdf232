/**
 * Runs edgeplug's benchmarks and prints one JSON document on stdout:
 * the machine, then each benchmark's result under its name. Progress goes to
 * stderr.
 *
 *   npm run bench              every benchmark
 *   npm run bench -- startup   only the named ones
 *
 * A benchmark is a module exporting `run(): Promise<object>`; add it to
 * BENCHMARKS under its name.
 */
import os from "node:os";
import process from "node:process";

interface Benchmark {
  run(): Promise<object>;
}

const BENCHMARKS: Record<string, () => Promise<Benchmark>> = {
  startup: () => import("./startup.ts"),
  registration: () => import("./registration.ts"),
  unary: () => import("./unary.ts"),
  api: () => import("./api.ts"),
  devices: () => import("./devices.ts"),
  "device-list": () => import("./device-list.ts"),
  "device-profile": () => import("./device-profile.ts"),
  policy: () => import("./policy.ts"),
  watcher: () => import("./watcher.ts"),
  targets: () => import("./targets.ts"),
  authority: () => import("./authority.ts"),
  wear: () => import("./checkpoint-wear.ts"),
  owners: () => import("./owner-lifetimes.ts"),
  fleet: () => import("./fleet.ts"),
  "fleet-status": () => import("./fleet-status.ts"),
};

async function main(): Promise<number> {
  const requested = process.argv.slice(2);
  const unknown = requested.filter((name) => !Object.hasOwn(BENCHMARKS, name));
  if (unknown.length > 0) {
    process.stderr.write(`bench: unknown benchmark ${unknown.join(", ")}; known: ${Object.keys(BENCHMARKS).join(", ")}\n`);
    return 2;
  }
  const names = requested.length > 0 ? requested : Object.keys(BENCHMARKS);
  const startedAt = new Date().toISOString();
  const cpus = os.cpus();
  const results: Record<string, object> = {};
  for (const name of names) {
    process.stderr.write(`bench: ${name}...\n`);
    const benchmark = await BENCHMARKS[name]!();
    results[name] = await benchmark.run();
  }
  const report = {
    date: startedAt,
    machine: {
      cpuModel: cpus[0]?.model ?? "unknown",
      cpuCount: cpus.length,
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      platform: `${process.platform}-${process.arch}`,
      kernel: os.release(),
      node: process.version,
    },
    results,
  };
  process.stdout.write(JSON.stringify(report, null, 2) + "\n");
  return 0;
}

process.exitCode = await main();
