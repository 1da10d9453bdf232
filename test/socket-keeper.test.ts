/**
 * edgeplug's listening sockets come back when their file is removed while
 * the agent runs (the kubelet's would be gone until it restarts): at once
 * for the file alone, at the next resync when its directory went too. A
 * file another process put at the path is left alone.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

type LogLine = { msg: string; socket?: string } & Record<string, unknown>;

async function startAgent(t: TestContext, resyncMs = 3_600_000) {
  const dir = tempDir(t);
  const lines: LogLine[] = [];
  const waiters = new Set<() => void>();
  const log = createLogger({
    level: "info",
    format: "json",
    write: (line) => {
      lines.push(JSON.parse(line) as LogLine);
      for (const wake of waiters) wake();
    },
  });
  const base = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} }, resyncMs });
  const policy: Policy = {
    ...base,
    devicePlugins: { registrationSocket: path.join(dir, "dp", "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    api: { socket: path.join(dir, "run", "api.sock"), socketGroup: null, metrics: "127.0.0.1:0" },
  };
  const agent = new EdgeplugAgent({ policy, log });
  t.after(() => agent.stop());
  await agent.start();
  /** Resolves at the `count`-th log line with this message and socket. */
  const logged = (msg: string, socket: string, count = 1) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no log "${msg}" for ${socket}: ${JSON.stringify(lines.map((l) => l.msg))}`)), 5000);
      const wake = () => {
        if (lines.filter((line) => line.msg === msg && line.socket === socket).length < count) return;
        clearTimeout(timer);
        waiters.delete(wake);
        resolve();
      };
      waiters.add(wake);
      wake();
    });
  return { dir, policy, agent, lines, logged };
}

async function status(socketPath: string) {
  const channel = dialUnix(socketPath);
  try {
    return await createClient(Agent, channel.transport).status({});
  } finally {
    channel.close();
  }
}

test("a removed kubelet.sock is served again at once and device plugins register on it; so is a removed API socket", async (t) => {
  const { policy, agent, logged } = await startAgent(t);
  const kubeletSocket = policy.devicePlugins.registrationSocket!;
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(kubeletSocket), "gpu.sock"), devices: healthyDevices(2) });
  t.after(() => plugin.stop());

  fs.rmSync(kubeletSocket);
  await logged("device plugin registration socket serving again", kubeletSocket);
  await registerDevicePlugin(kubeletSocket, { endpoint: "gpu.sock", resource_name: "acme.io/gpu" });
  await waitForDeviceState(agent.devices, "2 devices", () => agent.devices.resource("acme.io/gpu")?.allocatable === 2);

  const apiSocket = policy.api.socket!;
  fs.rmSync(apiSocket);
  await logged("api socket serving again", apiSocket);
  assert.equal((await status(apiSocket)).resources[0]?.name, "acme.io/gpu");
  assert.equal(fs.statSync(apiSocket).mode & 0o777, 0o660, "with the API socket's mode");

  // Removed again: it comes back each time.
  fs.rmSync(kubeletSocket);
  await logged("device plugin registration socket serving again", kubeletSocket, 2);
  await registerDevicePlugin(kubeletSocket, { endpoint: "gpu.sock", resource_name: "acme.io/gpu" });
});

test("a removed device-plugin directory comes back with kubelet.sock at the next resync, and its plugins' devices stay", async (t) => {
  const { policy, agent, logged } = await startAgent(t, 100);
  const kubeletSocket = policy.devicePlugins.registrationSocket!;
  const pluginDir = path.join(path.dirname(kubeletSocket), "..", "plugin-elsewhere");
  fs.mkdirSync(pluginDir, { recursive: true });
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(kubeletSocket), "gpu.sock"), devices: healthyDevices(1) });
  t.after(() => plugin.stop());
  await registerDevicePlugin(kubeletSocket, { endpoint: "gpu.sock", resource_name: "acme.io/gpu" });
  await waitForDeviceState(agent.devices, "1 device", () => agent.devices.resource("acme.io/gpu")?.allocatable === 1);

  fs.rmSync(path.dirname(kubeletSocket), { recursive: true });
  await logged("device plugin registration socket serving again", kubeletSocket);
  assert.ok(fs.lstatSync(kubeletSocket).isSocket());
  // The plugin's own connection is not the registration socket's: its devices never left.
  assert.equal(agent.devices.resource("acme.io/gpu")?.connected, true);
});

test("a file another process put at the socket's path is left alone, said by the metrics, and kept when the agent stops", async (t) => {
  const { dir, policy, agent, logged } = await startAgent(t);
  const kubeletSocket = policy.devicePlugins.registrationSocket!;
  const servingGauge = async () => {
    const text = await (await fetch(`${agent.metricsUrl}/metrics`)).text();
    return text.split("\n").filter((line) => line.startsWith("edgeplug_socket_serving{"));
  };
  assert.deepEqual(await servingGauge(), ['edgeplug_socket_serving{socket="api"} 1', 'edgeplug_socket_serving{socket="registration"} 1']);
  const theirs = path.join(dir, "theirs");
  fs.writeFileSync(theirs, "not edgeplug's");
  // A rename replaces the file in one step: the path is never missing.
  fs.renameSync(theirs, kubeletSocket);
  await logged("device plugin registration socket was replaced by a file edgeplug did not create; it is left alone", kubeletSocket);
  assert.deepEqual(await servingGauge(), ['edgeplug_socket_serving{socket="api"} 1', 'edgeplug_socket_serving{socket="registration"} 0']);
  await agent.stop();
  assert.equal(fs.readFileSync(kubeletSocket, "utf8"), "not edgeplug's");
});
