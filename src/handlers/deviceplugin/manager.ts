/**
 * The device manager: long-lived state behind both registration paths (the
 * watched-directory handler and the Registration server), so that a policy
 * reload that rebuilds the DevicePlugin handler neither drops nor re-dials a
 * plugin. It owns the endpoints, resources, allocations and checkpoint
 * writes, and tells subscribers of every resource and allocation change.
 *
 * @example
 * ```ts
 * const devices = new DeviceManager({ log, gracePeriodMs: 300_000, maxDevicesPerResource: 100_000, dialTimeoutMs: 10_000, store });
 * await devices.restore();
 * const manager = new PluginManager({ policy, log, handlers: { DevicePlugin: (p, c) => devices.handler(p, c) } });
 * ```
 */
import { create } from "@bufbuild/protobuf";
import type { AllocationStatus, ResourceStatus } from "../../gen/edgeplug/v1/agent_pb.ts";
import { AllocationStatusSchema, ResourceStatusSchema } from "../../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../../log/logger.ts";
import { systemClock, type Clock } from "../../pluginmanager/operations.ts";
import type { HandlerPolicy } from "../../policy/types.ts";
import { allocate, checkRequest, type AllocationRequest, type GrantedAllocation } from "./allocation.ts";
import { DevicePluginEndpoint, type EndpointListener } from "./endpoint.ts";
import { DevicePluginHandler, type ConnectionLostContext } from "./handler.ts";
import { entryDeviceIds, PodDevices, type DeviceStateStore, type RestoreResult } from "./pod-devices.ts";
import { ResourceTable } from "./resources.ts";

export interface DeviceManagerOptions {
  log: Logger;
  gracePeriodMs: number;
  maxDevicesPerResource: number;
  dialTimeoutMs: number;
  /** Where the device state is checkpointed; null keeps it in memory only. */
  store: DeviceStateStore | null;
  clock?: Clock;
}

export type DeviceChange =
  | { kind: "resource"; resource: string; removed: boolean }
  | { kind: "allocation"; owner: string; released: boolean };

export interface ConnectOptions {
  signal?: AbortSignal;
  /** Told when the plugin's ListAndWatch stream ends (watched-directory plugins: context.connectionLost). */
  onLost?: (reason: string) => void;
}

export class DeviceManager {
  readonly #log: Logger;
  readonly #store: DeviceStateStore | null;
  readonly #resources: ResourceTable;
  readonly #pods = new PodDevices();
  readonly #onLost = new Map<DevicePluginEndpoint, (reason: string) => void>();
  readonly #listeners = new Set<(change: DeviceChange) => void>();
  readonly #firstList = new Map<string, Promise<void>>();
  #maxDevices: number;
  #dialTimeoutMs: number;
  #allocating: Promise<unknown> = Promise.resolve();
  #checkpointPending = false;
  #checkpointWrites: Promise<void> = Promise.resolve();
  #stopped = false;
  /** Counters for metrics: successful and failed checkpoint writes. */
  readonly checkpointStats = { writes: 0, failures: 0 };

  constructor(options: DeviceManagerOptions) {
    this.#log = options.log.with({ component: "devicemanager" });
    this.#store = options.store;
    this.#maxDevices = options.maxDevicesPerResource;
    this.#dialTimeoutMs = options.dialTimeoutMs;
    this.#resources = new ResourceTable({
      clock: options.clock ?? systemClock,
      gracePeriodMs: options.gracePeriodMs,
      changed: ({ resource, removed }) => {
        if (removed) this.#log.info("resource removed after its grace period", { resource });
        this.#emit({ kind: "resource", resource, removed });
      },
    });
  }

  /** The DevicePlugin handler for the plugin manager: a view of this manager. */
  handler(policy: HandlerPolicy, context?: ConnectionLostContext): DevicePluginHandler {
    return new DevicePluginHandler(this, policy, context);
  }

  /** Settings a policy reload may change. */
  applySettings(settings: { gracePeriodMs: number; maxDevicesPerResource: number; dialTimeoutMs: number }): void {
    this.#resources.gracePeriodMs = settings.gracePeriodMs;
    this.#maxDevices = settings.maxDevicesPerResource;
    this.#dialTimeoutMs = settings.dialTimeoutMs;
  }

  subscribe(listener: (change: DeviceChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Reads the checkpoint: allocations come back, resources come back disconnected. */
  async restore(): Promise<RestoreResult> {
    if (!this.#store) return { kind: "missing" };
    const result = await this.#store.restore();
    if (result.kind !== "restored") return result;
    const skipped = this.#pods.restore(result.data.podDeviceEntries);
    for (const entry of skipped) this.#log.warn("checkpoint entry skipped: its AllocResp does not decode", { entry });
    for (const resource of result.data.registeredDevices.keys()) this.#resources.restoreDisconnected(resource);
    for (const entry of this.#pods.entries()) this.#resources.restoreDisconnected(entry.resource);
    return result;
  }

  /**
   * Dials the plugin at `socket` for `resource`, reads its options and opens
   * ListAndWatch (the kubelet's connectClient). Resolves once connected; a
   * plugin already connected on the same socket is replaced.
   */
  async connect(resource: string, socket: string, options: ConnectOptions = {}): Promise<void> {
    if (this.#stopped) throw new Error("the device manager is stopping");
    const endpoint = new DevicePluginEndpoint({ resource, socket, dialTimeoutMs: this.#dialTimeoutMs, maxDevices: this.#maxDevices });
    try {
      await endpoint.connect(options.signal);
    } catch (error) {
      endpoint.close();
      throw new Error(`device plugin ${resource} at ${socket}: GetDevicePluginOptions failed: ${error instanceof Error ? error.message : String(error)}`);
    }
    if (this.#stopped) {
      endpoint.close();
      throw new Error("the device manager is stopping");
    }
    const replaced = this.#resources.attach(endpoint);
    if (replaced) this.#closeEndpoint(replaced);
    let resolveFirst = () => {};
    this.#firstList.set(`${resource}\u0000${socket}`, new Promise<void>((resolve) => (resolveFirst = resolve)));
    if (options.onLost) this.#onLost.set(endpoint, options.onLost);
    this.#log.info("device plugin connected", { resource, socket, options: endpoint.options });
    endpoint.watch(this.#listener(resolveFirst));
  }

  /** Disconnects the plugin on `socket` (deregistration); never dials. */
  disconnect(resource: string, socket: string): void {
    const endpoint = this.#resources.get(resource)?.endpoints.get(socket);
    if (!endpoint) return;
    this.#closeEndpoint(endpoint);
    if (this.#resources.detach(endpoint)) this.#scheduleCheckpoint();
  }

  /** The resource a live plugin instance on `socket` serves, if any. */
  resourceOnSocket(socket: string): string | undefined {
    return this.#resources.all().find((state) => state.endpoints.has(socket))?.name;
  }

  /** Resolves when the plugin on (resource, socket) has sent its first good list, or at once if it is not connected. */
  firstList(resource: string, socket: string): Promise<void> {
    return this.#firstList.get(`${resource}\u0000${socket}`) ?? Promise.resolve();
  }

  resources(): ResourceStatus[] {
    return this.#resources
      .all()
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((state) => {
        const healthy: string[] = [];
        const unhealthy: string[] = [];
        for (const device of state.devices.values()) (device.healthy ? healthy : unhealthy).push(device.id);
        return create(ResourceStatusSchema, {
          name: state.name,
          capacity: healthy.length + unhealthy.length,
          allocatable: healthy.length,
          healthy: healthy.sort(),
          unhealthy: unhealthy.sort(),
          connected: state.endpoints.size > 0,
          sockets: [...state.endpoints.keys()],
          error: state.lastError ?? undefined,
        });
      });
  }

  resource(name: string): ResourceStatus | undefined {
    return this.resources().find((resource) => resource.name === name);
  }

  allocations(owner?: string): AllocationStatus[] {
    const entries = owner === undefined ? [...this.#pods.entries()] : this.#pods.ownerEntries(owner);
    return entries.map((entry) =>
      create(AllocationStatusSchema, { owner: entry.owner, container: entry.container, resource: entry.resource, devices: entryDeviceIds(entry) }),
    );
  }

  /** The pod-devices store, read-only use (pod-resources API). */
  get pods(): PodDevices {
    return this.#pods;
  }

  /** Allocates devices; requests run one at a time so two never pick the same device. */
  allocate(request: AllocationRequest): Promise<GrantedAllocation[]> {
    const run = this.#allocating.then(async () => {
      checkRequest(request, this.#maxDevices);
      const { granted, fresh } = await allocate(request, this.#resources, this.#pods);
      if (fresh.length > 0) {
        for (const entry of fresh) this.#pods.add(entry);
        this.#log.info("devices allocated", { owner: request.owner, container: request.container, allocations: fresh.map((e) => ({ resource: e.resource, devices: entryDeviceIds(e) })) });
        this.#scheduleCheckpoint();
        this.#emit({ kind: "allocation", owner: request.owner, released: false });
      }
      return granted;
    });
    this.#allocating = run.catch(() => {});
    return run;
  }

  /** Frees every device of `owner`; returns what was freed. */
  release(owner: string): AllocationStatus[] {
    const released = this.allocations(owner);
    if (this.#pods.release(owner).length > 0) {
      this.#log.info("devices released", { owner });
      this.#scheduleCheckpoint();
      this.#emit({ kind: "allocation", owner, released: true });
    }
    return released;
  }

  /** Resolves once every checkpoint write scheduled so far has finished. */
  async flush(): Promise<void> {
    while (this.#checkpointPending) await new Promise((resolve) => setImmediate(resolve));
    await this.#checkpointWrites;
  }

  /** Closes every endpoint and timer, then waits for the last checkpoint write. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#resources.stop();
    for (const state of this.#resources.all()) for (const endpoint of state.endpoints.values()) this.#closeEndpoint(endpoint);
    await this.flush();
  }

  #listener(resolveFirst: () => void): EndpointListener {
    return {
      devices: (endpoint, devices) => {
        if (!this.#resources.update(endpoint, devices)) return;
        resolveFirst();
        this.#scheduleCheckpoint();
      },
      refused: (endpoint, reason) => {
        this.#log.warn("device list refused; the last good list stays", { resource: endpoint.resource, socket: endpoint.socket, reason });
        this.#resources.refuse(endpoint, reason);
      },
      ended: (endpoint, reason) => {
        resolveFirst();
        const onLost = this.#onLost.get(endpoint);
        this.#onLost.delete(endpoint);
        if (!this.#resources.detach(endpoint)) return;
        this.#log.warn("device plugin disconnected", { resource: endpoint.resource, socket: endpoint.socket, reason });
        this.#scheduleCheckpoint();
        onLost?.(reason);
      },
    };
  }

  #closeEndpoint(endpoint: DevicePluginEndpoint): void {
    this.#onLost.delete(endpoint);
    this.#firstList.delete(`${endpoint.resource}\u0000${endpoint.socket}`);
    endpoint.close();
  }

  #emit(change: DeviceChange): void {
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch (error) {
        this.#log.error("device change listener failed", { error: String(error) });
      }
    }
  }

  /** Coalesces the changes of one turn of the event loop into one write (the store keeps the latest). */
  #scheduleCheckpoint(): void {
    if (!this.#store || this.#checkpointPending) return;
    this.#checkpointPending = true;
    setImmediate(() => {
      this.#checkpointPending = false;
      const data = {
        podDeviceEntries: this.#pods.toCheckpointEntries(),
        registeredDevices: new Map(this.#resources.all().map((state) => [state.name, this.#resources.healthyIds(state.name)])),
      };
      const store = this.#store!;
      this.#checkpointWrites = this.#checkpointWrites.then(() =>
        store.write(data).then(
          () => void this.checkpointStats.writes++,
          (error: unknown) => {
            this.checkpointStats.failures++;
            this.#log.error("checkpoint write failed", { error: error instanceof Error ? error.message : String(error) });
          },
        ),
      );
    });
  }
}
