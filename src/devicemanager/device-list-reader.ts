/**
 * A ListAndWatch message, read and checked. The Connect client decodes the
 * message as edgeplug.v1.ListAndWatchResponseView (each Device left as its
 * bytes: proto/edgeplug/v1/device_list_view.proto), and the devices are
 * read here with protobuf-es's BinaryReader straight into what the resource
 * keeps, which takes a fraction of the time and garbage of building 300,000
 * message objects for a list of 100,000 devices with their topology.
 *
 * The wire format is v1beta1.Device's (proto/deviceplugin/v1beta1/api.proto):
 * 1 `ID` string, 2 `health` string, 3 `topology` TopologyInfo
 * {1 repeated NUMANode {1 `ID` int64}}. Unknown fields are skipped, a
 * repeated scalar field keeps its last value and a repeated message field
 * is merged, as any protobuf reader does; a string that is not UTF-8 and a
 * tag of field number 0 are refused, as protobuf decoders refuse them (a
 * test holds the reader to protobuf-es on thousands of damaged lists).
 */
import { Buffer, isUtf8 } from "node:buffer";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { messageOf } from "../log/error-message.ts";
import { deviceIdRefusal, HEALTHY, MAX_DEVICE_ID_LENGTH } from "./names.ts";
import { Columns, type DeviceList, NO_NODES, singleNode } from "./device-list.ts";

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
      return `device ${i} of the list cannot be read: ${messageOf(error)}`;
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
    const field = fieldNumber(tag);
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
      // A proto3 string must be UTF-8, as every protobuf decoder (the kubelet's too) insists;
      // decoding anyway would replace bytes and name a device the plugin does not know.
      if (!ascii && !isUtf8(bytes.subarray(from, reader.pos))) throw new Error("its ID is not valid UTF-8");
      id = bytes.toString(ascii ? "latin1" : "utf8", from, reader.pos);
    } else if (field === 2) {
      // Only "Healthy" matters (anything else is unhealthy): compared in place, no string made.
      const length = lengthDelimited(reader, field, wireType).uint32();
      const from = reader.pos;
      reader.pos = subEndAt(from, length, end);
      healthy = isHealthy(bytes, from, length);
      if (!healthy && !isAsciiOrUtf8(bytes, from, reader.pos)) throw new Error("its health is not valid UTF-8");
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

/** ASCII is checked in place: a native call for each of 100,000 "Unhealthy" would cost more than the list. */
function isAsciiOrUtf8(bytes: Uint8Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i]! > 0x7f) return isUtf8(bytes.subarray(from, to));
  return true;
}

const HEALTHY_BYTES = new TextEncoder().encode(HEALTHY);

function isHealthy(bytes: Uint8Array, from: number, length: number): boolean {
  if (length !== HEALTHY_BYTES.length) return false;
  for (let i = 0; i < length; i++) if (bytes[from + i] !== HEALTHY_BYTES[i]) return false;
  return true;
}

/**
 * Linux has at most 1 << 10 NUMA nodes (MAX_NUMNODES); a device listing more
 * is garbage, refused before it costs more than reading its bytes.
 */
export const MAX_NUMA_NODES_PER_DEVICE = 1024;

/**
 * The nodes of a TopologyInfo appended to `nodes` (a repeated message field
 * merges). In place once there are two, so that a device listing many costs
 * one pass: one node is a shared array, two or more an array of this device's.
 */
function readTopology(reader: BinaryReader, bytes: Buffer, end: number, nodes: readonly number[]): readonly number[] {
  let result = nodes;
  while (reader.pos < end) {
    const tag = reader.uint32();
    const field = fieldNumber(tag);
    const wireType = tag & 7;
    if (field !== 1) {
      reader.skip(wireType, field);
      continue;
    }
    const nodeEnd = subEnd(lengthDelimited(reader, field, wireType), end);
    let id = 0;
    while (reader.pos < nodeEnd) {
      const nodeTag = reader.uint32();
      const nodeField = fieldNumber(nodeTag);
      const nodeWireType = nodeTag & 7;
      if (nodeField !== 1) reader.skip(nodeWireType, nodeField);
      else if (nodeWireType !== WireType.Varint) throw new Error(`NUMANode field 1 has wire type ${nodeWireType}, not varint`);
      // A one-byte varint (0 to 127, every real node id) read as it is: int64() makes a BigInt per device.
      else if (bytes[reader.pos]! < 0x80) id = bytes[reader.pos++]!;
      else id = Number(reader.int64());
    }
    if (result.length >= MAX_NUMA_NODES_PER_DEVICE) throw new Error(`its topology lists more than ${MAX_NUMA_NODES_PER_DEVICE} NUMA nodes`);
    if (result.length === 0) result = singleNode(id);
    else if (result.length === 1) result = [result[0]!, id];
    else (result as number[]).push(id);
  }
  return result;
}

/** A tag's field number; 0 is no field, and protobuf decoders refuse it. */
function fieldNumber(tag: number): number {
  const field = tag >>> 3;
  if (field === 0) throw new Error(`illegal tag: field number 0 (wire type ${tag & 7})`);
  return field;
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
