/**
 * The soak: dist/edgeplug under everything at once for N minutes, to show
 * that nothing grows while the work stays the same.
 *
 *   npm run soak -- --minutes 30        # the long form (docs/performance.md)
 *   npm run soak -- --minutes 1         # the short form CI runs
 *
 * At once, all the time:
 * - plugins churning: four device plugins on kubelet.sock, one of them
 *   stopped and started again on a fresh socket every 2 s (the same four
 *   resource names, so nothing is meant to accumulate);
 * - devices flapping: a fifth plugin's last device turns unhealthy and back every 50 ms;
 * - allocations coming and going: plain owners allocated and released,
 *   owners with a 2 s lease (some renewed, the others lapse), owners held
 *   by a short-lived process (released when it is killed);
 * - WatchEvents readers: four that read everything, two slow ones that
 *   read an event a second (cut off by the agent when they fall behind,
 *   then open again);
 * - a SIGHUP (policy reload) every 10 s.
 *
 * Every interval (a minute; a sixth of the run when shorter than 6 min)
 * it prints one JSON line: the agent's RSS, open descriptors, CPU seconds
 * and bytes written (write(2) calls, /proc/PID/io wchar, logs included;
 * and what reached the block layer, write_bytes) in that interval, and
 * the work done. At the end it compares the last interval with the first
 * one after a warm-up interval, and fails (exit 1) past these bounds:
 *   RSS          at most 25 % + 16 MiB above the first;
 *   descriptors  at most 16 more than the first;
 *   CPU seconds  at most twice the first's + 1 s;
 *   bytes written at most twice the first's + 1 MiB.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { type Client, createClient } from "@connectrpc/connect";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { processIdentity } from "../src/platform/process-watch.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { EDGEPLUG_BINARY, shortTempDir } from "../test/support/agent-process.ts";
import { type FakeDevicePlugin, healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "../test/support/fake-device-plugin.ts";
import { clockTicksPerSecond, cpuTicks, residentKiB } from "./support/proc.ts";

const BOUNDS = { rssRatio: 1.25, rssSlackKiB: 16 * 1024, fdSlack: 16, cpuRatio: 2, cpuSlackSeconds: 1, writeRatio: 2, writeSlackBytes: 2 ** 20 };

interface Sample {
  minute: number;
  rssMiB: number;
  fds: number;
  cpuSeconds: number;
  writtenBytes: number;
  blockWrittenBytes: number;
  work: Record<string, number>;
}

const { values } = parseArgs({ options: { minutes: { type: "string", default: "1" } }, strict: true });
const minutes = Number(values.minutes);
if (!(minutes >= 1 && minutes <= 24 * 60)) {
  process.stderr.write(`soak: --minutes must be between 1 and 1440, got ${JSON.stringify(values.minutes)}\n`);
  process.exit(2);
}
const intervalMs = Math.min(60_000, (minutes * 60_000) / 6);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function io(pid: number): { wchar: number; writeBytes: number } {
  const text = fs.readFileSync(`/proc/${pid}/io`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}: (\\d+)$`, "m").exec(text)?.[1] ?? Number.NaN);
  return { wchar: field("wchar"), writeBytes: field("write_bytes") };
}

async function main(): Promise<number> {
  if (!fs.existsSync(EDGEPLUG_BINARY)) throw new Error(`${EDGEPLUG_BINARY} is missing: npm run build first`);
  const { dir, cleanup } = shortTempDir("ep-soak-");
  const pluginsDir = path.join(dir, "dp");
  const registrationSocket = path.join(pluginsDir, "kubelet.sock");
  const apiSocket = path.join(dir, "api.sock");
  const policy = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policy,
    [
      "version: 1",
      "nodeName: soak-node",
      "watch:",
      `  - path: ${path.join(dir, "registry")}`,
      "handlers:",
      "  DevicePlugin: {}",
      `devicePlugins: { registrationSocket: ${registrationSocket}, gracePeriod: 30s }`,
      `checkpoint: { path: ${path.join(dir, "state", "kubelet_internal_checkpoint")} }`,
      `api: { socket: ${apiSocket}, metrics: null }`,
      `podResources: { socket: null }`,
      "log: { level: info, format: json }",
      "",
    ].join("\n"),
  );
  const agent = spawn(EDGEPLUG_BINARY, ["run", "--config", policy], { stdio: ["ignore", "ignore", "pipe"] });
  const pid = agent.pid!;
  let logBytes = 0;
  let running = false;
  let startLog = "";
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the agent did not start within 30 s")), 30_000);
    agent.stderr!.on("data", (chunk: Buffer) => {
      logBytes += chunk.length;
      if (!running) startLog += chunk.toString("utf8");
      if (!running && chunk.toString("utf8").includes('"edgeplug running"')) {
        running = true;
        clearTimeout(timer);
        resolve();
      }
    });
    agent.once("exit", (code) => reject(new Error(`the agent exited with ${code}: ${startLog.slice(0, 2000)}`)));
  });
  const stopping = new AbortController();
  const work: Record<string, number> = {};
  const count = (what: string) => void (work[what] = (work[what] ?? 0) + 1);
  const sleepers = new Set<ChildProcess>();
  const plugins = new Map<string, FakeDevicePlugin>();
  const channels: Array<ReturnType<typeof dialUnix>> = [];
  const loops: Promise<void>[] = [];
  const loop = (name: string, body: () => Promise<void>) =>
    loops.push(
      (async () => {
        while (!stopping.signal.aborted) {
          try {
            await body();
          } catch (error) {
            if (!stopping.signal.aborted) count(`${name}Errors`);
            if (process.env.SOAK_VERBOSE) process.stderr.write(`${name}: ${(error as Error).message}\n`);
            await sleep(100);
          }
        }
      })(),
    );
  const client = (): Client<typeof Agent> => {
    const channel = dialUnix(apiSocket);
    channels.push(channel);
    return createClient(Agent, channel.transport);
  };
  try {
    await ready;
    const api = client();
    const startPlugin = async (resource: string, devices = 8) => {
      const socketPath = path.join(pluginsDir, `${resource.split("/")[1]}-${Date.now()}.sock`);
      const plugin = await startFakeDevicePlugin({ socketPath, devices: healthyDevices(devices) });
      plugins.set(resource, plugin);
      await registerDevicePlugin(registrationSocket, { endpoint: path.basename(socketPath), resource_name: resource });
      return plugin;
    };
    const churned = ["soak.io/a", "soak.io/b", "soak.io/c", "soak.io/d"];
    for (const resource of churned) await startPlugin(resource);
    const flapping = await startPlugin("soak.io/flap", 10);

    let turn = 0;
    loop("churn", async () => {
      const resource = churned[turn++ % churned.length]!;
      const old = plugins.get(resource);
      await old?.stop();
      await startPlugin(resource);
      count("pluginRestarts");
      await sleep(2_000);
    });
    let flaps = 0;
    const devices = healthyDevices(10);
    loop("flap", async () => {
      const sick = flaps++ % 2 === 0;
      flapping.setDevices(devices.map((device, index) => (index === 9 ? { ...device, health: sick ? "Unhealthy" : "Healthy" } : device)));
      count("flaps");
      await sleep(50);
    });
    let owner = 0;
    loop("plain", async () => {
      const name = `plain-${owner++}`;
      await api.allocate({ owner: name, resources: [{ resource: "soak.io/flap", count: 1 }] });
      await sleep(200);
      await api.release({ owner: name });
      count("plainAllocations");
    });
    loop("lease", async () => {
      const name = `lease-${owner++}`;
      const request = { owner: name, resources: [{ resource: churned[owner % churned.length]!, count: 1 }], leaseMs: 2_000n };
      await api.allocate(request);
      count("leases");
      if (owner % 2 === 0) {
        await sleep(1_000);
        await api.allocate(request);
        count("leaseRenewals");
      }
      await sleep(500);
    });
    loop("process", async () => {
      const sleeper = spawn("sleep", ["600"], { stdio: "ignore" });
      sleepers.add(sleeper);
      const identity = processIdentity(sleeper.pid!);
      try {
        if (identity === null) throw new Error("the sleeper is not running");
        await api.allocate({ owner: `pid-${owner++}`, resources: [{ resource: "soak.io/flap", count: 1 }], ownerPid: identity.pid, ownerPidStartTime: BigInt(identity.startTime) });
        count("processOwners");
        await sleep(300 + Math.random() * 1_000);
      } finally {
        sleeper.kill("SIGKILL");
        sleepers.delete(sleeper);
      }
    });
    for (let i = 0; i < 6; i++) {
      const slow = i >= 4;
      loop(slow ? "slowReader" : "reader", async () => {
        const watcher = client();
        for await (const event of watcher.watchEvents({}, { signal: stopping.signal })) {
          count(slow ? "slowReaderEvents" : "readerEvents");
          if (event.kind.case === "snapshot") count(slow ? "slowReaderStreams" : "readerStreams");
          if (slow) await sleep(1_000);
        }
      });
    }
    loop("sighup", async () => {
      await sleep(10_000);
      if (!stopping.signal.aborted) {
        process.kill(pid, "SIGHUP");
        count("sighups");
      }
    });

    const ticks = clockTicksPerSecond();
    const samples: Sample[] = [];
    let before = { cpu: cpuTicks(pid), io: io(pid), log: logBytes };
    const started = performance.now();
    for (let minute = 1; performance.now() - started < minutes * 60_000 - 1; minute++) {
      await sleep(Math.min(intervalMs, minutes * 60_000 - (performance.now() - started)));
      const now = { cpu: cpuTicks(pid), io: io(pid), log: logBytes };
      const sample: Sample = {
        minute: Math.round(((performance.now() - started) / 60_000) * 100) / 100,
        rssMiB: Math.round((residentKiB(pid) / 1024) * 10) / 10,
        fds: fs.readdirSync(`/proc/${pid}/fd`).length,
        cpuSeconds: (now.cpu - before.cpu) / ticks,
        writtenBytes: now.io.wchar - before.io.wchar,
        blockWrittenBytes: now.io.writeBytes - before.io.writeBytes,
        work: { ...work, logBytes: now.log - before.log },
      };
      for (const key of Object.keys(work)) work[key] = 0;
      before = now;
      samples.push(sample);
      process.stdout.write(JSON.stringify(sample) + "\n");
    }
    return verdict(samples);
  } finally {
    stopping.abort();
    for (const sleeper of sleepers) sleeper.kill("SIGKILL");
    for (const channel of channels) channel.close();
    agent.kill("SIGTERM");
    await new Promise((resolve) => (agent.exitCode !== null ? resolve(null) : agent.once("exit", resolve)));
    await Promise.allSettled([...plugins.values()].map((plugin) => plugin.stop()));
    await Promise.race([Promise.allSettled(loops), sleep(5_000)]);
    cleanup();
  }
}

/** Compares the last interval with the first after the warm-up; prints the verdict; 0 when within the bounds. */
function verdict(samples: Sample[]): number {
  const first = samples[Math.min(1, samples.length - 1)]!;
  const last = samples.at(-1)!;
  const failures: string[] = [];
  const rssBound = first.rssMiB * BOUNDS.rssRatio + BOUNDS.rssSlackKiB / 1024;
  if (last.rssMiB > rssBound) failures.push(`RSS ${last.rssMiB} MiB > ${rssBound.toFixed(1)} MiB (${first.rssMiB} MiB × ${BOUNDS.rssRatio} + 16 MiB)`);
  if (last.fds > first.fds + BOUNDS.fdSlack) failures.push(`descriptors ${last.fds} > ${first.fds} + ${BOUNDS.fdSlack}`);
  const scale = (sample: Sample) => sample.minute - (samples[samples.indexOf(sample) - 1]?.minute ?? 0);
  const cpuBound = (first.cpuSeconds / scale(first)) * BOUNDS.cpuRatio + BOUNDS.cpuSlackSeconds;
  if (last.cpuSeconds / scale(last) > cpuBound) failures.push(`CPU ${(last.cpuSeconds / scale(last)).toFixed(2)} s/min > ${cpuBound.toFixed(2)} s/min`);
  const writeBound = (first.writtenBytes / scale(first)) * BOUNDS.writeRatio + BOUNDS.writeSlackBytes;
  if (last.writtenBytes / scale(last) > writeBound) failures.push(`bytes written ${Math.round(last.writtenBytes / scale(last))}/min > ${Math.round(writeBound)}/min`);
  const errors = Object.entries(last.work).filter(([key, value]) => key.endsWith("Errors") && value > 0);
  process.stdout.write(
    JSON.stringify({ verdict: failures.length === 0 ? "ok" : "grew", failures, bounds: BOUNDS, comparedMinutes: [first.minute, last.minute], errorsInLastInterval: Object.fromEntries(errors) }) + "\n",
  );
  if (samples.every((sample) => (sample.work.processOwners ?? 0) === 0 && (sample.work.leases ?? 0) === 0)) {
    process.stdout.write(JSON.stringify({ verdict: "no work", failures: ["no lease or process owner was allocated"] }) + "\n");
    return 1;
  }
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`soak failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  },
);
