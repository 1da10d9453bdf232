/**
 * Allocation as the kubelet does it at pod admission, for one owner and
 * container: per resource, healthy free devices chosen the kubelet's way
 * (topology.ts), the plugin's Allocate, then PreStartContainer when the
 * plugin requires it. Errors are the kubelet's texts. All or nothing: when
 * any resource fails, nothing of the request is recorded.
 */
import type { ContainerAllocateResponse } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { peerMessageOf } from "../log/error-message.ts";
import type { ContainerDevices, PodDevices } from "./pod-devices.ts";
import { ALLOCATE_ANSWER_LIMITS, answerBytes, entryDeviceIds } from "./pod-devices.ts";
import { type DevicePluginEndpoint, EndpointStoppedError } from "./endpoint.ts";
import { healthyNodeIndex, type ResourceTable } from "./resources.ts";
import { chooseDevices, groupByNode, type TopologyPolicy } from "./topology.ts";
import { hasControlCharacter } from "../log/printable.ts";
import type { RequestedLifetime } from "./owner-lifetimes.ts";

export interface ResourceRequest {
  resource: string;
  count: number;
}

export interface AllocationRequest {
  owner: string;
  container: string;
  resources: ResourceRequest[];
  /** How long the owner holds its devices (owner-lifetimes.ts); plain when unset. */
  lifetime?: RequestedLifetime;
  /**
   * The caller's: once it gives up, its request leaves the queue, and its
   * plugin calls are abandoned. While the request runs, the allocator adds
   * the whole request's deadline to it.
   */
  signal?: AbortSignal;
}

export interface GrantedAllocation {
  owner: string;
  container: string;
  resource: string;
  devices: string[];
  response: ContainerAllocateResponse;
}

/** A refusal whose message is the reason the caller sees (the kubelet's wording where it has one). */
export class AllocationError extends Error {
  override name = "AllocationError";
}

/** A request refused on arrival because the queue holds as many waiting requests as it may (the API's ResourceExhausted). */
export class AllocationQueueFullError extends AllocationError {
  override name = "AllocationQueueFullError";
  constructor(waiting: number) {
    super(`allocation queue is full (${waiting} requests waiting); retry later`);
  }
}

/** Why a request's signal aborts when the whole request's deadline passes (the allocator sets it). */
export class RequestDeadlinePassed extends Error {
  override name = "RequestDeadlinePassed";
  readonly deadlineMs: number;
  constructor(deadlineMs: number) {
    super(`the request's deadline of ${deadlineMs} ms passed`);
    this.deadlineMs = deadlineMs;
  }
}

export type PluginCall = "GetPreferredAllocation" | "Allocate" | "PreStartContainer";

/** A request failed at its whole-request deadline, naming the plugin call that was abandoned. */
export class AllocationDeadlineError extends AllocationError {
  override name = "AllocationDeadlineError";
  readonly call: PluginCall;
  readonly resource: string;
  constructor(owner: string, deadlineMs: number, call: PluginCall, resource: string) {
    super(
      `the allocation for owner ${owner} passed its deadline of ${deadlineMs / 1000} s while device plugin ${call} for ${resource} was running; ` +
        "the call was abandoned and nothing was allocated",
    );
    this.call = call;
    this.resource = resource;
  }
}

/** Bounds on what an API client may ask (edgeplug's, the kubelet takes these from the pod spec). */
export const MAX_OWNER_LENGTH = 253;
export const MAX_CONTAINER_LENGTH = 63;
export const MAX_RESOURCES_PER_REQUEST = 64;

export function checkRequest(request: AllocationRequest, maxCount: number): void {
  const text = (what: string, value: string, max: number) => {
    if (value === "") throw new AllocationError(`${what} is required`);
    if (value.length > max) throw new AllocationError(`${what} is longer than ${max} characters`);
    if (hasControlCharacter(value)) throw new AllocationError(`${what} ${JSON.stringify(value)} contains a control character`);
  };
  text("owner", request.owner, MAX_OWNER_LENGTH);
  text("container", request.container, MAX_CONTAINER_LENGTH);
  if (request.resources.length === 0) throw new AllocationError("no resource requested (RESOURCE=COUNT)");
  if (request.resources.length > MAX_RESOURCES_PER_REQUEST) {
    throw new AllocationError(`${request.resources.length} resources requested; at most ${MAX_RESOURCES_PER_REQUEST} per request`);
  }
  const seen = new Set<string>();
  for (const { resource, count } of request.resources) {
    text("resource", resource, 316);
    if (seen.has(resource)) throw new AllocationError(`resource ${resource} is requested twice`);
    seen.add(resource);
    if (!Number.isInteger(count) || count < 1 || count > maxCount) {
      throw new AllocationError(`count for ${resource} must be between 1 and ${maxCount}, got ${count}`);
    }
  }
}

/**
 * Runs the whole request; returns the granted allocations (the held devices
 * for a repeated identical request) without recording them: the caller
 * records them all at once, so a failure anywhere records nothing.
 */
export async function allocate(
  request: AllocationRequest,
  resources: ResourceTable,
  pods: PodDevices,
  topologyPolicy: TopologyPolicy = "none",
): Promise<{ granted: GrantedAllocation[]; fresh: ContainerDevices[] }> {
  const granted: GrantedAllocation[] = [];
  const fresh: ContainerDevices[] = [];
  let freshAnswersBytes = 0;
  for (const { resource, count } of request.resources) {
    const existing = pods.get(request.owner, request.container, resource);
    const held = existing ? entryDeviceIds(existing) : [];
    if (existing && held.length !== count) {
      throw new AllocationError(
        `pod ${goQuote(request.owner)} container ${goQuote(request.container)} changed request for resource ${goQuote(resource)} from ${held.length} to ${count}`,
      );
    }
    const state = resources.get(resource);
    if (!state) throw new AllocationError(`cannot allocate unregistered device ${resource}`);
    // Built once per device list, not per allocation: the free devices are it minus those held.
    const healthy = healthyNodeIndex(state);
    if (healthy.size === 0) throw new AllocationError(`no healthy devices present; cannot allocate unhealthy devices ${resource}`);
    const endpoint = resources.primary(resource);
    if (existing) {
      // The same owner and container asking again is the kubelet's container restart: the same devices,
      // no Allocate, PreStartContainer again; only if they are all still healthy.
      if (!held.every((id) => healthy.has(id))) {
        throw new AllocationError(`previously allocated devices are no longer healthy; cannot allocate unhealthy devices ${resource}`);
      }
      if (endpoint?.options?.preStartRequired) await preStart(endpoint, held, resource, request);
      granted.push({ owner: request.owner, container: request.container, resource, devices: held, response: existing.response });
      continue;
    }
    const free = healthy.without(pods.allocatedIds(resource));
    if (free.count < count) {
      throw new AllocationError(`requested number of devices unavailable for ${resource}. Requested: ${count}, Available: ${free.count}`);
    }
    if (!endpoint) throw new AllocationError(`unknown Device Plugin ${resource}`);
    const preferred = endpoint.options?.getPreferredAllocationAvailable
      ? (available: string[], mustInclude: string[], size: number) => endpoint.getPreferredAllocation(available, mustInclude, size, request.signal)
      : null;
    const devices = await chooseDevices(free, count, preferred, topologyPolicy).catch((error: unknown) => {
      throw rpcFailure("GetPreferredAllocation", resource, request, error);
    });
    if (devices.length < count) {
      throw new AllocationError(`unexpectedly allocated less resources than required. Requested: ${count}, Got: ${devices.length}`);
    }
    const response = await endpoint.allocate(devices, request.signal).catch((error: unknown) => {
      throw rpcFailure("Allocate", resource, request, error);
    });
    // Refused before anything is recorded: a checkpoint too large to read again would lose every allocation.
    const bytes = answerBytes(response);
    if (bytes > ALLOCATE_ANSWER_LIMITS.answerBytes) {
      throw new AllocationError(`the device plugin's Allocate answer for ${resource} is ${bytes} bytes, over the limit of ${ALLOCATE_ANSWER_LIMITS.answerBytes}`);
    }
    freshAnswersBytes += bytes;
    checkAnswerBudget(resource, bytes, freshAnswersBytes, resources, pods);
    if (endpoint.options?.preStartRequired) await preStart(endpoint, devices, resource, request);
    const entry = { owner: request.owner, container: request.container, resource, byNode: groupByNode(state.devices, devices), response };
    fresh.push(entry);
    granted.push({ owner: request.owner, container: request.container, resource, devices, response });
  }
  return { granted, fresh };
}

/**
 * Refuses an answer of `bytes` for `resource` that would take the held
 * answers past the node-wide budget, or take `resource` past its
 * guaranteed share where that would eat into another resource's
 * ({@link ALLOCATE_ANSWER_LIMITS}). `freshBytes` counts this request's
 * answers so far, this one included.
 */
function checkAnswerBudget(resource: string, bytes: number, freshBytes: number, resources: ResourceTable, pods: PodDevices): void {
  const { allAnswersBytes: budget, guaranteedBytesPerResource: guaranteed } = ALLOCATE_ANSWER_LIMITS;
  const total = pods.allAnswersBytes + freshBytes;
  if (total > budget) {
    throw new AllocationError(`the checkpoint's Allocate answers would take more than ${budget} bytes; release some owners first`);
  }
  const own = pods.answersBytesOf(resource) + bytes;
  if (own <= guaranteed) return;
  let reserved = 0;
  for (const state of resources.all()) if (state.name !== resource) reserved += Math.max(0, guaranteed - pods.answersBytesOf(state.name));
  reserved = Math.min(reserved, budget / 2);
  if (total + reserved > budget) {
    throw new AllocationError(
      `the Allocate answers of ${resource} would take ${own} bytes of the checkpoint, leaving other resources less than their ${guaranteed} bytes each; release some of its owners first`,
    );
  }
}

async function preStart(endpoint: DevicePluginEndpoint, devices: string[], resource: string, request: AllocationRequest): Promise<void> {
  await endpoint.preStartContainer(devices, request.signal).catch((error: unknown) => {
    throw rpcFailure("PreStartContainer", resource, request, error);
  });
}

/**
 * A plugin call that failed; a stopped endpoint says so in the kubelet's
 * words, and a call cut by the request's deadline says which deadline,
 * since the transport's own text ("operation was aborted") names neither.
 */
function rpcFailure(call: PluginCall, resource: string, request: AllocationRequest, error: unknown): AllocationError {
  if (error instanceof EndpointStoppedError) return new AllocationError(error.message);
  const reason: unknown = request.signal?.aborted ? request.signal.reason : undefined;
  if (reason instanceof RequestDeadlinePassed) return new AllocationDeadlineError(request.owner, reason.deadlineMs, call, resource);
  return new AllocationError(`device plugin ${call} rpc failed with err: ${peerMessageOf(error)}`);
}

/** Go's %q for the strings edgeplug accepts (no control characters): a JSON string. */
function goQuote(text: string): string {
  return JSON.stringify(text);
}
