/**
 * The paired part of the registration benchmark: the current build and a
 * baseline build (BENCH_REGISTRATION_BASELINE=/path/to/an/older/edgeplug)
 * run side by side, each on its own registry, and are measured in turns
 * (single-socket trials alternate, then 100-socket bursts alternate), so
 * that the two see the same machine load and their ratio means something
 * even when the absolute numbers are noisy.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { requireBinary } from "../../test/support/agent-process.ts";
import type { PluginHost } from "./plugin-host-client.ts";
import { roundMs } from "./stats.ts";
import { progress, type RunningAgent, startAgent, waitForEach } from "./registration-agent.ts";
import { measureBurst, measureSingleSocket } from "./registration-parts.ts";

const BURST_SOCKETS = 100;
const BURST_ROUNDS = 4;
const BURST_TIMEOUT_MS = 10_000;
const RESYNC = "  resync: 1h";

/** Undefined when no baseline is given; throws when the given baseline does not exist. */
export function baselineBinary(): string | undefined {
  const baseline = process.env.BENCH_REGISTRATION_BASELINE;
  if (!baseline) return undefined;
  const resolved = path.resolve(baseline);
  if (!fs.existsSync(resolved)) throw new Error(`BENCH_REGISTRATION_BASELINE=${baseline}: no such file`);
  return resolved;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export async function measurePaired(dir: string, host: PluginHost, baseline: string, trials: number) {
  progress(`paired run: starting the current and the baseline agent (${baseline})`);
  const names = ["current", "baseline"] as const;
  const agents: RunningAgent[] = [];
  fs.mkdirSync(dir, { recursive: true });
  try {
    agents.push(await startAgent(path.join(dir, "current"), RESYNC, requireBinary()));
    agents.push(await startAgent(path.join(dir, "baseline"), RESYNC, baseline));
    progress(`paired run: ${trials} single-socket trials each, alternating`);
    const single = await measureSingleSocket(agents, host, trials);
    const bursts: number[][] = [[], []];
    const burstCpuMs: number[][] = [[], []];
    for (let round = 0; round < BURST_ROUNDS; round++) {
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const index of order) {
        progress(`paired run: ${BURST_SOCKETS} sockets at once on ${names[index]} (round ${round + 1} of ${BURST_ROUNDS})`);
        const agent = agents[index]!;
        const burst = await measureBurst(agent, host, `burst${round}`, BURST_SOCKETS, BURST_TIMEOUT_MS);
        if (!burst.allRegistered) throw new Error(`${names[index]}: ${burst.result.neverRegisteredCount} of ${BURST_SOCKETS} plugins never registered`);
        bursts[index]!.push(burst.result.firstListenToLastRegisteredMs);
        burstCpuMs[index]!.push(burst.result.cpuMsUntilLastRegistered.agent);
        await host.stop(burst.sockets);
        await waitForEach(agent.process, "plugin socket removed", burst.sockets);
      }
    }
    const summary = (index: number) => ({
      singleSocketListenToRegisteredMs: single[index]!.listenToRegisteredMs,
      singleSocketAgentCpuMsPerTrial: single[index]!.agentCpuMsPerTrial,
      singleSocketNeverRegistered: single[index]!.neverRegistered.length,
      burst100FirstListenToLastRegisteredMs: { rounds: bursts[index]!, median: roundMs(median(bursts[index]!)) },
      burst100AgentCpuMs: { rounds: burstCpuMs[index]!, median: roundMs(median(burstCpuMs[index]!)) },
    });
    const current = summary(0);
    const old = summary(1);
    return {
      design:
        `both agents running at once on their own registries; ${trials} single-socket trials each in alternating order, then ${BURST_ROUNDS} rounds of ${BURST_SOCKETS} sockets at once, alternating`,
      baselineBinary: baseline,
      current,
      baseline: old,
      ratios: {
        singleP50CurrentOverBaseline: roundMs(current.singleSocketListenToRegisteredMs.p50Ms / old.singleSocketListenToRegisteredMs.p50Ms),
        singleAgentCpuCurrentOverBaseline: roundMs(current.singleSocketAgentCpuMsPerTrial / old.singleSocketAgentCpuMsPerTrial),
        burst100MedianCurrentOverBaseline: roundMs(current.burst100FirstListenToLastRegisteredMs.median / old.burst100FirstListenToLastRegisteredMs.median),
      },
    };
  } finally {
    for (const agent of agents) await agent.stop();
  }
}
