/**
 * The registration benchmark's measurements on one running agent: one
 * socket at a time, and many sockets at once.
 */
import process from "node:process";
import type { PluginHost } from "./plugin-host-client.ts";
import { clockTicksPerSecond, cpuTicks } from "./proc.ts";
import { roundMs, summarize } from "./stats.ts";
import { describeFailure, refusalsOf, type RunningAgent, socketNames, staleAttempts, waitForEach } from "./registration-agent.ts";

/** Single-socket trials run first and left out of the statistics (JIT warm-up on both sides). */
export const WARMUP_TRIALS = 5;
/**
 * How long a plugin waits to be notified registered before it counts as
 * never registered: well past one default backoff (500 ms) after a stale
 * first attempt, short enough that the bench still ends in 3 minutes.
 */
export const SINGLE_TIMEOUT_MS = 3000;

interface SingleSocketTally {
  latencies: number[];
  listenToGetInfo: number[];
  getInfoToNotify: number[];
  refusals: string[];
  neverRegistered: ReturnType<typeof describeFailure>[];
  sockets: string[];
  /** CPU ticks the agent spent in measured trials (its own, not the other agent's). */
  ticks: number;
}

/**
 * Part 1: one socket at a time. Before the next trial the agent has logged
 * the plugin registered, the plugin is stopped and the agent has logged the
 * removal, so no trial overlaps another's work. With several agents (a paired
 * run of two builds), their trials alternate, the first agent of each round
 * alternating too, so that drift in the machine's load hits each alike.
 */
export async function measureSingleSocket(agents: RunningAgent[], host: PluginHost, trials: number) {
  const tallies: SingleSocketTally[] = agents.map((agent) => ({
    latencies: [],
    listenToGetInfo: [],
    getInfoToNotify: [],
    refusals: [],
    neverRegistered: [],
    sockets: socketNames(agent.policy.registry, "one", WARMUP_TRIALS + trials),
    ticks: 0,
  }));
  for (let trial = 0; trial < WARMUP_TRIALS + trials; trial++) {
    const order = agents.map((_, index) => index);
    if (trial % 2 === 1) order.reverse();
    for (const index of order) await singleTrial(agents[index]!, host, tallies[index]!, trial);
  }
  return agents.map((agent, index) => {
    const tally = tallies[index]!;
    const measured = tally.sockets.slice(WARMUP_TRIALS);
    return {
      trials,
      warmupTrialsExcluded: WARMUP_TRIALS,
      listenToRegisteredMs: summarize(tally.latencies),
      listenToGetInfoMs: summarize(tally.listenToGetInfo),
      getInfoToRegisteredMs: summarize(tally.getInfoToNotify),
      // Registration, deregistration and their log lines, divided by the trials (10 ms tick resolution over the sum).
      agentCpuMsPerTrial: roundMs((tally.ticks * 1000) / clockTicksPerSecond() / trials),
      trialsWithStaleFirstAttempt: measured.filter((socket) => staleAttempts(agent.process, [socket]) > 0).length,
      registrationTimeoutMs: SINGLE_TIMEOUT_MS,
      neverRegistered: tally.neverRegistered,
      refusalsBeforeRegistered: tally.refusals,
    };
  });
}

async function singleTrial(agent: RunningAgent, host: PluginHost, tally: SingleSocketTally, trial: number): Promise<void> {
  const socket = tally.sockets[trial]!;
  const ticksBefore = cpuTicks(agent.pid);
  const { plugins, failures } = await host.start([socket], SINGLE_TIMEOUT_MS);
  const plugin = plugins[0];
  tally.refusals.push(...refusalsOf(plugins));
  tally.neverRegistered.push(...failures.map((failure) => describeFailure(agent.process, failure)));
  if (plugin && trial >= WARMUP_TRIALS) {
    tally.latencies.push(plugin.notifyAt - plugin.listenAt);
    tally.listenToGetInfo.push(plugin.getInfoAt - plugin.listenAt);
    tally.getInfoToNotify.push(plugin.notifyAt - plugin.getInfoAt);
  }
  if (plugin) await waitForEach(agent.process, "plugin registered", [socket]);
  await host.stop([socket]);
  await waitForEach(agent.process, "plugin socket removed", [socket]);
  if (trial >= WARMUP_TRIALS) tally.ticks += cpuTicks(agent.pid) - ticksBefore;
}

/**
 * Parts 2 and 3: `count` sockets made at once. Resolves once the agent has
 * logged every one registered; the plugins stay up until the caller stops them.
 */
export async function measureBurst(agent: RunningAgent, host: PluginHost, prefix: string, count: number, timeoutMs: number) {
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
