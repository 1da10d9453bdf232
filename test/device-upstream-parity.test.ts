/**
 * Upstream manager_test.go behaviours the other device tests did not
 * assert yet, against @grpc/grpc-js device plugins on real sockets: a
 * released owner is gone (the kubelet's removed pod), reads between updates
 * see whole lists, a fresh plugin on a re-used socket path takes over, and
 * re-registration with every combination of the plugin's two options.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { ask, connected, newManager, R1 } from "./support/device-manager-harness.ts";
import { healthyDevices, startFakeDevicePlugin, type TestDevice, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

test("TestGetDeviceRunContainerOptions: a released owner (the kubelet's removed pod) has nothing left, and asking again is a new allocation", async (t) => {
  const devices = newManager(t);
  const plugin = await connected(t, devices, R1);
  await devices.allocate(ask("pod1", { [R1]: 1 }));
  assert.deepEqual(devices.allocations("pod1").map((a) => a.devices), [["dev0"]]);

  assert.deepEqual((await devices.release("pod1")).map((a) => a.devices), [["dev0"]]);
  assert.deepEqual(devices.allocations("pod1"), [], "no allocation and no error for the released owner");
  assert.deepEqual(await devices.release("pod1"), [], "releasing it again is not an error");
  assert.deepEqual([...devices.pods.entries()], []);

  // Not a container restart any more: the plugin is asked to Allocate again.
  await devices.allocate(ask("pod1", { [R1]: 2 }));
  assert.deepEqual(plugin.allocateCalls, [["dev0"], ["dev0", "dev1"]]);
});

test("TestGetTopologyHintsWithUpdates: reads while a plugin sends update after update each see one of its complete lists", async (t) => {
  const devices = newManager(t);
  const lists: TestDevice[][] = Array.from({ length: 40 }, (_, round) =>
    Array.from({ length: 20 }, (_, i) => ({
      ID: `r${round}-dev${i}`,
      health: (i + round) % 3 === 0 ? "Unhealthy" : "Healthy",
      topology: { nodes: [{ ID: String(i % 2) }] },
    })));
  const plugin = await connected(t, devices, R1, { devices: lists[0]! });
  const sent = new Map(lists.map((list) => [list.map((d) => d.ID).join(","), list]));
  const seen: string[] = [];
  const failures: unknown[] = [];
  const check = () => {
    const status = devices.resource(R1);
    if (!status) return;
    const ids = [...status.healthy, ...status.unhealthy].sort((a, b) => Number(a.split("dev")[1]) - Number(b.split("dev")[1])).join(",");
    const list = sent.get(ids);
    assert.ok(list, `a read saw a mix of lists: ${ids}`);
    assert.deepEqual([...status.unhealthy].sort(), list.filter((d) => d.health !== "Healthy").map((d) => d.ID).sort());
    // The pod-resources view (what topology hints read) agrees with the status view at the same moment.
    const state = devices.resourceStates().find((s) => s.name === R1)!;
    assert.deepEqual([...state.devices.ids].sort(), list.map((d) => d.ID).sort());
    seen.push(ids);
  };
  // The manager catches a listener's throw: keep each failure for the end.
  const read = () => {
    try {
      check();
    } catch (error) {
      failures.push(error);
    }
  };
  const unsubscribe = devices.subscribe(read);
  t.after(unsubscribe);
  const reads = setInterval(read, 1);
  t.after(() => clearInterval(reads));
  for (const list of lists.slice(1)) plugin.setDevices(list);
  const last = lists.at(-1)!;
  await waitForDeviceState(devices, "the last list", () => devices.resource(R1)?.healthy.includes(last[1]!.ID) === true);
  read();
  assert.deepEqual(failures, []);
  assert.ok(new Set(seen).size > 1, "reads happened between updates");
  assert.equal(seen.at(-1), last.map((d) => d.ID).join(","));
});

test("TestSameSocketRace_FastTakeoverMayResultInInfiniteRetries / DisconnectBeforeReconnectAttempt: a new plugin on a re-used socket path is accepted and serves Allocate", async (t) => {
  const devices = newManager(t);
  const socketPath = path.join(tempDir(t), "gpu.sock");
  const first = await startFakeDevicePlugin({ socketPath, devices: healthyDevices(2, "old-") });
  await devices.connect(R1, socketPath);
  await waitForDeviceState(devices, "the first plugin's list", () => devices.resource(R1)?.healthy.length === 2);

  // The first plugin dies and a new one binds the same path before any disconnect was handled.
  await first.stop();
  const second = await startFakeDevicePlugin({ socketPath, devices: healthyDevices(3, "new-") });
  t.after(() => second.stop());
  await devices.connect(R1, socketPath);
  await waitForDeviceState(devices, "the second plugin's list", () => devices.resource(R1)?.healthy.join(",") === "new-0,new-1,new-2");

  assert.equal(devices.resource(R1)?.connected, true);
  assert.deepEqual(devices.resource(R1)?.sockets, [socketPath]);
  const granted = await devices.allocate(ask("pod1", { [R1]: 1 }));
  assert.deepEqual(granted.map((g) => g.devices), [["new-0"]]);
  assert.deepEqual(second.allocateCalls, [["new-0"]], "Allocate went to the new plugin");
  assert.deepEqual(first.allocateCalls, []);
});

for (const preStartRequired of [false, true]) {
  for (const getPreferredAllocationAvailable of [false, true]) {
    test(`TestDevicePluginReRegistration with preStartRequired=${preStartRequired}, getPreferredAllocationAvailable=${getPreferredAllocationAvailable}: 2, still 2, then the third plugin's 1 device serves the allocation`, async (t) => {
      const dir = tempDir(t);
      const devices = newManager(t);
      const flags = { preStartRequired, getPreferredAllocationAvailable };
      const counts = () => [devices.resource(R1)?.capacity, devices.resource(R1)?.allocatable];
      await connected(t, devices, R1, { ...flags, devices: healthyDevices(2) }, path.join(dir, "p1.sock"));
      assert.deepEqual(counts(), [2, 2]);
      const second = await startFakeDevicePlugin({ socketPath: path.join(dir, "p2.sock"), devices: healthyDevices(2), ...flags });
      t.after(() => second.stop());
      await devices.connect(R1, second.socketPath);
      await second.waitForStreams();
      assert.deepEqual(counts(), [2, 2], "no orphaned devices");
      const third = await startFakeDevicePlugin({ socketPath: path.join(dir, "p3.sock"), devices: [{ ID: "other", health: "Healthy" }], ...flags });
      t.after(() => third.stop());
      await devices.connect(R1, third.socketPath);
      await waitForDeviceState(devices, "1/1", () => devices.resource(R1)?.capacity === 1);
      assert.deepEqual(counts(), [1, 1]);

      const granted = await devices.allocate(ask("pod1", { [R1]: 1 }));
      assert.deepEqual(granted.map((g) => g.devices), [["other"]]);
      assert.deepEqual(third.allocateCalls, [["other"]], "the newest instance allocates");
      assert.deepEqual(third.preStartCalls, preStartRequired ? [["other"]] : []);
      assert.equal(third.preferredCalls.length, getPreferredAllocationAvailable ? 1 : 0);
      assert.deepEqual([second.allocateCalls, second.preStartCalls, second.preferredCalls], [[], [], []]);
    });
  }
}
