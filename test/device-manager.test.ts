/**
 * The device manager against @grpc/grpc-js device plugins on real sockets:
 * ListAndWatch lists and health (upstream endpoint_test.go), capacity
 * and allocatable (manager_test.go TestUpdateCapacityAllocatable,
 * TestDevicePluginReRegistration, TestEndpointSyncOnDisconnect and the
 * multi-endpoint tests), grace-period removal, and untrusted lists.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { DeviceManager } from "../src/devicemanager/device-manager.ts";
import { DevicePluginHandler } from "../src/handlers/device-plugin.ts";
import { createLogger } from "../src/log/logger.ts";
import { type FakeDevicePluginOptions, healthyDevices, startFakeDevicePlugin, type TestDevice, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { startFakePlugin } from "./support/fake-plugin.ts";
import { manualClock } from "./support/manual-clock.ts";
import { tempDir } from "./support/temp-dir.ts";

const R = "acme.io/gpu";
const quiet = createLogger({ level: "error", format: "text" });

function newManager(t: TestContext, options: { clock?: ReturnType<typeof manualClock>; maxDevices?: number } = {}) {
  const devices = new DeviceManager({
    log: quiet,
    gracePeriodMs: 60_000,
    maxDevicesPerResource: options.maxDevices ?? 100_000,
    dialTimeoutMs: 2000,
    store: null,
    clock: options.clock,
  });
  t.after(() => devices.stop());
  return devices;
}

async function plugin(t: TestContext, dir: string, name: string, options: Partial<FakeDevicePluginOptions> = {}) {
  const started = await startFakeDevicePlugin({ socketPath: path.join(dir, name), devices: healthyDevices(2), ...options });
  t.after(() => started.stop());
  return started;
}

const counts = (devices: DeviceManager, resource = R) => {
  const status = devices.resource(resource);
  return status ? { capacity: status.capacity, allocatable: status.allocatable } : undefined;
};

test("ListAndWatch: the first complete list, then each full update replaces it (endpoint_test.go TestRun)", async (t) => {
  const dir = tempDir(t);
  const p = await plugin(t, dir, "a.sock", {
    devices: [
      { ID: "d1", health: "Healthy" },
      { ID: "d2", health: "Healthy" },
      { ID: "d3", health: "Unhealthy" },
    ],
  });
  const devices = newManager(t);
  await devices.connect(R, p.socketPath);
  await waitForDeviceState(devices, "three devices", () => devices.resource(R)?.capacity === 3);
  assert.deepEqual(devices.resource(R)?.healthy, ["d1", "d2"]);
  assert.deepEqual(devices.resource(R)?.unhealthy, ["d3"]);
  p.setDevices([
    { ID: "d1", health: "Unhealthy" },
    { ID: "d3", health: "Healthy" },
    { ID: "d4", health: "Healthy" },
  ]);
  await waitForDeviceState(devices, "the update", () => devices.resource(R)?.healthy.includes("d4") === true);
  const status = devices.resource(R)!;
  assert.deepEqual([status.healthy, status.unhealthy, status.capacity, status.allocatable], [["d3", "d4"], ["d1"], 3, 2]);
  assert.equal(status.connected, true);
  assert.deepEqual(status.sockets, [p.socketPath]);
});

test("capacity counts every device, allocatable only healthy ones; a dropped device disappears (TestUpdateCapacityAllocatable)", async (t) => {
  const dir = tempDir(t);
  const p = await plugin(t, dir, "a.sock", {
    devices: [
      { ID: "a", health: "Healthy" },
      { ID: "b", health: "Healthy" },
      { ID: "c", health: "Unhealthy" },
    ],
  });
  const devices = newManager(t);
  await devices.connect(R, p.socketPath);
  await waitForDeviceState(devices, "3/2", () => devices.resource(R)?.capacity === 3);
  assert.deepEqual(counts(devices), { capacity: 3, allocatable: 2 });
  const steps: [TestDevice[], { capacity: number; allocatable: number }][] = [
    [[{ ID: "a", health: "Healthy" }, { ID: "b", health: "Healthy" }], { capacity: 2, allocatable: 2 }],
    [[{ ID: "a", health: "Healthy" }, { ID: "b", health: "Unhealthy" }, { ID: "c", health: "Unhealthy" }], { capacity: 3, allocatable: 1 }],
    [[{ ID: "b", health: "Unhealthy" }, { ID: "c", health: "Unhealthy" }], { capacity: 2, allocatable: 0 }],
  ];
  for (const [list, expected] of steps) {
    p.setDevices(list);
    await waitForDeviceState(devices, JSON.stringify(expected), () => JSON.stringify(counts(devices)) === JSON.stringify(expected));
  }
});

test("a stream that ends turns every device unhealthy at once; the resource goes after gracePeriod unless the plugin returns (TestEndpointSyncOnDisconnect)", async (t) => {
  const dir = tempDir(t);
  const clock = manualClock();
  const p = await plugin(t, dir, "a.sock", { devices: healthyDevices(3) });
  const devices = newManager(t, { clock });
  const lost: string[] = [];
  await devices.connect(R, p.socketPath, { onLost: (reason) => lost.push(reason) });
  await waitForDeviceState(devices, "3 healthy", () => devices.resource(R)?.allocatable === 3);
  p.endStreams();
  await waitForDeviceState(devices, "disconnected", () => devices.resource(R)?.connected === false);
  const status = devices.resource(R)!;
  assert.deepEqual([status.healthy, status.unhealthy, status.capacity, status.allocatable], [[], ["dev0", "dev1", "dev2"], 3, 0]);
  assert.equal(lost.length, 1, "connectionLost is told once");
  clock.advance(59_999);
  assert.ok(devices.resource(R), "kept within the grace period");
  clock.advance(1);
  assert.equal(devices.resource(R), undefined, "removed when the grace period ends");

  // A plugin coming back within the grace period keeps the resource and cancels the removal.
  await devices.connect(R, p.socketPath);
  await waitForDeviceState(devices, "back", () => devices.resource(R)?.allocatable === 3);
  p.endStreams();
  await waitForDeviceState(devices, "down again", () => devices.resource(R)?.connected === false);
  clock.advance(30_000);
  await devices.connect(R, p.socketPath);
  await waitForDeviceState(devices, "back again", () => devices.resource(R)?.allocatable === 3);
  clock.advance(60_000);
  assert.equal(devices.resource(R)?.connected, true, "the cancelled removal does not fire");
});

test("re-registration: a new socket with the same devices keeps them; another socket's different list replaces them (TestDevicePluginReRegistration)", async (t) => {
  const dir = tempDir(t);
  const devices = newManager(t);
  const p1 = await plugin(t, dir, "p1.sock", { devices: healthyDevices(2) });
  await devices.connect(R, p1.socketPath);
  await waitForDeviceState(devices, "2/2", () => devices.resource(R)?.allocatable === 2);
  const p2 = await plugin(t, dir, "p2.sock", { devices: healthyDevices(2) });
  await devices.connect(R, p2.socketPath);
  await p2.waitForStreams();
  assert.deepEqual(counts(devices), { capacity: 2, allocatable: 2 }, "no orphaned devices");
  const p3 = await plugin(t, dir, "p3.sock", { devices: [{ ID: "other", health: "Healthy" }] });
  await devices.connect(R, p3.socketPath);
  await waitForDeviceState(devices, "1/1", () => devices.resource(R)?.capacity === 1);
  assert.deepEqual(devices.resource(R)?.healthy, ["other"]);
});

test("rolling upgrade: two instances of one resource coexist; the old one leaving does not take the devices down (multi-endpoint tests)", async (t) => {
  const dir = tempDir(t);
  const devices = newManager(t);
  const oldPlugin = await plugin(t, dir, "old.sock", { devices: healthyDevices(2) });
  const newPlugin = await plugin(t, dir, "new.sock", { devices: healthyDevices(2) });
  await devices.connect(R, oldPlugin.socketPath);
  await devices.connect(R, newPlugin.socketPath);
  await newPlugin.waitForStreams();
  assert.deepEqual(devices.resource(R)?.sockets, [oldPlugin.socketPath, newPlugin.socketPath]);
  await oldPlugin.stop();
  await waitForDeviceState(devices, "one socket left", () => devices.resource(R)?.sockets.length === 1);
  assert.deepEqual(counts(devices), { capacity: 2, allocatable: 2 }, "devices stay healthy");
  assert.equal(devices.resource(R)?.connected, true);
  // Disconnecting a socket the resource does not have, or an unknown resource, changes nothing.
  devices.disconnect(R, path.join(dir, "nobody.sock"));
  devices.disconnect("acme.io/other", newPlugin.socketPath);
  assert.deepEqual(counts(devices), { capacity: 2, allocatable: 2 });
  devices.disconnect(R, newPlugin.socketPath);
  assert.equal(devices.resource(R)?.connected, false, "the last one leaving stops the resource");
  assert.deepEqual(devices.resource(R)?.unhealthy, ["dev0", "dev1"]);
});

test("the same socket registering again replaces its endpoint instead of being refused forever", async (t) => {
  const dir = tempDir(t);
  const devices = newManager(t);
  const p = await plugin(t, dir, "a.sock", { devices: healthyDevices(2) });
  await devices.connect(R, p.socketPath);
  await p.waitForStreams(1);
  await devices.connect(R, p.socketPath);
  await p.waitForOpenStreams(1);
  assert.deepEqual(devices.resource(R)?.sockets, [p.socketPath]);
  assert.deepEqual(counts(devices), { capacity: 2, allocatable: 2 });
});

/** A plugin that holds its GetDevicePluginOptions answer, being connected: once its ListAndWatch is open, `answerOptions` lets the call go (or fail). */
async function connectingWithOptionsHeld(t: TestContext) {
  let answerOptions = (_failure?: string) => {};
  const p = await plugin(t, tempDir(t), "a.sock", { holdOptions: () => new Promise((resolve) => (answerOptions = resolve)) });
  const devices = newManager(t);
  const connecting = devices.connect(R, p.socketPath);
  await p.waitForStreams(1);
  return { p, devices, connecting, answerOptions: (failure?: string) => answerOptions(failure) };
}

test("ListAndWatch is opened beside GetDevicePluginOptions, one round trip sooner than after it; its devices count only once the options came", async (t) => {
  const { devices, connecting, answerOptions } = await connectingWithOptionsHeld(t);
  assert.equal(devices.resource(R), undefined, "nothing is recorded while the options are not in");
  answerOptions();
  await connecting;
  await waitForDeviceState(devices, "2 devices", () => devices.resource(R)?.allocatable === 2);
});

test("a plugin whose GetDevicePluginOptions fails is not recorded, and the ListAndWatch opened beside it is closed", async (t) => {
  const { p, devices, connecting, answerOptions } = await connectingWithOptionsHeld(t);
  answerOptions("options are broken");
  await assert.rejects(connecting, /failed to get device plugin options: rpc error: code = Internal desc = options are broken/);
  await p.waitForOpenStreams(0);
  assert.equal(devices.resource(R), undefined);
});

test("untrusted lists: too many devices, long ids, control characters and duplicates are refused per message; the last good list stays", async (t) => {
  const dir = tempDir(t);
  const p = await plugin(t, dir, "a.sock", { devices: healthyDevices(3) });
  const devices = newManager(t, { maxDevices: 5 });
  await devices.connect(R, p.socketPath);
  await waitForDeviceState(devices, "3 devices", () => devices.resource(R)?.capacity === 3);
  const bad: [object, RegExp][] = [
    [{ devices: healthyDevices(6) }, /6 devices exceeds security\.maxDevicesPerResource \(5\)/],
    [{ devices: [{ ID: "x".repeat(64), health: "Healthy" }] }, /longer than 63 characters/],
    [{ devices: [{ ID: "bad\nid", health: "Healthy" }] }, /control character/],
    [{ devices: [{ ID: "", health: "Healthy" }] }, /empty ID/],
    [{ devices: [{ ID: "twice", health: "Healthy" }, { ID: "twice", health: "Healthy" }] }, /listed twice/],
  ];
  for (const [message, reason] of bad) {
    p.sendRaw(message);
    await waitForDeviceState(devices, `refusal ${reason}`, () => reason.test(devices.resource(R)?.error ?? ""));
    assert.deepEqual(counts(devices), { capacity: 3, allocatable: 3 }, `the last good list stays after ${reason}`);
    assert.equal(devices.resource(R)?.connected, true);
    p.sendRaw({ devices: healthyDevices(3) });
    await waitForDeviceState(devices, "error cleared", () => devices.resource(R)?.error === undefined);
  }
});

test("a plugin that cannot be reached, or does not serve DevicePlugin, is not recorded; the error is the kubelet's text", async (t) => {
  const dir = tempDir(t);
  const devices = newManager(t);
  await assert.rejects(devices.connect(R, path.join(dir, "missing.sock")), /^Error: failed to dial device plugin: no socket at /);
  // A gRPC server without the DevicePlugin service: the dial works, GetDevicePluginOptions does not.
  const registrationOnly = await startFakePlugin({ socketPath: path.join(dir, "other.sock"), info: { type: "DevicePlugin", name: R } });
  t.after(() => registrationOnly.stop());
  await assert.rejects(devices.connect(R, registrationOnly.socketPath), /^Error: failed to get device plugin options: rpc error: code = Unimplemented desc = /);
  assert.equal(devices.resource(R), undefined);
});

test("a plugin instance that outlives a sibling and sends its list again, byte for byte, has its devices back", async (t) => {
  const dir = tempDir(t);
  const survivor = await plugin(t, dir, "a.sock");
  const devices = newManager(t);
  await devices.connect(R, survivor.socketPath);
  await waitForDeviceState(devices, "the survivor's list", () => devices.resource(R)?.capacity === 2);
  const sibling = await plugin(t, dir, "b.sock", { devices: [{ ID: "other", health: "Healthy" }] });
  await devices.connect(R, sibling.socketPath);
  await waitForDeviceState(devices, "the sibling's list", () => devices.resource(R)?.healthy.join() === "other");
  await sibling.stop();
  await waitForDeviceState(devices, "the sibling gone", () => devices.resource(R)?.sockets.length === 1);
  // Many plugins send their full list again on a timer: the same bytes as the survivor's last list.
  survivor.setDevices(healthyDevices(2));
  await waitForDeviceState(devices, "the survivor's devices again", () => devices.resource(R)?.healthy.join() === "dev0,dev1");
  const granted = await devices.allocate({ owner: "pod", container: "main", resources: [{ resource: R, count: 1 }] });
  assert.deepEqual(survivor.allocateCalls, [granted[0]!.devices]);
});

test("a watched-directory registration that leaves disconnects only its own plugin: a newer one that re-bound the endpoint stays", async (t) => {
  const dir = tempDir(t);
  const devices = newManager(t);
  const handler = new DevicePluginHandler(devices, { type: "DevicePlugin", kind: "builtin", versions: null, allow: ["*"], deny: [] });
  // Two registration sockets naming one fixed endpoint, as in a rolling upgrade of a device plugin's pods.
  const registration = (socket: string) => ({ socket: path.join(dir, socket), type: "DevicePlugin", name: R, endpoint: "dp.sock", versions: ["v1beta1"] });
  const [before, after] = [registration("old.sock"), registration("new.sock")];
  const signal = new AbortController().signal;
  await plugin(t, dir, "dp.sock");
  await handler.registerPlugin(before, signal);
  await waitForDeviceState(devices, "the old pod's devices", () => devices.resource(R)?.capacity === 2);
  fs.unlinkSync(path.join(dir, "dp.sock"));
  const newer = await plugin(t, dir, "dp.sock", { devices: healthyDevices(3) });
  await handler.registerPlugin(after, signal);
  await waitForDeviceState(devices, "the new pod's devices", () => devices.resource(R)?.capacity === 3);

  handler.deregisterPlugin(before);
  assert.equal(devices.resource(R)?.connected, true, "the new pod's plugin is still connected");
  const granted = await devices.allocate({ owner: "pod", container: "main", resources: [{ resource: R, count: 1 }] });
  assert.deepEqual(newer.allocateCalls, [granted[0]!.devices]);
  handler.deregisterPlugin(after);
  assert.equal(devices.resource(R)?.connected, false);
});
