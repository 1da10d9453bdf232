/**
 * What process and lease owners cost the built daemon: N owners held by a
 * process each (BENCH_OWNERS, default 100) and N with a 24 h lease; the
 * agent's descriptors and its CPU time over BENCH_IDLE_SECONDS (default 20)
 * of idling with them and without any; then every process is killed at
 * once and the time until the last release event arrives is measured
 * (kill to event, p50 and max), with the descriptors after.
 *
 *   npm run bench -- owners
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { processIdentity } from "../src/platform/process-watch.ts";
import { shortTempDir } from "../test/support/agent-process.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "../test/support/fake-device-plugin.ts";
import { startDevicesAgent } from "./support/devices-agent.ts";
import { clockTicksPerSecond, cpuTicks } from "./support/proc.ts";

const OWNERS = Math.min(1000, Math.max(1, Number(process.env.BENCH_OWNERS) || 100));
const IDLE_SECONDS = Math.max(5, Number(process.env.BENCH_IDLE_SECONDS) || 20);
const RESOURCE = "bench.io/owned";

const fds = (pid: number) => fs.readdirSync(`/proc/${pid}/fd`).length;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function idleCpuSeconds(pid: number): Promise<number> {
  const before = cpuTicks(pid);
  await sleep(IDLE_SECONDS * 1000);
  return (cpuTicks(pid) - before) / clockTicksPerSecond();
}

export async function run(): Promise<object> {
  const { dir, cleanup } = shortTempDir("ep-owners-");
  const agent = await startDevicesAgent(dir);
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(agent.registrationSocket), "owned.sock"), devices: healthyDevices(2 * OWNERS) });
  const sleepers: ChildProcess[] = [];
  try {
    await registerDevicePlugin(agent.registrationSocket, { endpoint: "owned.sock", resource_name: RESOURCE });
    const events = agent.watch();
    await events.next((e) => e.kind.case === "resource" && e.kind.value.resource?.allocatable === 2 * OWNERS, 10_000).catch(() => {});
    const idleWithout = await idleCpuSeconds(agent.pid);
    const fdsWithout = fds(agent.pid);
    for (let i = 0; i < OWNERS; i++) {
      const sleeper = spawn("sleep", ["3600"], { stdio: "ignore" });
      sleepers.push(sleeper);
      const identity = processIdentity(sleeper.pid!)!;
      await agent.api().allocate({ owner: `pid-${i}`, resources: [{ resource: RESOURCE, count: 1 }], ownerPid: identity.pid, ownerPidStartTime: BigInt(identity.startTime) });
      await agent.api().allocate({ owner: `lease-${i}`, resources: [{ resource: RESOURCE, count: 1 }], leaseMs: 86_400_000n });
    }
    const fdsWith = fds(agent.pid);
    const idleWith = await idleCpuSeconds(agent.pid);
    const released = new Map<string, number>();
    const allReleased = new Promise<void>((resolve) => {
      for (let i = 0; i < OWNERS; i++) {
        void events
          .next((e) => e.kind.case === "allocation" && e.kind.value.owner === `pid-${i}` && e.kind.value.released, 30_000)
          .then((at) => {
            released.set(`pid-${i}`, at);
            if (released.size === OWNERS) resolve();
          });
      }
    });
    const killedAt = performance.now();
    for (const sleeper of sleepers) sleeper.kill("SIGKILL");
    await allReleased;
    const latencies = [...released.values()].map((at) => at - killedAt).sort((a, b) => a - b);
    const fdsAfter = fds(agent.pid);
    events.close();
    return {
      owners: { processes: OWNERS, leases: OWNERS },
      descriptors: { without: fdsWithout, with: fdsWith, afterExits: fdsAfter },
      idleCpuSeconds: { seconds: IDLE_SECONDS, without: idleWithout, with: idleWith },
      killToReleaseEventMs: { p50: Math.round(latencies[Math.floor(latencies.length / 2)]! * 10) / 10, max: Math.round(latencies.at(-1)! * 10) / 10 },
    };
  } finally {
    for (const sleeper of sleepers) sleeper.kill("SIGKILL");
    await plugin.stop();
    await agent.stop();
    cleanup();
  }
}
