/**
 * The device checkpoint through the agent (docs/devices.md, "Checkpoint and restarts"):
 * allocations survive a restart, restored resources are disconnected with
 * no devices until their plugin returns and go after the grace period if it
 * never does, a corrupt file is moved aside and reported in the log, status
 * and metrics, a directory that cannot be created stops the start, /readyz
 * waits for the restore, and the last changes are on disk when stop returns.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { statusToJson, statusToText } from "../src/api/status.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { decodeCheckpoint } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { runEdgeplug } from "./support/agent-process.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const R = "acme.io/gpu";

function agentPolicy(dir: string, options: { gracePeriodMs?: number; checkpointPath?: string } = {}): Policy {
  const base = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} }, checkpointPath: options.checkpointPath });
  return {
    ...base,
    // The fake plugins here keep their socket across the agent's restart and register again on it.
    devicePlugins: { registrationSocket: path.join(dir, "dp", "kubelet.sock"), gracePeriodMs: options.gracePeriodMs ?? 60_000, removeSocketsAtStart: false, topologyPolicy: "none" },
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: "127.0.0.1:0" },
  };
}

async function startAgent(t: TestContext, policy: Policy) {
  const logs: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: "info", format: "json", write: (line) => void logs.push(JSON.parse(line)) });
  const agent = new EdgeplugAgent({ policy, log });
  t.after(() => agent.stop());
  await agent.start();
  const channel = dialUnix(policy.api.socket!);
  t.after(() => channel.close());
  return { agent, logs, api: createClient(Agent, channel.transport) };
}

async function devicePlugin(t: TestContext, policy: Policy, name: string, count = 3) {
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(path.dirname(policy.devicePlugins.registrationSocket!), name), devices: healthyDevices(count) });
  t.after(() => plugin.stop());
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: name, resource_name: R });
  return plugin;
}

async function metricsText(agent: EdgeplugAgent): Promise<string> {
  return (await fetch(`${agent.metricsUrl}/metrics`)).text();
}

const checkpointOf = (policy: Policy) => decodeCheckpoint(fs.readFileSync(policy.checkpoint.path));

test("allocations survive a restart; the resource is back disconnected with capacity 0 until its plugin re-registers", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir);
  const first = await startAgent(t, policy);
  const plugin = await devicePlugin(t, policy, "gpu.sock");
  await waitForDeviceState(first.agent.devices, "3 devices", () => first.agent.devices.resource(R)?.allocatable === 3);
  await first.api.allocate({ owner: "job-7", resources: [{ resource: R, count: 2 }] });
  assert.deepEqual(checkpointOf(policy).podDeviceEntries.map((e) => e.podUID), ["job-7"], "on disk before Allocate answers");
  // The allocation is on disk as soon as stop returns (SIGTERM: the last writes are flushed).
  await first.agent.stop();
  const written = checkpointOf(policy);
  assert.deepEqual(written.podDeviceEntries.map((e) => [e.podUID, e.containerName, e.resourceName, [...e.deviceIDs]]), [["job-7", "main", R, [[-1, ["dev0", "dev1"]]]]]);
  assert.deepEqual([...written.registeredDevices], [[R, ["dev0", "dev1", "dev2"]]]);

  const second = await startAgent(t, policy);
  const restored = statusToJson(await second.api.status({}));
  assert.deepEqual(restored.resources, [{ name: R, capacity: 0, allocatable: 0, healthy: [], unhealthy: [], connected: false, sockets: [], error: null }]);
  // A plain owner restored from the checkpoint has no age: the kubelet's format keeps no time.
  assert.deepEqual(restored.allocations, [
    { owner: "job-7", container: "main", resource: R, devices: ["dev0", "dev1"], allocatedAt: null, ageSeconds: null, kind: "plain", ownerPid: null, leaseExpiresAt: null },
  ]);
  assert.equal(restored.ok, false, "a resource whose plugin is not back is not ok");
  assert.equal(restored.checkpoint?.restore, "restored");

  // The plugin re-registers (as after a kubelet restart); the restored owner keeps its devices.
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "gpu.sock", resource_name: R });
  await waitForDeviceState(second.agent.devices, "back", () => second.agent.devices.resource(R)?.allocatable === 3);
  const next = await second.api.allocate({ owner: "job-8", resources: [{ resource: R, count: 1 }] });
  assert.deepEqual(next.allocations[0]?.devices, ["dev2"]);
  await assert.rejects(second.api.allocate({ owner: "job-9", resources: [{ resource: R, count: 1 }] }), /Requested: 1, Available: 0/);
  assert.equal(plugin.allocateCalls.length, 2);
});

test("a restored resource whose plugin never returns is removed after gracePeriod, and the checkpoint forgets it", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir, { gracePeriodMs: 60_000 });
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  const kubeletFile = fs.readFileSync(new URL("fixtures/checkpoint/kubelet-gpu-registered.json", import.meta.url));
  fs.writeFileSync(policy.checkpoint.path, kubeletFile);
  const { agent } = await startAgent(t, { ...policy, devicePlugins: { ...policy.devicePlugins, gracePeriodMs: 50 } });
  assert.equal(agent.devices.resource("nvidia.com/gpu")?.connected, false, "restored from the kubelet's checkpoint");
  await waitForDeviceState(agent.devices, "removal after the grace period", () => agent.devices.resource("nvidia.com/gpu") === undefined);
  assert.equal(await agent.devices.flush(), true);
  assert.deepEqual([...checkpointOf(policy).registeredDevices], []);
});

test("a corrupt checkpoint is moved aside unchanged, the agent starts empty, and log, status and metrics say so", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir);
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  const torn = fs.readFileSync(new URL("fixtures/checkpoint/kubelet-tegra-allocated.json", import.meta.url)).subarray(0, 120);
  fs.writeFileSync(policy.checkpoint.path, torn);
  const { agent, api, logs } = await startAgent(t, policy);

  const status = await api.status({});
  const json = statusToJson(status);
  assert.equal(json.checkpoint?.restore, "corrupt");
  assert.match(json.checkpoint?.restoreError ?? "", /not JSON/);
  const movedTo = json.checkpoint!.movedTo!;
  assert.match(path.basename(movedTo), /^kubelet_internal_checkpoint\.corrupt-\d{8}T\d{6}\.\d{3}Z$/);
  assert.equal(path.dirname(movedTo), path.dirname(policy.checkpoint.path));
  assert.deepEqual(fs.readFileSync(movedTo), torn, "bytes unchanged");
  assert.deepEqual(json.allocations, []);
  assert.match(statusToText(status), new RegExp(`checkpoint .*: corrupt at start \\(.*\\); moved aside to ${movedTo.replace(/[.]/g, "\\.")}, started with no allocations`));
  assert.ok(logs.some((record) => record["msg"] === "checkpoint is corrupt: moved aside, starting with no allocations" && record["movedTo"] === movedTo));
  const metrics = await metricsText(agent);
  assert.match(metrics, /^edgeplug_checkpoint_restores_total\{result="corrupt"\} 1$/m);
  assert.match(metrics, /^edgeplug_checkpoint_restores_total\{result="restored"\} 0$/m);
});

test("a checkpoint directory that cannot be created stops the start, naming the path; nothing is left serving", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "a-file"), "");
  const policy = agentPolicy(dir, { checkpointPath: path.join(dir, "a-file", "state", "kubelet_internal_checkpoint") });
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "error", write: () => {} }) });
  t.after(() => agent.stop());
  assert.equal(agent.health.readiness().checks.find((check) => check.name === "checkpoint-restored")?.ok, false);
  await assert.rejects(agent.start(), (error: Error) => error.message.includes(path.join(dir, "a-file")));
  assert.equal(fs.existsSync(policy.api.socket!), false, "the API socket is removed again");
  assert.equal(agent.health.readiness().ok, false);
});

test("edgeplug run exits 1 when the checkpoint directory cannot be created", async (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, "a-file"), "");
  const file = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    file,
    [
      "version: 1",
      "watch:",
      `  - path: ${path.join(dir, "registry")}`,
      "devicePlugins: { registrationSocket: null }",
      "podResources: { socket: null }",
      `checkpoint: { path: ${path.join(dir, "a-file", "kubelet_internal_checkpoint")} }`,
      `api: { socket: ${path.join(dir, "api.sock")}, metrics: null }`,
      "",
    ].join("\n"),
  );
  const { code, stderr } = await runEdgeplug(["run", "--config", file]);
  assert.equal(code, 1, stderr);
  assert.match(stderr, new RegExp(`${path.join(dir, "a-file")}`));
});

test("/readyz waits for the checkpoint restore; metrics count devices, allocations and checkpoint writes", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir);
  const { agent, api } = await startAgent(t, policy);
  const ready = await fetch(`${agent.metricsUrl}/readyz`);
  assert.equal(ready.status, 200);
  assert.match(await ready.text(), /^\[\+\]checkpoint-restored ok$/m);

  const plugin = await devicePlugin(t, policy, "gpu.sock", 3);
  await waitForDeviceState(agent.devices, "3 devices", () => agent.devices.resource(R)?.allocatable === 3);
  plugin.setDevices([...healthyDevices(2), { ID: "dev2", health: "Unhealthy" }]);
  await waitForDeviceState(agent.devices, "one unhealthy", () => agent.devices.resource(R)?.unhealthy.length === 1);
  await api.allocate({ owner: "a", resources: [{ resource: R, count: 1 }] });
  await api.allocate({ owner: "b", resources: [{ resource: R, count: 1 }] });
  await api.release({ owner: "a" });
  assert.equal(await agent.devices.flush(), true);

  const metrics = await metricsText(agent);
  assert.match(metrics, /^edgeplug_devices\{resource="acme\.io\/gpu",health="healthy"\} 2$/m);
  assert.match(metrics, /^edgeplug_devices\{resource="acme\.io\/gpu",health="unhealthy"\} 1$/m);
  assert.match(metrics, /^edgeplug_allocations_total\{resource="acme\.io\/gpu"\} 2$/m);
  assert.match(metrics, /^edgeplug_allocated_devices\{resource="acme\.io\/gpu"\} 1$/m);
  const writes = Number(/^edgeplug_checkpoint_writes_total\{result="success"\} (\d+)$/m.exec(metrics)?.[1]);
  assert.ok(writes >= 1, metrics);
  assert.equal(writes, statusToJson(await api.status({})).checkpoint?.writes);
  assert.match(metrics, /^edgeplug_checkpoint_writes_total\{result="failure"\} 0$/m);
  assert.match(metrics, new RegExp(`^edgeplug_checkpoint_write_duration_seconds_count ${writes}$`, "m"));
  assert.match(metrics, /^edgeplug_checkpoint_restores_total\{result="missing"\} 1$/m);
});

test("while the checkpoint cannot be written, allocations and releases are refused with the cause and status reports it; both work again once the disk allows it", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir);
  const { agent, api } = await startAgent(t, policy);
  await devicePlugin(t, policy, "gpu.sock", 2);
  await waitForDeviceState(agent.devices, "2 devices", () => agent.devices.resource(R)?.allocatable === 2);
  await api.allocate({ owner: "held", resources: [{ resource: R, count: 1 }] });
  // The directory goes away and a file takes its place: the next write cannot create its temporary file.
  const stateDir = path.dirname(policy.checkpoint.path);
  fs.rmSync(stateDir, { recursive: true });
  fs.writeFileSync(stateDir, "");
  const cause = `cannot write the checkpoint ${policy.checkpoint.path}: ENOTDIR`;
  await assert.rejects(api.allocate({ owner: "a", resources: [{ resource: R, count: 1 }] }), (error: Error) => {
    assert.match(error.message, new RegExp(`^\\[failed_precondition\\] nothing was allocated to owner a, the allocation was undone: ${cause}`));
    return true;
  });
  await assert.rejects(
    api.allocate({ owner: "a", resources: [{ resource: R, count: 1 }] }),
    /\[failed_precondition\] nothing was allocated to owner a: cannot write the checkpoint .*ENOTDIR/,
    "refused before any plugin call",
  );
  await assert.rejects(api.release({ owner: "held" }), new RegExp(`\\[failed_precondition\\] owner held was not released, its devices stay held: ${cause}`));
  assert.deepEqual(agent.devices.allocations().map((a) => a.owner), ["held"], "nothing allocated, nothing released");
  const failing = statusToJson(await api.status({})).checkpoint!;
  assert.match(failing.writeError ?? "", new RegExp(cause));
  assert.ok(failing.writeFailures >= 1);
  assert.match(await metricsText(agent), /^edgeplug_checkpoint_writes_total\{result="failure"\} [1-9]\d*$/m);
  assert.match(statusToText(await api.status({})), /: last write failed: cannot write the checkpoint/);

  fs.rmSync(stateDir);
  fs.mkdirSync(stateDir);
  const granted = await api.allocate({ owner: "a", resources: [{ resource: R, count: 1 }] });
  assert.equal(granted.allocations[0]?.devices.length, 1, "allocations work again at once, without waiting for the retry");
  assert.deepEqual(checkpointOf(policy).podDeviceEntries.map((e) => e.podUID).sort(), ["a", "held"]);
  assert.equal((await api.release({ owner: "held" })).released.length, 1);
  assert.deepEqual(checkpointOf(policy).podDeviceEntries.map((e) => e.podUID), ["a"]);
  assert.equal(statusToJson(await api.status({})).checkpoint?.writeError, null);
});

test("docs/metrics.md lists exactly the edgeplug and plugin_manager metrics the agent serves", async (t) => {
  const { agent } = await startAgent(t, agentPolicy(tempDir(t)));
  const served = new Set([...(await metricsText(agent)).matchAll(/^# TYPE ((?:edgeplug|plugin_manager)_\w+) /gm)].map((match) => match[1]!));
  const docs = fs.readFileSync(new URL("../docs/metrics.md", import.meta.url), "utf8");
  const documented = new Set([...docs.matchAll(/^\| `((?:edgeplug|plugin_manager)_\w+)` \|/gm)].map((match) => match[1]!));
  assert.deepEqual([...documented].sort(), [...served].sort());
});

test("a checkpoint a kubelet up to 1.19 wrote is restored, its devices on NUMA node 0 as newer kubelets take them, and written back in the current layout", async (t) => {
  const dir = tempDir(t);
  const policy = agentPolicy(dir);
  fs.mkdirSync(path.dirname(policy.checkpoint.path), { recursive: true });
  fs.copyFileSync(new URL("fixtures/checkpoint/kubelet-1.19-allocated.json", import.meta.url), policy.checkpoint.path);
  const { agent, logs } = await startAgent(t, policy);
  assert.deepEqual(agent.devices.allocations().map((a) => [a.owner, a.container, a.resource, a.devices]), [
    ["6d1a2f3e-0c4b-4d5e-9f60-7a8b9c0d1e2f", "worker", "acme.io/fpga", ["fpga1", "fpga0"]],
  ]);
  assert.ok(logs.some((record) => record.msg === "checkpoint written by a kubelet up to 1.19: converted, its allocated devices taken as on NUMA node 0 as newer kubelets do"));
  assert.equal(await agent.devices.flush(), true);
  // The file now reads as every kubelet since 1.20 reads its own: DeviceIDs by NUMA node.
  const onDisk = JSON.parse(fs.readFileSync(policy.checkpoint.path, "utf8")) as { Data: { PodDeviceEntries: Array<{ DeviceIDs: unknown }> } };
  assert.deepEqual(onDisk.Data.PodDeviceEntries.map((entry) => entry.DeviceIDs), [{ "0": ["fpga1", "fpga0"] }]);
  assert.deepEqual(checkpointOf(policy).podDeviceEntries[0]?.deviceIDs, new Map([[0, ["fpga1", "fpga0"]]]));
});
