/**
 * Unary call cost of the plugin client (src/rpc/unix-channel.ts): sequential
 * GetInfo + NotifyRegistrationStatus pairs against a @grpc/grpc-js plugin in
 * a child process, in two shapes:
 *
 * - `freshChannel`: each pair dials its own channel and closes it, as one
 *   registration attempt does;
 * - `sharedChannel`: every pair goes over one open channel (the calls alone).
 *
 * Reports wall time and this process's CPU (user + system) per pair. With
 * BENCH_UNARY_BASELINE=/path/to/unix-channel.ts another implementation of
 * dialUnix is measured in the same run, in alternating blocks against the
 * same plugin, so that the two are compared under the same conditions.
 *
 * Env: BENCH_UNARY_PAIRS (pairs per shape and implementation, default 2000),
 * BENCH_UNARY_BASELINE (optional module path, see above).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createClient } from "@connectrpc/connect";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import type { dialUnix as DialUnix } from "../src/rpc/unix-channel.ts";
import { spawnRegistrationPlugin } from "../test/support/grpc-peers.ts";
import { makeShortTempDir } from "../test/support/temp-dir.ts";
import { roundMs, summarize } from "./support/stats.ts";

const PAIRS = Math.max(100, Number(process.env.BENCH_UNARY_PAIRS) || 2000);
/** Each shape is measured in this many alternating blocks per implementation, so drift hits both alike. */
const BLOCKS = 4;
const WARMUP_PAIRS = 300;
const CALL_TIMEOUT_MS = 5000;

type Shape = "freshChannel" | "sharedChannel";

interface Implementation {
  name: string;
  source: string;
  dialUnix: typeof DialUnix;
}

interface Tally {
  latencies: number[];
  cpuMicros: number;
  wallMs: number;
}

function progress(message: string): void {
  process.stderr.write(`unary: ${message}\n`);
}

async function loadImplementations(): Promise<Implementation[]> {
  const current = path.resolve(import.meta.dirname, "../src/rpc/unix-channel.ts");
  const implementations: Implementation[] = [
    { name: "current", source: current, dialUnix: (await import(current)).dialUnix as typeof DialUnix },
  ];
  const baseline = process.env.BENCH_UNARY_BASELINE;
  if (baseline) {
    const source = path.resolve(baseline);
    if (!fs.existsSync(source)) throw new Error(`BENCH_UNARY_BASELINE=${baseline}: no such file`);
    implementations.unshift({ name: "baseline", source, dialUnix: (await import(source)).dialUnix as typeof DialUnix });
  }
  return implementations;
}

/** One GetInfo + NotifyRegistrationStatus(true), as the registration sequence makes them. */
async function pair(client: ReturnType<typeof createClient<typeof Registration>>): Promise<void> {
  const info = await client.getInfo({}, { timeoutMs: CALL_TIMEOUT_MS });
  if (info.name !== "bench") throw new Error(`GetInfo answered name ${JSON.stringify(info.name)}`);
  await client.notifyRegistrationStatus({ pluginRegistered: true, error: "" }, { timeoutMs: CALL_TIMEOUT_MS });
}

async function runBlock(implementation: Implementation, shape: Shape, socketPath: string, count: number, tally: Tally): Promise<void> {
  const shared = shape === "sharedChannel" ? implementation.dialUnix(socketPath) : null;
  const sharedClient = shared ? createClient(Registration, shared.transport) : null;
  try {
    const cpuBefore = process.cpuUsage();
    const blockStarted = performance.now();
    for (let i = 0; i < count; i++) {
      const started = performance.now();
      if (sharedClient) {
        await pair(sharedClient);
      } else {
        const channel = implementation.dialUnix(socketPath);
        try {
          await pair(createClient(Registration, channel.transport));
        } finally {
          channel.close();
          await channel.closed;
        }
      }
      tally.latencies.push(performance.now() - started);
    }
    tally.wallMs += performance.now() - blockStarted;
    const cpu = process.cpuUsage(cpuBefore);
    tally.cpuMicros += cpu.user + cpu.system;
  } finally {
    shared?.close();
    await shared?.closed;
  }
}

function report(tally: Tally) {
  const pairs = tally.latencies.length;
  return {
    pairs,
    wallMsPerPair: Math.round((tally.wallMs / pairs) * 1000) / 1000,
    cpuMsPerPair: Math.round((tally.cpuMicros / 1000 / pairs) * 1000) / 1000,
    pairLatencyMs: summarize(tally.latencies),
  };
}

/** Runs the benchmark; see the module comment. */
export async function run(): Promise<object> {
  const implementations = await loadImplementations();
  const dir = makeShortTempDir();
  const plugin = await spawnRegistrationPlugin(path.join(dir, "bench.sock"), { type: "acme.io/Sensor", name: "bench", supported_versions: ["v1"] });
  try {
    const shapes: Shape[] = ["freshChannel", "sharedChannel"];
    const results: Record<string, Record<Shape, object>> = {};
    for (const shape of shapes) {
      progress(`${shape}: warm-up (${WARMUP_PAIRS} pairs per implementation)`);
      for (const implementation of implementations) {
        await runBlock(implementation, shape, plugin.socketPath, WARMUP_PAIRS, { latencies: [], cpuMicros: 0, wallMs: 0 });
      }
      const tallies = new Map(implementations.map((implementation) => [implementation, { latencies: [], cpuMicros: 0, wallMs: 0 } as Tally]));
      const perBlock = Math.ceil(PAIRS / BLOCKS);
      for (let block = 0; block < BLOCKS; block++) {
        progress(`${shape}: block ${block + 1}/${BLOCKS} (${perBlock} pairs per implementation)`);
        for (const implementation of block % 2 === 0 ? implementations : [...implementations].reverse()) {
          await runBlock(implementation, shape, plugin.socketPath, perBlock, tallies.get(implementation)!);
        }
      }
      for (const [implementation, tally] of tallies) {
        (results[implementation.name] ??= {} as Record<Shape, object>)[shape] = report(tally);
      }
    }
    const comparison: Record<string, object> = {};
    const [baseline, current] = implementations.length === 2 ? implementations : [undefined, implementations[0]];
    if (baseline && current) {
      for (const shape of shapes) {
        const before = results[baseline.name]![shape] as ReturnType<typeof report>;
        const after = results[current.name]![shape] as ReturnType<typeof report>;
        comparison[shape] = {
          cpuPerPairAfterOverBefore: roundMs(after.cpuMsPerPair / before.cpuMsPerPair),
          wallPerPairAfterOverBefore: roundMs(after.wallMsPerPair / before.wallMsPerPair),
        };
      }
    }
    return {
      what: "sequential GetInfo + NotifyRegistrationStatus pairs from this process to a @grpc/grpc-js plugin in a child process",
      cpu: "process.cpuUsage() of this process (user + system) over the measured blocks, divided by the pairs",
      pairsPerShape: PAIRS,
      blocks: BLOCKS,
      warmupPairs: WARMUP_PAIRS,
      implementations: Object.fromEntries(implementations.map((implementation) => [implementation.name, implementation.source])),
      results,
      ...(Object.keys(comparison).length > 0 ? { comparison } : {}),
    };
  } finally {
    await plugin.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
