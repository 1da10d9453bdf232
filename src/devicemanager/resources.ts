/**
 * The device manager's resources: per resource, the latest complete device
 * list (from any of its plugin instances, as the kubelet's update callback
 * rebuilds the resource from each message), the live endpoints keyed by
 * socket with the newest one primary (allocation goes through it), and when
 * the last endpoint left. The last endpoint leaving turns every device
 * unhealthy at once and starts the grace period after which the resource
 * is removed; an endpoint leaving while a sibling remains changes nothing.
 * Node-wide bounds on what it holds: resource-bounds.ts.
 */
import type { Clock } from "../platform/clock.ts";
import { DeviceList } from "./device-list.ts";
import type { DevicePluginEndpoint } from "./endpoint.ts";
import { NodeIndex } from "./node-index.ts";
import { boundDeparted, NO_ALLOCATIONS, nodeDevicesRefusal, RESOURCE_BOUNDS, type ResourceBounds } from "./resource-bounds.ts";

export interface ResourceState {
  name: string;
  devices: DeviceList;
  /** Live endpoints by socket, in connection order; the last is primary. */
  endpoints: Map<string, DevicePluginEndpoint>;
  /** When the last endpoint left (or the resource was restored without one); null while connected. */
  stoppedAt: number | null;
  cancelGrace: (() => void) | null;
  /** Why the last ListAndWatch message was refused; cleared by the next good one. */
  lastError: string | null;
  /** Counts the changes above, so derived views (status) know when to rebuild. */
  version: number;
}

/** `connection`: a plugin instance came or went, or the resource was removed (`early`: before its grace period); otherwise a new or refused list. */
export type ResourceChange = { resource: string; removed: boolean; connection: boolean; early?: boolean };

export class ResourceTable {
  readonly #resources = new Map<string, ResourceState>();
  readonly #clock: Clock;
  readonly #changed: (change: ResourceChange) => void;
  readonly #allocatedIds: (resource: string) => ReadonlySet<string>;
  readonly #bounds: ResourceBounds;
  #gracePeriodMs: number;
  /** The devices of every resource together. */
  #deviceCount = 0;

  /** `allocatedIds`: the device ids allocations of a resource hold, what a departed resource keeps at least. */
  constructor(options: { clock: Clock; gracePeriodMs: number; changed: (change: ResourceChange) => void; allocatedIds?: (resource: string) => ReadonlySet<string>; bounds?: ResourceBounds }) {
    this.#clock = options.clock;
    this.#gracePeriodMs = options.gracePeriodMs;
    this.#changed = options.changed;
    this.#allocatedIds = options.allocatedIds ?? (() => NO_ALLOCATIONS);
    this.#bounds = options.bounds ?? RESOURCE_BOUNDS;
  }

  /** Why `devices` may not become the list of `endpoint`'s resource: the node would hold more than its bound; or null. */
  nodeDevicesRefusal(endpoint: DevicePluginEndpoint, devices: DeviceList): string | null {
    return nodeDevicesRefusal(this.#deviceCount - (this.#resources.get(endpoint.resource)?.devices.size ?? 0) + devices.size, this.#bounds);
  }

  get gracePeriodMs(): number {
    return this.#gracePeriodMs;
  }

  /** A reload: resources already disconnected leave when the new period since their disconnection ends (at once if it has). */
  set gracePeriodMs(gracePeriodMs: number) {
    if (gracePeriodMs === this.#gracePeriodMs) return;
    this.#gracePeriodMs = gracePeriodMs;
    for (const state of this.#resources.values()) {
      if (state.cancelGrace !== null && state.stoppedAt !== null) this.#armGrace(state, Math.max(0, state.stoppedAt + gracePeriodMs - this.#clock.now()));
    }
  }

  get(name: string): ResourceState | undefined {
    return this.#resources.get(name);
  }

  all(): ResourceState[] {
    return [...this.#resources.values()];
  }

  /** The endpoint allocation goes through: the newest live one. */
  primary(name: string): DevicePluginEndpoint | undefined {
    const endpoints = this.#resources.get(name)?.endpoints;
    return endpoints ? [...endpoints.values()].at(-1) : undefined;
  }

  /** A resource the checkpoint knew: present, disconnected, no devices until its plugin returns. */
  restoreDisconnected(name: string): void {
    if (!this.#resources.has(name)) this.#stop(this.#ensure(name));
  }

  /** Adds a connected endpoint, replacing one on the same socket; returns the replaced one. */
  attach(endpoint: DevicePluginEndpoint): DevicePluginEndpoint | undefined {
    const state = this.#ensure(endpoint.resource);
    const replaced = state.endpoints.get(endpoint.socket);
    state.endpoints.delete(endpoint.socket);
    state.endpoints.set(endpoint.socket, endpoint);
    state.cancelGrace?.();
    state.cancelGrace = null;
    state.stoppedAt = null;
    state.version++;
    this.#changed({ resource: state.name, removed: false, connection: true });
    return replaced;
  }

  /**
   * Removes `endpoint` if it is the one recorded for its socket (a late end of
   * a replaced stream changes nothing); the last one leaving stops the resource.
   * Returns whether anything changed.
   */
  detach(endpoint: DevicePluginEndpoint): boolean {
    const state = this.#resources.get(endpoint.resource);
    if (!state || state.endpoints.get(endpoint.socket) !== endpoint) return false;
    state.endpoints.delete(endpoint.socket);
    if (state.endpoints.size === 0) this.#stop(state);
    state.version++;
    this.#changed({ resource: state.name, removed: false, connection: true });
    return true;
  }

  /** A validated message from a live endpoint: the resource's complete list. */
  update(endpoint: DevicePluginEndpoint, devices: DeviceList): boolean {
    const state = this.#resources.get(endpoint.resource);
    if (!state || state.endpoints.get(endpoint.socket) !== endpoint) return false;
    this.#setDevices(state, devices);
    state.lastError = null;
    state.version++;
    this.#changed({ resource: state.name, removed: false, connection: false });
    return true;
  }

  /**
   * The endpoint's last good list, `devices`, came again. Another endpoint's
   * list may have replaced it meanwhile (a sibling that left since): then it
   * is the resource's list again, and true is returned. Otherwise only a
   * refusal recorded since is cleared.
   */
  unchanged(endpoint: DevicePluginEndpoint, devices: DeviceList): boolean {
    const state = this.#resources.get(endpoint.resource);
    if (!state || state.endpoints.get(endpoint.socket) !== endpoint) return false;
    if (state.devices !== devices) return this.update(endpoint, devices);
    if (state.lastError === null) return false;
    state.lastError = null;
    state.version++;
    this.#changed({ resource: state.name, removed: false, connection: false });
    return false;
  }

  /** Records why a message was refused; "repeated" when it is the error already recorded (nothing changes then). */
  refuse(endpoint: DevicePluginEndpoint, reason: string): "recorded" | "repeated" | "unknown" {
    const state = this.#resources.get(endpoint.resource);
    if (!state || state.endpoints.get(endpoint.socket) !== endpoint) return "unknown";
    const error = `${endpoint.socket}: ${reason}`;
    if (state.lastError === error) return "repeated";
    state.lastError = error;
    state.version++;
    this.#changed({ resource: state.name, removed: false, connection: false });
    return "recorded";
  }

  /** The healthy device ids of `name` in list order (shared and frozen, see {@link healthyIds}). */
  healthyIds(name: string): readonly string[] {
    const state = this.#resources.get(name);
    return state ? healthyIds(state) : NO_IDS;
  }

  /** Cancels every grace timer (the manager is stopping). */
  stop(): void {
    for (const state of this.#resources.values()) {
      state.cancelGrace?.();
      state.cancelGrace = null;
    }
  }

  #ensure(name: string): ResourceState {
    let state = this.#resources.get(name);
    if (!state) {
      state = { name, devices: DeviceList.EMPTY, endpoints: new Map(), stoppedAt: null, cancelGrace: null, lastError: null, version: 0 };
      this.#resources.set(name, state);
    }
    return state;
  }

  #setDevices(state: ResourceState, devices: DeviceList): void {
    this.#deviceCount += devices.size - state.devices.size;
    state.devices = devices;
  }

  /** Every device unhealthy at once; removal after the grace period unless an endpoint returns; departed resources bounded. */
  #stop(state: ResourceState): void {
    state.devices.health.fill(0);
    state.stoppedAt = this.#clock.now();
    state.version++;
    this.#armGrace(state, this.#gracePeriodMs);
    this.#boundDeparted();
  }

  #boundDeparted(): void {
    const { cut, remove } = boundDeparted(this.all().filter((state) => state.stoppedAt !== null), this.#allocatedIds, this.#bounds);
    for (const [state, kept] of cut) {
      this.#setDevices(state, kept);
      state.version++;
    }
    for (const state of remove) this.#remove(state, true);
  }

  #remove(state: ResourceState, early: boolean): void {
    state.cancelGrace?.();
    state.cancelGrace = null;
    this.#resources.delete(state.name);
    this.#deviceCount -= state.devices.size;
    this.#changed({ resource: state.name, removed: true, connection: true, early });
  }

  #armGrace(state: ResourceState, delayMs: number): void {
    state.cancelGrace?.();
    state.cancelGrace = this.#clock.setTimer(() => {
      state.cancelGrace = null;
      if (this.#resources.get(state.name) !== state || state.endpoints.size > 0) return;
      this.#remove(state, false);
    }, delayMs);
  }
}

const NO_IDS: readonly string[] = Object.freeze([]);

interface HealthyIds {
  version: number;
  inOrder: readonly string[];
  sorted: readonly string[] | null;
  unhealthySorted: readonly string[] | null;
  nodes: NodeIndex | null;
}

const healthyCache = new WeakMap<ResourceState, HealthyIds>();

function healthyEntry(state: ResourceState): HealthyIds {
  const cached = healthyCache.get(state);
  if (cached && cached.version === state.version) return cached;
  const { ids, health } = state.devices;
  let inOrder: readonly string[];
  if (health.indexOf(0) < 0) {
    // Every device healthy, the usual case: the list's own frozen array.
    inOrder = ids;
  } else {
    const healthy: string[] = [];
    for (let i = 0; i < ids.length; i++) if (health[i] === 1) healthy.push(ids[i]!);
    inOrder = Object.freeze(healthy);
  }
  const entry = { version: state.version, inOrder, sorted: null, unhealthySorted: null, nodes: null };
  healthyCache.set(state, entry);
  return entry;
}

/**
 * The healthy device ids of `state` in list order, built once per change of
 * the resource: an allocation, the checkpoint (which keeps the encoding of
 * this very array, checkpoint-go.ts) and status all read the same frozen
 * array, so with 100,000 devices an allocation does not walk them again.
 * With every device healthy it is the list's id array itself, which a list
 * repeating the same ids shares, so the checkpoint's encoding of it is kept.
 */
export function healthyIds(state: ResourceState): readonly string[] {
  return healthyEntry(state).inOrder;
}

/** {@link healthyIds} sorted (UTF-16 order, as status lists them), built once per change. */
export function sortedHealthyIds(state: ResourceState): readonly string[] {
  const entry = healthyEntry(state);
  entry.sorted ??= sortedWhere(state.devices, entry.inOrder.length, 1);
  return entry.sorted;
}

/** {@link sortedHealthyIds} by NUMA node, built once per change (on the first allocation after it). */
export function healthyNodeIndex(state: ResourceState): NodeIndex {
  const entry = healthyEntry(state);
  entry.nodes ??= NodeIndex.of(state.devices, sortedHealthyIds(state));
  return entry.nodes;
}

/** The unhealthy device ids of `state`, sorted, built once per change. */
export function sortedUnhealthyIds(state: ResourceState): readonly string[] {
  const entry = healthyEntry(state);
  entry.unhealthySorted ??= sortedWhere(state.devices, state.devices.size - entry.inOrder.length, 0);
  return entry.unhealthySorted;
}

/**
 * The ids whose health byte is `health`, in the list's sorted order: the
 * list's sorted array itself when that is all of them, else a filter of it
 * by a set of whichever side is smaller (no sort again).
 */
function sortedWhere(list: DeviceList, count: number, health: number): readonly string[] {
  if (count === 0) return NO_IDS;
  if (count === list.size) return list.sorted;
  const minority = count <= list.size - count ? health : 1 - health;
  const few = new Set<string>();
  for (let i = 0; i < list.size; i++) if (list.health[i] === minority) few.add(list.ids[i]!);
  const wanted = minority === health;
  return Object.freeze(list.sorted.filter((id) => few.has(id) === wanted));
}
