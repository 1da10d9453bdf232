/**
 * The device manager's checkpoint (`kubelet_internal_checkpoint`) in the
 * kubelet's exact bytes: Go encoding/json of `checkpoint.Data` with the
 * FNV-1a 32 checksum over go-spew's rendering of its `Data` (the kubelet's
 * checkpointmanager/checksum). A file written by a kubelet reads here and
 * one written here reads in a kubelet.
 *
 * @example
 * ```ts
 * const bytes = encodeCheckpoint({ podDeviceEntries: [], registeredDevices: new Map([["acme.io/gpu", ["gpu0"]]]) });
 * decodeCheckpoint(bytes).registeredDevices.get("acme.io/gpu"); // ["gpu0"]
 * ```
 */
import {
  CheckpointCorruptError,
  checksumOf,
  checksumOf119,
  type GoCheckpointData,
  type GoCheckpointData119,
  goCheckpointJson,
  type GoPodDevicesEntry,
  parseCheckpointFile,
  type ParsedCheckpoint,
} from "./checkpoint-go.ts";

export { CheckpointCorruptError } from "./checkpoint-go.ts";

export interface PodDevicesEntry {
  podUID: string;
  containerName: string;
  resourceName: string;
  /** NUMA node (-1 when the device has no topology) -> device ids, in the kubelet's order */
  deviceIDs: Map<number, string[]>;
  /** the ContainerAllocateResponse as protobuf bytes (the kubelet's AllocResp) */
  allocResp: Uint8Array;
}

export interface CheckpointData {
  podDeviceEntries: PodDevicesEntry[];
  /** healthy device ids per resource, as the kubelet writes RegisteredDevices */
  registeredDevices: Map<string, readonly string[]>;
}

/**
 * A checkpoint file larger than this is refused as corrupt without being read:
 * 100,000 devices with 64-byte ids, all allocated, take about 20 MiB.
 */
export const MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024;

/** The file name the kubelet gives the device manager's checkpoint. */
export const KUBELET_CHECKPOINT_NAME = "kubelet_internal_checkpoint";

const utf8 = new TextEncoder();

/**
 * The kubelet's exact bytes for `data`. No entries is written as Go's nil
 * slice (`null`), as the kubelet does; maps are written with sorted keys and
 * device lists in the order given.
 */
export function encodeCheckpoint(data: CheckpointData): Uint8Array {
  const go: GoCheckpointData = {
    podDeviceEntries: data.podDeviceEntries.length === 0 ? null : data.podDeviceEntries,
    registeredDevices: data.registeredDevices,
  };
  return utf8.encode(goCheckpointJson(go, checksumOf(go)));
}

/**
 * Reads a checkpoint written by a kubelet or by edgeplug and verifies its
 * checksum as the kubelet does (over the decoded data, so a file re-indented
 * or with its keys reordered still verifies). Throws CheckpointCorruptError
 * saying why otherwise. Go's nil values come back empty.
 */
export function decodeCheckpoint(bytes: Uint8Array): CheckpointData {
  return decodeCheckpointWithChecksum(bytes).data;
}

/**
 * The layout a checkpoint was written in: a kubelet's since 1.20 (and
 * edgeplug's), or one up to 1.19, whose device ids have no NUMA node. Such a
 * file is read as kubelets 1.20 and later read it: every allocated device on
 * NUMA node 0, the only choice left without recorded affinity. It is
 * written back in the current layout at the next change.
 */
export type CheckpointLayout = "1.20" | "1.19";

/** decodeCheckpoint, also giving the verified checksum and the layout the file was in (for `checkpoint verify` and the restore's log). */
export function decodeCheckpointWithChecksum(bytes: Uint8Array): { data: CheckpointData; checksum: number; layout: CheckpointLayout } {
  if (bytes.length > MAX_CHECKPOINT_BYTES) {
    throw new CheckpointCorruptError(`${bytes.length} bytes is over the ${MAX_CHECKPOINT_BYTES}-byte limit of a checkpoint`);
  }
  let parsed: ReturnType<typeof parseCheckpointFile>;
  try {
    parsed = parseCheckpointFile(bytes);
  } catch (error) {
    // Whatever the parser did not foresee is still a file that cannot be read: moved aside, never a start that fails forever.
    if (error instanceof CheckpointCorruptError) throw error;
    throw new CheckpointCorruptError(`the checkpoint cannot be parsed (${error instanceof Error ? error.name : typeof error})`);
  }
  const { data: go, checksum: actual, layout } = verified(parsed);
  const entries = go.podDeviceEntries ?? [];
  const registered = go.registeredDevices ?? new Map<string, readonly string[] | null>();
  return {
    checksum: actual,
    layout,
    data: {
      podDeviceEntries: entries.map((entry) => ({
        podUID: entry.podUID,
        containerName: entry.containerName,
        resourceName: entry.resourceName,
        deviceIDs: new Map([...(entry.deviceIDs ?? [])].map(([node, ids]) => [node, [...(ids ?? [])]])),
        allocResp: entry.allocResp ?? new Uint8Array(0),
      })),
      registeredDevices: new Map([...registered].map(([name, ids]) => [name, [...(ids ?? [])]])),
    },
  };
}

/**
 * The file's data in the current layout, once its checksum holds in the
 * layout its entries show. Entries whose `DeviceIDs` are all `null` (or no
 * entries) show none: the current layout is tried first, as kubelets do.
 */
function verified(parsed: ParsedCheckpoint): { data: GoCheckpointData; checksum: number; layout: CheckpointLayout } {
  const entries = parsed.data.podDeviceEntries;
  const lists = entries?.some((entry) => Array.isArray(entry.deviceIDs)) ?? false;
  const maps = entries?.some((entry) => entry.deviceIDs instanceof Map) ?? false;
  if (lists && maps) throw new CheckpointCorruptError("Data.PodDeviceEntries: some DeviceIDs are lists (kubelet 1.19) and some map NUMA nodes (1.20 and later)");
  const tried: number[] = [];
  if (!lists) {
    const current: GoCheckpointData = { ...parsed.data, podDeviceEntries: entries as GoPodDevicesEntry[] | null };
    const checksum = checksumOf(current);
    if (parsed.checksum === BigInt(checksum)) return { data: current, checksum, layout: "1.20" };
    tried.push(checksum);
  }
  if (!maps) {
    const old: GoCheckpointData119 = { ...parsed.data, podDeviceEntries: entries as GoCheckpointData119["podDeviceEntries"] };
    const checksum = checksumOf119(old);
    if (parsed.checksum === BigInt(checksum)) {
      const converted = old.podDeviceEntries?.map((entry) => ({ ...entry, deviceIDs: new Map([[0, entry.deviceIDs]]) })) ?? null;
      return { data: { registeredDevices: old.registeredDevices, podDeviceEntries: converted }, checksum, layout: "1.19" };
    }
    tried.push(checksum);
  }
  throw new CheckpointCorruptError(`checkpoint is corrupted: its Checksum is ${parsed.checksum} but its Data hashes to ${tried[0]}`);
}
