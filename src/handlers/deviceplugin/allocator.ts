/**
 * Allocate and release as the device manager serves them: requests run one
 * at a time, so two never pick the same device, and the queue is bounded in
 * length and in how long one request may hold it; a release of the owner
 * whose request is in flight wins (as a pod deleted during its admission);
 * what is granted is recorded all at once, written to the checkpoint, and
 * answered once it is on disk (or its write failed, which status reports),
 * so an agent that crashes right after answering still knows the devices
 * are taken. A release is written within LIST_WRITE_DELAY_MS, or sooner
 * with the next allocation.
 */
import { API_SOCKET_LIMITS } from "../../api/limits.ts";
import type { AllocationStatus } from "../../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../../log/logger.ts";
import type { Clock } from "../../platform/clock.ts";
import { allocate, AllocationDeadlineError, AllocationError, checkRequest, RequestDeadlinePassed } from "./allocation.ts";
import type { AllocationRequest, GrantedAllocation } from "./allocation.ts";
import { AllocationQueue } from "./allocation-queue.ts";
import type { DeviceCheckpoint } from "./device-checkpoint.ts";
import { allocationStatus } from "./device-status.ts";
import type { DeviceEvents } from "./device-events.ts";
import { PLUGIN_CALL_TIMEOUTS } from "./endpoint.ts";
import { entryDeviceIds, type PodDevices } from "./pod-devices.ts";
import type { ResourceTable } from "./resources.ts";

/** How long an allocation's answer waits for its checkpoint write. */
const ALLOCATION_WRITE_WAIT_MS = 5000;

/**
 * Requests that may wait behind the running one: as many as the API socket
 * takes connections, so a script running `edgeplug allocate` for many
 * owners at once (one connection per call) meets the connection cap first;
 * only many HTTP/2 streams on one connection can fill the queue.
 */
export const MAX_WAITING_ALLOCATIONS = API_SOCKET_LIMITS.maxConnections;

/**
 * How long one request may hold the queue, all its plugin calls together:
 * what one resource's calls may take, each at its own timeout. So a request
 * for one resource is never cut sooner than its calls' own timeouts would
 * cut it, and one for 64 resources cannot hold the others up 64 times as long.
 */
export const ALLOCATION_REQUEST_DEADLINE_MS =
  PLUGIN_CALL_TIMEOUTS.getPreferredAllocationMs + PLUGIN_CALL_TIMEOUTS.allocateMs + PLUGIN_CALL_TIMEOUTS.preStartContainerMs;

export interface AllocatorParts {
  resources: ResourceTable;
  pods: PodDevices;
  checkpoint: DeviceCheckpoint;
  events: DeviceEvents;
  log: Logger;
  maxDevices: () => number;
  stopped: () => boolean;
  /** Times each request's deadline. */
  clock: Clock;
  /** Told of each request refused because the queue was full. */
  queueFull?: () => void;
}

export class Allocator {
  readonly #parts: AllocatorParts;
  readonly #queue: AllocationQueue;
  /** The request on its way, and whether its owner was released meanwhile. */
  #inFlight: { owner: string; released: boolean } | null = null;

  constructor(parts: AllocatorParts) {
    this.#parts = parts;
    this.#queue = new AllocationQueue(MAX_WAITING_ALLOCATIONS, () => parts.queueFull?.());
  }

  async allocate(request: AllocationRequest): Promise<GrantedAllocation[]> {
    // Checked before the request takes a place in the queue: a malformed one never waits, nor holds its memory there.
    checkRequest(request, this.#parts.maxDevices());
    if (this.#parts.stopped()) throw new AllocationError("the agent is stopping");
    const giveUpTurn = await this.#queue.take(request.owner, request.signal);
    let outcome: { granted: GrantedAllocation[]; recorded: boolean };
    try {
      if (this.#parts.stopped()) throw new AllocationError("the agent is stopping");
      // Its caller may have given up just as its turn came.
      if (request.signal?.aborted) throw new AllocationError(`the request of owner ${request.owner} was cancelled before its turn`);
      outcome = await this.#run(request);
    } finally {
      giveUpTurn();
    }
    // Outside the queue: allocations close together share one write.
    if (outcome.recorded) await this.#parts.checkpoint.flush(ALLOCATION_WRITE_WAIT_MS);
    return outcome.granted;
  }

  /** Runs `request`, which holds the turn, under its deadline, and records what it was granted. */
  async #run(request: AllocationRequest): Promise<{ granted: GrantedAllocation[]; recorded: boolean }> {
    const { resources, pods, checkpoint, events, log, clock } = this.#parts;
    const deadline = new AbortController();
    const cancelTimer = clock.setTimer(() => deadline.abort(new RequestDeadlinePassed(ALLOCATION_REQUEST_DEADLINE_MS)), ALLOCATION_REQUEST_DEADLINE_MS);
    const signal = request.signal ? AbortSignal.any([request.signal, deadline.signal]) : deadline.signal;
    const inFlight = { owner: request.owner, released: false };
    this.#inFlight = inFlight;
    let ran: Awaited<ReturnType<typeof allocate>>;
    try {
      ran = await allocate({ ...request, signal }, resources, pods);
    } catch (error) {
      if (error instanceof AllocationDeadlineError) {
        log.warn("allocation passed its deadline", { owner: request.owner, resource: error.resource, call: error.call, deadlineMs: ALLOCATION_REQUEST_DEADLINE_MS });
      }
      throw error;
    } finally {
      cancelTimer();
      this.#inFlight = null;
    }
    const { granted, fresh } = ran;
    if (inFlight.released) throw new AllocationError(`owner ${request.owner} was released while its allocation was in progress`);
    if (fresh.length > 0) {
      for (const entry of fresh) pods.add(entry);
      log.info("devices allocated", { owner: request.owner, container: request.container, allocations: fresh.map((e) => ({ resource: e.resource, devices: entryDeviceIds(e) })) });
      checkpoint.changed();
      events.allocationChanged({ kind: "allocation", owner: request.owner, released: false, resources: fresh.map((entry) => entry.resource) });
    }
    return { granted, recorded: fresh.length > 0 };
  }

  /** Frees every device of `owner`; returns what was freed. */
  release(owner: string): AllocationStatus[] {
    const { pods, checkpoint, events, log } = this.#parts;
    if (this.#inFlight?.owner === owner) this.#inFlight.released = true;
    const freed = pods.release(owner);
    if (freed.length > 0) {
      log.info("devices released", { owner });
      // Not urgent: a release lost to a crash leaves its devices taken, never given twice, and the
      // next allocation's write carries it, so a release and an allocation cost one write, not two.
      checkpoint.changed(false);
      events.allocationChanged({ kind: "allocation", owner, released: true, resources: freed.map((entry) => entry.resource) });
    }
    return freed.map(allocationStatus);
  }
}
