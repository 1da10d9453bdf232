/**
 * What a flapping device plugin costs the disk: the built daemon with a
 * 10-device plugin whose last device turns unhealthy and healthy again
 * every BENCH_WEAR_FLAP_MS (default 10 ms) for BENCH_WEAR_SECONDS (default
 * 20 s), with BENCH_WEAR_OWNERS owners (default 5) holding a device each
 * and an Allocate answer of BENCH_WEAR_ANSWER_BYTES (default 4096) each, so
 * the checkpoint is the size a small node's is. Reports the checkpoint
 * writes, the file's size, the bytes those writes put in files (writes ×
 * size) and what the kernel counted the agent sending to the block layer
 * (/proc/PID/io write_bytes: 0 on tmpfs), each also per hour.
 *
 *   npm run bench -- wear
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { shortTempDir } from "../test/support/agent-process.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "../test/support/fake-device-plugin.ts";
import { startDevicesAgent } from "./support/devices-agent.ts";

const RESOURCE = "bench.io/flapping";
const SECONDS = Math.max(2, Number(process.env.BENCH_WEAR_SECONDS) || 20);
const FLAP_MS = Math.max(1, Number(process.env.BENCH_WEAR_FLAP_MS) || 10);
const OWNERS = Math.min(9, Math.max(0, Number(process.env.BENCH_WEAR_OWNERS ?? 5)));
const ANSWER_BYTES = Math.max(0, Number(process.env.BENCH_WEAR_ANSWER_BYTES ?? 4096));

function blockWriteBytes(pid: number): number {
  return Number(/^write_bytes: (\d+)$/m.exec(fs.readFileSync(`/proc/${pid}/io`, "utf8"))?.[1] ?? Number.NaN);
}

export async function run(): Promise<object> {
  const { dir, cleanup } = shortTempDir("ep-wear-");
  const agent = await startDevicesAgent(dir);
  const devices = healthyDevices(10);
  const plugin = await startFakeDevicePlugin({
    socketPath: path.join(path.dirname(agent.registrationSocket), "flapping.sock"),
    devices,
    allocateResponse: () => ({ envs: { BENCH_PAYLOAD: "x".repeat(ANSWER_BYTES) } }),
  });
  try {
    await registerDevicePlugin(agent.registrationSocket, { endpoint: "flapping.sock", resource_name: RESOURCE });
    const deadline = performance.now() + 10_000;
    while ((await agent.api().status({})).resources.find((r) => r.name === RESOURCE)?.allocatable !== 10) {
      if (performance.now() > deadline) throw new Error("the plugin's 10 devices never showed");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    for (let i = 0; i < OWNERS; i++) await agent.api().allocate({ owner: `owner-${i}`, resources: [{ resource: RESOURCE, count: 1 }] });
    const checkpoint = path.join(dir, "state", "kubelet_internal_checkpoint");
    const writesBefore = (await agent.api().status({})).checkpoint?.writes ?? 0;
    const blockBefore = blockWriteBytes(agent.pid);
    const started = performance.now();
    let flaps = 0;
    while (performance.now() - started < SECONDS * 1000) {
      const sick = flaps++ % 2 === 0;
      plugin.setDevices(devices.map((device, index) => (index === 9 ? { ...device, health: sick ? "Unhealthy" : "Healthy" } : device)));
      await new Promise((resolve) => setTimeout(resolve, FLAP_MS));
    }
    const seconds = (performance.now() - started) / 1000;
    const writes = ((await agent.api().status({})).checkpoint?.writes ?? 0) - writesBefore;
    const blockBytes = blockWriteBytes(agent.pid) - blockBefore;
    const fileBytes = fs.statSync(checkpoint).size;
    const perHour = (value: number) => Math.round((value * 3600) / seconds);
    return {
      seconds: Math.round(seconds * 10) / 10,
      flaps,
      owners: OWNERS,
      fileBytes,
      writes,
      writesPerHour: perHour(writes),
      fileBytesWritten: writes * fileBytes,
      fileMiBPerHour: Math.round((perHour(writes * fileBytes) / 2 ** 20) * 10) / 10,
      blockBytesWritten: blockBytes,
      blockMiBPerHour: Math.round((perHour(blockBytes) / 2 ** 20) * 10) / 10,
    };
  } finally {
    await plugin.stop();
    await agent.stop();
    cleanup();
  }
}
