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

/** `--container`'s default (docs/commands.md). */
export const DEFAULT_CONTAINER = "main";

export async function allocateDevices(devices: DeviceManager, request: AllocateRequest, signal?: AbortSignal): Promise<AllocateResponse> {
  try {
    const granted = await devices.allocate({
      signal,
      owner: request.owner,
      container: request.container === "" ? DEFAULT_CONTAINER : request.container,
      resources: request.resources.map(({ resource, count }) => ({ resource, count })),
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

export async function releaseDevices(devices: DeviceManager, request: ReleaseRequest): Promise<ReleaseResponse> {
  if (request.owner === "") throw new ConnectError("owner is required", Code.InvalidArgument);
  try {
    return create(ReleaseResponseSchema, { released: await devices.release(request.owner) });
  } catch (error) {
    if (error instanceof AllocationError) throw new ConnectError(error.message, Code.FailedPrecondition);
    throw error;
  }
}
