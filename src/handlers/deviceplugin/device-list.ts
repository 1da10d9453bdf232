/**
 * A ListAndWatch message, read and checked. The Connect client decodes the
 * message as edgeplug.v1.ListAndWatchResponseView (each Device left as its
 * bytes: proto/edgeplug/v1/device_list_view.proto), and the devices are
 * read here with protobuf-es's BinaryReader straight into what the resource
 * keeps, which takes a fraction of the time and garbage of building 300,000
 * message objects for a list of 100,000 devices with their topology.
 *
 * The wire format is v1beta1.Device's (kubelet-facts.md section 5):
 * 1 `ID` string, 2 `health` string, 3 `topology` TopologyInfo
 * {1 repeated NUMANode {1 `ID` int64}}. Unknown fields are skipped, a
 * repeated scalar field keeps its last value and a repeated message field
 * is merged, as any protobuf reader does.
 */
import { Buffer } from "node:buffer";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { deviceIdRefusal, HEALTHY, MAX_DEVICE_ID_LENGTH } from "./names.ts";

/** One device as a message describes it (tests and fixtures build lists from these). */
export interface DeviceInfo {
  id: string;
  healthy: boolean;
  /** NUMA node ids from the plugin's topology; empty when it gave none. */
  numaNodes: readonly number[];
}

/** A node id kept in the compact per-device column; the sentinel means no topology. */
const NO_NODE = -0x80000000;
const NO_NODES: readonly number[] = Object.freeze([]);

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

/** The columns of a list being read. */
class Columns {
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

/** One device's fields as they are read, reused for every device of a list. */
interface DeviceFields {
  id: string;
  healthy: boolean;
  numaNodes: readonly number[];
  /** Whether the id has a byte of a control character (in UTF-8 only those bytes encode one). */
  suspect: boolean;
}

/**
 * The devices of one message, or why the message is refused (the previous
 * list stays). One reader walks the message's buffer, which every device's
 * bytes are a view of, and the devices go straight into the list's columns.
 * `previous` is the resource's current list: when the ids are the same in
 * the same order, the new list shares its id arrays and no duplicate check
 * or sort is needed.
 */
export function readDeviceList(encoded: readonly Uint8Array[], maxDevices: number, previous: DeviceList | null = null): DeviceList | string {
  if (encoded.length > maxDevices) {
    return `device list of ${encoded.length} devices exceeds security.maxDevicesPerResource (${maxDevices})`;
  }
  const columns = new Columns(encoded.length);
  let reader: BinaryReader | null = null;
  let whole: Buffer | null = null;
  let buffer: ArrayBufferLike | null = null;
  const fields: DeviceFields = { id: "", healthy: false, numaNodes: NO_NODES, suspect: false };
  for (let i = 0; i < encoded.length; i++) {
    const bytes = encoded[i]!;
    if (bytes.buffer !== buffer) {
      buffer = bytes.buffer;
      whole = Buffer.from(buffer);
      reader = new BinaryReader(whole);
    }
    try {
      reader!.pos = bytes.byteOffset;
      readDevice(reader!, whole!, bytes.byteOffset + bytes.byteLength, fields);
    } catch (error) {
      return `device ${i} of the list cannot be read: ${error instanceof Error ? error.message : String(error)}`;
    }
    const { id } = fields;
    if (fields.suspect || id === "" || id.length > MAX_DEVICE_ID_LENGTH) {
      const refusal = deviceIdRefusal(id);
      if (refusal) return refusal;
    }
    columns.set(i, id, fields.healthy, fields.numaNodes);
  }
  return columns.finish(previous);
}

/**
 * The bytes the devices of one message take in it (they lie one after the
 * other in its buffer), to tell a list sent again unchanged from a new one
 * without reading it; null when they are not contiguous.
 */
export function listRegion(encoded: readonly Uint8Array[]): Uint8Array | null {
  if (encoded.length === 0) return new Uint8Array(0);
  const first = encoded[0]!;
  const last = encoded[encoded.length - 1]!;
  if (last.buffer !== first.buffer) return null;
  return new Uint8Array(first.buffer, first.byteOffset, last.byteOffset + last.byteLength - first.byteOffset);
}

/** Whether two regions hold the same bytes. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.length).equals(Buffer.from(b.buffer, b.byteOffset, b.length));
}

/** Reads one device into `fields`. */
function readDevice(reader: BinaryReader, bytes: Buffer, end: number, fields: DeviceFields): void {
  let id = "";
  let healthy = false;
  let numaNodes: readonly number[] = NO_NODES;
  let suspect = false;
  while (reader.pos < end) {
    // The tag by hand: reader.tag() allocates a pair for every field of 100,000 devices.
    const tag = reader.uint32();
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field === 1) {
      // Decoded from the message's buffer in place: reader.string() makes a view of every id's bytes first.
      const length = lengthDelimited(reader, field, wireType).uint32();
      const from = reader.pos;
      reader.pos = subEndAt(from, length, end);
      let ascii = true;
      suspect = false;
      for (let i = from; i < reader.pos; i++) {
        const byte = bytes[i]!;
        if (byte < 0x20 || byte === 0x7f) suspect = true;
        else if (byte > 0x7f) ascii = false;
      }
      id = bytes.toString(ascii ? "latin1" : "utf8", from, reader.pos);
    } else if (field === 2) {
      // Only "Healthy" matters (anything else is unhealthy): compared in place, no string made.
      const length = lengthDelimited(reader, field, wireType).uint32();
      const from = reader.pos;
      reader.pos = subEndAt(from, length, end);
      healthy = isHealthy(bytes, from, length);
    } else if (field === 3) {
      numaNodes = readTopology(reader, bytes, subEnd(lengthDelimited(reader, field, wireType), end), numaNodes);
    } else {
      reader.skip(wireType, field);
    }
  }
  if (reader.pos !== end) throw new Error("a field runs past the device's end");
  fields.id = id;
  fields.healthy = healthy;
  fields.numaNodes = numaNodes;
  fields.suspect = suspect;
}

const HEALTHY_BYTES = new TextEncoder().encode(HEALTHY);

function isHealthy(bytes: Uint8Array, from: number, length: number): boolean {
  if (length !== HEALTHY_BYTES.length) return false;
  for (let i = 0; i < length; i++) if (bytes[from + i] !== HEALTHY_BYTES[i]) return false;
  return true;
}

/** The nodes of a TopologyInfo appended to `nodes` (a repeated message field merges). */
function readTopology(reader: BinaryReader, bytes: Buffer, end: number, nodes: readonly number[]): readonly number[] {
  let result = nodes;
  while (reader.pos < end) {
    const tag = reader.uint32();
    const field = tag >>> 3;
    const wireType = tag & 7;
    if (field !== 1) {
      reader.skip(wireType, field);
      continue;
    }
    const nodeEnd = subEnd(lengthDelimited(reader, field, wireType), end);
    let id = 0;
    while (reader.pos < nodeEnd) {
      const nodeTag = reader.uint32();
      const nodeField = nodeTag >>> 3;
      const nodeWireType = nodeTag & 7;
      if (nodeField !== 1) reader.skip(nodeWireType, nodeField);
      else if (nodeWireType !== WireType.Varint) throw new Error(`NUMANode field 1 has wire type ${nodeWireType}, not varint`);
      // A one-byte varint (0 to 127, every real node id) read as it is: int64() makes a BigInt per device.
      else if (bytes[reader.pos]! < 0x80) id = bytes[reader.pos++]!;
      else id = Number(reader.int64());
    }
    result = withNode(result, id);
  }
  return result;
}

/** Reads a length prefix; the end of what it delimits, which must lie within `outer`. */
function subEnd(reader: BinaryReader, outer: number): number {
  const length = reader.uint32();
  return subEndAt(reader.pos, length, outer);
}

function subEndAt(from: number, length: number, outer: number): number {
  const end = from + length;
  if (end > outer) throw new Error("a field runs past its message's end");
  return end;
}

function lengthDelimited(reader: BinaryReader, field: number, wireType: number): BinaryReader {
  if (wireType !== WireType.LengthDelimited) throw new Error(`field ${field} has wire type ${wireType}, not length-delimited`);
  return reader;
}

/** Devices on one node share its list: 100,000 devices on a few nodes need a few arrays, not 100,000. */
const SINGLE_NODES_KEPT = 1024;
const SINGLE_NODES: (readonly number[] | undefined)[] = new Array<undefined>(SINGLE_NODES_KEPT).fill(undefined);

function singleNode(id: number): readonly number[] {
  if (id < 0 || id >= SINGLE_NODES_KEPT) return Object.freeze([id]);
  return (SINGLE_NODES[id] ??= Object.freeze([id]));
}

function withNode(nodes: readonly number[], id: number): readonly number[] {
  return nodes.length > 0 ? [...nodes, id] : singleNode(id);
}
