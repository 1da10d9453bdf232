/**
 * One resource's device list as the device manager keeps it (DeviceList);
 * device-list-reader.ts reads a ListAndWatch message into one.
 */

/** One device as a message describes it (tests and fixtures build lists from these). */
export interface DeviceInfo {
  id: string;
  healthy: boolean;
  /** NUMA node ids from the plugin's topology; empty when it gave none. */
  numaNodes: readonly number[];
}

/** A node id kept in the compact per-device column; the sentinel means no topology. */
const NO_NODE = -0x80000000;
export const NO_NODES: readonly number[] = Object.freeze([]);

/**
 * One resource's device list, kept as columns rather than an object per
 * device: the ids in list order and in UTF-16 order (status lists them so,
 * and equal neighbours there are how a duplicate is found, without a map of
 * 100,000 entries per list), one health byte per device, one NUMA node per
 * device in an Int32Array, and the few devices on several nodes aside. The
 * id index that allocation and the pod-resources API look devices up by is
 * built on first use. The id arrays are frozen and shared by every list
 * that repeats the same ids in the same order, the usual case of a plugin
 * reporting a health change.
 */
export class DeviceList {
  static readonly EMPTY = new DeviceList(Object.freeze([]), Object.freeze([]), new Uint8Array(0), null, null, null);

  /** Device ids in the plugin's order. */
  readonly ids: readonly string[];
  /** The same ids in UTF-16 code unit order. */
  readonly sorted: readonly string[];
  /** 1 where the device is healthy. */
  readonly health: Uint8Array;
  readonly #nodes: Int32Array | null;
  readonly #several: ReadonlyMap<number, readonly number[]> | null;
  #index: Map<string, number> | null;

  private constructor(
    ids: readonly string[],
    sorted: readonly string[],
    health: Uint8Array,
    nodes: Int32Array | null,
    several: ReadonlyMap<number, readonly number[]> | null,
    index: Map<string, number> | null,
  ) {
    this.ids = ids;
    this.sorted = sorted;
    this.health = health;
    this.#nodes = nodes;
    this.#several = several;
    this.#index = index;
  }

  /** A list of `devices` (which must have distinct ids), for tests and restored state. */
  static of(devices: readonly DeviceInfo[]): DeviceList {
    const columns = new Columns(devices.length);
    devices.forEach((device, i) => columns.set(i, device.id, device.healthy, device.numaNodes));
    const list = columns.finish(null);
    if (typeof list === "string") throw new Error(list);
    return list;
  }

  get size(): number {
    return this.ids.length;
  }

  /** Where `id` is in {@link ids}, or -1. */
  indexOf(id: string): number {
    if (this.#index === null) {
      const index = new Map<string, number>();
      for (let i = 0; i < this.ids.length; i++) index.set(this.ids[i]!, i);
      this.#index = index;
    }
    return this.#index.get(id) ?? -1;
  }

  has(id: string): boolean {
    return this.indexOf(id) >= 0;
  }

  isHealthy(index: number): boolean {
    return this.health[index] === 1;
  }

  /** The NUMA nodes of the device at `index` (empty without topology). */
  nodesAt(index: number): readonly number[] {
    if (this.#several !== null) {
      const several = this.#several.get(index);
      if (several !== undefined) return several;
    }
    if (this.#nodes === null) return NO_NODES;
    const node = this.#nodes[index]!;
    return node === NO_NODE ? NO_NODES : singleNode(node);
  }

  /** The NUMA nodes of device `id` (empty when unknown or without topology). */
  nodesOf(id: string): readonly number[] {
    const index = this.indexOf(id);
    return index < 0 ? NO_NODES : this.nodesAt(index);
  }

  /** Every device as a message describes it, in list order. */
  devices(): DeviceInfo[] {
    return this.ids.map((id, i) => ({ id, healthy: this.isHealthy(i), numaNodes: this.nodesAt(i) }));
  }

  /** A list of the devices whose ids are in `keep`, in this list's order. */
  only(keep: ReadonlySet<string>): DeviceList {
    return DeviceList.of(this.devices().filter((device) => keep.has(device.id)));
  }

  /** Whether this list has exactly the ids of `other`, in the same order. */
  sameIds(other: DeviceList): boolean {
    if (other.ids === this.ids) return true;
    if (other.ids.length !== this.ids.length) return false;
    for (let i = 0; i < this.ids.length; i++) if (this.ids[i] !== other.ids[i]) return false;
    return true;
  }

  /** Shares `previous`'s frozen id arrays and index (which the caller has found to hold the same ids). */
  withIdsOf(previous: DeviceList): DeviceList {
    return new DeviceList(previous.ids, previous.sorted, this.health, this.#nodes, this.#several, previous.#index);
  }

  static fromColumns(ids: string[], health: Uint8Array, nodes: Int32Array | null, several: Map<number, readonly number[]> | null, previous: DeviceList | null): DeviceList | string {
    const fresh = new DeviceList(ids, ids, health, nodes, several, null);
    if (previous !== null && fresh.sameIds(previous)) return fresh.withIdsOf(previous);
    const sorted = ids.slice().sort();
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i] === sorted[i - 1]) return `device ID ${JSON.stringify(sorted[i])} is listed twice`;
    }
    return new DeviceList(Object.freeze(ids), Object.freeze(sorted), health, nodes, several, null);
  }
}

/** The columns of a list being built, device by device (DeviceList.of, device-list-reader.ts). */
export class Columns {
  readonly ids: string[] = [];
  readonly health: Uint8Array;
  #nodes: Int32Array | null = null;
  #several: Map<number, readonly number[]> | null = null;

  constructor(size: number) {
    this.health = new Uint8Array(size);
  }

  set(index: number, id: string, healthy: boolean, nodes: readonly number[]): void {
    this.ids.push(id);
    if (healthy) this.health[index] = 1;
    if (nodes.length === 0) return;
    const node = nodes[0]!;
    if (nodes.length === 1 && (node | 0) === node && node !== NO_NODE) {
      this.#nodes ??= new Int32Array(this.health.length).fill(NO_NODE);
      this.#nodes[index] = node;
    } else {
      (this.#several ??= new Map()).set(index, nodes);
    }
  }

  finish(previous: DeviceList | null): DeviceList | string {
    return DeviceList.fromColumns(this.ids, this.health, this.#nodes, this.#several, previous);
  }
}

/** Devices on one node share its list: 100,000 devices on a few nodes need a few arrays, not 100,000. */
const SINGLE_NODES_KEPT = 1024;
const SINGLE_NODES: (readonly number[] | undefined)[] = new Array<undefined>(SINGLE_NODES_KEPT).fill(undefined);

export function singleNode(id: number): readonly number[] {
  if (id < 0 || id >= SINGLE_NODES_KEPT) return Object.freeze([id]);
  return (SINGLE_NODES[id] ??= Object.freeze([id]));
}
