import assert from "node:assert/strict";
import { test } from "node:test";
import { DeviceList } from "./device-list.ts";
import { boundDeparted, nodeDevicesRefusal } from "./resource-bounds.ts";

const list = (prefix: string, n: number) => DeviceList.of(Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, healthy: true, numaNodes: [] })));
const departed = (name: string, stoppedAt: number, n: number) => ({ name, stoppedAt, devices: list(name, n) });
const bounds = { maxNodeDevices: 100, maxDepartedResources: 2, maxDepartedDevices: 10 };

test("departed resources keep their lists while all of them hold at most maxDepartedDevices; past it the oldest keep only their allocated devices", () => {
  const allocated = new Map([["old", new Set(["old1"])]]);
  const allocatedIds = (name: string) => allocated.get(name) ?? new Set<string>();
  const states = [departed("new", 3, 6), departed("old", 1, 6)];
  const { cut, remove } = boundDeparted(states, allocatedIds, bounds);
  assert.deepEqual(
    cut.map(([state, kept]) => [state.name, kept.ids, [...kept.health]]),
    [["old", ["old1"], [0]]],
    "the oldest is cut to its allocated device (unhealthy), which brings the total to 7",
  );
  assert.deepEqual(remove, []);
  assert.deepEqual(boundDeparted([departed("a", 1, 5), departed("b", 2, 5)], allocatedIds, bounds).cut, [], "10 devices are within the bound");
});

test("past maxDepartedResources the oldest departed resources without allocations are removed; those with allocations stay", () => {
  const allocatedIds = (name: string) => (name === "held" ? new Set(["held0"]) : new Set<string>());
  const states = [departed("c", 3, 0), departed("held", 0, 1), departed("a", 1, 0), departed("b", 2, 0), departed("d", 4, 0)];
  assert.deepEqual(boundDeparted(states, allocatedIds, bounds).remove.map((state) => state.name), ["a", "b"]);
});

test("the node's devices together are bounded", () => {
  assert.equal(nodeDevicesRefusal(100, bounds), null);
  assert.equal(nodeDevicesRefusal(101, bounds), "the node would hold 101 devices, more than its limit of 100 for all resources together");
});
