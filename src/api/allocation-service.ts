/**
 * edgeplug.v1.Agent's Allocate and Release, answered by the device manager.
 * A refusal (the kubelet's error texts, or a checkpoint that cannot be
 * written) is FailedPrecondition, and one
 * because the allocation queue is full ResourceExhausted (retry later); the
 * message is what `edgeplug allocate` prints.
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { AllocateRequest, AllocateResponse, ReleaseRequest, ReleaseResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { AllocateResponseSchema, ReleaseResponseSchema, ResourceAllocationSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { AllocationError, AllocationQueueFullError } from "../devicemanager/allocation.ts";
import type { DeviceManager } from "../devicemanager/device-manager.ts";
import type { RequestedLifetime } from "../devicemanager/owner-lifetimes.ts";

/** `--container`'s default (docs/commands.md). */
export const DEFAULT_CONTAINER = "main";

export async function allocateDevices(devices: DeviceManager, request: AllocateRequest, signal?: AbortSignal): Promise<AllocateResponse> {
  try {
    const granted = await devices.allocate({
      signal,
      owner: request.owner,
      container: request.container === "" ? DEFAULT_CONTAINER : request.container,
      resources: request.resources.map(({ resource, count }) => ({ resource, count })),
      lifetime: requestedLifetime(request),
    });
    return create(AllocateResponseSchema, {
      allocations: granted.map((grant) => create(ResourceAllocationSchema, grant)),
    });
  } catch (error) {
    if (error instanceof AllocationQueueFullError) throw new ConnectError(error.message, Code.ResourceExhausted);
    if (error instanceof AllocationError) throw new ConnectError(error.message, Code.FailedPrecondition);
    throw error;
  }
}

/** The owner's lifetime the request asks for; a process and a lease at once is refused. */
function requestedLifetime(request: AllocateRequest): RequestedLifetime {
  if (request.ownerPid !== undefined && request.leaseMs !== undefined) {
    throw new ConnectError("owner_pid and lease_ms exclude each other: an owner is held by a process or by a lease", Code.InvalidArgument);
  }
  if (request.ownerPid !== undefined) {
    return { kind: "process", pid: request.ownerPid, startTime: request.ownerPidStartTime === undefined ? undefined : String(request.ownerPidStartTime) };
  }
  if (request.ownerPidStartTime !== undefined) throw new ConnectError("owner_pid_start_time needs owner_pid", Code.InvalidArgument);
  if (request.leaseMs !== undefined) return { kind: "lease", durationMs: Number(request.leaseMs) };
  return { kind: "plain" };
}

export async function releaseDevices(devices: DeviceManager, request: ReleaseRequest): Promise<ReleaseResponse> {
  if (request.owner === "") throw new ConnectError("owner is required", Code.InvalidArgument);
  try {
    return create(ReleaseResponseSchema, { released: await devices.release(request.owner) });
  } catch (error) {
    if (error instanceof AllocationError) throw new ConnectError(error.message, Code.FailedPrecondition);
    throw error;
  }
}
