/**
 * Reads a checkpoint file the way the kubelet's json.Unmarshal into
 * `checkpoint.Data` does, into the Go value model the checksum is computed
 * over: struct fields matched exactly or case-insensitively, unknown fields
 * (e.g. a newer kubelet's `BootID`) ignored, `null` as Go's zero value, a
 * type mismatch an error. Every error names where in the file it is.
 *
 * Where Go would pick one of two conflicting values silently, this refuses
 * the file instead: the same field spelled two ways (`PodUID` and `poduid`),
 * or two NUMA keys naming one node (`0` and `00`). A kubelet never writes
 * either. NUMA node ids must be safe integers (below 2^53).
 */
import { Buffer } from "node:buffer";
import type { GoCheckpointData, GoPodDevicesEntry } from "./checkpoint-spew.ts";

/** A checkpoint that cannot be trusted: not the format, or its checksum does not match. The message says why. */
export class CheckpointCorruptError extends Error {
  override name = "CheckpointCorruptError";
}

/**
 * An entry as the file has it: `DeviceIDs` maps NUMA nodes to ids (kubelets
 * since 1.20), or is a flat list (up to 1.19); the checksum decides which
 * layout a file whose entries all have `null` there was written in.
 */
export interface ParsedPodDevicesEntry extends Omit<GoPodDevicesEntry, "deviceIDs"> {
  deviceIDs: Map<number, string[] | null> | string[] | null;
}

/** The file's `Data` as Go would hold it, and the `Checksum` it claims. */
export interface ParsedCheckpoint {
  data: { podDeviceEntries: ParsedPodDevicesEntry[] | null; registeredDevices: GoCheckpointData["registeredDevices"] };
  /** The file's `Checksum` (Go uint64); 0 when absent, as Go leaves it. */
  checksum: bigint;
}

/** A JSON number kept as its source text, so that `1.0` or `1e3` can be refused where Go wants a uint64. */
class JsonNumber {
  readonly source: string;
  constructor(source: string) {
    this.source = source;
  }
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

export function parseCheckpointFile(bytes: Uint8Array): ParsedCheckpoint {
  if (bytes.length === 0) throw new CheckpointCorruptError("the file is empty");
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    throw new CheckpointCorruptError("the file is not UTF-8 text");
  }
  let root: unknown;
  try {
    root = JSON.parse(text, keepNumberSource as (key: string, value: unknown) => unknown);
  } catch (error) {
    // V8's message quotes the text around the error; only its position is kept.
    const position = /at position (\d+)/.exec((error as Error).message)?.[1];
    throw new CheckpointCorruptError(position === undefined ? "not JSON" : `not JSON (at character ${position})`);
  }
  if (root === null) return { data: { podDeviceEntries: null, registeredDevices: null }, checksum: 0n };
  const top = fields(root, "the file", ["Data", "Checksum"]);
  return {
    data: readData(top.get("Data"), "Data"),
    checksum: readUint64(top.get("Checksum"), "Checksum"),
  };
}

function keepNumberSource(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === "number" ? new JsonNumber(context?.source ?? String(value)) : value;
}

function readData(value: unknown, where: string): ParsedCheckpoint["data"] {
  if (value === null || value === undefined) return { podDeviceEntries: null, registeredDevices: null };
  const data = fields(value, where, ["PodDeviceEntries", "RegisteredDevices"]);
  return {
    podDeviceEntries: readEntries(data.get("PodDeviceEntries"), `${where}.PodDeviceEntries`),
    registeredDevices: readStringMap(data.get("RegisteredDevices"), `${where}.RegisteredDevices`),
  };
}

function readEntries(value: unknown, where: string): ParsedPodDevicesEntry[] | null {
  if (value === null || value === undefined) return null;
  if (!Array.isArray(value)) throw mismatch(where, "an array or null", value);
  return value.map((item, index) => readEntry(item, `${where}[${index}]`));
}

function readEntry(value: unknown, where: string): ParsedPodDevicesEntry {
  const entry: ParsedPodDevicesEntry = { podUID: "", containerName: "", resourceName: "", deviceIDs: null, allocResp: null };
  if (value === null) return entry;
  const found = fields(value, where, ["PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"]);
  entry.podUID = readString(found.get("PodUID"), `${where}.PodUID`);
  entry.containerName = readString(found.get("ContainerName"), `${where}.ContainerName`);
  entry.resourceName = readString(found.get("ResourceName"), `${where}.ResourceName`);
  const deviceIDs = found.get("DeviceIDs");
  // A kubelet up to 1.19 wrote a flat list (kubernetes#102880: one upgrading past it dropped the file silently).
  entry.deviceIDs = Array.isArray(deviceIDs) ? readStrings(deviceIDs, `${where}.DeviceIDs`) : readNumaMap(deviceIDs, `${where}.DeviceIDs`);
  entry.allocResp = readBytes(found.get("AllocResp"), `${where}.AllocResp`);
  return entry;
}

function readStringMap(value: unknown, where: string): Map<string, string[] | null> | null {
  if (value === null || value === undefined) return null;
  if (!isObject(value)) throw mismatch(where, "an object or null", value);
  const map = new Map<string, string[] | null>();
  // Errors name an entry by its place, never by its key: no error quotes the file (it may not be a checkpoint at all).
  for (const [index, [key, item]] of Object.entries(value).entries()) {
    map.set(wellFormed(key), readStrings(item, `${where}[key ${index + 1}]`));
  }
  return map;
}

const GO_INT_KEY = /^[+-]?[0-9]+$/;

function readNumaMap(value: unknown, where: string): Map<number, string[] | null> | null {
  if (value === null || value === undefined) return null;
  if (!isObject(value)) throw mismatch(where, "an object or null", value);
  const map = new Map<number, string[] | null>();
  for (const [key, item] of Object.entries(value)) {
    const node = GO_INT_KEY.test(key) ? Number(key) : Number.NaN;
    if (!Number.isSafeInteger(node)) {
      throw new CheckpointCorruptError(`${where}: a key is not a NUMA node number`);
    }
    if (map.has(node)) throw new CheckpointCorruptError(`${where}: NUMA node ${node} appears twice`);
    map.set(node === 0 ? 0 : node, readStrings(item, `${where}[${JSON.stringify(key)}]`));
  }
  return map;
}

function readStrings(value: unknown, where: string): string[] | null {
  if (value === null || value === undefined) return null;
  if (!Array.isArray(value)) throw mismatch(where, "an array of strings or null", value);
  return value.map((item, index) => readString(item, `${where}[${index}]`));
}

function readString(value: unknown, where: string): string {
  if (value === null || value === undefined) return "";
  if (typeof value !== "string") throw mismatch(where, "a string", value);
  return wellFormed(value);
}

/**
 * Standard base64 with padding, as Go's StdEncoding writes it, checked in
 * one pass: a regex with a repeated group overflowed V8's stack past about
 * 4.4 million characters (a 3.3 MiB AllocResp).
 */
function isStandardBase64(text: string): boolean {
  if (text.length % 4 !== 0) return false;
  let padding = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x3d) {
      padding++;
    } else if (padding > 0) {
      return false;
    } else if (!((c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2f)) {
      return false;
    }
  }
  return padding <= 2;
}

function readBytes(value: unknown, where: string): Uint8Array | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== "string") throw mismatch(where, "a base64 string or null", value);
  // Go's base64 decoder skips line breaks.
  const text = value.replace(/[\r\n]/g, "");
  if (!isStandardBase64(text)) throw new CheckpointCorruptError(`${where}: not standard base64`);
  return new Uint8Array(Buffer.from(text, "base64"));
}

const UINT64_MAX = 2n ** 64n - 1n;

function readUint64(value: unknown, where: string): bigint {
  if (value === null || value === undefined) return 0n;
  if (!(value instanceof JsonNumber)) throw mismatch(where, "an unsigned integer", value);
  if (!/^(0|[1-9][0-9]*)$/.test(value.source) || BigInt(value.source) > UINT64_MAX) {
    throw new CheckpointCorruptError(`${where}: not an unsigned 64-bit integer`);
  }
  return BigInt(value.source);
}

/**
 * The declared fields of a Go struct found in `value`, matched as
 * encoding/json does: the exact name, else a case-insensitive one.
 */
function fields(value: unknown, where: string, declared: readonly string[]): Map<string, unknown> {
  if (!isObject(value)) throw mismatch(where, "an object", value);
  const found = new Map<string, unknown>();
  const spelling = new Map<string, string>();
  for (const [key, item] of Object.entries(value)) {
    const field = declared.includes(key) ? key : declared.find((name) => foldName(name) === foldName(key));
    if (field === undefined) continue;
    const earlier = spelling.get(field);
    if (earlier !== undefined) {
      throw new CheckpointCorruptError(`${where}: field ${field} is given twice, spelled two ways`);
    }
    spelling.set(field, key);
    found.set(field, item);
  }
  return found;
}

/** Case folding as Go's bytes.EqualFold sees these ASCII field names (long s and Kelvin sign included). */
function foldName(name: string): string {
  return name.replace(/\u017f/g, "s").toLowerCase();
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof JsonNumber);
}

/** Go decodes an escaped lone surrogate as U+FFFD. */
function wellFormed(text: string): string {
  return /[\ud800-\udfff]/.test(text) ? (text as string & { toWellFormed(): string }).toWellFormed() : text;
}

function mismatch(where: string, expected: string, value: unknown): CheckpointCorruptError {
  return new CheckpointCorruptError(`${where}: expected ${expected}, found ${describe(value)}`);
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (value instanceof JsonNumber) return "a number";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return "a string";
  return typeof value === "boolean" ? `${value}` : typeof value;
}
