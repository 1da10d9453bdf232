/**
 * Resources and allocations as status shows them (docs/status-json.md). A
 * resource's status, with its sorted device lists, is built once per change
 * of the resource and reused by every status call, event and scrape until
 * the next change, so a large resource costs its sort once, not per reader.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AllocationStatus, CheckpointStatus, ResourceStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import { AllocationStatusSchema, CheckpointStatusSchema, ResourceStatusSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { CheckpointState } from "./device-manager.ts";
import { type ContainerDevices, entryDeviceIds } from "./pod-devices.ts";
import type { OwnerLifetime } from "./owner-lifetimes.ts";
import { type ResourceState, sortedHealthyIds, sortedUnhealthyIds } from "./resources.ts";

export class ResourceStatusView {
  readonly #cache = new WeakMap<ResourceState, { version: number; status: ResourceStatus }>();

  /** The status of `state` (shared: callers must not change it). */
  of(state: ResourceState): ResourceStatus {
    const cached = this.#cache.get(state);
    if (cached && cached.version === state.version) return cached.status;
    const status = resourceStatus(state);
    this.#cache.set(state, { version: state.version, status });
    return status;
  }
}

function resourceStatus(state: ResourceState): ResourceStatus {
  // The sorted ids an allocation uses too (resources.ts), shared: the message is only read, never changed.
  const healthy = sortedHealthyIds(state) as string[];
  const unhealthy = sortedUnhealthyIds(state) as string[];
  return create(ResourceStatusSchema, {
    name: state.name,
    capacity: state.devices.size,
    // No live plugin: allocatable 0 (docs/status-json.md), though its devices are unhealthy by then anyway.
    allocatable: state.endpoints.size > 0 ? healthy.length : 0,
    healthy,
    unhealthy,
    connected: state.endpoints.size > 0,
    sockets: [...state.endpoints.keys()],
    error: state.lastError ?? undefined,
  });
}

/** An allocation as status shows it; with its owner's lifetime, its age at `now` and its kind. */
export function allocationStatus(entry: ContainerDevices, lifetime?: OwnerLifetime, now?: number): AllocationStatus {
  const status = create(AllocationStatusSchema, { owner: entry.owner, container: entry.container, resource: entry.resource, devices: entryDeviceIds(entry), kind: "plain" });
  if (lifetime === undefined) return status;
  status.kind = lifetime.kind;
  if (lifetime.since !== null) {
    status.allocatedAt = timestampFromDate(new Date(lifetime.since));
    if (now !== undefined) status.ageSeconds = BigInt(Math.max(0, Math.floor((now - lifetime.since) / 1000)));
  }
  if (lifetime.kind === "process") status.ownerPid = lifetime.pid;
  if (lifetime.kind === "lease") status.leaseExpiresAt = timestampFromDate(new Date(lifetime.expiresAt));
  return status;
}

/** Orders resources by name, as status lists them. */
export function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** The checkpoint at `path` as status shows it; undefined without a checkpoint. */
export function checkpointStatus(path: string, state: CheckpointState | null): CheckpointStatus | undefined {
  if (!state) return undefined;
  const { restore, writes } = state;
  return create(CheckpointStatusSchema, {
    path,
    restore: restore?.kind ?? "pending",
    restoreError: restore?.kind === "corrupt" ? restore.error : undefined,
    movedTo: restore?.kind === "corrupt" ? restore.movedTo : undefined,
    writes: writes.writes,
    writeFailures: writes.failures,
    lastWriteAt: writes.lastWriteAt ? timestampFromDate(writes.lastWriteAt) : undefined,
    writeError: writes.lastError ?? undefined,
  });
}
