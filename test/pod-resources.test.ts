/**
 * The kubelet's pod-resources API on the agent's API socket, read by a
 * @grpc/grpc-js client as monitoring agents read the kubelet's
 * (upstream pod_devices_test.go: TestGetContainerDevices,
 * TestGetPodAndContainerForDevice; manager_test.go
 * TestGetAllocatableDevicesMultipleResources and ...HealthTransition), and
 * by curl's Connect JSON over HTTP/1.1, as docs/devices.md shows.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { registerDevicePlugin, startFakeDevicePlugin, type TestDevice, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { deviceRows as rows, podResourcesClient, podRows as pods } from "./support/pod-resources-client.ts";
import { testPolicy } from "./support/policy.ts";
import { scopedTempDir } from "./support/device-node.ts";

const quiet = createLogger({ level: "error", format: "text" });
const GPU = "acme.io/gpu";
const NIC = "acme.io/nic";
const numa = (...ids: number[]) => ({ nodes: ids.map((id) => ({ ID: String(id) })) });

const gpus: TestDevice[] = [
  { ID: "gpu0", health: "Healthy", topology: numa(0, 1) },
  { ID: "gpu1", health: "Healthy", topology: numa(1) },
  { ID: "gpu2", health: "Healthy" },
  { ID: "gpu3", health: "Unhealthy", topology: numa(0) },
];

async function startAgent(t: TestContext) {
  // Cleanups run newest first and before the dir goes, so no checkpoint write races its removal.
  const scope = scopedTempDir(t);
  const dir = scope.dir;
  const pluginsDir = path.join(dir, "dp");
  const policy: Policy = {
    ...testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} } }),
    devicePlugins: { registrationSocket: path.join(pluginsDir, "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: null },
  };
  const agent = new EdgeplugAgent({ policy, log: quiet });
  scope.after(() => agent.stop());
  await agent.start();
  const gpu = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "gpu.sock"), devices: gpus });
  const nic = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "nic.sock"), devices: [{ ID: "gpu0", health: "Healthy" }] });
  scope.after(() => Promise.all([gpu.stop(), nic.stop()]));
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "gpu.sock", resource_name: GPU });
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "nic.sock", resource_name: NIC });
  await waitForDeviceState(agent.devices, "both resources listed", () => agent.devices.resource(GPU)?.capacity === 4 && agent.devices.resource(NIC)?.capacity === 1);

  const channel = dialUnix(policy.api.socket!);
  scope.after(() => channel.close());
  const lister = podResourcesClient(scope, policy.api.socket!);
  return { agent, gpu, policy, api: createClient(Agent, channel.transport), lister };
}

test("List and Get: each owner is a pod in namespace edgeplug; a device on NUMA nodes 0 and 1 is reported under both; the same device ID of another resource belongs to another pod", async (t) => {
  const { api, lister } = await startAgent(t);
  await api.allocate({ owner: "job-a", resources: [{ resource: GPU, count: 2 }] });
  await api.allocate({ owner: "job-b", container: "sidecar", resources: [{ resource: NIC, count: 1 }] });
  await api.allocate({ owner: "job-a", container: "init", resources: [{ resource: GPU, count: 1 }] });

  const listed = await lister.list();
  // gpu0 and gpu1 share NUMA node 1, the node that can hold the request alone; gpu2 has no topology.
  assert.deepEqual(pods(listed.pod_resources), [
    ["job-a", "edgeplug", [
      ["main", [[GPU, ["gpu0"], ["0"]], [GPU, ["gpu0"], ["1"]], [GPU, ["gpu1"], ["1"]]]],
      ["init", [[GPU, ["gpu2"], null]]],
    ]],
    ["job-b", "edgeplug", [["sidecar", [[NIC, ["gpu0"], null]]]]],
  ]);
  // edgeplug has no CPU or memory manager: those fields, pod-level ones included, stay empty.
  for (const pod of listed.pod_resources ?? []) {
    assert.deepEqual([pod.cpu_ids ?? [], pod.memory ?? []], [[], []]);
    for (const container of pod.containers ?? []) assert.deepEqual([container.cpu_ids ?? [], container.memory ?? []], [[], []]);
  }

  const got = await lister.get("job-b", "edgeplug");
  assert.deepEqual(pods([got.pod_resources!]), [["job-b", "edgeplug", [["sidecar", [[NIC, ["gpu0"], null]]]]]]);
});

test("Get of an unknown pod, or of an owner in another namespace, fails with the kubelet's text; a released owner leaves List", async (t) => {
  const { api, lister } = await startAgent(t);
  await api.allocate({ owner: "job-a", resources: [{ resource: NIC, count: 1 }] });
  for (const [name, namespace] of [["nobody", "edgeplug"], ["job-a", "default"], ["job-a", ""]] as const) {
    await assert.rejects(lister.get(name, namespace), (error: grpc.ServiceError) => {
      assert.equal(error.code, grpc.status.UNKNOWN);
      assert.equal(error.details, `pod ${name} in namespace ${namespace} not found`);
      return true;
    });
  }
  await api.release({ owner: "job-a" });
  assert.deepEqual(pods((await lister.list()).pod_resources), []);
  await assert.rejects(lister.get("job-a", "edgeplug"), /pod job-a in namespace edgeplug not found/);
});

test("GetAllocatableResources: healthy devices of every resource with their NUMA nodes, allocated ones included; a device that turns healthy joins", async (t) => {
  const { agent, api, gpu, lister } = await startAgent(t);
  await api.allocate({ owner: "job-a", resources: [{ resource: GPU, count: 1 }] });
  const allocatable = async () => rows((await lister.allocatable()).devices);
  assert.deepEqual(await allocatable(), [
    [GPU, ["gpu0"], ["0"]],
    [GPU, ["gpu0"], ["1"]],
    [GPU, ["gpu1"], ["1"]],
    [GPU, ["gpu2"], null],
    [NIC, ["gpu0"], null],
  ]);
  gpu.setDevices(gpus.map((device) => ({ ...device, health: "Healthy" })));
  await waitForDeviceState(agent.devices, "gpu3 healthy", () => agent.devices.resource(GPU)?.allocatable === 4);
  assert.deepEqual((await allocatable()).filter(([, ids]) => ids[0] === "gpu3"), [[GPU, ["gpu3"], ["0"]]]);
  gpu.setDevices(gpus.map((device) => ({ ...device, health: "Unhealthy" })));
  await waitForDeviceState(agent.devices, "gpus unhealthy", () => agent.devices.resource(GPU)?.allocatable === 0);
  assert.deepEqual(await allocatable(), [[NIC, ["gpu0"], null]]);
});

test("curl's way: Connect JSON over HTTP/1.1 on the same socket (as docs/devices.md shows)", async (t) => {
  const { api, policy } = await startAgent(t);
  await api.allocate({ owner: "job-a", resources: [{ resource: GPU, count: 1 }] });
  const post = (method: string, body: object) =>
    new Promise<{ status: number; json: Record<string, unknown> }>((resolve, reject) => {
      const request = http.request(
        { socketPath: policy.api.socket!, path: `/v1.PodResourcesLister/${method}`, method: "POST", headers: { "content-type": "application/json" } },
        (response) => {
          let text = "";
          response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
          response.on("end", () => resolve({ status: response.statusCode ?? 0, json: JSON.parse(text) as Record<string, unknown> }));
        },
      );
      request.on("error", reject);
      request.end(JSON.stringify(body));
    });
  const got = await post("Get", { podName: "job-a", podNamespace: "edgeplug" });
  assert.equal(got.status, 200);
  const pod = got.json.podResources as { name: string; containers: { name: string; devices: { resourceName: string; deviceIds: string[]; topology: unknown }[] }[] };
  assert.equal(pod.name, "job-a");
  assert.deepEqual(pod.containers[0]?.devices.map((d) => [d.resourceName, d.deviceIds, d.topology]), [
    [GPU, ["gpu0"], { nodes: [{ ID: "0" }] }],
    [GPU, ["gpu0"], { nodes: [{ ID: "1" }] }],
  ]);
  const missing = await post("Get", { podName: "nobody", podNamespace: "edgeplug" });
  assert.deepEqual([missing.status, missing.json], [500, { code: "unknown", message: "pod nobody in namespace edgeplug not found" }]);
});
