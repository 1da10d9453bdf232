/**
 * Device plugins through the whole agent, in-process: both registration
 * paths (the watched directory and Register on kubelet.sock, as upstream's
 * manager tests do in probe and direct mode), status, events, and a policy
 * reload that keeps the registered plugins without re-dialling them.
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

const quiet = createLogger({ level: "error", format: "text" });

async function startAgent(t: TestContext, maxPlugins?: number) {
  const dir = tempDir(t);
  const registry = path.join(dir, "registry");
  const pluginsDir = path.join(dir, "dp");
  const base = testPolicy({ watch: [registry], handlers: { DevicePlugin: {} }, maxPlugins });
  const policy: Policy = {
    ...base,
    devicePlugins: { registrationSocket: path.join(pluginsDir, "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: null },
  };
  const agent = new EdgeplugAgent({ policy, log: quiet });
  t.after(() => agent.stop());
  await agent.start();
  const channel = dialUnix(policy.api.socket!);
  t.after(() => channel.close());
  return { dir, registry, pluginsDir, policy, agent, api: createClient(Agent, channel.transport) };
}

test("watched directory: a DevicePlugin registers, its devices show in status, a stream end marks them unhealthy, and the plugin manager re-registers it", async (t) => {
  const { registry, agent, api } = await startAgent(t);
  fs.mkdirSync(registry, { recursive: true });
  const plugin = await startFakeDevicePlugin({
    socketPath: path.join(registry, "gpu.sock"),
    devices: healthyDevices(2, "gpu"),
    watchedAs: { name: "acme.io/gpu" },
  });
  t.after(() => plugin.stop());
  await waitForDeviceState(agent.devices, "the resource", () => agent.devices.resource("acme.io/gpu")?.allocatable === 2);
  const status = await api.status({});
  assert.deepEqual(
    status.resources.map((r) => [r.name, r.capacity, r.allocatable, r.connected, r.sockets]),
    [["acme.io/gpu", 2, 2, true, [plugin.socketPath]]],
  );
  assert.equal(status.plugins[0]?.state, "registered");
  plugin.endStreams();
  await waitForDeviceState(agent.devices, "disconnected", () => agent.devices.resource("acme.io/gpu")?.connected === false);
  assert.deepEqual(agent.devices.resource("acme.io/gpu")?.unhealthy, ["gpu0", "gpu1"]);
  // The plugin manager hears the lost connection and registers the plugin again, which reopens the stream.
  await waitForDeviceState(agent.devices, "reconnected", () => agent.devices.resource("acme.io/gpu")?.allocatable === 2);
});

test("watched directory: ValidatePlugin refuses another version or an invalid resource name with the kubelet's texts", async (t) => {
  const { registry, agent } = await startAgent(t);
  fs.mkdirSync(registry, { recursive: true });
  const badVersion = await startFakeDevicePlugin({ socketPath: path.join(registry, "v.sock"), devices: [], watchedAs: { name: "acme.io/a", versions: ["v1alpha"] } });
  const badName = await startFakeDevicePlugin({ socketPath: path.join(registry, "n.sock"), devices: [], watchedAs: { name: "gpu" } });
  t.after(() => Promise.all([badVersion.stop(), badName.stop()]).then(() => {}));
  const errorOf = (socket: string) => agent.pluginStatus.plugins().find((p) => p.socket === socket)?.error ?? "";
  await waitForDeviceState({ subscribe: (l) => agent.pluginStatus.subscribe(l) }, "both refused", () => errorOf(badVersion.socketPath) !== "" && errorOf(badName.socketPath) !== "");
  assert.match(errorOf(badVersion.socketPath), /manager version, v1beta1, is not among plugin supported versions \[v1alpha\]/);
  assert.match(errorOf(badName.socketPath), /invalid name of device plugin socket: the ResourceName "gpu" is invalid/);
});

test("kubelet.sock: Register with a file name relative to the directory connects back before it returns", async (t) => {
  const { pluginsDir, policy, agent, api } = await startAgent(t);
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "gpu-1.sock"), devices: healthyDevices(3) });
  t.after(() => plugin.stop());
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "gpu-1.sock", resource_name: "acme.io/gpu" });
  await waitForDeviceState(agent.devices, "3 devices", () => agent.devices.resource("acme.io/gpu")?.allocatable === 3);
  const granted = await api.allocate({ owner: "job-1", resources: [{ resource: "acme.io/gpu", count: 2 }] });
  assert.deepEqual(granted.allocations.map((a) => [a.owner, a.container, a.resource, a.devices]), [["job-1", "main", "acme.io/gpu", ["dev0", "dev1"]]]);
  assert.deepEqual(granted.allocations[0]?.response?.envs, { VISIBLE_DEVICES: "dev0,dev1" });
  const status = await api.status({});
  assert.deepEqual(status.allocations.map((a) => [a.owner, a.devices]), [["job-1", ["dev0", "dev1"]]]);
  const released = await api.release({ owner: "job-1" });
  assert.equal(released.released.length, 1);
  assert.deepEqual((await api.status({})).allocations, []);
});

test("security.maxPlugins counts the plugins of both registration paths; one connecting again on its own socket takes no new slot", async (t) => {
  const { registry, pluginsDir, policy, agent } = await startAgent(t, 2);
  fs.mkdirSync(registry, { recursive: true });
  const kubeletSocket = policy.devicePlugins.registrationSocket!;
  const first = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "a.sock"), devices: healthyDevices(1) });
  const watched = await startFakeDevicePlugin({ socketPath: path.join(registry, "w.sock"), devices: healthyDevices(1), watchedAs: { name: "acme.io/w" } });
  const third = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "c.sock"), devices: healthyDevices(1) });
  t.after(() => Promise.all([first.stop(), watched.stop(), third.stop()]).then(() => {}));
  await registerDevicePlugin(kubeletSocket, { endpoint: "a.sock", resource_name: "acme.io/a" });
  await waitForDeviceState(agent.devices, "the watched plugin", () => agent.devices.resource("acme.io/w")?.allocatable === 1);

  await assert.rejects(registerDevicePlugin(kubeletSocket, { endpoint: "c.sock", resource_name: "acme.io/c" }), {
    code: 8, // RESOURCE_EXHAUSTED
    details: "maxPlugins limit of 2 reached",
  });
  assert.equal(agent.devices.resource("acme.io/c"), undefined);
  // At the limit, the same plugin may still register again: its new connection replaces the old one.
  await registerDevicePlugin(kubeletSocket, { endpoint: "a.sock", resource_name: "acme.io/a" });
  assert.equal(agent.devices.resource("acme.io/a")?.connected, true);

  // A watched-directory plugin finds no slot either while both are held.
  const late = await startFakeDevicePlugin({ socketPath: path.join(registry, "late.sock"), devices: [], watchedAs: { name: "acme.io/late" } });
  t.after(() => late.stop());
  const lateRecord = () => agent.pluginStatus.plugins().find((plugin) => plugin.socket === late.socketPath);
  await waitForDeviceState({ subscribe: (l) => agent.pluginStatus.subscribe(l) }, "the late plugin refused", () => lateRecord()?.reason === "max_plugins");
  // Gone before a slot frees: its retries would otherwise race c.sock for that slot.
  await late.stop();

  // The kubelet.sock plugin going away frees its slot.
  await first.stop();
  await waitForDeviceState(agent.devices, "a disconnected", () => agent.devices.resource("acme.io/a")?.connected === false);
  await registerDevicePlugin(kubeletSocket, { endpoint: "c.sock", resource_name: "acme.io/c" });
  assert.equal(agent.devices.resource("acme.io/c")?.connected, true);
});

test("a policy reload that still accepts DevicePlugin neither drops nor re-dials the plugin", async (t) => {
  const { registry, policy, agent } = await startAgent(t);
  fs.mkdirSync(registry, { recursive: true });
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(registry, "gpu.sock"), devices: healthyDevices(1), watchedAs: { name: "acme.io/gpu" } });
  t.after(() => plugin.stop());
  await waitForDeviceState(agent.devices, "registered", () => agent.devices.resource("acme.io/gpu")?.allocatable === 1);
  const handlers = new Map(policy.handlers);
  handlers.set("DevicePlugin", { ...handlers.get("DevicePlugin")!, deny: ["acme.io/never"] });
  agent.applyPolicy({ ...policy, handlers });
  await agent.pluginStatus.whenSettled({ predicate: (plugins) => plugins.every((p) => p.state === "registered"), signal: AbortSignal.timeout(5000) });
  assert.equal(plugin.streams(), 1, "the same ListAndWatch stream");
  assert.equal(agent.devices.resource("acme.io/gpu")?.connected, true);
  plugin.endStreams();
  await waitForDeviceState(agent.devices, "the rebuilt handler still hears the end", () => agent.devices.resource("acme.io/gpu")?.connected === false);
});
