/**
 * The kubelet's device choice (devicesToAllocate, filterByAffinity) under
 * the topology manager policies edgeplug follows (devicePlugins.topologyPolicy):
 *
 * - `none`, the kubelet's default: there is no NUMA hint, so every free
 *   device is in the no-affinity set. The plugin's GetPreferredAllocation is
 *   offered every free device, and what it does not pick is taken in id order.
 * - `single-numa-node`: split the free devices by NUMA alignment with a hint,
 *   take aligned devices first, let the plugin's preferred allocation decide
 *   the rest, then fall back to unaligned and topology-less devices. edgeplug
 *   has no topology manager; its hint is the one NUMA node that can hold the
 *   whole request on its own (the one with most free devices), as a
 *   single-numa-node policy would choose, or none.
 */
import type { TopologyPolicy } from "../policy/types.ts";
import { type FreeDevices, NO_NUMA_NODE } from "./node-index.ts";

export type { TopologyPolicy } from "../policy/types.ts";

/** Where each device is: its NUMA nodes, empty without topology (DeviceList answers it). */
export interface DeviceNodes {
  nodesOf(id: string): readonly number[];
}

/** The kubelet's three sets of available devices. */
export type Affinity = "aligned" | "unaligned" | "noAffinity";

/**
 * The kubelet's filterByAffinity over the free devices, read lazily: each
 * device is in exactly one set, by the first of its nodes in the sorted node
 * order (hint nodes first, -1 last, then by how many free devices a node
 * has, then by id), and within a node in id order. Taking one device walks
 * one node's devices only until a free one comes up.
 */
export class AffinitySplit {
  readonly #free: FreeDevices;
  readonly #hint: readonly number[] | null;
  readonly #order: number[];
  readonly #rank: Map<number, number>;

  constructor(free: FreeDevices, hint: readonly number[] | null) {
    this.#free = free;
    this.#hint = hint;
    const counts = free.grouped();
    this.#order = [...counts.keys()].sort((a, b) => {
      if (this.#inHint(a) !== this.#inHint(b)) return this.#inHint(a) ? -1 : 1;
      if ((a === NO_NUMA_NODE) !== (b === NO_NUMA_NODE)) return a === NO_NUMA_NODE ? 1 : -1;
      const byCount = counts.get(a)! - counts.get(b)!;
      return byCount !== 0 ? byCount : a - b;
    });
    this.#rank = new Map(this.#order.map((node, rank) => [node, rank]));
  }

  /** The free devices of one set, in the kubelet's order. */
  *devices(kind: Affinity): Generator<string> {
    for (const node of this.#order) {
      if (this.#kindOfNode(node) !== kind) continue;
      for (const id of this.#free.on(node)) {
        const several = this.#free.severalOf(id);
        if (several === undefined || this.#firstOf(several) === node) yield id;
      }
    }
  }

  /** The set a free device is in. */
  kindOf(id: string): Affinity {
    const several = this.#free.severalOf(id);
    return this.#kindOfNode(several !== undefined ? this.#firstOf(several) : (this.#free.nodesOf(id)[0] ?? NO_NUMA_NODE));
  }

  #inHint(node: number): boolean {
    return this.#hint !== null && this.#hint.includes(node);
  }

  #kindOfNode(node: number): Affinity {
    // -1 is the no-topology set even when a plugin names node -1 and the hint is it.
    if (node === NO_NUMA_NODE) return "noAffinity";
    return this.#inHint(node) ? "aligned" : "unaligned";
  }

  /** The node that comes first in the order among `nodes` (all of which have a free device). */
  #firstOf(nodes: readonly number[]): number {
    let first = nodes[0]!;
    for (const node of nodes) if (this.#rank.get(node)! < this.#rank.get(first)!) first = node;
    return first;
  }
}

/** The kubelet's name for the split. */
export function filterByAffinity(free: FreeDevices, hint: readonly number[] | null): AffinitySplit {
  return new AffinitySplit(free, hint);
}

/** The single NUMA node with the most free devices, when it can hold `count` alone; else null. */
export function singleNodeHint(free: FreeDevices, count: number): number[] | null {
  let best: number | null = null;
  let bestFree = 0;
  for (const [node, available] of free.named) {
    if (available < count) continue;
    if (best === null || available > bestFree || (available === bestFree && node < best)) {
      best = node;
      bestFree = available;
    }
  }
  return best === null ? null : [best];
}

/** A plugin's GetPreferredAllocation: the ids it prefers among `available`. */
export type PreferredAllocation = (available: string[], mustInclude: string[], size: number) => Promise<string[]>;

/**
 * Picks `count` of the free devices the kubelet's way under `policy`;
 * `preferred` is the plugin's GetPreferredAllocation (null when the plugin
 * does not offer it). Returns fewer than `count` only if the sets run short.
 * Without `preferred` it reads only as many devices as it takes; the plugin
 * is sent the whole set it chooses from.
 */
export async function chooseDevices(free: FreeDevices, count: number, preferred: PreferredAllocation | null, policy: TopologyPolicy = "none"): Promise<string[]> {
  if (policy === "none") return chooseWithoutTopology(free, count, preferred);
  const split = filterByAffinity(free, singleNodeHint(free, count));
  const picked = new Set<string>();
  const takeFrom = (ids: Iterable<string>): boolean => {
    for (const id of ids) {
      if (picked.size >= count) break;
      picked.add(id);
    }
    return picked.size >= count;
  };
  if (preferred) {
    const aligned = [...split.devices("aligned")];
    if (aligned.length >= count) {
      const answer = await preferred(aligned, [], count);
      if (!takeFrom(answer.filter((id) => free.has(id) && split.kindOf(id) === "aligned"))) takeFrom(aligned);
      return [...picked];
    }
    takeFrom(aligned);
    const answer = await preferred(free.all(), [...picked], count);
    if (takeFrom(answer.filter((id) => free.has(id)))) return [...picked];
  } else if (takeFrom(split.devices("aligned"))) {
    return [...picked];
  }
  if (!takeFrom(split.devices("unaligned"))) takeFrom(split.devices("noAffinity"));
  return [...picked];
}

/**
 * The kubelet without a topology hint (policy `none`): its aligned set is
 * empty, so GetPreferredAllocation gets every free device, and the devices
 * it did not pick come from the no-affinity set (here in id order).
 */
async function chooseWithoutTopology(free: FreeDevices, count: number, preferred: PreferredAllocation | null): Promise<string[]> {
  const picked = new Set<string>();
  const takeFrom = (ids: Iterable<string>): void => {
    for (const id of ids) {
      if (picked.size >= count) return;
      picked.add(id);
    }
  };
  if (preferred) takeFrom((await preferred(free.all(), [], count)).filter((id) => free.has(id)));
  if (picked.size < count) takeFrom(free.each());
  return [...picked];
}

/** Groups device ids under each of their NUMA nodes (-1 when none), as the kubelet's checkpoint stores them. */
export function groupByNode(devices: DeviceNodes, ids: string[]): Map<number, string[]> {
  const groups = new Map<number, string[]>();
  for (const id of ids) {
    const nodes = devices.nodesOf(id);
    for (const node of nodes.length > 0 ? nodes : [NO_NUMA_NODE]) {
      let list = groups.get(node);
      if (!list) groups.set(node, list = []);
      list.push(id);
    }
  }
  return groups;
}
