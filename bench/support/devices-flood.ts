/**
 * The devices benchmark's flood part: registration latency of generic
 * plugins (through the watched directory, timed by the plugin host as in
 * the registration benchmark) and of device plugins (Register on
 * kubelet.sock, timed here), first with the agent quiet, then while a
 * device plugin in another process floods ListAndWatch; and how much of
 * the flood the agent turned into events and checkpoint writes.
 */
import { fork } from "node:child_process";
import { once } from "node:events";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { registerDevicePlugin } from "../../test/support/fake-device-plugin.ts";
import { type PluginHost, startPluginHost } from "./plugin-host-client.ts";
import { clockTicksPerSecond, cpuTicks } from "./proc.ts";
import { encodedList, startRawDevicePlugin } from "./raw-device-plugin.ts";
import { type DevicesAgent, retried } from "./devices-agent.ts";
import { summarize } from "./stats.ts";

const FLOOD_ENTRY = fileURLToPath(new URL("./flood-plugin.ts", import.meta.url));
const FLOOD_DEVICES = Number(process.env.BENCH_FLOOD_DEVICES) || 1000;
const FLOOD_RESOURCE = "flood.io/dev";
const TRIALS = 30;
/** Longer than the 2 s burst of a plugin's list budget (list-budget.ts), so the trials meet the steady flood. */
const FLOOD_WARMUP_MS = 5000;

async function registrationTrials(agent: DevicesAgent, host: PluginHost, tag: string) {
  process.stderr.write(`devices: ${TRIALS} registrations through the watched directory (${tag})\n`);
  const samples: number[] = [];
  for (let i = 0; i < TRIALS; i++) {
    const socket = path.join(agent.registry, `${tag}-${i}.sock`);
    const reply = await host.start([socket], 10_000);
    const plugin = reply.plugins[0];
    if (!plugin) throw new Error(`${socket} did not register: ${JSON.stringify(reply.failures)}`);
    samples.push(plugin.notifyAt - plugin.listenAt);
    await host.stop([socket]);
  }
  return summarize(samples);
}

async function deviceRegistrationTrials(agent: DevicesAgent, tag: string) {
  process.stderr.write(`devices: ${TRIALS} device plugins registering on kubelet.sock (${tag})\n`);
  const samples: number[] = [];
  const list = encodedList(8, "d");
  for (let i = 0; i < TRIALS; i++) {
    const name = `${tag}-${i}.sock`;
    const socketPath = path.join(path.dirname(agent.registrationSocket), name);
    const plugin = await startRawDevicePlugin({ socketPath, registrationSocket: agent.registrationSocket, resource: `bench.io/${tag}${i}`, initial: list, register: false });
    const startedAt = performance.now();
    await registerDevicePlugin(agent.registrationSocket, { endpoint: name, resource_name: `bench.io/${tag}${i}` });
    samples.push(performance.now() - startedAt);
    await plugin.stop();
  }
  return summarize(samples);
}

export async function measureFlood(agent: DevicesAgent, dir: string) {
  const host = await startPluginHost();
  try {
    const quiet = { registration: await registrationTrials(agent, host, "quiet"), deviceRegister: await deviceRegistrationTrials(agent, "quiet") };
    const flooder = fork(FLOOD_ENTRY, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const exited = once(flooder, "exit").then(([code]) => {
      throw new Error(`the flooding plugin exited (${code})`);
    });
    exited.catch(() => {});
    const reply = () => Promise.race([once(flooder, "message").then(([message]) => message as { op: string; sent?: number }), exited]);
    flooder.send({ socketPath: path.join(dir, "dp", "flood.sock"), registrationSocket: agent.registrationSocket, resource: FLOOD_RESOURCE, count: FLOOD_DEVICES });
    await reply();
    process.stderr.write(`devices: flooding with lists of ${FLOOD_DEVICES} devices (${FLOOD_WARMUP_MS / 1000} s before measuring: the plugin's list budget spends its burst)\n`);
    await new Promise((resolve) => setTimeout(resolve, FLOOD_WARMUP_MS));
    const writesBefore = (await retried(() => agent.api().status({}))).answer.checkpoint?.writes ?? 0;
    const events = agent.watch();
    const ticksBefore = cpuTicks(agent.pid);
    const startedAt = performance.now();
    const flooded = { registration: await registrationTrials(agent, host, "flooded"), deviceRegister: await deviceRegistrationTrials(agent, "flooded") };
    events.close();
    const stopped = reply();
    flooder.send("stop");
    const { sent = 0 } = await stopped;
    const floodMs = performance.now() - startedAt;
    const agentCpuMs = ((cpuTicks(agent.pid) - ticksBefore) * 1000) / clockTicksPerSecond();
    const writes = ((await retried(() => agent.api().status({}))).answer.checkpoint?.writes ?? 0) - writesBefore;
    await exited.catch(() => {});
    return {
      quiet,
      flooded,
      flood: {
        devicesPerList: FLOOD_DEVICES,
        durationMs: Math.round(floodMs),
        listsWrittenByThePlugin: sent,
        listsWrittenPerSecond: Math.round((sent / floodMs) * 1000),
        resourceEventsToOneWatcher: events.countFor(FLOOD_RESOURCE),
        checkpointWrites: writes,
        agentCpuPercentOfCore: Math.round((agentCpuMs / floodMs) * 100),
      },
    };
  } finally {
    await host.close();
  }
}
