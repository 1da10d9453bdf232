/**
 * Allocation against @grpc/grpc-js device plugins on real sockets, as the
 * kubelet allocates at pod admission (upstream manager_test.go and
 * endpoint_test.go): the kubelet's refusals word for word, a repeated
 * request as a container restart, GetPreferredAllocation and PreStartContainer
 * calls with exact arguments, the plugin's exact answer returned, nothing
 * recorded when a call fails or the endpoint stops, releases while a call
 * is in flight, and one winner for the last device.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { toJson } from "@bufbuild/protobuf";
import { ContainerAllocateResponseSchema } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { ask, connected, hold, newManager, R1, R2 } from "./support/device-manager-harness.ts";
import { healthyDevices, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

test("two resources for one pod, then the kubelet's refusal when one runs out (TestPodContainerDeviceAllocation)", async (t) => {
  const devices = newManager(t);
  await connected(t, devices, R1);
  await connected(t, devices, R2, { devices: healthyDevices(2, "r2-") });
  const first = await devices.allocate(ask("pod1", { [R1]: 2, [R2]: 1 }));
  assert.deepEqual(first.map((g) => [g.resource, g.devices]), [[R1, ["dev0", "dev1"]], [R2, ["r2-0"]]]);
  await assert.rejects(devices.allocate(ask("pod2", { [R1]: 1 })), { message: `requested number of devices unavailable for ${R1}. Requested: 1, Available: 0` });
  assert.deepEqual(devices.allocations("pod2"), [], "nothing recorded for the refused pod");
  const third = await devices.allocate(ask("pod3", { [R2]: 1 }));
  assert.deepEqual(third.map((g) => g.devices), [["r2-1"]]);
  // allocatable counts healthy devices, allocated ones included, per resource (TestGetAllocatableDevicesMultipleResources).
  assert.deepEqual([devices.resource(R1)?.allocatable, devices.resource(R2)?.allocatable], [2, 2]);
});

test("the kubelet's texts for an unregistered resource and one with no healthy device (TestPodContainerDeviceToAllocate)", async (t) => {
  const devices = newManager(t);
  await connected(t, devices, R1, { devices: [{ ID: "sick", health: "Unhealthy" }] });
  await assert.rejects(devices.allocate(ask("p", { "domain9.com/none": 1 })), { message: "cannot allocate unregistered device domain9.com/none" });
  await assert.rejects(devices.allocate(ask("p", { [R1]: 1 })), { message: `no healthy devices present; cannot allocate unhealthy devices ${R1}` });
});

test("the same owner and container asking again is a container restart: the same devices, no Allocate, PreStartContainer again", async (t) => {
  const devices = newManager(t);
  const plugin = await connected(t, devices, R1, { devices: healthyDevices(3), preStartRequired: true });
  const first = await devices.allocate(ask("job", { [R1]: 2 }));
  const again = await devices.allocate(ask("job", { [R1]: 2 }));
  assert.deepEqual(again.map((g) => g.devices), first.map((g) => g.devices));
  assert.deepEqual(toJson(ContainerAllocateResponseSchema, again[0]!.response), toJson(ContainerAllocateResponseSchema, first[0]!.response));
  assert.equal(plugin.allocateCalls.length, 1, "Allocate is not called again");
  assert.deepEqual(plugin.preStartCalls, [["dev0", "dev1"], ["dev0", "dev1"]]);
  await assert.rejects(devices.allocate(ask("job", { [R1]: 3 })), { message: `pod "job" container "main" changed request for resource "${R1}" from 2 to 3` });
  // Another container of the same owner is another allocation.
  assert.deepEqual((await devices.allocate(ask("job", { [R1]: 1 }, "sidecar"))).map((g) => g.devices), [["dev2"]]);

  plugin.setDevices([{ ID: "dev0", health: "Unhealthy" }, { ID: "dev1", health: "Healthy" }, { ID: "dev2", health: "Healthy" }]);
  await waitForDeviceState(devices, "dev0 unhealthy", () => devices.resource(R1)?.unhealthy.includes("dev0") === true);
  await assert.rejects(devices.allocate(ask("job", { [R1]: 2 })), {
    message: `previously allocated devices are no longer healthy; cannot allocate unhealthy devices ${R1}`,
  });
  assert.deepEqual(devices.allocations("job").map((a) => a.devices), [["dev0", "dev1"], ["dev2"]], "the held devices stay held");
});

test("Allocate returns exactly the plugin's answer (endpoint_test.go TestAllocate); PreStartContainer gets exactly the allocated ids (TestDevicePreStartContainer)", async (t) => {
  const devices = newManager(t);
  const answer = {
    envs: { GPU: "dev0,dev1" },
    mounts: [{ container_path: "/usr/lib/gpu", host_path: "/opt/gpu/lib", read_only: true }],
    devices: [{ container_path: "/dev/gpu0", host_path: "/dev/gpu0", permissions: "rw" }],
    annotations: { "vendor.com/devices": "0,1" },
    cdi_devices: [{ name: "vendor.com/gpu=0" }, { name: "vendor.com/gpu=1" }],
  };
  const withPreStart = await connected(t, devices, R1, { devices: healthyDevices(3), preStartRequired: true, allocateResponse: () => answer });
  const withoutPreStart = await connected(t, devices, R2);
  const [grant] = await devices.allocate(ask("p", { [R1]: 2 }));
  assert.deepEqual(toJson(ContainerAllocateResponseSchema, grant!.response), {
    envs: { GPU: "dev0,dev1" },
    mounts: [{ containerPath: "/usr/lib/gpu", hostPath: "/opt/gpu/lib", readOnly: true }],
    devices: [{ containerPath: "/dev/gpu0", hostPath: "/dev/gpu0", permissions: "rw" }],
    annotations: { "vendor.com/devices": "0,1" },
    cdiDevices: [{ name: "vendor.com/gpu=0" }, { name: "vendor.com/gpu=1" }],
  });
  assert.deepEqual(withPreStart.allocateCalls, [["dev0", "dev1"]]);
  assert.deepEqual(withPreStart.preStartCalls, [["dev0", "dev1"]]);
  // A request that asks nothing of R1 does not call R1's PreStartContainer; R2's plugin does not require it.
  await devices.allocate(ask("q", { [R2]: 1 }));
  assert.deepEqual(withPreStart.preStartCalls, [["dev0", "dev1"]]);
  assert.deepEqual(withoutPreStart.preStartCalls, []);
});

test("GetPreferredAllocation: the plugin's exact choice is taken, and it is asked with the free devices (endpoint_test.go TestGetPreferredAllocation)", async (t) => {
  const devices = newManager(t);
  const plugin = await connected(t, devices, R1, {
    devices: healthyDevices(4),
    getPreferredAllocationAvailable: true,
    preferred: (available, _must, size) => available.slice(-size).reverse(),
  });
  await devices.allocate(ask("a", { [R1]: 1 }));
  const [grant] = await devices.allocate(ask("b", { [R1]: 2 }));
  assert.deepEqual(grant!.devices, ["dev2", "dev1"], "the preferred devices, in the plugin's order");
  assert.deepEqual(plugin.preferredCalls.at(-1), { available: ["dev0", "dev1", "dev2"], mustInclude: [], size: 2 });
  assert.deepEqual(plugin.allocateCalls.at(-1), ["dev2", "dev1"]);
});

test("topologyPolicy none (the default, as a default kubelet): the plugin is offered every free device and its choice stands, whatever the NUMA nodes; single-numa-node from the next request after a reload", async (t) => {
  const devices = newManager(t);
  const on = (id: string, ...nodes: number[]) => ({ ID: id, health: "Healthy", topology: { nodes: nodes.map((n) => ({ ID: String(n) })) } });
  const plugin = await connected(t, devices, R1, {
    devices: [on("a0", 0), on("b1", 1), on("c1", 1), on("d1", 1), on("e0", 0), { ID: "f", health: "Healthy" }],
    getPreferredAllocationAvailable: true,
    preferred: (available) => available.filter((id) => id === "a0" || id === "f"),
  });
  const [grant] = await devices.allocate(ask("p", { [R1]: 2 }));
  assert.deepEqual(plugin.preferredCalls[0], { available: ["a0", "b1", "c1", "d1", "e0", "f"], mustInclude: [], size: 2 });
  assert.deepEqual(grant!.devices, ["a0", "f"], "two NUMA nodes apart: the plugin chose");
  assert.deepEqual([...devices.pods.get("p", "main", R1)!.byNode], [[0, ["a0"]], [-1, ["f"]]]);

  devices.applySettings({ gracePeriodMs: 60_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, topologyPolicy: "single-numa-node" });
  await devices.allocate(ask("q", { [R1]: 2 }));
  assert.deepEqual(plugin.preferredCalls[1], { available: ["b1", "c1", "d1"], mustInclude: [], size: 2 });
});

test("NUMA (single-numa-node): devices come from one node that can hold the request, and the plugin is asked only about that node's devices", async (t) => {
  const devices = newManager(t, { topologyPolicy: "single-numa-node" });
  const on = (id: string, ...nodes: number[]) => ({ ID: id, health: "Healthy", topology: { nodes: nodes.map((n) => ({ ID: String(n) })) } });
  const plugin = await connected(t, devices, R1, {
    devices: [on("a0", 0), on("b1", 1), on("c1", 1), on("d1", 1), on("e0", 0), { ID: "f", health: "Healthy" }],
    getPreferredAllocationAvailable: true,
  });
  const [grant] = await devices.allocate(ask("p", { [R1]: 2 }));
  assert.deepEqual(plugin.preferredCalls[0], { available: ["b1", "c1", "d1"], mustInclude: [], size: 2 });
  assert.deepEqual(grant!.devices, ["b1", "c1"]);
  // Recorded under its NUMA node, as the kubelet's checkpoint keeps them.
  assert.deepEqual([...devices.pods.get("p", "main", R1)!.byNode], [[1, ["b1", "c1"]]]);
});

test("NUMA (single-numa-node): after the plugin moves devices to another node and marks one unhealthy, the next allocation follows the new list", async (t) => {
  const devices = newManager(t, { topologyPolicy: "single-numa-node" });
  const on = (id: string, node: number, health = "Healthy") => ({ ID: id, health, topology: { nodes: [{ ID: String(node) }] } });
  const plugin = await connected(t, devices, R1, { devices: [on("a", 0), on("b", 0), on("c", 1), on("d", 1), on("e", 1)] });
  assert.deepEqual((await devices.allocate(ask("before", { [R1]: 2 }))).map((g) => g.devices), [["c", "d"]], "node 1 has the most");
  await devices.release("before");
  plugin.setDevices([on("a", 0), on("b", 0, "Unhealthy"), on("c", 1), on("d", 0), on("e", 0)]);
  await waitForDeviceState(devices, "b unhealthy", () => devices.resource(R1)?.unhealthy.includes("b") === true);
  assert.deepEqual((await devices.allocate(ask("after", { [R1]: 2 }))).map((g) => g.devices), [["a", "d"]], "node 0 now has the most healthy devices");
  assert.deepEqual([...devices.pods.get("after", "main", R1)!.byNode], [[0, ["a", "d"]]]);
  await assert.rejects(devices.allocate(ask("more", { [R1]: 3 })), { message: `requested number of devices unavailable for ${R1}. Requested: 3, Available: 2` });
});

test("a failed Allocate or PreStartContainer records nothing and leaves the devices free", async (t) => {
  const devices = newManager(t);
  await connected(t, devices, R1, { failAllocate: "out of firmware" });
  await assert.rejects(devices.allocate(ask("p", { [R1]: 1 })), /^AllocationError: device plugin Allocate rpc failed with err: .*out of firmware/);
  await connected(t, devices, R2, { preStartRequired: true, failPreStart: "reset failed" });
  await assert.rejects(devices.allocate(ask("p", { [R2]: 2 })), /device plugin PreStartContainer rpc failed with err: .*reset failed/);
  assert.deepEqual(devices.allocations(), []);
  // Both of R2's devices are still free.
  await assert.rejects(devices.allocate(ask("q", { [R2]: 2 })), /PreStartContainer/);
  assert.deepEqual(devices.allocations(), []);
});

test("an endpoint that stops while its Allocate is in flight: the kubelet's 'has been stopped', nothing recorded", async (t) => {
  const devices = newManager(t);
  const gate = hold();
  const plugin = await connected(t, devices, R1, { holdAllocate: gate.held });
  const pending = devices.allocate(ask("p", { [R1]: 1 }));
  await plugin.waitForCalls("allocate");
  plugin.endStreams();
  await assert.rejects(pending, { message: `endpoint ${plugin.socketPath} has been stopped` });
  gate.release();
  assert.deepEqual(devices.allocations(), []);
});

test("a release while another owner's GetPreferredAllocation is in flight does not break it (TestDevicesToAllocateConflictWithUpdateAllocatedDevices)", async (t) => {
  const devices = newManager(t);
  let holding = false;
  const gate = hold();
  const plugin = await connected(t, devices, R1, {
    devices: healthyDevices(3),
    getPreferredAllocationAvailable: true,
    preferred: (available) => available.slice(-1),
    holdPreferred: () => (holding ? gate.held() : Promise.resolve()),
  });
  await devices.allocate(ask("old", { [R1]: 1 }));
  holding = true;
  const pending = devices.allocate(ask("new", { [R1]: 1 }));
  await plugin.waitForCalls("preferred", 2);
  assert.equal((await devices.release("old")).length, 1);
  gate.release();
  assert.deepEqual((await pending).map((g) => g.devices), [["dev1"]], "the preferred device, as asked before the release");
  holding = false;
  // The released device is free again.
  assert.deepEqual((await devices.allocate(ask("third", { [R1]: 1 }))).map((g) => g.devices), [["dev2"]]);
  assert.deepEqual(plugin.preferredCalls.at(-1)?.available, ["dev0", "dev2"]);
});

test("a release of the owner whose allocation is in flight wins: nothing is recorded", async (t) => {
  const devices = newManager(t);
  const gate = hold();
  const plugin = await connected(t, devices, R1, { holdAllocate: gate.held });
  const pending = devices.allocate(ask("p", { [R1]: 1 }));
  await plugin.waitForCalls("allocate");
  void devices.release("p");
  gate.release();
  await assert.rejects(pending, { message: "owner p was released while its allocation was in progress" });
  assert.deepEqual(devices.allocations(), []);
});

test("two requests for the last free device at once: exactly one wins", async (t) => {
  const devices = newManager(t);
  await connected(t, devices, R1, { devices: healthyDevices(1) });
  const results = await Promise.allSettled([devices.allocate(ask("a", { [R1]: 1 })), devices.allocate(ask("b", { [R1]: 1 }))]);
  assert.deepEqual(results.map((r) => r.status).sort(), ["fulfilled", "rejected"]);
  const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
  assert.equal(refused.reason.message, `requested number of devices unavailable for ${R1}. Requested: 1, Available: 0`);
  assert.equal(devices.allocations().length, 1);
});

test("when the newest instance of a resource leaves, allocation goes through the survivor (TestPluginDisconnected_PromotesSurvivor)", async (t) => {
  const devices = newManager(t);
  const older = await connected(t, devices, R1, { devices: healthyDevices(2) }, path.join(tempDir(t), "older.sock"));
  const newer = await connected(t, devices, R1, { devices: healthyDevices(2) }, path.join(tempDir(t), "newer.sock"));
  await devices.allocate(ask("a", { [R1]: 1 }));
  assert.deepEqual([older.allocateCalls.length, newer.allocateCalls.length], [0, 1], "the newest is primary");
  await newer.stop();
  await waitForDeviceState(devices, "one instance left", () => devices.resource(R1)?.sockets.length === 1);
  assert.equal(devices.resource(R1)?.allocatable, 2, "the devices stay healthy");
  await devices.allocate(ask("b", { [R1]: 1 }));
  assert.deepEqual(older.allocateCalls, [["dev1"]]);
});

test("stop is idempotent", async (t) => {
  const devices = newManager(t);
  await connected(t, devices, R1);
  await Promise.all([devices.stop(), devices.stop()]);
  await devices.stop();
  await assert.rejects(devices.allocate(ask("p", { [R1]: 1 })), { message: "the agent is stopping" });
});

test("an Allocate answer over 64 KiB is refused and nothing is recorded, so the checkpoint stays small enough to read back", async (t) => {
  const devices = newManager(t);
  let envBytes = 70 * 1024;
  await connected(t, devices, R1, { allocateResponse: (ids) => ({ envs: { VISIBLE_DEVICES: ids.join(","), PADDING: "x".repeat(envBytes) } }) });
  await assert.rejects(devices.allocate(ask("big", { [R1]: 1 })), { message: new RegExp(`^the device plugin's Allocate answer for ${R1} is \\d+ bytes, over the limit of 65536$`) });
  assert.deepEqual(devices.allocations("big"), []);
  envBytes = 1024;
  assert.deepEqual((await devices.allocate(ask("small", { [R1]: 2 }))).map((g) => g.devices), [["dev0", "dev1"]], "both devices were still free");
});

test("a caller that gives up frees the queue: its hung plugin call is abandoned, and a request cancelled while queued is never started", async (t) => {
  const devices = newManager(t);
  const stuck = hold();
  t.after(stuck.release);
  const hung = await connected(t, devices, R1, { holdAllocate: stuck.held });
  const other = await connected(t, devices, R2);
  const [first, queued] = [new AbortController(), new AbortController()];
  const hungRequest = devices.allocate({ ...ask("hung", { [R1]: 1 }), signal: first.signal });
  const queuedRequest = devices.allocate({ ...ask("queued", { [R2]: 1 }), signal: queued.signal });
  const unrelated = devices.allocate(ask("unrelated", { [R2]: 1 }));
  await hung.waitForCalls("allocate", 1);
  queued.abort();
  first.abort();
  await assert.rejects(hungRequest, /device plugin Allocate rpc failed/);
  await assert.rejects(queuedRequest, { message: "the request of owner queued was cancelled before its turn" });
  assert.deepEqual((await unrelated).map((g) => g.devices), [["dev0"]]);
  assert.equal(other.allocateCalls.length, 1, "the cancelled request never reached its plugin");
  assert.deepEqual([devices.allocations("hung"), devices.allocations("queued")], [[], []]);
});

test("one resource's large Allocate answers cannot take the checkpoint budget another resource is sure of (2 MiB each)", async (t) => {
  const devices = newManager(t);
  const padded = (ids: string[]) => ({ envs: { VISIBLE_DEVICES: ids.join(","), PADDING: "x".repeat(60 * 1024) } });
  await connected(t, devices, R1, { devices: healthyDevices(600), allocateResponse: padded });
  await connected(t, devices, R2, { devices: healthyDevices(40), allocateResponse: padded });
  let refusal: Error | undefined;
  let granted = 0;
  while (refusal === undefined && granted < 600) {
    await devices.allocate(ask(`big-${granted}`, { [R1]: 1 })).then(() => granted++, (error: Error) => (refusal = error));
  }
  assert.match(
    refusal?.message ?? "none",
    new RegExp(`^the Allocate answers of ${R1} would take \\d+ bytes of the checkpoint, leaving other resources less than their 2097152 bytes each; release some of its owners first$`),
  );
  assert.ok(granted * 61 * 1024 >= 29 * 1024 * 1024, `${granted} answers: R1 took nearly all the rest of the budget`);
  // R2's 2 MiB are still there: 33 answers of 61 KiB.
  for (let i = 0; i < 33; i++) await devices.allocate(ask(`other-${i}`, { [R2]: 1 }));
  assert.equal(devices.allocations().filter((a) => a.resource === R2).length, 33);
});
