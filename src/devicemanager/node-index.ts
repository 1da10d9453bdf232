/**
 * The healthy devices of one device list grouped by NUMA node, built once
 * per list (resources.ts keeps it beside the sorted healthy ids), and the
 * free devices an allocation chooses from: the index minus the devices
 * held. With 10,000 devices an allocation then reads a few per-node counts
 * and walks a node's devices only until it has taken what it needs,
 * instead of looking every device's nodes up again (topology.ts).
 */
import type { DeviceList } from "./device-list.ts";

/** The kubelet's fake NUMA node for devices without topology. */
export const NO_NUMA_NODE = -1;

const NO_IDS: readonly string[] = Object.freeze([]);

export class NodeIndex {
  /** The healthy devices, in UTF-16 code unit order (what `Array.prototype.sort` gives). */
  readonly sorted: readonly string[];
  readonly #list: DeviceList;
  /** Per node, its healthy devices once each, sorted; devices without topology are under NO_NUMA_NODE. */
  readonly #members: ReadonlyMap<number, readonly string[]>;
  /** Per node, how often the devices' topologies name it: a device naming a node twice counts twice, as in the kubelet. */
  readonly #named: ReadonlyMap<number, number>;
  readonly #withoutTopology: number;
  /** The few devices on more than one distinct node, with those nodes: only their place in the node order needs choosing. */
  readonly #several: ReadonlyMap<string, readonly number[]>;

  /**
   * Walks the list by position (its node column, no lookup by id) and sorts
   * each node's ids; with every device on one node (or none with topology)
   * that node's ids are `sorted` itself.
   */
  private constructor(list: DeviceList, sorted: readonly string[]) {
    this.sorted = sorted;
    this.#list = list;
    const members = new Map<number, string[]>();
    const named = new Map<number, number>();
    const several = new Map<string, readonly number[]>();
    let withoutTopology = 0;
    for (let i = 0; i < list.size; i++) {
      if (!list.isHealthy(i)) continue;
      const id = list.ids[i]!;
      const nodes = list.nodesAt(i);
      if (nodes.length === 0) withoutTopology++;
      for (const node of nodes) named.set(node, (named.get(node) ?? 0) + 1);
      const distinct = distinctNodes(nodes);
      if (distinct.length > 1) several.set(id, distinct);
      for (const node of distinct.length > 0 ? distinct : [NO_NUMA_NODE]) {
        let ids = members.get(node);
        if (!ids) members.set(node, ids = []);
        ids.push(id);
      }
    }
    if (members.size === 1) {
      this.#members = new Map([[members.keys().next().value!, sorted]]);
    } else {
      for (const ids of members.values()) ids.sort();
      this.#members = members;
    }
    this.#named = named;
    this.#withoutTopology = withoutTopology;
    this.#several = several;
  }

  /** The healthy devices of `list`; `sorted` is their ids sorted, which resources.ts keeps per list. */
  static of(list: DeviceList, sorted: readonly string[]): NodeIndex {
    return new NodeIndex(list, sorted);
  }

  get size(): number {
    return this.sorted.length;
  }

  /** Whether `id` is one of the indexed devices (a binary search: no set of 10,000 ids per list). */
  has(id: string): boolean {
    let low = 0;
    let high = this.sorted.length - 1;
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const probe = this.sorted[middle]!;
      if (probe === id) return true;
      if (probe < id) low = middle + 1;
      else high = middle - 1;
    }
    return false;
  }

  /** The indexed devices that `taken` does not hold. */
  without(taken: ReadonlySet<string>): FreeDevices {
    const named = new Map(this.#named);
    let withoutTopology = this.#withoutTopology;
    let count = this.size;
    for (const id of taken) {
      if (!this.has(id)) continue;
      count--;
      const nodes = this.#list.nodesOf(id);
      if (nodes.length === 0) withoutTopology--;
      for (const node of nodes) {
        const left = named.get(node)! - 1;
        if (left === 0) named.delete(node);
        else named.set(node, left);
      }
    }
    return new FreeDevices(this, taken, count, named, withoutTopology);
  }

  /** The devices on `node`, sorted (each once). */
  membersOf(node: number): readonly string[] {
    return this.#members.get(node) ?? NO_IDS;
  }

  /** The distinct nodes of `id` when there are several; undefined otherwise. */
  severalOf(id: string): readonly number[] | undefined {
    return this.#several.get(id);
  }

  nodesOf(id: string): readonly number[] {
    return this.#list.nodesOf(id);
  }
}

/** One allocation's choice: the devices of an index that nobody holds, counted per node. */
export class FreeDevices {
  readonly #index: NodeIndex;
  readonly #taken: ReadonlySet<string>;
  /** How many free devices there are. */
  readonly count: number;
  /** Per node named by a free device's topology, how often (nodes at zero are left out). */
  readonly named: ReadonlyMap<number, number>;
  readonly #withoutTopology: number;

  constructor(index: NodeIndex, taken: ReadonlySet<string>, count: number, named: ReadonlyMap<number, number>, withoutTopology: number) {
    this.#index = index;
    this.#taken = taken;
    this.count = count;
    this.named = named;
    this.#withoutTopology = withoutTopology;
  }

  has(id: string): boolean {
    return !this.#taken.has(id) && this.#index.has(id);
  }

  /** Every free device, sorted. */
  all(): string[] {
    return this.#index.sorted.filter((id) => !this.#taken.has(id));
  }

  /** The free devices, sorted, read only as far as the caller goes. */
  *each(): Generator<string> {
    for (const id of this.#index.sorted) if (!this.#taken.has(id)) yield id;
  }

  /** The nodes free devices are grouped under (NO_NUMA_NODE for those without topology), with how many each. */
  grouped(): Map<number, number> {
    const groups = new Map(this.named);
    if (this.#withoutTopology > 0) groups.set(NO_NUMA_NODE, (groups.get(NO_NUMA_NODE) ?? 0) + this.#withoutTopology);
    return groups;
  }

  /** The free devices on `node`, sorted, each once. */
  *on(node: number): Generator<string> {
    for (const id of this.#index.membersOf(node)) if (!this.#taken.has(id)) yield id;
  }

  severalOf(id: string): readonly number[] | undefined {
    return this.#index.severalOf(id);
  }

  nodesOf(id: string): readonly number[] {
    return this.#index.nodesOf(id);
  }
}

/** `nodes` without repeats, in their order; the same array when it has none (the usual one node). */
function distinctNodes(nodes: readonly number[]): readonly number[] {
  if (nodes.length < 2) return nodes;
  const distinct = [...new Set(nodes)];
  return distinct.length === nodes.length ? nodes : distinct;
}
