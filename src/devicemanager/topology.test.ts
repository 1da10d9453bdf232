import assert from "node:assert/strict";
import { test } from "node:test";
import { DeviceList } from "./device-list.ts";
import { NodeIndex } from "./node-index.ts";
import * as topology from "./topology.ts";
import { groupByNode } from "./topology.ts";

function devicesOn(layout: Record<string, number[]>): DeviceList {
  return DeviceList.of(Object.entries(layout).map(([id, numaNodes]) => ({ id, healthy: true, numaNodes })));
}

/** `available` of `devices` as an allocation sees them: indexed, nothing held. */
function freeOf(devices: DeviceList, available: readonly string[]) {
  const healthy = DeviceList.of(available.map((id) => ({ id, healthy: true, numaNodes: devices.nodesOf(id) })));
  return NodeIndex.of(healthy, healthy.sorted).without(new Set());
}

function filterByAffinity(devices: DeviceList, available: readonly string[], hint: number[] | null) {
  const split = topology.filterByAffinity(freeOf(devices, available), hint);
  return { aligned: [...split.devices("aligned")], unaligned: [...split.devices("unaligned")], noAffinity: [...split.devices("noAffinity")] };
}

const singleNodeHint = (devices: DeviceList, available: readonly string[], count: number) => topology.singleNodeHint(freeOf(devices, available), count);

const chooseDevices = (
  devices: DeviceList,
  available: readonly string[],
  count: number,
  preferred: Parameters<typeof topology.chooseDevices>[2],
  policy: topology.TopologyPolicy = "single-numa-node",
) => topology.chooseDevices(freeOf(devices, available), count, preferred, policy);

test("TestFilterByAffinity: with hint node 2, each device lands in one set by the first of its nodes in the sorted order", () => {
  const devices = devicesOn({ dev1: [1], dev2: [1, 2], dev3: [2], dev4: [2] });
  assert.deepEqual(filterByAffinity(devices, ["dev1", "dev2"], [2]), { aligned: ["dev2"], unaligned: ["dev1"], noAffinity: [] });
  assert.deepEqual(filterByAffinity(devices, ["dev1", "dev2", "dev3", "dev4"], [2]), { aligned: ["dev2", "dev3", "dev4"], unaligned: ["dev1"], noAffinity: [] });
});

test("devices without topology go to the no-affinity set (the kubelet's fake node -1), with or without a hint", () => {
  const devices = devicesOn({ a: [0], b: [], c: [] });
  assert.deepEqual(filterByAffinity(devices, ["a", "b", "c"], [0]), { aligned: ["a"], unaligned: [], noAffinity: ["b", "c"] });
  assert.deepEqual(filterByAffinity(devices, ["a", "b", "c"], null), { aligned: [], unaligned: ["a"], noAffinity: ["b", "c"] });
});

test("the hint is the one node that can hold the whole request, the fullest one; none when no node can", () => {
  const devices = devicesOn({ a0: [0], b1: [1], c1: [1], d1: [1], e0: [0], f: [] });
  assert.deepEqual(singleNodeHint(devices, devices.ids, 2), [1]);
  assert.deepEqual(singleNodeHint(devices, ["a0", "e0", "b1"], 2), [0]);
  assert.equal(singleNodeHint(devices, devices.ids, 4), null);
  assert.deepEqual(singleNodeHint(devicesOn({ x: [3], y: [1] }), ["x", "y"], 1), [1], "a tie goes to the lower node");
});

test("aligned devices suffice: the plugin is asked about them only, and its answer outside them is ignored", async () => {
  const devices = devicesOn({ a0: [0], b1: [1], c1: [1], d1: [1] });
  const calls: unknown[] = [];
  const picked = await chooseDevices(devices, ["a0", "b1", "c1", "d1"], 2, async (available, mustInclude, size) => {
    calls.push({ available, mustInclude, size });
    return ["a0", "d1"];
  });
  assert.deepEqual(calls, [{ available: ["b1", "c1", "d1"], mustInclude: [], size: 2 }]);
  assert.deepEqual(picked, ["d1", "b1"], "the preferred aligned device first, then the rest from the aligned set");
});

test("no node holds the request: the plugin is asked about every free device, then unaligned devices, then those without topology", async () => {
  const devices = devicesOn({ a0: [0], b1: [1], n: [] });
  const calls: unknown[] = [];
  assert.deepEqual(
    await chooseDevices(devices, ["a0", "b1", "n"], 3, async (available, mustInclude, size) => {
      calls.push({ available, mustInclude, size });
      return ["n"];
    }),
    ["n", "a0", "b1"],
  );
  assert.deepEqual(calls, [{ available: ["a0", "b1", "n"], mustInclude: [], size: 3 }]);
  assert.deepEqual(await chooseDevices(devices, ["a0", "b1", "n"], 3, null), ["a0", "b1", "n"], "without GetPreferredAllocation");
  assert.deepEqual(await chooseDevices(devices, ["a0"], 2, null), ["a0"], "fewer than asked only when the sets run short");
});

test("policy none (the kubelet's default): the plugin is offered every free device, NUMA nodes aside, and its choice is taken as it is", async () => {
  const devices = devicesOn({ a0: [0], b1: [1], c1: [1], d1: [1], n: [] });
  const calls: unknown[] = [];
  const picked = await chooseDevices(devices, ["a0", "b1", "c1", "d1", "n"], 2, async (available, mustInclude, size) => {
    calls.push({ available, mustInclude, size });
    return ["a0", "n", "b1"];
  }, "none");
  // single-numa-node would offer node 1's three devices only and keep none of these two.
  assert.deepEqual(calls, [{ available: ["a0", "b1", "c1", "d1", "n"], mustInclude: [], size: 2 }]);
  assert.deepEqual(picked, ["a0", "n"]);
});

test("policy none: what the plugin does not pick, or everything without GetPreferredAllocation, is taken in id order", async () => {
  const devices = devicesOn({ a0: [0], b1: [1], c1: [1], n: [] });
  const unknownAndTaken = async () => ["zz", "c1"];
  assert.deepEqual(await chooseDevices(devices, ["a0", "c1", "n"], 3, unknownAndTaken, "none"), ["c1", "a0", "n"], "an id that is not free is ignored");
  assert.deepEqual(await chooseDevices(devices, ["a0", "b1", "c1", "n"], 2, null, "none"), ["a0", "b1"], "node 1 could hold both: no matter");
  assert.deepEqual(await chooseDevices(devices, ["a0"], 2, null, "none"), ["a0"], "fewer than asked only when devices run short");
});

test("allocated devices are grouped under each of their NUMA nodes, -1 for none, as the checkpoint keeps them", () => {
  const devices = devicesOn({ a: [0], b: [0, 1], c: [] });
  assert.deepEqual([...groupByNode(devices, ["a", "b", "c"])], [[0, ["a", "b"]], [1, ["b"]], [-1, ["c"]]]);
});
