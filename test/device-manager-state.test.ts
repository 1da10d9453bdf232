/**
 * The device manager's state across resources, grace periods and its
 * checkpoint, with @grpc/grpc-js plugins on real sockets and a real
 * checkpoint file: the later steps of upstream's TestUpdateCapacityAllocatable
 * and TestCheckpoint (manager_test.go).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { toJson } from "@bufbuild/protobuf";
import { ContainerAllocateResponseSchema } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { CheckpointStore, decodeCheckpoint } from "../src/devicemanager/checkpoint/checkpoint.ts";
import { DeviceManager } from "../src/devicemanager/device-manager.ts";
import { createLogger } from "../src/log/logger.ts";
import { manualClock, startFakeDevicePlugin, type TestDevice, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const R1 = "domain1.com/resource1";
const R2 = "domain2.com/resource2";
const quiet = createLogger({ level: "error", write: () => {} });

async function managerWithCheckpoint(t: TestContext, file: string, clock?: ReturnType<typeof manualClock>) {
  const devices = new DeviceManager({
    log: quiet,
    gracePeriodMs: 300_000,
    maxDevicesPerResource: 1000,
    dialTimeoutMs: 2000,
    store: new CheckpointStore({ path: file, log: quiet }),
    clock,
  });
  t.after(() => devices.stop());
  await devices.restore();
  return devices;
}

async function plugin(t: TestContext, dir: string, name: string, devices: TestDevice[]) {
  const started = await startFakeDevicePlugin({ socketPath: path.join(dir, name), devices, allocateResponse: (ids) => ({ envs: { [name]: ids.join(",") } }) });
  t.after(() => started.stop());
  return started;
}

const counts = (devices: DeviceManager) => devices.resources().map((r) => [r.name, r.capacity, r.allocatable, r.connected]);
const h = (ID: string, ...nodes: number[]): TestDevice => ({ ID, health: "Healthy", ...(nodes.length ? { topology: { nodes: nodes.map((n) => ({ ID: String(n) })) } } : {}) });
const u = (ID: string): TestDevice => ({ ID, health: "Unhealthy" });

test("TestUpdateCapacityAllocatable, later steps: a second resource, expiry of the first, the second disconnected, then re-read from the checkpoint", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "state", "kubelet_internal_checkpoint");
  const clock = manualClock();
  const devices = await managerWithCheckpoint(t, file, clock);
  const p1 = await plugin(t, dir, "r1.sock", [h("a"), h("b"), u("c")]);
  await devices.connect(R1, p1.socketPath);
  const p2 = await plugin(t, dir, "r2.sock", [h("x"), u("y"), u("z")]);
  await devices.connect(R2, p2.socketPath);
  await waitForDeviceState(devices, "both listed", () => devices.resources().every((r) => r.capacity === 3));
  assert.deepEqual(counts(devices), [[R1, 3, 2, true], [R2, 3, 1, true]]);

  // Resource 1's plugin goes and its grace period ends: it leaves capacity, allocatable, health sets and endpoints.
  p1.endStreams();
  await waitForDeviceState(devices, "r1 disconnected", () => devices.resource(R1)?.connected === false);
  clock.advance(300_000);
  assert.deepEqual(counts(devices), [[R2, 3, 1, true]]);
  await assert.rejects(devices.allocate({ owner: "p", container: "c", resources: [{ resource: R1, count: 1 }] }), { message: `cannot allocate unregistered device ${R1}` });

  // Resource 2's plugin goes: every device unhealthy at once, nothing allocatable.
  p2.endStreams();
  await waitForDeviceState(devices, "r2 disconnected", () => devices.resource(R2)?.connected === false);
  assert.deepEqual(counts(devices), [[R2, 3, 0, false]]);
  assert.deepEqual(devices.resource(R2)?.unhealthy, ["x", "y", "z"]);
  await assert.rejects(devices.allocate({ owner: "p", container: "c", resources: [{ resource: R2, count: 1 }] }), { message: `no healthy devices present; cannot allocate unhealthy devices ${R2}` });
  assert.equal(await devices.flush(), true);
  assert.deepEqual([...decodeCheckpoint(fs.readFileSync(file)).registeredDevices], [[R2, []]], "no healthy device is checkpointed");

  // Read back: resource 2 is a stopped resource with nothing in it, still a device-plugin resource.
  await devices.stop();
  const again = await managerWithCheckpoint(t, file);
  assert.deepEqual(counts(again), [[R2, 0, 0, false]]);
  await assert.rejects(again.allocate({ owner: "p", container: "c", resources: [{ resource: R2, count: 1 }] }), { message: `no healthy devices present; cannot allocate unhealthy devices ${R2}` });
});

test("TestCheckpoint: allocations of several owners, containers and resources (NUMA and none) and the healthy sets come back exactly", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "state", "kubelet_internal_checkpoint");
  const devices = await managerWithCheckpoint(t, file);
  const p1 = await plugin(t, dir, "r1.sock", [h("n0a", 0), h("n0b", 0), h("n1a", 1), h("both", 0, 1), h("plain"), u("sick")]);
  const p2 = await plugin(t, dir, "r2.sock", [h("x"), h("y"), h("z")]);
  await devices.connect(R1, p1.socketPath);
  await devices.connect(R2, p2.socketPath);
  await waitForDeviceState(devices, "listed", () => devices.resource(R1)?.capacity === 6 && devices.resource(R2)?.capacity === 3);
  await devices.allocate({ owner: "pod1", container: "c1", resources: [{ resource: R1, count: 2 }, { resource: R2, count: 1 }] });
  await devices.allocate({ owner: "pod1", container: "c2", resources: [{ resource: R1, count: 3 }] });
  await devices.allocate({ owner: "pod2", container: "c1", resources: [{ resource: R2, count: 2 }] });
  const snapshot = (manager: DeviceManager) =>
    [...manager.pods.entries()].map((e) => ({ owner: e.owner, container: e.container, resource: e.resource, byNode: [...e.byNode], response: toJson(ContainerAllocateResponseSchema, e.response) }));
  const before = snapshot(devices);
  assert.ok(before.some((e) => e.byNode.some(([node]) => node === -1)), "some devices without topology");
  assert.ok(before.some((e) => e.byNode.length > 1), "some allocation over two NUMA nodes");
  await devices.stop();

  const written = decodeCheckpoint(fs.readFileSync(file));
  assert.deepEqual(new Map([...written.registeredDevices].map(([name, ids]) => [name, [...ids].sort()])), new Map([[R1, ["both", "n0a", "n0b", "n1a", "plain"]], [R2, ["x", "y", "z"]]]));
  const again = await managerWithCheckpoint(t, file);
  assert.deepEqual(snapshot(again), before);
  assert.deepEqual(again.allocations(), devices.allocations());
  assert.deepEqual(counts(again), [[R1, 0, 0, false], [R2, 0, 0, false]]);
});

test("an allocation and a release are each answered once on disk; a release's devices stay held until then", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "state", "kubelet_internal_checkpoint");
  const disk = new CheckpointStore({ path: file, log: quiet });
  /** While set, writes wait for it: a slow disk. */
  let gate: Promise<void> | null = null;
  const store = {
    restore: () => disk.restore(),
    write: async (data: Parameters<CheckpointStore["write"]>[0]) => {
      await gate;
      await disk.write(data);
    },
  };
  const devices = new DeviceManager({ log: quiet, gracePeriodMs: 300_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store });
  t.after(() => devices.stop());
  await devices.restore();
  const p1 = await plugin(t, dir, "r1.sock", [h("a"), h("b")]);
  await devices.connect(R1, p1.socketPath);
  await waitForDeviceState(devices, "listed", () => devices.resource(R1)?.capacity === 2);
  const ownersOnDisk = () => [...new Set(decodeCheckpoint(fs.readFileSync(file)).podDeviceEntries.map((entry) => entry.podUID))].sort();

  await devices.allocate({ owner: "job-1", container: "main", resources: [{ resource: R1, count: 2 }] });
  assert.deepEqual(ownersOnDisk(), ["job-1"], "answered once on disk");

  let open = () => {};
  gate = new Promise<void>((resolve) => (open = resolve));
  const released = devices.release("job-1");
  await assert.rejects(
    devices.allocate({ owner: "job-2", container: "main", resources: [{ resource: R1, count: 1 }] }),
    { message: `requested number of devices unavailable for ${R1}. Requested: 1, Available: 0` },
    "the released devices are held until the release is on disk",
  );
  assert.deepEqual(ownersOnDisk(), ["job-1"]);
  open();
  gate = null;
  assert.deepEqual((await released).map((a) => a.devices), [["a", "b"]]);
  assert.deepEqual(ownersOnDisk(), [], "the release is answered once on disk");
  await devices.allocate({ owner: "job-2", container: "main", resources: [{ resource: R1, count: 1 }] });
  assert.deepEqual(ownersOnDisk(), ["job-2"]);
});

test("a reload's new gracePeriod applies to a resource already disconnected, counted from its disconnection", async (t) => {
  const dir = tempDir(t);
  const clock = manualClock();
  const devices = await managerWithCheckpoint(t, path.join(dir, "kubelet_internal_checkpoint"), clock);
  const p1 = await plugin(t, dir, "r1.sock", [h("a")]);
  await devices.connect(R1, p1.socketPath);
  await waitForDeviceState(devices, "listed", () => devices.resource(R1)?.capacity === 1);
  p1.endStreams();
  await waitForDeviceState(devices, "disconnected", () => devices.resource(R1)?.connected === false);
  clock.advance(60_000);
  devices.applySettings({ gracePeriodMs: 100_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000 });
  clock.advance(39_999);
  assert.equal(devices.resource(R1)?.connected, false, "kept until 100 s after it disconnected");
  clock.advance(1);
  assert.equal(devices.resource(R1), undefined, "removed then, not 300 s after");
});

test("an allocation whose write has no outcome within the wait is undone and refused; a caller giving up while its write is on its way changes nothing", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "state", "kubelet_internal_checkpoint");
  const clock = manualClock();
  const disk = new CheckpointStore({ path: file, log: quiet });
  let gate: Promise<void> | null = null;
  let writing = () => {};
  const store = {
    restore: () => disk.restore(),
    write: async (data: Parameters<CheckpointStore["write"]>[0]) => {
      writing();
      await gate;
      await disk.write(data);
    },
  };
  const devices = new DeviceManager({ log: quiet, gracePeriodMs: 300_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store, clock });
  t.after(() => devices.stop());
  await devices.restore();
  const p1 = await plugin(t, dir, "r1.sock", [h("a"), h("b")]);
  await devices.connect(R1, p1.socketPath);
  await waitForDeviceState(devices, "listed", () => devices.resource(R1)?.capacity === 2);
  assert.equal(await devices.flush(), true);
  const ownersOnDisk = () => [...new Set(decodeCheckpoint(fs.readFileSync(file)).podDeviceEntries.map((entry) => entry.podUID))].sort();

  // A disk that hangs: after 5 s (a small file) the allocation is undone and refused, its devices free.
  let open = () => {};
  gate = new Promise<void>((resolve) => (open = resolve));
  let started = new Promise<void>((resolve) => (writing = resolve));
  const slow = devices.allocate({ owner: "slow", container: "main", resources: [{ resource: R1, count: 2 }] });
  await started;
  clock.advance(4999);
  assert.deepEqual(devices.allocations().map((a) => a.owner), ["slow"], "held while its write is on its way");
  clock.advance(1);
  await assert.rejects(slow, { message: "nothing was allocated to owner slow, the allocation was undone: the checkpoint was not written within 5 s" });
  assert.deepEqual(devices.allocations(), []);
  open();
  gate = null;
  // Both the late write and the undo's write are done before the next phase counts writes (the disk held no owner before either).
  assert.equal(await devices.flush(), true);
  assert.deepEqual(ownersOnDisk(), [], "the undo's write came after the late one");
  // No write in flight any more, so the next one to start is the allocation's.
  assert.equal(await devices.flush(), true);

  // The caller gives up while its write is on its way: the write decides, and it succeeds.
  gate = new Promise<void>((resolve) => (open = resolve));
  started = new Promise<void>((resolve) => (writing = resolve));
  const caller = new AbortController();
  const patient = devices.allocate({ owner: "gone", container: "main", resources: [{ resource: R1, count: 1 }], signal: caller.signal });
  await started;
  caller.abort();
  open();
  gate = null;
  assert.equal((await patient)[0]?.devices.length, 1);
  assert.deepEqual(ownersOnDisk(), ["gone"]);
  assert.deepEqual(devices.allocations().map((a) => a.owner), ["gone"], "status shows it");
});
