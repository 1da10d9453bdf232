/**
 * The registration benchmark's churn part: while 100 plugins stay
 * registered, batches of plugins come and go (listen, register, stop,
 * deregister) for a while, and the agent's resident memory is sampled, so
 * that growth over churn shows (issue 9: flat over 10 minutes).
 */
import { type ResidentMemory, residentMemory } from "./proc.ts";
import type { PluginHost } from "./plugin-host-client.ts";
import { progress, type RunningAgent, socketNames, waitForEach } from "./registration-agent.ts";

/** Plugins per batch: each one registers and deregisters once per round. */
const BATCH = 20;
const SAMPLE_EVERY_MS = 10_000;
/** As the idle window: lets the last round's garbage go before the final reading. */
const SETTLE_MS = 2000;
/**
 * Then a quiet spell long enough for V8's memory reducer, which gives heap
 * pages back 8 s after a full collection or, when none comes once the
 * churn stops, at its watchdog about 100 s after the last: only then does the
 * last reading say what the churn left behind (measured: 30 s was often too soon).
 */
const REST_MS = 120_000;

export interface ChurnResult {
  durationMs: number;
  rounds: number;
  /** Registrations (and as many deregistrations) during the churn. */
  registrations: number;
  before: ResidentMemory;
  /** Every SAMPLE_EVERY_MS during the churn. */
  samples: Array<{ atMs: number } & ResidentMemory>;
  maxRssKiB: number;
  /** After the churn and a settle of SETTLE_MS. */
  after: ResidentMemory;
  growthKiB: number;
  /** REST_MS later, nothing having happened since `after`. */
  afterRest: { restMs: number } & ResidentMemory;
  /** afterRest less before: what the churn left behind. */
  growthAfterRestKiB: number;
}

/** Churns batches of plugins through `agent` for `durationMs`, the registered ones staying. */
export async function measureChurn(agent: RunningAgent, host: PluginHost, durationMs: number): Promise<ChurnResult> {
  progress(`churn: batches of ${BATCH} plugins for ${Math.round(durationMs / 1000)} s`);
  const before = residentMemory(agent.pid);
  const samples: ChurnResult["samples"] = [];
  const started = performance.now();
  let nextSample = SAMPLE_EVERY_MS;
  let rounds = 0;
  while (performance.now() - started < durationMs) {
    const batch = socketNames(agent.policy.registry, `churn${rounds}`, BATCH);
    const { plugins } = await host.start(batch, 15_000);
    if (plugins.length !== BATCH) throw new Error(`churn round ${rounds}: ${BATCH - plugins.length} plugins were not registered`);
    await waitForEach(agent.process, "plugin registered", batch, 30_000);
    await host.stop(batch);
    await waitForEach(agent.process, "plugin socket removed", batch, 30_000);
    rounds++;
    const atMs = performance.now() - started;
    if (atMs >= nextSample) {
      samples.push({ atMs: Math.round(atMs), ...residentMemory(agent.pid) });
      nextSample += SAMPLE_EVERY_MS;
    }
  }
  const durationSpent = performance.now() - started;
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const after = residentMemory(agent.pid);
  await new Promise((resolve) => setTimeout(resolve, REST_MS));
  const afterRest = residentMemory(agent.pid);
  return {
    durationMs: Math.round(durationSpent),
    rounds,
    registrations: rounds * BATCH,
    before,
    samples,
    maxRssKiB: Math.max(before.rssKiB, after.rssKiB, ...samples.map((sample) => sample.rssKiB)),
    after,
    growthKiB: after.rssKiB - before.rssKiB,
    afterRest: { restMs: REST_MS, ...afterRest },
    growthAfterRestKiB: afterRest.rssKiB - before.rssKiB,
  };
}
