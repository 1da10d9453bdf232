/**
 * What the device manager's resources may hold node-wide (resources.ts):
 * all resources' devices together by {@link MAX_NODE_DEVICES} (a list that
 * would pass it is refused); departed resources (no live endpoint) keep
 * their lists, as the kubelet's stopped endpoints do, only while all of
 * them together hold at most {@link MAX_DEPARTED_DEVICES}: past it the
 * oldest departures keep only the devices their allocations hold (a plugin
 * sends its whole list again when it returns), so plugins that come and go
 * leave little more than names behind; and at most
 * {@link MAX_DEPARTED_RESOURCES} departed resources without allocations
 * wait out their grace period, the oldest leaving early past that.
 */
import { DeviceList } from "./device-list.ts";

/** Devices of all resources together, departed ones included (ten times `security.maxDevicesPerResource`'s default). */
export const MAX_NODE_DEVICES = 1_000_000;
/** Departed resources without allocations kept for their grace period; past it the oldest leaves at once. */
export const MAX_DEPARTED_RESOURCES = 1024;
/** Devices departed resources keep in all (one resource at `security.maxDevicesPerResource`'s default); past it they keep only allocated ones. */
export const MAX_DEPARTED_DEVICES = 100_000;

export interface ResourceBounds {
  maxNodeDevices: number;
  maxDepartedResources: number;
  maxDepartedDevices: number;
}

export const RESOURCE_BOUNDS: ResourceBounds = {
  maxNodeDevices: MAX_NODE_DEVICES,
  maxDepartedResources: MAX_DEPARTED_RESOURCES,
  maxDepartedDevices: MAX_DEPARTED_DEVICES,
};

export const NO_ALLOCATIONS: ReadonlySet<string> = new Set();

/** Why the node may not hold `total` devices, or null. */
export function nodeDevicesRefusal(total: number, bounds: ResourceBounds): string | null {
  if (total <= bounds.maxNodeDevices) return null;
  return `the node would hold ${total} devices, more than its limit of ${bounds.maxNodeDevices} for all resources together`;
}

interface Departed {
  name: string;
  devices: DeviceList;
  stoppedAt: number | null;
}

/**
 * What keeps `departed` (resources without a live endpoint) within `bounds`:
 * the lists to cut down to their allocated devices (oldest departures
 * first), and the resources without allocations to remove now.
 */
export function boundDeparted<T extends Departed>(
  departed: readonly T[],
  allocatedIds: (resource: string) => ReadonlySet<string>,
  bounds: ResourceBounds,
): { cut: Array<[T, DeviceList]>; remove: T[] } {
  const oldestFirst = [...departed].sort((a, b) => a.stoppedAt! - b.stoppedAt!);
  let devices = oldestFirst.reduce((sum, state) => sum + state.devices.size, 0);
  const cut: Array<[T, DeviceList]> = [];
  for (const state of oldestFirst) {
    if (devices <= bounds.maxDepartedDevices) break;
    const allocated = allocatedIds(state.name);
    if (state.devices.size <= allocated.size) continue;
    const kept = allocated.size === 0 ? DeviceList.EMPTY : state.devices.only(allocated);
    kept.health.fill(0);
    devices -= state.devices.size - kept.size;
    cut.push([state, kept]);
  }
  const unallocated = oldestFirst.filter((state) => allocatedIds(state.name).size === 0);
  return { cut, remove: unallocated.slice(0, Math.max(0, unallocated.length - bounds.maxDepartedResources)) };
}
