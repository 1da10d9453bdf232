/**
 * The device manager's checkpoint: the kubelet's `kubelet_internal_checkpoint`
 * format (checkpoint-codec.ts) and its atomic, coalescing store on disk
 * (checkpoint-store.ts). This module is the one the device manager imports.
 *
 * @example
 * ```ts
 * const store = new CheckpointStore({ path, log });
 * const restored = await store.restore();       // missing | restored | corrupt (moved aside)
 * await store.write({ podDeviceEntries, registeredDevices });
 * ```
 */
export {
  CheckpointCorruptError,
  type CheckpointData,
  decodeCheckpoint,
  decodeCheckpointWithChecksum,
  encodeCheckpoint,
  KUBELET_CHECKPOINT_NAME,
  MAX_CHECKPOINT_BYTES,
  type PodDevicesEntry,
} from "./checkpoint-codec.ts";
export { CheckpointStore, type CheckpointStoreOptions, type DeviceStateStore, type RestoreResult } from "./checkpoint-store.ts";
export { readCheckpointBytes } from "./checkpoint-files.ts";
