/**
 * Where the agent's CPU goes on the device path, workload by workload: the
 * profiles behind the rows of the side-by-side table (docs/performance.md,
 * "Devices beside the kubelet's device manager").
 *
 * Each workload runs twice on a fresh dist/edgeplug, with the same plugins as
 * the side-by-side bench (support/side-plugins.ts, a process of its own):
 * once plain, for the agent's CPU per operation (schedstat, every thread) and
 * the latency, and once under V8's CPU profiler (`--cpu-prof`, 100 µs), whose
 * samples inside the workload's window are summed by where the code comes
 * from: edgeplug's own folders, Connect, protobuf-es, Node's JavaScript, the
 * garbage collector, native calls. The profiler slows the agent, so its run
 * gives shares, not times.
 *   - register: a 16-device plugin registers, is seen, and goes, `REGISTRATIONS` times
 *     (the latency: `Register` -> seen);
 *   - health: one device turns unhealthy and back, `HEALTH_FLIPS` times (the
 *     latency: unhealthy -> seen);
 *   - allocate: allocate 2 of 16 and release, `ALLOCATIONS` times;
 *   - idle: 10 plugins x 100 devices, 20 s to settle, then a window of
 *     `IDLE_MS` on the shipped 10 s resync; beside it, the Node binary the
 *     executable embeds waking every 10 s for one lstat (the floor of a wakeup).
 *     The profiler's own sampling wakes the agent, so the idle profile counts
 *     only the JavaScript each resync runs.
 *
 * Env: BENCH_PROFILE_KEEP=DIR keeps the .cpuprofile files there.
 */
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { shortTempDir } from "../test/support/agent-process.ts";
import { startPluginHost } from "./support/devices-side-by-side.ts";
import { contextSwitches, cpuNanoseconds } from "./support/proc.ts";
import { type SideAgent, startEdgeplugSide } from "./support/side-agents.ts";
import { percentile, roundMs } from "./support/stats.ts";

const REGISTRATIONS = 60;
const HEALTH_FLIPS = 100;
const ALLOCATIONS = 300;
const IDLE_SETTLE_MS = 20_000;
const IDLE_MS = 40_000;
const RESYNC_MS = 10_000;
const TIMEOUT_MS = 30_000;
/**
 * As the side-by-side bench: a pause after each operation, so that a
 * resource's events (8 back to back, then 100 a second) are never what the
 * health flips wait for.
 */
const PAUSE_AFTER_REGISTRATION_MS = 50;
const PAUSE_AFTER_HEALTH_FLIP_MS = 20;
const PROFILE_INTERVAL_US = 100;
const BUNDLE = fileURLToPath(new URL("../dist/build-linux-x64/edgeplug.cjs", import.meta.url));
const EMBEDDED_NODE = fileURLToPath(new URL("../node_modules/node/bin/node", import.meta.url));

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const p50 = (samples: number[]) => roundMs(percentile([...samples].sort((a, b) => a - b), 0.5));

function progress(message: string): void {
  process.stderr.write(`device-profile: ${message}\n`);
}

type Host = ReturnType<typeof startPluginHost>;
interface Workload {
  name: string;
  operation: string;
  /** Sets up what the timed part needs (not measured). */
  prepare(agent: SideAgent, host: Host): Promise<void>;
  /** The timed part: one latency per operation. */
  run(agent: SideAgent, host: Host): Promise<number[]>;
}

const RESOURCE = "bench.io/profiled";
const visible = (n: number) => (view: { capacity: number; healthy: number } | undefined) => view?.capacity === n && view.healthy === n;
const socketIn = (agent: SideAgent, name: string) => path.join(path.dirname(agent.registrationSocket), `${name}.sock`);

function startPlugin(agent: SideAgent, host: Host, name: string, prefix: string): Promise<number | undefined> {
  return host.ask({ op: "start", name, socketPath: socketIn(agent, name), registrationSocket: agent.registrationSocket, resource: RESOURCE, count: 16, prefix });
}

/** Starts a 16-device plugin and waits until the agent shows its devices. */
async function pluginSeen(agent: SideAgent, host: Host, name: string, prefix: string): Promise<void> {
  const seen = agent.until(RESOURCE, visible(16), TIMEOUT_MS);
  await startPlugin(agent, host, name, prefix);
  await seen;
}

const WORKLOADS: Workload[] = [
  {
    name: "register",
    operation: "registration (Register -> 16 devices seen, then the plugin goes)",
    prepare: async () => {},
    async run(agent, host) {
      const samples: number[] = [];
      for (let i = 0; i < REGISTRATIONS; i++) {
        const seen = agent.until(RESOURCE, visible(16), TIMEOUT_MS);
        const at = (await startPlugin(agent, host, `reg${i}`, `r${i}-`))!;
        samples.push((await seen) - at);
        await host.ask({ op: "stop", name: `reg${i}` });
        await agent.until(RESOURCE, (view) => view === undefined || view.healthy !== 16, TIMEOUT_MS);
        await settle(PAUSE_AFTER_REGISTRATION_MS);
      }
      return samples;
    },
  },
  {
    name: "health",
    operation: "health change (one device unhealthy -> seen, and back)",
    async prepare(agent, host) {
      await pluginSeen(agent, host, "health", "h-");
    },
    async run(agent, host) {
      const samples: number[] = [];
      for (let i = 0; i < HEALTH_FLIPS; i++) {
        const seen = agent.until(RESOURCE, (view) => view?.healthy === 15 && view.capacity === 16, TIMEOUT_MS);
        const at = (await host.ask({ op: "send", name: "health", count: 16, prefix: "h-", unhealthy: i % 16 }))!;
        samples.push((await seen) - at);
        const back = agent.until(RESOURCE, visible(16), TIMEOUT_MS);
        await host.ask({ op: "send", name: "health", count: 16, prefix: "h-" });
        await back;
        await settle(PAUSE_AFTER_HEALTH_FLIP_MS);
      }
      return samples;
    },
  },
  {
    name: "allocate",
    operation: "allocate 2 of 16 and release (one pair)",
    async prepare(agent, host) {
      await pluginSeen(agent, host, "alloc", "a-");
      for (let i = 0; i < 5; i++) {
        await agent.allocate(`warm-${i}`, RESOURCE, 2);
        await agent.release(`warm-${i}`);
      }
    },
    async run(agent) {
      const samples: number[] = [];
      for (let i = 0; i < ALLOCATIONS; i++) {
        const startedAt = performance.now();
        await agent.allocate(`owner-${i}`, RESOURCE, 2);
        await agent.release(`owner-${i}`);
        samples.push(performance.now() - startedAt);
      }
      return samples;
    },
  },
];

/** One run of `workload` on a fresh agent: its operations' latencies, the agent's CPU and switches over them, and how long the stop took. */
async function runOnce(workload: Workload, nodeOptions?: string) {
  const { dir, cleanup } = shortTempDir("epp-");
  const host = startPluginHost();
  let agent: SideAgent | undefined;
  try {
    agent = await startEdgeplugSide(path.join(dir, "a"), { count: 0 }, { nodeOptions });
    await workload.prepare(agent, host);
    const cpuFrom = cpuNanoseconds(agent.pid);
    const switchesFrom = contextSwitches(agent.pid);
    const startedAt = performance.now();
    const samples = await workload.run(agent, host);
    const wallMs = performance.now() - startedAt;
    const cpuMs = (cpuNanoseconds(agent.pid) - cpuFrom) / 1e6;
    const switches = contextSwitches(agent.pid) - switchesFrom;
    await host.close();
    const stopFrom = performance.now();
    const stopping = agent;
    agent = undefined;
    await stopping.stop();
    const stopMs = performance.now() - stopFrom;
    return { samples, wallMs, cpuMs, switches, stopMs };
  } finally {
    await host.close();
    await agent?.stop();
    cleanup();
  }
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The bundle's module markers (`// src/...`, `// .../node_modules/...`), by line, so a bundle line names its source file. */
function bundleModules(bundle: string): { lines: number[]; files: string[] } {
  const lines: number[] = [];
  const files: string[] = [];
  fs.readFileSync(bundle, "utf8").split("\n").forEach((line, index) => {
    const marker = /^\s*\/\/ (\S+\.(?:ts|js|mjs|cjs))$/.exec(line);
    if (!marker) return;
    lines.push(index);
    files.push(marker[1]!.replace(/^.*?(?=node_modules\/)/, ""));
  });
  return { lines, files };
}

/** Where a sampled frame's code comes from, in the few groups the docs speak of. */
function groupOf(frame: CpuProfile["nodes"][number]["callFrame"], modules: { lines: number[]; files: string[] }): string {
  const { functionName, url, lineNumber } = frame;
  if (functionName === "(garbage collector)") return "garbage collector";
  if (functionName === "(program)") return "V8 and native, unattributed (program)";
  if (url === "") return "native calls (file system, sockets)";
  if (url.endsWith("edgeplug.cjs")) {
    let low = 0;
    let high = modules.lines.length - 1;
    let found = -1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      if (modules.lines[middle]! <= lineNumber) {
        found = middle;
        low = middle + 1;
      } else high = middle - 1;
    }
    const file = found < 0 ? "" : modules.files[found]!;
    if (file.includes("node_modules/@connectrpc/connect-node/")) return "connect-node";
    if (file.includes("node_modules/@connectrpc/connect/")) return "connect";
    if (file.includes("node_modules/@bufbuild/protobuf/")) return "protobuf-es";
    if (file.includes("node_modules/")) return "other libraries";
    if (file.startsWith("src/gen/")) return "edgeplug: generated code";
    const folder = /^src\/([^/]+)\//.exec(file)?.[1];
    return folder ? `edgeplug: src/${folder}` : "edgeplug: other";
  }
  return "Node's JavaScript (http, http2, streams, events, timers)";
}

/** The profile's non-idle sample time inside [end - stopMs - windowMs, end - stopMs], by group, in ms and share. */
function profileShares(profile: CpuProfile, windowMs: number, stopMs: number, modules: { lines: number[]; files: string[] }) {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const until = profile.endTime - stopMs * 1000;
  const from = until - windowMs * 1000;
  const groups = new Map<string, number>();
  let at = profile.startTime;
  let busyUs = 0;
  profile.samples.forEach((id, index) => {
    const delta = profile.timeDeltas[index]!;
    at += delta;
    if (at < from || at > until) return;
    const frame = byId.get(id)!.callFrame;
    if (frame.functionName === "(idle)") return;
    busyUs += delta;
    const group = groupOf(frame, modules);
    groups.set(group, (groups.get(group) ?? 0) + delta);
  });
  const shares = [...groups].sort((a, b) => b[1] - a[1]).map(([group, us]) => ({ group, ms: roundMs(us / 1000), percent: Math.round((us / busyUs) * 1000) / 10 }));
  return { busyMs: roundMs(busyUs / 1000), shares };
}

function readProfile(dir: string): CpuProfile {
  const files = fs.readdirSync(dir).filter((name) => name.endsWith(".cpuprofile"));
  if (files.length !== 1) throw new Error(`expected one CPU profile in ${dir}, found ${files.length}`);
  const file = path.join(dir, files[0]!);
  const keep = process.env.BENCH_PROFILE_KEEP;
  if (keep) fs.copyFileSync(file, path.join(keep, `${path.basename(dir)}.cpuprofile`));
  return JSON.parse(fs.readFileSync(file, "utf8")) as CpuProfile;
}

async function profiled<T>(name: string, run: (nodeOptions: string) => Promise<T>): Promise<{ result: T; profile: CpuProfile }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `edgeplug-profile-${name}-`));
  try {
    const result = await run(`--cpu-prof --cpu-prof-dir=${dir} --cpu-prof-interval=${PROFILE_INTERVAL_US}`);
    return { result, profile: readProfile(dir) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The idle agent: 10 plugins x 100 devices, settled, then the window (the run: no operations, only the window's CPU). */
const IDLE: Workload = {
  name: "idle",
  operation: `one resync (every ${RESYNC_MS / 1000} s, the shipped default), 10 plugins x 100 devices connected`,
  async prepare(agent, host) {
    for (let i = 0; i < 10; i++) {
      const resource = `bench.io/idle${i}`;
      const seen = agent.until(resource, (view) => view?.healthy === 100, TIMEOUT_MS);
      await host.ask({ op: "start", name: `idle${i}`, socketPath: socketIn(agent, `idle${i}`), registrationSocket: agent.registrationSocket, resource, count: 100, prefix: `i${i}-` });
      await seen;
    }
    await settle(IDLE_SETTLE_MS);
  },
  async run() {
    await settle(IDLE_MS);
    return [];
  },
};

/** The embedded Node binary waking every RESYNC_MS for one lstat, nothing else: what a wakeup costs any Node process here. */
async function nodeWakeFloor(windowMs: number) {
  const child = spawn(EMBEDDED_NODE, ["-e", `setInterval(() => require("node:fs").lstatSync("/"), ${RESYNC_MS}); process.stdout.write("ready\\n");`], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once("data", () => resolve());
      child.once("exit", (code) => reject(new Error(`the Node floor process exited (${code})`)));
    });
    await settle(IDLE_SETTLE_MS);
    const cpuFrom = cpuNanoseconds(child.pid!);
    const startedAt = performance.now();
    await settle(windowMs);
    const wallMs = performance.now() - startedAt;
    return { cpuMsPerWake: roundMs((cpuNanoseconds(child.pid!) - cpuFrom) / 1e6 / (wallMs / RESYNC_MS)) };
  } finally {
    child.kill("SIGKILL");
  }
}

export async function run(): Promise<object> {
  if (!fs.existsSync(BUNDLE)) throw new Error(`no ${BUNDLE}: run npm run build first`);
  const modules = bundleModules(BUNDLE);
  const workloads: Record<string, object> = {};
  for (const workload of WORKLOADS) {
    progress(`${workload.name}: plain`);
    const plain = await runOnce(workload);
    progress(`${workload.name}: under the CPU profiler`);
    const { result, profile } = await profiled(workload.name, (nodeOptions) => runOnce(workload, nodeOptions));
    const operations = plain.samples.length;
    const { busyMs, shares } = profileShares(profile, result.wallMs, result.stopMs, modules);
    workloads[workload.name] = {
      operation: workload.operation,
      operations,
      p50Ms: p50(plain.samples),
      agentCpuMsPerOperation: roundMs(plain.cpuMs / operations),
      contextSwitchesPerOperation: Math.round((plain.switches / operations) * 10) / 10,
      profiledMainThreadMsPerOperation: roundMs(busyMs / operations),
      shares,
    };
  }
  progress(`idle: plain, and the Node floor beside it (${Math.round((IDLE_SETTLE_MS + IDLE_MS) / 1000)} s)`);
  const [idle, floor] = await Promise.all([runOnce(IDLE), nodeWakeFloor(IDLE_MS)]);
  progress("idle: under the CPU profiler");
  const { result: idleProfiled, profile } = await profiled("idle", (nodeOptions) => runOnce(IDLE, nodeOptions));
  const resyncs = idle.wallMs / RESYNC_MS;
  const idleShares = profileShares(profile, idleProfiled.wallMs, idleProfiled.stopMs, modules);
  workloads.idle = {
    operation: IDLE.operation,
    windowMs: Math.round(idle.wallMs),
    cpuPercentOfCore: Math.round((idle.cpuMs / idle.wallMs) * 100 * 1000) / 1000,
    agentCpuMsPerResync: roundMs(idle.cpuMs / resyncs),
    contextSwitchesPerResync: Math.round((idle.switches / resyncs) * 10) / 10,
    profiledJavaScriptMsPerResync: roundMs(idleShares.busyMs / (idleProfiled.wallMs / RESYNC_MS)),
    nodeFloorCpuMsPerWake: floor.cpuMsPerWake,
    shares: idleShares.shares,
  };
  return {
    note:
      "agentCpuMsPerOperation: the plain run's CPU of every agent thread (schedstat) per operation; shares: the profiled run's main-thread samples in the workload's window, by where the code comes from (the profiler slows the agent, so they are shares, not times)",
    workloads,
  };
}
