/**
 * The device manager's public shapes: its options, the changes it tells
 * subscribers of, and what status says about its checkpoint.
 */
import type { TopologyPolicy } from "./topology.ts";
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import type { CheckpointWriteOutcome } from "./checkpoint/checkpoint-writer.ts";
import type { LiveEndpointLookup, WatchedEndpointRules } from "../endpoints/endpoint-rules.ts";
import type { DeviceStateStore } from "./checkpoint/checkpoint.ts";
import type { PinnedSocket } from "../platform/pinned-socket.ts";
import type { AutomaticReleaseCause } from "./owner-lifetimes.ts";
import type { ProcessWatcher } from "../platform/process-watch.ts";

/** The settings a policy gives the device manager; a reload may change them. */
export interface DeviceSettings {
  gracePeriodMs: number;
  maxDevicesPerResource: number;
  dialTimeoutMs: number;
  /** How allocation treats NUMA nodes (devicePlugins.topologyPolicy); default "none", the kubelet's. */
  topologyPolicy?: TopologyPolicy;
  /** What a watched-directory plugin's endpoint may be (default: owned by root or the agent's uid; no other rule). */
  endpointRules?: WatchedEndpointRules;
}

export interface DeviceManagerOptions extends DeviceSettings {
  log: Logger;
  /** Where the device state is checkpointed; null keeps it in memory only. With a store, connect() waits for restore(). */
  store: DeviceStateStore | null;
  /** The store is only read (someone else writes it: a daemon beside `--reconcile-once`). */
  readOnly?: boolean;
  clock?: Clock;
  /** Told of every checkpoint write (metrics). */
  observeCheckpointWrite?: (outcome: CheckpointWriteOutcome) => void;
  /** The live plugins of other kinds (CSI and DRA drivers), whose endpoints a device plugin may not name. */
  liveElsewhere?: LiveEndpointLookup;
  /** Told of every allocation request refused because the queue was full (metrics). */
  observeAllocationQueueFull?: () => void;
  /**
   * Owners held by a process or a lease (owner-lifetimes.ts): the side file
   * beside the checkpoint (null: in memory only) and the process watcher.
   * Without it every owner is plain (`--reconcile-once`).
   */
  ownerLifetimes?: { file: string | null; watcher: ProcessWatcher; observeAutomaticRelease?: (cause: AutomaticReleaseCause) => void };
}

export type DeviceChange =
  | { kind: "resource"; resource: string; removed: boolean }
  | {
    kind: "allocation";
    owner: string;
    released: boolean;
    /** resources newly allocated or freed */ resources: string[];
    /** Set when the agent released the owner by itself. */
    cause?: AutomaticReleaseCause;
  };

export interface ConnectOptions {
  signal?: AbortSignal;
  /** Told when the plugin's ListAndWatch stream ends (watched-directory plugins: context.connectionLost). */
  onLost?: (reason: string) => void;
  /** Registered on kubelet.sock: it holds a `security.maxPlugins` slot while connected. */
  viaRegistrationSocket?: boolean;
  /** The socket opened for dialling (pinned-socket.ts): dialled instead of the path, and closed with the endpoint or on failure. */
  pinned?: PinnedSocket;
  /** What the connection is for (a watched-directory registration), to disconnect that one only ({@link DeviceManager.disconnectFor}). */
  for?: object;
  /**
   * Asked once the plugin answered, just before it is attached: why it may
   * not be (the `security.maxPlugins` slots filled while it was dialled),
   * or null. Nothing is held for a plugin until it is attached.
   */
  admit?: () => string | null;
}
