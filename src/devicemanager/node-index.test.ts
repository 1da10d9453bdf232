import assert from "node:assert/strict";
import { test } from "node:test";
import { type DeviceInfo, DeviceList } from "./device-list.ts";
import { NodeIndex } from "./node-index.ts";
import { chooseDevices, filterByAffinity, singleNodeHint } from "./topology.ts";

type Preferred = (available: string[], mustInclude: string[], size: number) => Promise<string[]>;

/**
 * The kubelet's choice written the plain way, every device's nodes looked
 * at on every call: what the index must agree with on any layout.
 */
const model = {
  groups(devices: DeviceList, free: string[]): Map<number, string[]> {
    const groups = new Map<number, string[]>();
    for (const id of free) {
      const nodes = devices.nodesOf(id);
      for (const node of nodes.length > 0 ? nodes : [-1]) groups.set(node, [...(groups.get(node) ?? []), id]);
    }
    return groups;
  },
  hint(devices: DeviceList, free: string[], count: number): number[] | null {
    const named = new Map<number, number>();
    for (const id of free) for (const node of devices.nodesOf(id)) named.set(node, (named.get(node) ?? 0) + 1);
    const fits = [...named].filter(([, n]) => n >= count).sort(([a, n], [b, m]) => m - n || a - b);
    return fits.length > 0 ? [fits[0]![0]] : null;
  },
  split(devices: DeviceList, free: string[], hint: number[] | null) {
    const groups = model.groups(devices, free);
    const inHint = (node: number) => hint?.includes(node) === true;
    const order = [...groups.keys()].sort(
      (a, b) => Number(inHint(b)) - Number(inHint(a)) || Number(a === -1) - Number(b === -1) || groups.get(a)!.length - groups.get(b)!.length || a - b,
    );
    const split = { aligned: [] as string[], unaligned: [] as string[], noAffinity: [] as string[] };
    const placed = new Set<string>();
    for (const node of order) {
      for (const id of [...groups.get(node)!].sort()) {
        if (placed.has(id)) continue;
        placed.add(id);
        split[node === -1 ? "noAffinity" : inHint(node) ? "aligned" : "unaligned"].push(id);
      }
    }
    return split;
  },
  async choose(devices: DeviceList, free: string[], count: number, preferred: Preferred | null): Promise<string[]> {
    const { aligned, unaligned, noAffinity } = model.split(devices, free, model.hint(devices, free, count));
    const picked: string[] = [];
    const take = (ids: string[]) => {
      for (const id of ids) if (picked.length < count && !picked.includes(id)) picked.push(id);
      return picked.length >= count;
    };
    if (aligned.length >= count) {
      if (preferred && take((await preferred(aligned, [], count)).filter((id) => aligned.includes(id)))) return picked;
      take(aligned);
      return picked;
    }
    take(aligned);
    if (preferred && take((await preferred(free, [...picked], count)).filter((id) => free.includes(id)))) return picked;
    if (!take(unaligned)) take(noAffinity);
    return picked;
  },
};

/** A small deterministic generator (mulberry32), so a failing layout can be run again from its seed. */
function random(seed: number): (below: number) => number {
  let state = seed >>> 0;
  return (below) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * below);
  };
}

/** Devices on up to four nodes, some without topology, on two nodes, naming a node twice, or naming node -1. */
function layout(next: (below: number) => number): DeviceInfo[] {
  const shapes = [() => [next(4)], () => [next(4)], () => [], () => [next(4), next(4)], () => [-1], () => [next(2), -1]];
  const names = ["gpu", "GPU", "dev-", "a", "é"];
  const size = next(24);
  return Array.from({ length: size }, (_, i) => ({ id: `${names[next(names.length)]}${i * 7 + next(7)}`, healthy: next(5) > 0, numaNodes: shapes[next(shapes.length)]!() }));
}

test("the index's hint, split and choice agree with the plain per-device choice on 500 random layouts, with devices held and plugins answering anything", async () => {
  for (let seed = 1; seed <= 500; seed++) {
    const next = random(seed);
    const list = DeviceList.of(layout(next));
    const healthy = list.ids.filter((_, i) => list.isHealthy(i)).sort();
    // Held: some healthy devices, an unhealthy one, and an id the list does not have.
    const taken = new Set([...healthy.filter(() => next(3) === 0), ...list.ids.filter((_, i) => !list.isHealthy(i)).slice(0, 1), "gone"]);
    const free = healthy.filter((id) => !taken.has(id));
    const index = NodeIndex.of(list, healthy).without(taken);
    const context = `seed ${seed}: ${JSON.stringify(list.devices())} held ${JSON.stringify([...taken])}`;
    assert.equal(index.count, free.length, context);
    assert.deepEqual(index.all(), free, context);
    for (const count of [1, 2, 3, Math.max(1, free.length)]) {
      const hint = model.hint(list, free, count);
      assert.deepEqual(singleNodeHint(index, count), hint, `${context} count ${count}`);
      for (const anyHint of [hint, null, [next(4)], [-1]]) {
        const split = filterByAffinity(index, anyHint);
        const lazily = { aligned: [...split.devices("aligned")], unaligned: [...split.devices("unaligned")], noAffinity: [...split.devices("noAffinity")] };
        assert.deepEqual(lazily, model.split(list, free, anyHint), `${context} hint ${JSON.stringify(anyHint)}`);
      }
      const answer = [...list.ids.filter(() => next(3) === 0), "gone", list.ids[0] ?? "x"];
      for (const offersPreferred of [false, true]) {
        const plugin = (calls: unknown[][]): Preferred | null =>
          offersPreferred
            ? async (...args) => {
              calls.push(args);
              return answer;
            }
            : null;
        const [expectedCalls, calls] = [[], []] as unknown[][][];
        const expected = await model.choose(list, free, count, plugin(expectedCalls!));
        assert.deepEqual(await chooseDevices(index, count, plugin(calls!), "single-numa-node"), expected, `${context} count ${count} preferred ${offersPreferred && JSON.stringify(answer)}`);
        assert.deepEqual(calls, expectedCalls, `${context}: the plugin is asked the same`);
      }
    }
  }
});

test("a device is found by its id in the sorted ids, whatever its characters; held ids outside the list change nothing", () => {
  const ids = ["gpu10", "gpu9", "GPU1", "é1", "e1", "a", ""];
  const list = DeviceList.of(ids.map((id, i) => ({ id, healthy: true, numaNodes: i % 2 === 0 ? [0] : [] })));
  const index = NodeIndex.of(list, [...ids].sort());
  for (const id of ids) assert.equal(index.has(id), true, id);
  for (const id of ["gpu1", "gpu", "zzz", "GPU10", "é"]) assert.equal(index.has(id), false, id);
  const free = index.without(new Set(["gpu10", "nope"]));
  assert.equal(free.count, ids.length - 1);
  assert.deepEqual([...free.named], [[0, 3]], "gpu10 (node 0) is held; the others on node 0 are free");
});
