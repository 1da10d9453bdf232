/**
 * Allocate and release as the device manager serves them: requests run one
 * at a time, so two never pick the same device, and the queue is bounded in
 * length and in how long one request may hold it; a release of the owner
 * whose request is in flight wins (as a pod deleted during its admission);
 * what is granted is recorded all at once, written to the checkpoint, and
 * answered once it is on disk, so an agent that crashes right after
 * answering still knows the devices are taken. When that write fails, or
 * has no outcome within the checkpoint's write wait, the allocation is
 * undone and refused with the cause; a request arriving while the last
 * write failed tries a write first and is refused before any plugin call
 * if it fails again. A release is answered once a checkpoint without the
 * owner is on disk; until then its devices stay held, and if that write
 * fails the owner keeps them and the release is refused with the cause.
 * The caller giving up while its write is on its way changes nothing: the
 * write alone decides, and status shows the outcome.
 */
import type { AllocationStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../log/logger.ts";
import type { Clock } from "../platform/clock.ts";
import { allocate, AllocationDeadlineError, AllocationError, checkRequest, RequestDeadlinePassed } from "./allocation.ts";
import type { AllocationRequest, GrantedAllocation } from "./allocation.ts";
import { AllocationQueue } from "./allocation-queue.ts";
import type { DeviceCheckpoint } from "./checkpoint/device-checkpoint.ts";
import { allocationStatus } from "./device-status.ts";
import type { DeviceEvents } from "./device-events.ts";
import { PLUGIN_CALL_TIMEOUTS } from "./endpoint.ts";
import { type ContainerDevices, entryDeviceIds, type PodDevices } from "./pod-devices.ts";
import type { ResourceTable } from "./resources.ts";
import type { TopologyPolicy } from "./topology.ts";
import type { AutomaticReleaseCause, OwnerLifetimes } from "./owner-lifetimes.ts";

/**
 * Requests that may wait behind the running one: as many as the API socket
 * takes connections (API_SOCKET_LIMITS.maxConnections, held equal by
 * test/device-allocation-api-bounds.test.ts), so a script running `edgeplug
 * allocate` for many owners at once (one connection per call) meets the
 * connection cap first; only many HTTP/2 streams on one connection can fill
 * the queue. The device manager's own number: it sits below the listeners.
 */
export const MAX_WAITING_ALLOCATIONS = 128;

/**
 * How long one request may hold the queue, all its plugin calls together:
 * what one resource's calls may take, each at its own timeout. So a request
 * for one resource is never cut sooner than its calls' own timeouts would
 * cut it, and one for 64 resources cannot hold the others up 64 times as long.
 */
export const ALLOCATION_REQUEST_DEADLINE_MS = PLUGIN_CALL_TIMEOUTS.getPreferredAllocationMs + PLUGIN_CALL_TIMEOUTS.allocateMs + PLUGIN_CALL_TIMEOUTS.preStartContainerMs;

export interface AllocatorParts {
  resources: ResourceTable;
  pods: PodDevices;
  checkpoint: DeviceCheckpoint;
  events: DeviceEvents;
  log: Logger;
  maxDevices: () => number;
  /** devicePlugins.topologyPolicy in force (a reload changes it for the next request). */
  topologyPolicy: () => TopologyPolicy;
  stopped: () => boolean;
  /** Times each request's deadline. */
  clock: Clock;
  /** Told of each request refused because the queue was full. */
  queueFull?: () => void;
  /** Owners held by a process or a lease; without it every owner is plain. */
  lifetimes?: () => OwnerLifetimes | null;
}

export class Allocator {
  readonly #parts: AllocatorParts;
  readonly #queue: AllocationQueue;
  /** The request on its way, and whether its owner was released meanwhile. */
  #inFlight: { owner: string; released: boolean } | null = null;
  /** Releases on their way to disk, by owner: a second release of the owner waits for the same write. */
  readonly #releasing = new Map<string, Promise<AllocationStatus[]>>();

  constructor(parts: AllocatorParts) {
    this.#parts = parts;
    this.#queue = new AllocationQueue(MAX_WAITING_ALLOCATIONS, () => parts.queueFull?.());
  }

  async allocate(request: AllocationRequest): Promise<GrantedAllocation[]> {
    // Checked before the request takes a place in the queue: a malformed one never waits, nor holds its memory there.
    checkRequest(request, this.#parts.maxDevices());
    if (this.#parts.stopped()) throw new AllocationError("the agent is stopping");
    const giveUpTurn = await this.#queue.take(request.owner, request.signal);
    let recorded: Recorded;
    try {
      if (this.#parts.stopped()) throw new AllocationError("the agent is stopping");
      // Its caller may have given up just as its turn came.
      if (request.signal?.aborted) throw new AllocationError(`the request of owner ${request.owner} was cancelled before its turn`);
      if (this.#parts.pods.isReleasing(request.owner)) throw new AllocationError(`owner ${request.owner} is being released; allocate again once the release is answered`);
      await this.#checkpointWritable(request);
      const lifetimes = this.#parts.lifetimes?.() ?? null;
      if (lifetimes === null && request.lifetime !== undefined && request.lifetime.kind !== "plain") {
        throw new AllocationError("this agent keeps no owner processes or leases (--reconcile-once)");
      }
      // In force before the plugin calls: a process exiting meanwhile releases whatever the request records.
      const pending = lifetimes?.prepare(request.owner, request.lifetime ?? { kind: "plain" }) ?? null;
      try {
        recorded = await this.#run(request);
      } catch (error) {
        pending?.abandon();
        throw error;
      }
      // Before the checkpoint holds the devices, the side file holds how long: a crash between leaves an owner the next start drops.
      const failure = pending === null ? null : await pending.commit();
      if (failure !== null) {
        this.#undo(recorded);
        pending?.abandon();
        this.#parts.log.warn("allocation undone: the owner lifetimes file was not written", { owner: request.owner, error: failure });
        throw new AllocationError(`nothing was allocated to owner ${request.owner}, the allocation was undone: the owner lifetimes file was not written: ${failure}`);
      }
    } finally {
      giveUpTurn();
    }
    // Outside the queue: allocations close together share one write.
    if (recorded.fresh.length > 0) await this.#written(request, recorded);
    return recorded.granted;
  }

  /**
   * Refuses the request before any plugin call when the checkpoint cannot be
   * written: after a failed write, one more is tried now (the disk may be
   * back, so nothing waits for the retry's backoff).
   */
  async #checkpointWritable(request: AllocationRequest): Promise<void> {
    const { checkpoint } = this.#parts;
    if (checkpoint.writeError === null) return;
    if (await checkpoint.flush(checkpoint.writeWaitMs())) return;
    throw new AllocationError(`nothing was allocated to owner ${request.owner}: ${checkpoint.writeError ?? "the checkpoint was not written in time"}`);
  }

  /** Waits for the write holding `recorded`; on failure undoes it and refuses with the cause. */
  async #written(request: AllocationRequest, recorded: Recorded): Promise<void> {
    const { checkpoint, events, log } = this.#parts;
    const failure = await checkpoint.written(recorded.change);
    const devices = recorded.fresh.map((e) => ({ resource: e.resource, devices: entryDeviceIds(e) }));
    if (failure === null) {
      log.info("devices allocated", { owner: request.owner, container: request.container, allocations: devices });
      events.allocationChanged({ kind: "allocation", owner: request.owner, released: false, resources: recorded.fresh.map((entry) => entry.resource) });
      return;
    }
    this.#undo(recorded);
    this.#parts.lifetimes?.()?.forget(request.owner);
    log.warn("allocation undone: its checkpoint write failed", { owner: request.owner, container: request.container, allocations: devices, error: failure });
    throw new AllocationError(`nothing was allocated to owner ${request.owner}, the allocation was undone: ${failure}`);
  }

  /** Entries a release took meanwhile are gone already; the others go now, and the next write leaves them out. */
  #undo(recorded: Recorded): void {
    const undone = recorded.fresh.filter((entry) => this.#parts.pods.remove(entry));
    if (undone.length > 0) this.#parts.checkpoint.changed();
  }

  /** Runs `request`, which holds the turn, under its deadline, and records what it was granted. */
  async #run(request: AllocationRequest): Promise<Recorded> {
    const { resources, pods, checkpoint, log, clock } = this.#parts;
    const deadline = new AbortController();
    const cancelTimer = clock.setTimer(() => deadline.abort(new RequestDeadlinePassed(ALLOCATION_REQUEST_DEADLINE_MS)), ALLOCATION_REQUEST_DEADLINE_MS);
    const signal = request.signal ? AbortSignal.any([request.signal, deadline.signal]) : deadline.signal;
    const inFlight = { owner: request.owner, released: false };
    this.#inFlight = inFlight;
    let ran: Awaited<ReturnType<typeof allocate>>;
    try {
      ran = await allocate({ ...request, signal }, resources, pods, this.#parts.topologyPolicy());
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
    for (const entry of fresh) pods.add(entry);
    return { granted, fresh, change: fresh.length > 0 ? checkpoint.changed() : 0 };
  }

  /**
   * Frees every device of `owner` once a checkpoint without it is on disk;
   * returns what was freed. Until then the devices stay held (no allocation
   * can take them); if that write fails the owner keeps them and the release
   * is refused with the cause.
   */
  release(owner: string, cause?: AutomaticReleaseCause): Promise<AllocationStatus[]> {
    if (this.#inFlight?.owner === owner) this.#inFlight.released = true;
    const pending = this.#releasing.get(owner);
    if (pending) return pending;
    if (this.#parts.pods.ownerEntries(owner).length === 0) {
      this.#parts.lifetimes?.()?.forget(owner);
      return Promise.resolve([]);
    }
    const releasing = this.#release(owner, cause).finally(() => this.#releasing.delete(owner));
    this.#releasing.set(owner, releasing);
    return releasing;
  }

  async #release(owner: string, cause: AutomaticReleaseCause | undefined): Promise<AllocationStatus[]> {
    const { pods, checkpoint, events, log } = this.#parts;
    pods.beginRelease(owner);
    let failure: string | null;
    try {
      failure = await checkpoint.written(checkpoint.changed());
    } finally {
      pods.endRelease(owner);
    }
    if (failure !== null) {
      // The owner is back in the next write, which the failed one's retry makes.
      checkpoint.changed(false);
      log.warn("release refused: its checkpoint write failed", { owner, error: failure });
      throw new AllocationError(`owner ${owner} was not released, its devices stay held: ${failure}`);
    }
    const freed = pods.release(owner);
    this.#parts.lifetimes?.()?.forget(owner);
    if (freed.length > 0) {
      if (cause === undefined) log.info("devices released", { owner });
      events.allocationChanged({ kind: "allocation", owner, released: true, resources: freed.map((entry) => entry.resource), cause });
    }
    return freed.map((entry) => allocationStatus(entry));
  }
}

/** What a request was granted, the entries it added, and the checkpoint change that holds them (0: nothing new). */
interface Recorded {
  granted: GrantedAllocation[];
  fresh: ContainerDevices[];
  change: number;
}
