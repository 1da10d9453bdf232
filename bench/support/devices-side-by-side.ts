/**
 * The devices benchmark beside the kubelet's own device manager
 * (BENCH_KUBELET_DM names its executable; support/side-agents.ts): the same
 * workloads on both agents, one agent at a time, the order alternating over
 * rounds, the same plugins (support/side-plugins.ts, a process of their own)
 * registering on each agent's kubelet.sock. Each round starts the agent
 * afresh on a new directory, then measures in this order:
 *   - idle: 10 plugins x 100 devices registered, then a settling pause (the
 *     work registration leaves behind: V8's memory reducer collects some
 *     seconds after activity, Go's scavenger returns memory), then the
 *     agent's CPU (on-CPU time of all its threads, from schedstat) and its
 *     context switches over a window, and its RSS. edgeplug runs with the
 *     shipped resync (10 s), whose wakeups count;
 *   - Register -> all 16 devices visible (the plugin stamps the call; the bench stamps the sighting);
 *   - one device turning unhealthy in ListAndWatch -> visible;
 *   - allocate 2 of the 16 (request -> answer) and release;
 *   - Register -> visible with 10,000 and with 100,000 devices, then the RSS.
 * Each figure is reported per agent with its spread over rounds, and the
 * ratio kubelet / edgeplug (below 1: edgeplug is slower or costlier).
 *
 * Env: BENCH_SIDE_ROUNDS (default 3), BENCH_SIDE_TRIALS (Register and health
 * trials per round and size, default 10; 100,000 devices take a third of it),
 * BENCH_SIDE_ALLOCATIONS (allocate/release pairs per round, default 100),
 * BENCH_SIDE_IDLE_MS (the idle window, default 60000), BENCH_SIDE_SETTLE_MS
 * (the pause before it, default 20000).
 */
import { type ChildProcess, fork } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { shortTempDir } from "../../test/support/agent-process.ts";
import { contextSwitches, cpuNanoseconds, residentMemory } from "./proc.ts";
import { type ResourceView, type SideAgent, startEdgeplugSide, startKubeletSide } from "./side-agents.ts";
import type { SidePluginAnswer, SidePluginRequest } from "./side-plugins.ts";
import { sharedClockMs } from "./side-plugins.ts";
import { percentile, roundMs } from "./stats.ts";

const envNumber = (name: string, fallback: number, min: number) => Math.max(min, Number(process.env[name]) || fallback);
const ROUNDS = envNumber("BENCH_SIDE_ROUNDS", 3, 1);
const TRIALS = envNumber("BENCH_SIDE_TRIALS", 10, 2);
const ALLOCATIONS = envNumber("BENCH_SIDE_ALLOCATIONS", 100, 5);
const IDLE_MS = envNumber("BENCH_SIDE_IDLE_MS", 60_000, 1000);
const SETTLE_MS = envNumber("BENCH_SIDE_SETTLE_MS", 20_000, 0);
const IDLE_PLUGINS = 10;
const IDLE_DEVICES = 100;
const TIMEOUT_MS = 60_000;
const PLUGIN_HOST = fileURLToPath(new URL("./side-plugins.ts", import.meta.url));

type Kind = SideAgent["kind"];

function progress(message: string): void {
  process.stderr.write(`devices (side by side): ${message}\n`);
}

/** The plugin host child, one per agent run: requests answered in order of their ids. */
export function startPluginHost() {
  const child: ChildProcess = fork(PLUGIN_HOST, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const pending = new Map<number, { resolve: (at: number | undefined) => void; reject: (error: Error) => void }>();
  let nextId = 1;
  child.on("message", (answer: SidePluginAnswer) => {
    const waiter = pending.get(answer.id);
    pending.delete(answer.id);
    if (answer.ok) waiter?.resolve(answer.at);
    else waiter?.reject(new Error(`plugin host: ${answer.error}`));
  });
  child.once("exit", (code) => {
    for (const waiter of pending.values()) waiter.reject(new Error(`plugin host exited (${code})`));
    pending.clear();
  });
  type Body = SidePluginRequest extends infer R ? (R extends SidePluginRequest ? Omit<R, "id"> : never) : never;
  const ask = (body: Body): Promise<number | undefined> =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      child.send({ ...body, id });
    });
  return {
    ask,
    async close() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.disconnect();
      const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(killer);
    },
  };
}

interface RoundFigures {
  /** CPU while registration's aftermath settles (the pause before the idle window), ms. */
  settlingCpuMs: number;
  idleCpuPercentOfCore: number;
  idleContextSwitchesPerMinute: number;
  rssIdleMB: number;
  anonIdleMB: number;
  register16P50Ms: number;
  unhealthyP50Ms: number;
  allocateP50Ms: number;
  releaseP50Ms: number;
  register10kP50Ms: number;
  register100kP50Ms: number;
  rss100kMB: number;
  anon100kMB: number;
}

const p50 = (samples: number[]) => roundMs(percentile([...samples].sort((a, b) => a - b), 0.5));
const mb = (kib: number) => Math.round((kib / 1024) * 10) / 10;
const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One agent's run of every workload, on a fresh directory. */
async function oneRun(kind: Kind, executable: string, refusals: { count: number }): Promise<RoundFigures> {
  const { dir, cleanup } = shortTempDir("eps-");
  const host = startPluginHost();
  let agent: SideAgent | undefined;
  try {
    agent = kind === "edgeplug" ? await startEdgeplugSide(path.join(dir, "a"), refusals) : await startKubeletSide(executable, path.join(dir, "a"));
    const running = agent;
    const pluginDir = path.dirname(running.registrationSocket);
    let sockets = 0;
    const socketFor = (name: string) => path.join(pluginDir, `${name}-${sockets++}.sock`);
    const visible = (n: number) => (view: ResourceView | undefined) => view?.healthy === n && view.capacity === n;
    const gone = (n: number) => (view: ResourceView | undefined) => view === undefined || view.healthy !== n;

    // Idle: 10 plugins x 100 devices, nothing changing.
    for (let i = 0; i < IDLE_PLUGINS; i++) {
      const resource = `bench.io/idle${i}`;
      await host.ask({ op: "start", name: `idle${i}`, socketPath: socketFor(`idle${i}`), registrationSocket: running.registrationSocket, resource, count: IDLE_DEVICES, prefix: `i${i}-` });
      await running.until(resource, visible(IDLE_DEVICES), TIMEOUT_MS);
    }
    const settlingFrom = cpuNanoseconds(running.pid);
    await settle(SETTLE_MS);
    const settlingCpuMs = roundMs((cpuNanoseconds(running.pid) - settlingFrom) / 1e6);
    const cpuAtStart = cpuNanoseconds(running.pid);
    const switchesAtStart = contextSwitches(running.pid);
    const windowStart = performance.now();
    await settle(IDLE_MS);
    const windowMs = performance.now() - windowStart;
    const idleCpuPercentOfCore = Math.round(((cpuNanoseconds(running.pid) - cpuAtStart) / 1e6 / windowMs) * 100 * 1000) / 1000;
    const idleContextSwitchesPerMinute = Math.round(((contextSwitches(running.pid) - switchesAtStart) * 60_000) / windowMs);
    const idleMemory = residentMemory(running.pid);

    /** Register -> all `count` devices visible, `trials` times, each time a new plugin after the last one is gone. */
    const registerTrials = async (count: number, trials: number, keepLast: boolean) => {
      const resource = `bench.io/reg${count}`;
      const samples: number[] = [];
      let previous: string | undefined;
      for (let trial = 0; trial <= trials; trial++) {
        if (previous) {
          await host.ask({ op: "stop", name: previous });
          await running.until(resource, gone(count), TIMEOUT_MS);
        }
        previous = `reg${count}-${trial}`;
        const seen = running.until(resource, visible(count), TIMEOUT_MS);
        const at = (await host.ask({ op: "start", name: previous, socketPath: socketFor(previous), registrationSocket: running.registrationSocket, resource, count, prefix: `r${trial}-` }))!;
        const ms = (await seen) - at;
        if (trial > 0) samples.push(ms);
        await settle(count >= 100_000 ? 2000 : count >= 10_000 ? 300 : 50);
      }
      if (!keepLast && previous) await host.ask({ op: "stop", name: previous });
      return { resource, name: previous!, p50Ms: p50(samples) };
    };

    progress(`${kind}: Register -> 16 devices visible`);
    const with16 = await registerTrials(16, TRIALS, true);

    progress(`${kind}: one device unhealthy -> visible`);
    const unhealthy: number[] = [];
    for (let trial = 0; trial <= TRIALS; trial++) {
      const prefix = `r${TRIALS}-`;
      const seen = running.until(with16.resource, (view) => view?.healthy === 15 && view.capacity === 16, TIMEOUT_MS);
      const at = (await host.ask({ op: "send", name: with16.name, count: 16, prefix, unhealthy: trial % 16 }))!;
      const ms = (await seen) - at;
      if (trial > 0) unhealthy.push(ms);
      const back = running.until(with16.resource, visible(16), TIMEOUT_MS);
      await host.ask({ op: "send", name: with16.name, count: 16, prefix });
      await back;
      await settle(20);
    }

    progress(`${kind}: allocate 2 of 16 and release, ${ALLOCATIONS} times`);
    const allocate: number[] = [];
    const release: number[] = [];
    for (let i = -5; i < ALLOCATIONS; i++) {
      const owner = `0000${kind === "edgeplug" ? "e" : "k"}-pod-${i + 5}`;
      let startedAt = performance.now();
      await running.allocate(owner, with16.resource, 2);
      const allocateMs = performance.now() - startedAt;
      startedAt = performance.now();
      await running.release(owner);
      const releaseMs = performance.now() - startedAt;
      if (i < 0) continue;
      allocate.push(allocateMs);
      release.push(releaseMs);
    }
    await host.ask({ op: "stop", name: with16.name });

    progress(`${kind}: Register -> 10,000 devices visible`);
    const with10k = await registerTrials(10_000, TRIALS, false);
    progress(`${kind}: Register -> 100,000 devices visible`);
    const with100k = await registerTrials(100_000, Math.max(2, Math.round(TRIALS / 3)), true);
    await settle(2000);
    const memory100k = residentMemory(running.pid);
    return {
      settlingCpuMs,
      idleCpuPercentOfCore,
      idleContextSwitchesPerMinute,
      rssIdleMB: mb(idleMemory.rssKiB),
      anonIdleMB: mb(idleMemory.anonKiB),
      register16P50Ms: with16.p50Ms,
      unhealthyP50Ms: p50(unhealthy),
      allocateP50Ms: p50(allocate),
      releaseP50Ms: p50(release),
      register10kP50Ms: with10k.p50Ms,
      register100kP50Ms: with100k.p50Ms,
      rss100kMB: mb(memory100k.rssKiB),
      anon100kMB: mb(memory100k.anonKiB),
    };
  } finally {
    await host.close();
    await agent?.stop();
    cleanup();
  }
}

/** The median of `values` and their spread (min, max). */
function spread(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted.length % 2 === 1 ? sorted[(sorted.length - 1) / 2]! : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2;
  const round = (n: number) => Math.round(n * 1000) / 1000;
  return { median: round(median), min: round(sorted[0]!), max: round(sorted[sorted.length - 1]!), rounds: sorted.map(round) };
}

export async function runSideBySide(executable: string): Promise<object> {
  if (!fs.existsSync(executable)) throw new Error(`BENCH_KUBELET_DM: no file ${executable}`);
  const refusals = { count: 0 };
  const figures: Record<Kind, RoundFigures[]> = { edgeplug: [], kubelet: [] };
  const startedAt = sharedClockMs();
  for (let round = 0; round < ROUNDS; round++) {
    const order: Kind[] = round % 2 === 0 ? ["edgeplug", "kubelet"] : ["kubelet", "edgeplug"];
    for (const kind of order) {
      progress(`round ${round + 1}/${ROUNDS}: ${kind}`);
      figures[kind].push(await oneRun(kind, executable, refusals));
    }
  }
  const rows: Record<string, object> = {};
  for (const key of Object.keys(figures.edgeplug[0]!) as (keyof RoundFigures)[]) {
    const edgeplug = figures.edgeplug.map((f) => f[key]);
    const kubelet = figures.kubelet.map((f) => f[key]);
    // Per round, the two runs next to each other: the ratio's spread is that of these pairs.
    const ratios = edgeplug.map((e, i) => (e === 0 ? null : kubelet[i]! / e)).filter((r): r is number => r !== null);
    rows[key] = { edgeplug: spread(edgeplug), kubelet: spread(kubelet), kubeletOverEdgeplug: ratios.length > 0 ? spread(ratios) : null };
  }
  return {
    peer: executable,
    rounds: ROUNDS,
    trialsPerRound: TRIALS,
    allocationsPerRound: ALLOCATIONS,
    idleWindowMs: IDLE_MS,
    settleBeforeIdleMs: SETTLE_MS,
    edgeplugRateLimitedAttempts: refusals.count,
    minutes: Math.round((sharedClockMs() - startedAt) / 600) / 100,
    note: "ratio = kubelet / edgeplug per round (below 1: edgeplug slower or costlier); median, min, max over rounds",
    figures: rows,
  };
}
