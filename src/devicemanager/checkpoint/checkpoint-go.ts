/**
 * The checkpoint as the kubelet's Go code sees it, in one place: the model
 * of the Go value (`checkpoint.Data`, nil-ness included), its checksum
 * (go-spew's rendering, FNV-1a 32), the file as Go's encoding/json writes it,
 * and the file read as the kubelet's json.Unmarshal reads it. checkpoint-codec.ts
 * turns these into what the device manager keeps.
 *
 * The checksum: FNV-1a 32 over go-spew's `%#v` rendering of the Go value
 * `checkpoint.checkpointData` (checkpointmanager/checksum). It depends on
 * Go's type names and on nil versus empty, not on the JSON bytes, so it is
 * computed over the model of the Go value itself.
 *
 * Writing: struct fields in declaration order, map keys sorted by their
 * string form (byte order), nil slices and maps as `null`, `[]byte` as
 * standard base64, strings escaped as Go escapes them (`<`, `>`, `&`, U+2028
 * and U+2029 included), no whitespace and no trailing newline.
 *
 * Reading: struct fields matched exactly or case-insensitively, unknown
 * fields (e.g. a newer kubelet's `BootID`) ignored, `null` as Go's zero
 * value, a type mismatch an error; every error names where in the file it
 * is. Where Go would pick one of two conflicting values silently, the file
 * is refused instead: the same field spelled two ways (`PodUID` and
 * `poduid`), or two NUMA keys naming one node (`0` and `00`). A kubelet
 * never writes either. NUMA node ids must be safe integers (below 2^53).
 *
 * @example
 * ```ts
 * checksumOf({ podDeviceEntries: null, registeredDevices: new Map([["nvidia.com/gpu", ["tegra"]]]) });
 * ```
 */
import { Buffer } from "node:buffer";

/** Go's `checkpoint.PodDevicesEntry`; `null` stands for a nil map or slice. */
export interface GoPodDevicesEntry {
  podUID: string;
  containerName: string;
  resourceName: string;
  /** `checkpoint.DevicesPerNUMA` (map[int64][]string). */
  deviceIDs: ReadonlyMap<number, readonly string[] | null> | null;
  allocResp: Uint8Array | null;
}

/** Go's `checkpoint.checkpointData`, the part of the file the checksum covers. */
export interface GoCheckpointData {
  podDeviceEntries: readonly GoPodDevicesEntry[] | null;
  registeredDevices: ReadonlyMap<string, readonly string[] | null> | null;
}

/**
 * A kubelet up to 1.19's `PodDevicesEntry`: `DeviceIDs` a flat list
 * (`[]string`), no NUMA nodes. Its checksum is that kubelet's; kubelets
 * 1.20 and later compute the same one when they read such a file (their
 * V1 types renamed back to the old names before hashing).
 */
interface GoPodDevicesEntry119 extends Omit<GoPodDevicesEntry, "deviceIDs"> {
  deviceIDs: readonly string[] | null;
}

export interface GoCheckpointData119 {
  podDeviceEntries: readonly GoPodDevicesEntry119[] | null;
  registeredDevices: ReadonlyMap<string, readonly string[] | null> | null;
}

const NIL = "<nil>";

/** How Go prints a slice or a map in one of the two renderings: its nil, and what opens, separates and closes its elements. */
interface GoListSyntax {
  nil: string;
  open: string;
  separator: string;
  close: string;
}

const SPEW_SLICE: GoListSyntax = { nil: NIL, open: "[", separator: " ", close: "]" };
const SPEW_MAP: GoListSyntax = { nil: NIL, open: "map[", separator: " ", close: "]" };
const JSON_ARRAY: GoListSyntax = { nil: "null", open: "[", separator: ",", close: "]" };
const JSON_OBJECT: GoListSyntax = { nil: "null", open: "{", separator: ",", close: "}" };

/** Pushes `items` (null: a nil slice or map) in `syntax`, each element by `element`. */
function pushList<T>(parts: string[], items: readonly T[] | null, syntax: GoListSyntax, element: (item: T) => void): void {
  if (items === null) {
    parts.push(syntax.nil);
    return;
  }
  parts.push(syntax.open);
  items.forEach((item, index) => {
    if (index > 0) parts.push(syntax.separator);
    element(item);
  });
  parts.push(syntax.close);
}

/**
 * go-spew's `%#v` with the kubelet's settings (SortKeys, SpewKeys,
 * DisableMethods, DisablePointerAddresses, DisableCapacities): the top value
 * and struct fields carry their Go type in parentheses, slice elements and
 * map entries do not; strings are printed raw.
 */
export function spewCheckpointData(data: GoCheckpointData): string {
  return spewData(data, spewEntry);
}

/** The same for a kubelet up to 1.19's data, whose `DeviceIDs` is a `[]string`. */
function spewCheckpointData119(data: GoCheckpointData119): string {
  return spewData(data, spewEntry119);
}

function spewData<E>(data: { podDeviceEntries: readonly E[] | null; registeredDevices: GoCheckpointData["registeredDevices"] }, entry: (entry: E, parts: string[]) => void): string {
  const parts: string[] = ["(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"];
  pushList(parts, data.podDeviceEntries, SPEW_SLICE, (item) => entry(item, parts));
  parts.push(" RegisteredDevices:(map[string][]string)");
  const registered = data.registeredDevices;
  pushList(parts, registered && [...registered.keys()].sort(compareGoStrings), SPEW_MAP, (name) => parts.push(name, ":", spewStrings(registered!.get(name)!)));
  parts.push("}");
  return parts.join("");
}

function spewEntryNames(entry: Omit<GoPodDevicesEntry, "deviceIDs">, parts: string[]): void {
  parts.push("{PodUID:(string)", entry.podUID, " ContainerName:(string)", entry.containerName, " ResourceName:(string)", entry.resourceName);
}

function spewAllocResp(entry: Omit<GoPodDevicesEntry, "deviceIDs">, parts: string[]): void {
  parts.push(" AllocResp:([]uint8)");
  // go-spew's formatter prints a byte slice like any other: decimal values between brackets.
  parts.push(entry.allocResp === null ? NIL : `[${entry.allocResp.join(" ")}]`);
  parts.push("}");
}

function spewEntry119(entry: GoPodDevicesEntry119, parts: string[]): void {
  spewEntryNames(entry, parts);
  parts.push(" DeviceIDs:([]string)", spewStrings(entry.deviceIDs));
  spewAllocResp(entry, parts);
}

function spewEntry(entry: GoPodDevicesEntry, parts: string[]): void {
  spewEntryNames(entry, parts);
  parts.push(" DeviceIDs:(checkpoint.DevicesPerNUMA)");
  const numa = entry.deviceIDs;
  pushList(parts, numa && [...numa.keys()].sort((a, b) => a - b), SPEW_MAP, (node) => parts.push(String(node), ":", spewStrings(numa!.get(node)!)));
  spewAllocResp(entry, parts);
}

/**
 * `render(values)`, kept per array when `values` is frozen: the device
 * manager hands the checkpoint the same frozen array of a resource's healthy
 * ids until its list changes (resources.ts), so an allocation with 100,000
 * devices registered renders its own entry, not the devices again. A frozen
 * array cannot change, so what is kept cannot go stale. The kept text is
 * flattened: the concatenation that built it is a rope of a piece per id,
 * which kept would cost more than the text (reading a character makes V8
 * flatten it in place).
 */
function renderedOnce(kept: WeakMap<readonly string[], string>, values: readonly string[], render: (values: readonly string[]) => string): string {
  if (!Object.isFrozen(values)) return render(values);
  let text = kept.get(values);
  if (text === undefined) {
    text = render(values);
    text.charCodeAt(0);
    kept.set(values, text);
  }
  return text;
}

const spewOfFrozen = new WeakMap<readonly string[], string>();

function spewStrings(values: readonly string[] | null): string {
  return values === null ? NIL : renderedOnce(spewOfFrozen, values, renderStrings);
}

function renderStrings(values: readonly string[]): string {
  // Concatenation, not join: V8 builds 100,000 ids this way in half the time.
  let out = "[";
  for (let i = 0; i < values.length; i++) out += i === 0 ? values[i]! : " " + values[i]!;
  return out + "]";
}

/**
 * Go's `<` on strings (byte order of their UTF-8), which is what both go-spew
 * and encoding/json sort map keys by. JavaScript compares UTF-16 code units,
 * which agrees except that surrogates (code points above U+FFFF) must sort
 * after U+E000..U+FFFF: shift the code units so that they do.
 */
function compareGoStrings(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return utf8Rank(x) - utf8Rank(y);
  }
  return a.length - b.length;
}

function utf8Rank(codeUnit: number): number {
  if (codeUnit < 0xd800) return codeUnit;
  return codeUnit < 0xe000 ? codeUnit + 0x2000 : codeUnit - 0x800;
}

const FNV32_OFFSET_BASIS = 0x811c9dc5;
const FNV32_PRIME = 0x01000193;

/** FNV-1a, 32 bits, as Go's hash/fnv New32a. */
export function fnv1a32(bytes: Uint8Array): number {
  let hash = FNV32_OFFSET_BASIS;
  for (let i = 0; i < bytes.length; i++) {
    hash = Math.imul(hash ^ bytes[i]!, FNV32_PRIME);
  }
  return hash >>> 0;
}

const utf8 = new TextEncoder();

/** The kubelet's `checksum.New(data)` for the device manager's checkpoint data. */
export function checksumOf(data: GoCheckpointData): number {
  return fnv1a32(utf8.encode(spewCheckpointData(data)));
}

/** A kubelet up to 1.19's checksum of its data. */
export function checksumOf119(data: GoCheckpointData119): number {
  return fnv1a32(utf8.encode(spewCheckpointData119(data)));
}

/** The whole file: `{"Data":{...},"Checksum":N}`. */
export function goCheckpointJson(data: GoCheckpointData, checksum: number): string {
  const parts: string[] = ['{"Data":{"PodDeviceEntries":'];
  pushList(parts, data.podDeviceEntries, JSON_ARRAY, (entry) => entryJson(entry, parts));
  parts.push(',"RegisteredDevices":');
  const registered = data.registeredDevices;
  pushList(parts, registered && [...registered.keys()].sort(compareGoStrings), JSON_OBJECT, (name) => parts.push(goJsonString(name), ":", stringsJson(registered!.get(name)!)));
  parts.push('},"Checksum":', String(checksum), "}");
  return parts.join("");
}

function entryJson(entry: GoPodDevicesEntry, parts: string[]): void {
  parts.push(
    '{"PodUID":',
    goJsonString(entry.podUID),
    ',"ContainerName":',
    goJsonString(entry.containerName),
    ',"ResourceName":',
    goJsonString(entry.resourceName),
    ',"DeviceIDs":',
  );
  const numa = entry.deviceIDs;
  // encoding/json sorts integer keys by their decimal text, so "-1" < "0" < "10" < "2".
  const keys = numa && [...numa.keys()].map((node) => ({ node, text: String(node) })).sort((a, b) => compareGoStrings(a.text, b.text));
  pushList(parts, keys, JSON_OBJECT, ({ node, text }) => parts.push('"', text, '":', stringsJson(numa!.get(node)!)));
  parts.push(',"AllocResp":');
  parts.push(entry.allocResp === null ? "null" : `"${Buffer.from(entry.allocResp.buffer, entry.allocResp.byteOffset, entry.allocResp.byteLength).toString("base64")}"`);
  parts.push("}");
}

const jsonOfFrozen = new WeakMap<readonly string[], string>();

function stringsJson(values: readonly string[] | null): string {
  return values === null ? "null" : renderedOnce(jsonOfFrozen, values, encodeStrings);
}

function encodeStrings(values: readonly string[]): string {
  let out = "[";
  for (let i = 0; i < values.length; i++) {
    const value = values[i]!;
    if (i > 0) out += ",";
    // Most ids need no escaping: added as they are, without a string made for each.
    if (NEEDS_ESCAPE.test(value)) out += goJsonString(value);
    else out += '"' + value + '"';
  }
  return out + "]";
}

/** Characters Go's encoder does not write as they are (HTML-sensitive ones included, as json.Marshal does). */
// deno-lint-ignore no-control-regex
const NEEDS_ESCAPE = /[\u0000-\u001f"\\<>&\u2028\u2029\ud800-\udfff]/;
const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/**
 * A string as Go's encoding/json writes it. A lone surrogate cannot come from
 * a Go string; Go writes invalid UTF-8 as U+FFFD, so it is written as `\ufffd`.
 */
function goJsonString(value: string): string {
  if (!NEEDS_ESCAPE.test(value)) return `"${value}"`;
  let out = '"';
  for (let i = 0; i < value.length; i++) {
    const char = value[i]!;
    const code = value.charCodeAt(i);
    const short = SHORT_ESCAPES[char];
    if (short !== undefined) {
      out += short;
    } else if (code < 0x20 || char === "<" || char === ">" || char === "&" || code === 0x2028 || code === 0x2029) {
      out += "\\u" + code.toString(16).padStart(4, "0");
    } else if (code >= 0xd800 && code <= 0xdbff && isLowSurrogate(value.charCodeAt(i + 1))) {
      out += char + value[i + 1]!;
      i++;
    } else if (code >= 0xd800 && code <= 0xdfff) {
      out += "\\ufffd";
    } else {
      out += char;
    }
  }
  return out + '"';
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}

/** A checkpoint that cannot be trusted: not the format, or its checksum does not match. The message says why. */
export class CheckpointCorruptError extends Error {
  override name = "CheckpointCorruptError";
}

/**
 * An entry as the file has it: `DeviceIDs` maps NUMA nodes to ids (kubelets
 * since 1.20), or is a flat list (up to 1.19); the checksum decides which
 * layout a file whose entries all have `null` there was written in.
 */
interface ParsedPodDevicesEntry extends Omit<GoPodDevicesEntry, "deviceIDs"> {
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
