/**
 * Devices benchmark of the built daemon (dist/edgeplug run), issue 10's targets:
 *   - a ListAndWatch list of 10,000 and of 100,000 devices until Agent/Status
 *     shows it (<= 50 ms, <= 500 ms), and the agent's RSS with 100,000 devices;
 *   - allocation round trips through the API (p50 < 5 ms) and per second, and
 *     the agent's CPU per allocate/release pair;
 *   - a checkpoint write with 10,000 devices (< 30 ms);
 *   - a plugin flooding ListAndWatch while other plugins register: their
 *     registration latency against the registration benchmark's target
 *     (p50 < 5 ms), and how much of the flood reaches events and the checkpoint.
 *
 * The measured device plugin lives in this process and sends lists it has
 * encoded beforehand (support/raw-device-plugin.ts); the flooding plugin and
 * the registration plugins run in child processes of their own.
 *
 * Env: BENCH_DEVICES_TRIALS (list trials per size, default 8), BENCH_ALLOCATIONS (default 300),
 * BENCH_DEVICES_BASELINE (another build's executable: its agent runs beside
 * this one, each list and allocation trial alternating between the two, so
 * both meet the same load; the ratios current / baseline are reported).
 * BENCH_KUBELET_DM: the executable of the kubelet's own device manager
 * (Kubernetes v1.19's, built with a small control surface, apart from this
 * repo): the bench then runs the side-by-side workloads of
 * support/devices-side-by-side.ts on it and on this build, instead of the
 * above. Without it the report says the comparison was skipped.
 */
import * as path from "node:path";
import { requireBinary, shortTempDir } from "../test/support/agent-process.ts";
import type { StatusResponse } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { clockTicksPerSecond, cpuTicks, residentKiB } from "./support/proc.ts";
import { encodedList, type RawDevicePlugin, startRawDevicePlugin } from "./support/raw-device-plugin.ts";
import { type DevicesAgent, type EventLog, retried, startDevicesAgent } from "./support/devices-agent.ts";
import { measureCheckpointWrites } from "./support/devices-checkpoint.ts";
import { measureFlood } from "./support/devices-flood.ts";
import { roundMs, summarize } from "./support/stats.ts";
import { runSideBySide } from "./support/devices-side-by-side.ts";

const TRIALS = Math.max(3, Number(process.env.BENCH_DEVICES_TRIALS) || 8);
const ALLOCATIONS = Math.max(50, Number(process.env.BENCH_ALLOCATIONS) || 300);
const RESOURCE = "bench.io/dev";
const SIZES = [10_000, 100_000];
const REFLECT_TIMEOUT_MS = 30_000;
const TICKS_PER_SECOND = clockTicksPerSecond();
const BASELINE = process.env.BENCH_DEVICES_BASELINE;
const KUBELET_DM = process.env.BENCH_KUBELET_DM;
const COMPARISON_SKIPPED = "skipped: BENCH_KUBELET_DM does not name the kubelet device manager's executable";

/** One agent under measurement, with the bench's device plugin registered on it. */
interface Subject {
  label: "current" | "baseline";
  agent: DevicesAgent;
  plugin: RawDevicePlugin;
}

/** The subjects in turn, the order swapped on every other trial so neither always goes first. */
function inTurn<T>(subjects: T[], trial: number): T[] {
  return trial % 2 === 0 ? subjects : [...subjects].reverse();
}

function perSubject<T>(subjects: Subject[], make: () => T): Map<string, T> {
  return new Map(subjects.map((subject) => [subject.label, make()]));
}

export const TARGETS = { reflected10kMs: 50, reflected100kMs: 500, checkpointWrite10kMs: 30, allocateP50Ms: 5, registrationP50Ms: 5 };

export function progress(message: string): void {
  process.stderr.write(`devices: ${message}\n`);
}

/** Whether `status` shows the list of `count` devices named `<prefix><i>`. */
function reflects(status: StatusResponse, count: number, prefix: string): boolean {
  const resource = status.resources.find((r) => r.name === RESOURCE);
  return resource !== undefined && resource.capacity === count && resource.healthy[0]?.startsWith(prefix) === true;
}

/**
 * A pause after each list: its checkpoint write (up to 100 ms later) and the
 * plugin's list budget (half a core, endpoint.ts) are over before the next
 * one, which then measures one list rather than a plugin sending them back to back.
 */
function settle(count: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, count >= 100_000 ? 4000 : 300));
}

/** Sends `list` and waits for the WatchEvents event that shows it: the time from the write to its arrival. */
async function untilEvent(events: EventLog, plugin: RawDevicePlugin, list: Buffer, count: number, prefix: string): Promise<number> {
  const event = events.next(
    (e) => e.kind.case === "resource" && e.kind.value.resource?.name === RESOURCE && e.kind.value.resource.capacity === count && e.kind.value.resource.healthy[0]?.startsWith(prefix) === true,
    REFLECT_TIMEOUT_MS,
  );
  const startedAt = performance.now();
  await plugin.send(list);
  return (await event) - startedAt;
}

/** Sends `list` and asks Status until it shows it: the time from the write to the answer that shows it. */
async function untilStatus(agent: DevicesAgent, plugin: RawDevicePlugin, list: Buffer, count: number, prefix: string): Promise<number> {
  const startedAt = performance.now();
  await plugin.send(list);
  for (;;) {
    const { answer } = await retried(() => agent.api().status({}));
    if (reflects(answer, count, prefix)) return performance.now() - startedAt;
    if (performance.now() - startedAt > REFLECT_TIMEOUT_MS) throw new Error(`status did not show ${count} devices within ${REFLECT_TIMEOUT_MS} ms`);
  }
}

/**
 * Per size: lists until a WatchEvents reader sees them (no Status call in
 * between), then lists until a Status call shows them (no event reader), so
 * neither reader's decoding of 100,000 ids delays the other's measurement.
 */
async function measureLists(subjects: Subject[]) {
  const rssBeforeKiB = perSubject(subjects, () => 0);
  for (const { label, agent } of subjects) rssBeforeKiB.set(label, residentKiB(agent.pid));
  const results = perSubject(subjects, () => ({}) as Record<string, object>);
  let generation = 0;
  const list = (count: number) => {
    const prefix = `s${count}g${generation++}-`;
    return { prefix, bytes: encodedList(count, prefix) };
  };
  for (const count of SIZES) {
    progress(`${count} devices: ${TRIALS} trials until an event shows the list, ${TRIALS} until Status does (1 warm-up each)${subjects.length > 1 ? ", alternating between the agents" : ""}`);
    const samples = perSubject(subjects, () => ({ events: [] as number[], cpu: [] as number[], status: [] as number[], messageBytes: 0 }));
    const watchers = new Map(subjects.map((subject) => [subject.label, subject.agent.watch()]));
    for (let trial = 0; trial <= TRIALS; trial++) {
      for (const { label, agent, plugin } of inTurn(subjects, trial)) {
        const { prefix, bytes } = list(count);
        const ticks = cpuTicks(agent.pid);
        const ms = await untilEvent(watchers.get(label)!, plugin, bytes, count, prefix);
        // Its checkpoint write comes up to 100 ms later: counted too; then the plugin's list budget refills.
        await settle(count);
        if (trial === 0) continue;
        samples.get(label)!.events.push(ms);
        samples.get(label)!.cpu.push(((cpuTicks(agent.pid) - ticks) * 1000) / TICKS_PER_SECOND);
      }
    }
    for (const watcher of watchers.values()) watcher.close();
    for (let trial = 0; trial <= TRIALS; trial++) {
      for (const { label, agent, plugin } of inTurn(subjects, trial)) {
        const { prefix, bytes } = list(count);
        samples.get(label)!.messageBytes = bytes.length;
        const ms = await untilStatus(agent, plugin, bytes, count, prefix);
        await settle(count);
        if (trial > 0) samples.get(label)!.status.push(ms);
      }
    }
    const calls = perSubject(subjects, () => [] as number[]);
    for (let i = 0; i < 10; i++) {
      for (const { label, agent } of inTurn(subjects, i)) calls.get(label)!.push((await retried(() => agent.api().status({}))).ms);
    }
    for (const { label } of subjects) {
      const taken = samples.get(label)!;
      results.get(label)![`devices${count}`] = {
        messageBytes: taken.messageBytes,
        untilWatchEventsShowsIt: summarize(taken.events),
        agentCpuMsPerList: summarize(taken.cpu),
        untilStatusShowsIt: summarize(taken.status),
        statusCallWhenUnchanged: summarize(calls.get(label)!),
      };
    }
  }
  // A quiet second, so that the RSS is the resident state, not the last list's garbage.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  return new Map(
    subjects.map(({ label, agent }) => [label, { ...results.get(label)!, rssKiB: { withTenDevices: rssBeforeKiB.get(label)!, with100000Devices: residentKiB(agent.pid) } }]),
  );
}

/** Sequential allocate/release pairs of one device, then 100 allocations at once (the socket's burst). */
async function measureAllocations(subjects: Subject[], devices: number, allocations: number) {
  const prefix = `a${devices}-`;
  for (const { agent, plugin } of subjects) await untilStatus(agent, plugin, encodedList(devices, prefix), devices, prefix);
  const allocate = perSubject(subjects, () => [] as number[]);
  const release = perSubject(subjects, () => [] as number[]);
  const rateLimited = perSubject(subjects, () => ({ count: 0 }));
  const ticksAtStart = perSubject(subjects, () => 0);
  for (let i = -20; i < allocations; i++) {
    if (i === 0) { for (const { label, agent } of subjects) ticksAtStart.set(label, cpuTicks(agent.pid)); }
    for (const { label, agent } of inTurn(subjects, i + 20)) {
      const owner = `owner-${devices}-${i + 20}`;
      const allocateMs = (await retried(() => agent.api().allocate({ owner, resources: [{ resource: RESOURCE, count: 1 }] }), rateLimited.get(label))).ms;
      const releaseMs = (await retried(() => agent.api().release({ owner }), rateLimited.get(label))).ms;
      if (i < 0) continue;
      allocate.get(label)!.push(allocateMs);
      release.get(label)!.push(releaseMs);
    }
  }
  // Each agent's own CPU over the measured pairs, its checkpoint writes (up to 100 ms after a change) included.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const cpuMsPerPair = new Map(
    subjects.map(({ label, agent }) => [label, roundMs(((cpuTicks(agent.pid) - ticksAtStart.get(label)!) * 1000) / TICKS_PER_SECOND / allocations)]),
  );
  const results = new Map<string, object>();
  for (const { label, agent } of subjects) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const burst = Math.min(100, devices);
    const burstStart = performance.now();
    await Promise.all(Array.from({ length: burst }, (_, i) => agent.api().allocate({ owner: `burst-${devices}-${i}`, resources: [{ resource: RESOURCE, count: 1 }] })));
    const burstMs = performance.now() - burstStart;
    await new Promise((resolve) => setTimeout(resolve, 200));
    await Promise.all(Array.from({ length: burst }, (_, i) => agent.api().release({ owner: `burst-${devices}-${i}` })));
    const allocateSummary = summarize(allocate.get(label)!);
    results.set(label, {
      devicesRegistered: devices,
      allocate: allocateSummary,
      release: summarize(release.get(label)!),
      agentCpuMsPerAllocateAndRelease: cpuMsPerPair.get(label)!,
      sequentialAllocationsPerSecond: Math.round(1000 / allocateSummary.meanMs),
      rateLimitedAttempts: rateLimited.get(label)!.count,
      concurrent: { allocations: burst, totalMs: Math.round(burstMs), perSecond: Math.round((burst / burstMs) * 1000) },
    });
  }
  return results;
}

/** current / baseline of each p50 (and RSS) the two agents were measured for, rounded to 0.01. */
function ratios(current: unknown, baseline: unknown): unknown {
  if (typeof current === "number" && typeof baseline === "number") return baseline === 0 ? null : Math.round((current / baseline) * 100) / 100;
  if (Array.isArray(current) && Array.isArray(baseline)) return current.map((value, i) => ratios(value, baseline[i]));
  if (typeof current !== "object" || current === null || typeof baseline !== "object" || baseline === null) return undefined;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(current)) {
    if (["samples", "minMs", "p90Ms", "p99Ms", "maxMs", "meanMs", "messageBytes", "devicesRegistered", "allocations", "rateLimitedAttempts", "withTenDevices"].includes(key)) continue;
    const ratio = ratios(value, (baseline as Record<string, unknown>)[key]);
    if (ratio !== undefined) out[key] = ratio;
  }
  return out;
}

async function startSubject(label: Subject["label"], dir: string, binary?: string): Promise<Subject> {
  progress(`starting the ${label} agent${binary ? ` (${binary})` : ""}`);
  const agent = await startDevicesAgent(dir, binary);
  try {
    const plugin = await startRawDevicePlugin({
      socketPath: path.join(path.dirname(agent.registrationSocket), "bench.sock"),
      registrationSocket: agent.registrationSocket,
      resource: RESOURCE,
      initial: encodedList(10, "start-"),
    });
    return { label, agent, plugin };
  } catch (error) {
    await agent.stop();
    throw error;
  }
}

export async function run(): Promise<object> {
  requireBinary();
  if (KUBELET_DM) return { kubeletComparison: await runSideBySide(KUBELET_DM) };
  const { dir, cleanup } = shortTempDir("epd-");
  const subjects: Subject[] = [];
  try {
    subjects.push(await startSubject("current", path.join(dir, "c")));
    if (BASELINE) subjects.push(await startSubject("baseline", path.join(dir, "b"), BASELINE));
    const [current] = subjects as [Subject];
    try {
      for (const { agent, plugin } of subjects) await untilStatus(agent, plugin, encodedList(10, "ten-"), 10, "ten-");
      const lists = await measureLists(subjects);
      progress(`allocation: ${ALLOCATIONS} allocate/release pairs with 16, then 10,000 devices registered`);
      const with16 = await measureAllocations(subjects, 16, ALLOCATIONS);
      const with10k = await measureAllocations(subjects, 10_000, Math.round(ALLOCATIONS / 3));
      const allocation = (label: string) => [with16.get(label)!, with10k.get(label)!];
      if (BASELINE) {
        const baseline = subjects[1]!;
        const exitCodes = { current: await current.agent.stop(), baseline: await baseline.agent.stop() };
        const both = {
          current: { lists: lists.get("current"), allocation: allocation("current") },
          baseline: { binary: BASELINE, lists: lists.get("baseline"), allocation: allocation("baseline") },
        };
        return { targets: TARGETS, paired: { ...both, currentOverBaseline: ratios(both.current, both.baseline) }, agentExitCodes: exitCodes, kubeletComparison: COMPARISON_SKIPPED };
      }
      progress("checkpoint writes with 10,000 devices");
      const checkpoint = await measureCheckpointWrites(path.join(dir, "checkpoint-bench"));
      progress("a flooding plugin while others register");
      await untilStatus(current.agent, current.plugin, encodedList(10, "idle-"), 10, "idle-");
      const flood = await measureFlood(current.agent, path.join(dir, "c"));
      const exitCode = await current.agent.stop();
      return { targets: TARGETS, lists: lists.get("current"), allocation: allocation("current"), checkpoint, flood, agentExitCode: exitCode, kubeletComparison: COMPARISON_SKIPPED };
    } catch (error) {
      for (const { label, agent } of subjects) process.stderr.write(`devices: failed; the ${label} agent's last log lines:\n${agent.process.stderr().slice(-3000)}\n`);
      throw error;
    }
  } finally {
    for (const { agent, plugin } of subjects) {
      await plugin.stop();
      await agent.stop();
    }
    cleanup();
  }
}
