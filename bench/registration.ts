/**
 * Registration benchmark of the built daemon (dist/edgeplug run): how long
 * from a plugin's socket listening to NotifyRegistrationStatus(true) reaching
 * it, for one socket at a time, 100 at once and 1000 at once; the daemon's
 * descriptors after 1000 registrations; and its idle CPU, RSS and
 * descriptors with 100 registered plugins.
 *
 * The plugins are @grpc/grpc-js servers in a child process of their own
 * (support/plugin-host.ts), which takes every timestamp with its own clock;
 * the daemon is another process; this one only orchestrates. The plugin type
 * is `acme.io/Sensor`, a generic type declared in the policy.
 *
 * Env: BENCH_TRIALS (single-socket trials, at least 50), BENCH_IDLE_MS (the
 * idle window, 60 s by default; shorter only for trying the bench out).
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import {
  openDescriptors,
  requireBinary,
  shortTempDir,
  startEdgeplug,
  writePolicy,
  type AgentProcess,
  type TestPolicyFile,
} from "../test/support/agent-process.ts";
import { startPluginHost, type PluginHost } from "./support/plugin-host-client.ts";
import type { PluginFailure, PluginTimeline } from "./support/plugin-host.ts";
import { clockTicksPerSecond, cpuTicks, residentKiB } from "./support/proc.ts";
import { roundMs, summarize } from "./support/stats.ts";

const TRIALS = Math.max(50, Number(process.env.BENCH_TRIALS) || 60);
/** Single-socket trials run first and left out of the statistics (JIT warm-up on both sides). */
const WARMUP_TRIALS = 5;
const BURST_SOCKETS = 100;
const LARGE_BURST_SOCKETS = 1000;
const IDLE_PLUGINS = 100;
const IDLE_WINDOW_MS = Number(process.env.BENCH_IDLE_MS) || 60_000;
/** Lets the registration burst's garbage be collected before the idle window opens. */
const IDLE_SETTLE_MS = 2000;
const MAX_PLUGINS = 2048;
/**
 * How long a plugin waits to be notified registered before it counts as
 * never registered: well past one default backoff (500 ms) after a stale
 * first attempt, short enough that the bench still ends in 3 minutes.
 */
const SINGLE_TIMEOUT_MS = 3000;
const BURST_TIMEOUT_MS = 10_000;
const LARGE_BURST_TIMEOUT_MS = 20_000;
/** Part 4 runs with the default resync (10 s), which retries whatever the backoff timer missed. */
const IDLE_REGISTRATION_TIMEOUT_MS = 15_000;

const TARGET_SINGLE_P50_MS = 5;
const TARGET_BURST_TOTAL_MS = 150;
const TARGET_IDLE_CPU_PERCENT = 0.2;
/** "Near the idle baseline": registration connections closed, so far fewer than one descriptor per plugin left. */
const DESCRIPTOR_GROWTH_LIMIT = 50;

/** Only resync differs from the defaults (backoff 500ms..2m2s, timeouts 10s/1s/5s), as a deployment would run. */
const EVENT_DRIVEN_RECONCILE = "  resync: 1h";
const DEFAULT_RECONCILE = "  resync: 10s";
const SECURITY = `  maxPlugins: ${MAX_PLUGINS}`;

function progress(message: string): void {
  process.stderr.write(`registration: ${message}\n`);
}

interface RunningAgent {
  process: AgentProcess;
  policy: TestPolicyFile;
  pid: number;
  /** SIGTERM, then SIGKILL after 3 s; resolves with the exit code (null when killed). */
  stop(): Promise<number | null>;
}

async function startAgent(dir: string, reconcile: string): Promise<RunningAgent> {
  fs.mkdirSync(dir);
  const policy = writePolicy(dir, { reconcile, security: SECURITY });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  let stopping: Promise<number | null> | null = null;
  const running: RunningAgent = {
    process: agent,
    policy,
    pid: agent.child.pid!,
    stop() {
      stopping ??= (async () => {
        if (agent.child.exitCode !== null || agent.child.signalCode !== null) return (await agent.exited).code;
        agent.child.kill("SIGTERM");
        const killer = setTimeout(() => agent.child.kill("SIGKILL"), 3000);
        const { code } = await agent.exited;
        clearTimeout(killer);
        return code;
      })();
      return stopping;
    },
  };
  try {
    await agent.waitForLog("edgeplug running");
  } catch (error) {
    await running.stop();
    throw error;
  }
  return running;
}

/**
 * Resolves once the agent's log records satisfy `done` (re-checked on each
 * stderr chunk); rejects after `timeoutMs`, listing what it did log.
 */
function waitForLogs(
  agent: AgentProcess,
  what: string,
  done: (records: Array<Record<string, unknown>>) => boolean,
  timeoutMs = 10_000,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const stderr = agent.child.stderr!;
    const check = () => {
      if (!done(agent.logs())) return;
      finish();
      resolve();
    };
    const timer = setTimeout(() => {
      finish();
      const tally: Record<string, number> = {};
      for (const record of agent.logs()) tally[String(record.msg)] = (tally[String(record.msg)] ?? 0) + 1;
      reject(new Error(`timed out after ${timeoutMs} ms waiting for the agent to log ${what} (it logged ${JSON.stringify(tally)})`));
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      stderr.off("data", check);
    };
    stderr.on("data", check);
    check();
  });
}

/** Records about `sockets` with message `message`. */
function countLogs(records: Array<Record<string, unknown>>, message: string, sockets: ReadonlySet<string>): number {
  return records.filter((record) => record.msg === message && sockets.has(String(record.socket))).length;
}

/** Resolves once the agent has logged `message` for every one of `sockets`. */
function waitForEach(agent: AgentProcess, message: string, sockets: readonly string[], timeoutMs?: number): Promise<void> {
  const wanted = new Set(sockets);
  return waitForLogs(agent, `"${message}" for ${wanted.size} sockets`, (records) => countLogs(records, message, wanted) >= wanted.size, timeoutMs);
}

/** How many registration attempts of `sockets` the agent found stale (nothing listening yet). */
function staleAttempts(agent: AgentProcess, sockets: readonly string[]): number {
  return countLogs(agent.logs(), "plugin socket is stale", new Set(sockets));
}

function socketNames(registry: string, prefix: string, count: number): string[] {
  const width = String(count - 1).length;
  return Array.from({ length: count }, (_, i) => path.join(registry, `${prefix}-${String(i).padStart(width, "0")}.sock`));
}

function refusalsOf(plugins: PluginTimeline[]): string[] {
  return plugins.flatMap((plugin) => plugin.refusals.map((reason) => `${path.basename(plugin.socket)}: ${reason}`));
}

/** A plugin never notified registered, with what the agent last logged about its socket. */
function describeFailure(agent: AgentProcess, failure: PluginFailure) {
  const records = agent.logs().filter((record) => record.socket === failure.socket);
  const last = records.at(-1);
  return {
    socket: path.basename(failure.socket),
    getInfoCalls: failure.getInfoCalls,
    notifications: failure.notifications,
    agentLastSaid: last ? `${String(last.msg)} (state ${String(last.state)}, attempts ${String(last.attempts)})` : null,
  };
}

/**
 * Part 1: one socket at a time. Before the next trial the agent has logged
 * the plugin registered, the plugin is stopped and the agent has logged the
 * removal, so no trial overlaps another's work.
 */
async function measureSingleSocket(agent: RunningAgent, host: PluginHost) {
  const latencies: number[] = [];
  const listenToGetInfo: number[] = [];
  const getInfoToNotify: number[] = [];
  const refusals: string[] = [];
  const neverRegistered: ReturnType<typeof describeFailure>[] = [];
  const sockets = socketNames(agent.policy.registry, "one", WARMUP_TRIALS + TRIALS);
  let ticksAtFirstMeasuredTrial = 0;
  for (const [trial, socket] of sockets.entries()) {
    if (trial === WARMUP_TRIALS) ticksAtFirstMeasuredTrial = cpuTicks(agent.pid);
    const { plugins, failures } = await host.start([socket], SINGLE_TIMEOUT_MS);
    const plugin = plugins[0];
    refusals.push(...refusalsOf(plugins));
    neverRegistered.push(...failures.map((failure) => describeFailure(agent.process, failure)));
    if (plugin && trial >= WARMUP_TRIALS) {
      latencies.push(plugin.notifyAt - plugin.listenAt);
      listenToGetInfo.push(plugin.getInfoAt - plugin.listenAt);
      getInfoToNotify.push(plugin.notifyAt - plugin.getInfoAt);
    }
    if (plugin) await waitForEach(agent.process, "plugin registered", [socket]);
    await host.stop([socket]);
    await waitForEach(agent.process, "plugin socket removed", [socket]);
  }
  const agentCpuMs = ((cpuTicks(agent.pid) - ticksAtFirstMeasuredTrial) * 1000) / clockTicksPerSecond();
  const measured = sockets.slice(WARMUP_TRIALS);
  return {
    trials: TRIALS,
    warmupTrialsExcluded: WARMUP_TRIALS,
    listenToRegisteredMs: summarize(latencies),
    listenToGetInfoMs: summarize(listenToGetInfo),
    getInfoToRegisteredMs: summarize(getInfoToNotify),
    // Registration, deregistration and their log lines, divided by the trials (10 ms tick resolution over the sum).
    agentCpuMsPerTrial: roundMs(agentCpuMs / TRIALS),
    trialsWithStaleFirstAttempt: measured.filter((socket) => staleAttempts(agent.process, [socket]) > 0).length,
    registrationTimeoutMs: SINGLE_TIMEOUT_MS,
    neverRegistered,
    refusalsBeforeRegistered: refusals,
  };
}

/**
 * Parts 2 and 3: `count` sockets made at once. Resolves once the agent has
 * logged every one registered; the plugins stay up until the caller stops them.
 */
async function measureBurst(agent: RunningAgent, host: PluginHost, prefix: string, count: number, timeoutMs: number) {
  const sockets = socketNames(agent.policy.registry, prefix, count);
  const agentTicksBefore = cpuTicks(agent.pid);
  const benchCpuBefore = process.cpuUsage();
  const reply = await host.start(sockets, timeoutMs);
  const agentTicks = cpuTicks(agent.pid) - agentTicksBefore;
  const benchCpu = process.cpuUsage(benchCpuBefore);
  const { plugins, failures } = reply;
  if (plugins.length === 0) throw new Error(`none of the ${count} plugins was registered within ${timeoutMs} ms`);
  await waitForEach(agent.process, "plugin registered", plugins.map((plugin) => plugin.socket), 30_000);
  const firstListen = Math.min(...plugins.map((plugin) => plugin.listenAt));
  const lastListen = Math.max(...plugins.map((plugin) => plugin.listenAt));
  const lastNotify = Math.max(...plugins.map((plugin) => plugin.notifyAt));
  const refusals = refusalsOf(plugins);
  return {
    sockets,
    allRegistered: failures.length === 0,
    result: {
      sockets: count,
      // Over the registered plugins only when some never were (see neverRegistered).
      firstListenToLastRegisteredMs: roundMs(lastNotify - firstListen),
      firstListenToLastListenMs: roundMs(lastListen - firstListen),
      perSocketListenToRegisteredMs: summarize(plugins.map((plugin) => plugin.notifyAt - plugin.listenAt)),
      staleFirstAttempts: staleAttempts(agent.process, sockets),
      cpuMsUntilLastRegistered: {
        agent: (agentTicks * 1000) / clockTicksPerSecond(),
        pluginHost: roundMs(reply.hostCpuMs),
        benchProcess: roundMs((benchCpu.user + benchCpu.system) / 1000),
      },
      refusalCount: refusals.length,
      refusalsBeforeRegistered: refusals.slice(0, 10),
      registrationTimeoutMs: timeoutMs,
      neverRegisteredCount: failures.length,
      neverRegisteredSample: failures.slice(0, 5).map((failure) => describeFailure(agent.process, failure)),
    },
  };
}

/** Parts 1-3 on one agent with `reconcile.resync: 1h`, so only filesystem events drive registration. */
async function measureEventDriven(dir: string, host: PluginHost) {
  progress("starting the agent (resync 1h)");
  const agent = await startAgent(dir, EVENT_DRIVEN_RECONCILE);
  try {
    const idleDescriptors = openDescriptors(agent.pid);
    const idleRssKiB = residentKiB(agent.pid);

    progress(`single socket: ${WARMUP_TRIALS} warm-up + ${TRIALS} trials`);
    const singleSocket = await measureSingleSocket(agent, host);

    progress(`${BURST_SOCKETS} sockets at once`);
    const burst = await measureBurst(agent, host, "burst", BURST_SOCKETS, BURST_TIMEOUT_MS);
    await host.stop(burst.sockets);
    await waitForEach(agent.process, "plugin socket removed", burst.sockets);

    progress(`${LARGE_BURST_SOCKETS} sockets at once`);
    const large = await measureBurst(agent, host, "many", LARGE_BURST_SOCKETS, LARGE_BURST_TIMEOUT_MS);
    // Plugins see NotifyRegistrationStatus before the agent has its answer and
    // closes the connection; the agent logs each registration after closing.
    const descriptorsAtLastNotify = openDescriptors(agent.pid);
    await waitForEach(agent.process, "plugin registered", large.sockets, 30_000);
    const descriptorsAfter = openDescriptors(agent.pid);
    const rssAfterKiB = residentKiB(agent.pid);
    await host.stop(large.sockets);
    await waitForEach(agent.process, "plugin socket removed", large.sockets, 30_000);

    const exitCode = await agent.stop();
    if (exitCode !== 0) throw new Error(`the agent exited ${exitCode} on SIGTERM; stderr:\n${agent.process.stderr().slice(-4000)}`);
    return {
      singleSocket,
      everyPluginRegistered:
        singleSocket.neverRegistered.length === 0 && burst.allRegistered && large.allRegistered,
      burst: burst.result,
      burstAllRegistered: burst.allRegistered,
      largeBurst: {
        ...large.result,
        descriptors: {
          idleBaseline: idleDescriptors,
          atLastNotification: descriptorsAtLastNotify,
          afterAllRegistered: descriptorsAfter,
          growth: descriptorsAfter - idleDescriptors,
        },
        rssKiB: { idleBaseline: idleRssKiB, afterAllRegistered: rssAfterKiB },
      },
    };
  } finally {
    await agent.stop();
  }
}

/** Part 4: a second agent with the default resync, 100 plugins registered, then a quiet window. */
async function measureIdle(dir: string, host: PluginHost) {
  progress("starting the agent (default resync 10s)");
  const agent = await startAgent(dir, DEFAULT_RECONCILE);
  try {
    const sockets = socketNames(agent.policy.registry, "idle", IDLE_PLUGINS);
    const { plugins } = await host.start(sockets, IDLE_REGISTRATION_TIMEOUT_MS);
    await waitForEach(agent.process, "plugin registered", plugins.map((plugin) => plugin.socket), 30_000);
    await new Promise((resolve) => setTimeout(resolve, IDLE_SETTLE_MS));
    progress(`${IDLE_PLUGINS} plugins registered; measuring idle for ${IDLE_WINDOW_MS / 1000} s`);
    const linesBefore = agent.process.logs().length;
    const ticksBefore = cpuTicks(agent.pid);
    const startedAt = performance.now();
    await new Promise((resolve) => setTimeout(resolve, IDLE_WINDOW_MS));
    const ticks = cpuTicks(agent.pid) - ticksBefore;
    const windowMs = performance.now() - startedAt;
    const cpuMs = (ticks * 1000) / clockTicksPerSecond();
    const result = {
      plugins: IDLE_PLUGINS,
      pluginsRegistered: plugins.length,
      windowMs: Math.round(windowMs),
      settleBeforeWindowMs: IDLE_SETTLE_MS,
      cpuTicks: ticks,
      clockTicksPerSecond: clockTicksPerSecond(),
      cpuMs,
      cpuPercentOfCore: Math.round((cpuMs / windowMs) * 100 * 1000) / 1000,
      rssKiB: residentKiB(agent.pid),
      descriptors: openDescriptors(agent.pid),
      logLinesDuringWindow: agent.process.logs().length - linesBefore,
    };
    await host.stop(sockets);
    const exitCode = await agent.stop();
    if (exitCode !== 0) throw new Error(`the agent exited ${exitCode} on SIGTERM; stderr:\n${agent.process.stderr().slice(-4000)}`);
    return result;
  } finally {
    await agent.stop();
  }
}

/** Runs the four parts in one go; throws when the executable is missing or a part fails. */
export async function run(): Promise<object> {
  requireBinary();
  const { dir, cleanup } = shortTempDir("ep-bench-");
  let host: PluginHost | undefined;
  const loadAtStart = os.loadavg()[0]!;
  try {
    host = await startPluginHost();
    const eventDriven = await measureEventDriven(path.join(dir, "a"), host);
    const idle = await measureIdle(path.join(dir, "b"), host);
    const singleP50 = eventDriven.singleSocket.listenToRegisteredMs.p50Ms;
    const burstTotal = eventDriven.burstAllRegistered ? eventDriven.burst.firstListenToLastRegisteredMs : null;
    const growth = eventDriven.largeBurst.descriptors.growth;
    return {
      agent: "dist/edgeplug run (built single executable)",
      // Anything else running on the 2 cores (other builds, tests) shows here and in the numbers.
      loadAverage1m: { atStart: roundMs(loadAtStart), atEnd: roundMs(os.loadavg()[0]!) },
      plugins: `@grpc/grpc-js registration servers in one child Node process (pid apart from the agent), type acme.io/Sensor (kind generic, versions [v1])`,
      timing: "listen = grpc-js bindAsync callback; registered = NotifyRegistrationStatus(true) arriving; both stamped by the plugin process's performance.now()",
      config: {
        partsOneToThree: { reconcile: { resync: "1h", backoff: "default (500ms..2m2s)" }, security: { maxPlugins: MAX_PLUGINS }, log: "info, json" },
        partFour: { reconcile: { resync: "10s (the default)", backoff: "default (500ms..2m2s)" }, security: { maxPlugins: MAX_PLUGINS }, log: "info, json" },
        singleSocketTrials: TRIALS,
        warmupTrials: WARMUP_TRIALS,
        idleWindowMs: IDLE_WINDOW_MS,
      },
      singleSocket: eventDriven.singleSocket,
      kubeletModel: {
        kind: "model, not a measurement",
        reconcilerLoopMs: 1000,
        expectedP50Ms: 500,
        expectedP99Ms: 990,
        why: "the kubelet's reconciler looks at the desired state once a second, so a new socket waits a uniform 0-1000 ms for the next pass (plus its own registration time)",
      },
      burst100: eventDriven.burst,
      burst1000: eventDriven.largeBurst,
      idleWith100Plugins: { resync: "10s (the default, as a real deployment runs)", ...idle },
      targets: {
        singleSocketP50: { targetMs: TARGET_SINGLE_P50_MS, measuredMs: singleP50, meetsTarget: singleP50 < TARGET_SINGLE_P50_MS },
        burst100FirstListenToLastRegistered: {
          targetMs: TARGET_BURST_TOTAL_MS,
          measuredMs: burstTotal,
          meetsTarget: burstTotal !== null && burstTotal < TARGET_BURST_TOTAL_MS,
        },
        everyPluginRegistered: {
          target: `each plugin notified registered (single: within ${SINGLE_TIMEOUT_MS} ms; bursts: ${BURST_TIMEOUT_MS} / ${LARGE_BURST_TIMEOUT_MS} ms; idle part: ${IDLE_REGISTRATION_TIMEOUT_MS} ms)`,
          meetsTarget: eventDriven.everyPluginRegistered && idle.pluginsRegistered === IDLE_PLUGINS,
        },
        idleCpuWith100Plugins: {
          targetPercentOfCore: TARGET_IDLE_CPU_PERCENT,
          measuredPercentOfCore: idle.cpuPercentOfCore,
          meetsTarget: idle.cpuPercentOfCore < TARGET_IDLE_CPU_PERCENT,
        },
        descriptorsAfter1000NearBaseline: {
          targetGrowthBelow: DESCRIPTOR_GROWTH_LIMIT,
          measuredGrowth: growth,
          meetsTarget: growth < DESCRIPTOR_GROWTH_LIMIT,
        },
      },
    };
  } finally {
    await host?.close();
    cleanup();
  }
}
