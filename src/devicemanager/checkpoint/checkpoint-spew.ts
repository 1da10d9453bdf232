/**
 * The kubelet's checkpoint checksum: FNV-1a 32 over go-spew's `%#v` rendering
 * of the Go value `checkpoint.checkpointData` (checkpointmanager/checksum).
 * The checksum depends on Go's type names and on nil versus empty, not
 * on the JSON bytes, so this module works on a model of the Go value itself,
 * nil-ness included.
 *
 * @example
 * ```ts
 * checksumOf({ podDeviceEntries: null, registeredDevices: new Map([["nvidia.com/gpu", ["tegra"]]]) });
 * ```
 */

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
export interface GoPodDevicesEntry119 extends Omit<GoPodDevicesEntry, "deviceIDs"> {
  deviceIDs: readonly string[] | null;
}

export interface GoCheckpointData119 {
  podDeviceEntries: readonly GoPodDevicesEntry119[] | null;
  registeredDevices: ReadonlyMap<string, readonly string[] | null> | null;
}

const NIL = "<nil>";

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
export function spewCheckpointData119(data: GoCheckpointData119): string {
  return spewData(data, spewEntry119);
}

function spewData<E>(data: { podDeviceEntries: readonly E[] | null; registeredDevices: GoCheckpointData["registeredDevices"] }, entry: (entry: E, parts: string[]) => void): string {
  const parts: string[] = ["(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"];
  const entries = data.podDeviceEntries;
  if (entries === null) {
    parts.push(NIL);
  } else {
    parts.push("[");
    entries.forEach((item, index) => {
      if (index > 0) parts.push(" ");
      entry(item, parts);
    });
    parts.push("]");
  }
  parts.push(" RegisteredDevices:(map[string][]string)");
  const registered = data.registeredDevices;
  if (registered === null) {
    parts.push(NIL);
  } else {
    parts.push("map[");
    const names = [...registered.keys()].sort(compareGoStrings);
    names.forEach((name, index) => {
      if (index > 0) parts.push(" ");
      parts.push(name, ":", spewStrings(registered.get(name)!));
    });
    parts.push("]");
  }
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
  if (numa === null) {
    parts.push(NIL);
  } else {
    parts.push("map[");
    const nodes = [...numa.keys()].sort((a, b) => a - b);
    nodes.forEach((node, index) => {
      if (index > 0) parts.push(" ");
      parts.push(String(node), ":", spewStrings(numa.get(node)!));
    });
    parts.push("]");
  }
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
export function renderedOnce(kept: WeakMap<readonly string[], string>, values: readonly string[], render: (values: readonly string[]) => string): string {
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
export function compareGoStrings(a: string, b: string): number {
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
