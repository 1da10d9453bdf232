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
 * const manager = new PluginManager({ policy, log, handlers: { DevicePlugin: (p, c) => new DevicePluginHandler(devices, p, c) } });
 * ```
 */
import type { AllocationStatus, ResourceStatus } from "../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../log/logger.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import { HeapReturn } from "../platform/heap-return.ts";
import { type CheckpointState, DeviceCheckpoint } from "./checkpoint/device-checkpoint.ts";
import { OwnerLifetimes } from "./owner-lifetimes.ts";
import { DeviceEvents } from "./device-events.ts";
import type { AllocationRequest, GrantedAllocation } from "./allocation.ts";
import { Allocator } from "./allocator.ts";
import { allocationStatus, byName, ResourceStatusView } from "./device-status.ts";
import { PluginConnections } from "./connections.ts";
import { PodDevices } from "./pod-devices.ts";
import type { RestoreResult } from "./checkpoint/checkpoint.ts";
import { MAX_DEPARTED_RESOURCES } from "./resource-bounds.ts";
import { healthyIds, type ResourceState, ResourceTable } from "./resources.ts";
import type { ConnectOptions, DeviceChange, DeviceManagerOptions, DeviceSettings } from "./types.ts";
import { sharedSocketRefusal } from "../endpoints/endpoint-check.ts";
import {
  defaultEndpointRules,
  type EndpointHolder,
  type LiveEndpointLookup,
  liveEndpointRefusal,
  ownSocketRefusal,
  watchedEndpointRefusal,
  type WatchedEndpointRules,
} from "../endpoints/endpoint-rules.ts";
import { isSameSocket, type PinnedSocket, type SocketIdentity } from "../platform/pinned-socket.ts";

export type { ConnectOptions, DeviceChange, DeviceManagerOptions, DeviceSettings } from "./types.ts";
export type { CheckpointState } from "./checkpoint/device-checkpoint.ts";

export class DeviceManager {
  readonly #log: Logger;
  readonly #checkpoint: DeviceCheckpoint;
  readonly #resources: ResourceTable;
  readonly #pods = new PodDevices();
  readonly #statusView = new ResourceStatusView();
  readonly #events: DeviceEvents;
  // In real time, as the events: it stands in for V8's own reducer, which keeps no injected clock.
  readonly #heapReturn = new HeapReturn({
    collected: (durationMs) => this.#log.info("memory of a large device list returned", { durationMs: Math.round(durationMs * 10) / 10 }),
  });
  readonly #connections: PluginConnections;
  #settings: Required<DeviceSettings>;
  readonly #allocator: Allocator;
  readonly #liveElsewhere: LiveEndpointLookup | undefined;
  readonly #lifetimes: OwnerLifetimes | null;
  readonly #clock: Clock;
  #stopped = false;
  #stopping: Promise<void> | null = null;

  constructor(options: DeviceManagerOptions) {
    this.#log = options.log.with({ component: "devicemanager" });
    const clock = options.clock ?? systemClock;
    // Watchers hear of device lists at a pace kept in real time: an injected clock drives grace periods and
    // deadlines, and a manual one in tests would hold every list event until advanced.
    this.#events = new DeviceEvents(this.#log, systemClock);
    this.#settings = settingsWithDefaults(options, defaultEndpointRules());
    this.#liveElsewhere = options.liveElsewhere;
    this.#clock = clock;
    this.#resources = new ResourceTable({
      clock,
      gracePeriodMs: options.gracePeriodMs,
      allocatedIds: (resource) => this.#pods.allocatedIds(resource),
      changed: ({ resource, removed, connection, early }) => {
        if (removed) {
          if (early) this.#log.warn("departed resource removed before its grace period: too many departed resources", { resource, limit: MAX_DEPARTED_RESOURCES });
          else this.#log.info("resource removed after its grace period", { resource });
          this.#checkpoint.changed(false);
        }
        this.#events.resourceChanged(resource, removed, connection);
      },
    });
    this.#checkpoint = new DeviceCheckpoint({
      store: options.store,
      readOnly: options.readOnly,
      snapshot: () => this.#snapshot(),
      log: this.#log,
      clock,
      observe: options.observeCheckpointWrite,
    });
    this.#connections = new PluginConnections({
      resources: this.#resources,
      log: this.#log,
      settings: () => this.#settings,
      checkpointChanged: (soon) => this.#checkpoint.changed(soon),
      largeGarbage: () => this.#heapReturn.largeGarbage(),
      refusal: (endpoint) => this.liveEndpointRefusal(endpoint.resource, endpoint.identity),
      clock,
    });
    this.#allocator = new Allocator({
      resources: this.#resources,
      pods: this.#pods,
      checkpoint: this.#checkpoint,
      events: this.#events,
      log: this.#log,
      maxDevices: () => this.#settings.maxDevicesPerResource,
      topologyPolicy: () => this.#settings.topologyPolicy,
      stopped: () => this.#stopped,
      clock,
      queueFull: options.observeAllocationQueueFull,
      lifetimes: () => this.#lifetimes,
    });
    const lifetimes = options.ownerLifetimes;
    this.#lifetimes = lifetimes === undefined ? null : new OwnerLifetimes({
      file: options.readOnly ? null : lifetimes.file,
      clock,
      log: this.#log,
      watcher: lifetimes.watcher,
      holdsDevices: (owner) => this.#pods.ownerEntries(owner).length > 0,
      release: async (owner, cause) => (await this.#allocator.release(owner, cause)).length,
      observe: lifetimes.observeAutomaticRelease,
    });
  }

  /** Settings a policy reload may change. */
  applySettings(settings: DeviceSettings): void {
    this.#resources.gracePeriodMs = settings.gracePeriodMs;
    this.#settings = settingsWithDefaults(settings, this.#settings.endpointRules);
  }

  /** Why a watched-directory plugin's endpoint, opened as `endpoint`, may not be dialled for `resource` (endpoint-rules.ts, endpoint-check.ts), or null. */
  watchedEndpointRefusal(resource: string, endpoint: PinnedSocket, registrationSocket: string): string | null {
    return watchedEndpointRefusal(endpoint, registrationSocket, this.#settings.endpointRules) ?? this.liveEndpointRefusal(resource, endpoint);
  }

  /**
   * Why `resource` may not connect `endpoint` (either way of registering),
   * or null: it is one of edgeplug's own sockets, or a live endpoint of
   * another resource or of a CSI or DRA driver, by path or through a hard link.
   */
  liveEndpointRefusal(resource: string, endpoint: SocketIdentity): string | null {
    const { realPath } = endpoint;
    return (
      ownSocketRefusal(endpoint, this.#settings.endpointRules.ownSockets) ??
        sharedSocketRefusal(realPath, this.#resourceOnEndpoint(endpoint), resource) ??
        liveEndpointRefusal(realPath, this.#liveElsewhere?.(endpoint), "device plugin")
    );
  }

  /** The live device plugin whose endpoint is `endpoint` (by path or inode), for the CSI and DRA drivers' endpoint rule. */
  endpointHolder(endpoint: SocketIdentity): EndpointHolder | undefined {
    const resource = this.#resourceOnEndpoint(endpoint);
    return resource === undefined ? undefined : { kind: "device plugin", name: resource };
  }

  /** Tells `listener` of allocation changes at once and of resource changes coalesced (device-events.ts). */
  subscribe(listener: (change: DeviceChange) => void): () => void {
    return this.#events.subscribe(listener);
  }

  /**
   * Reads the checkpoint, once, before any plugin connects: allocations come
   * back, resources come back disconnected with no devices (capacity 0, as
   * the kubelet's stopped endpoints) until their plugin returns, and go after
   * the grace period if it never does. A corrupt file has been moved aside
   * by the store: the manager starts empty. Rejects when the checkpoint's
   * directory cannot be created or the file cannot be read; writes start
   * only after a successful restore.
   */
  async restore(): Promise<RestoreResult> {
    const result = await this.#restoreCheckpoint();
    await this.#lifetimes?.restore();
    return result;
  }

  #restoreCheckpoint(): Promise<RestoreResult> {
    return this.#checkpoint.restore((data) => {
      const skipped = this.#pods.restore(data.podDeviceEntries);
      for (const entry of skipped) this.#log.warn("checkpoint entry skipped: its AllocResp does not decode", { entry });
      for (const resource of data.registeredDevices.keys()) this.#resources.restoreDisconnected(resource);
      for (const entry of this.#pods.entries()) this.#resources.restoreDisconnected(entry.resource);
      this.#log.info("checkpoint restored", { resources: data.registeredDevices.size, allocations: data.podDeviceEntries.length - skipped.length });
    });
  }

  /** How the checkpoint was restored and how its writes go (status); null without a store. */
  checkpointState(): CheckpointState | null {
    return this.#checkpoint.state();
  }

  /** Dials the plugin at `socket` for `resource` and opens ListAndWatch (connections.ts); resolves once connected. */
  async connect(resource: string, socket: string, options: ConnectOptions = {}): Promise<void> {
    if (this.#stopped) {
      options.pinned?.close();
      throw new Error("the device manager is stopping");
    }
    await this.#checkpoint.restored;
    await this.#connections.connect(resource, socket, options, () => this.#stopped);
  }

  /** Disconnects the plugin on `socket` (deregistration); never dials. */
  disconnect(resource: string, socket: string): void {
    this.#connections.disconnect(resource, socket);
  }

  /** Disconnects what was connected `for` this registration, unless a newer plugin has taken its socket since. */
  disconnectFor(registration: object): void {
    this.#connections.disconnectFor(registration);
  }

  /** How many plugins are connected through kubelet.sock. */
  get registrationSocketPlugins(): number {
    return this.#connections.viaRegistrationSocket;
  }

  /** Whether a plugin that registered on kubelet.sock is connected for `resource` at `socket`. */
  hasRegistrationSocketPlugin(resource: string, socket: string): boolean {
    return this.#connections.isViaRegistrationSocket(resource, socket);
  }

  /** The resource a live plugin instance on `socket` serves, if any. */
  resourceOnSocket(socket: string): string | undefined {
    return this.#resources.all().find((state) => state.endpoints.has(socket))?.name;
  }

  /** The resource a live plugin instance on `endpoint` serves, by path or inode: one it names itself if any, else another's. */
  #resourceOnEndpoint(endpoint: SocketIdentity): string | undefined {
    return this.resourceOnSocket(endpoint.realPath) ?? this.#resources.all().find((state) => [...state.endpoints.values()].some((live) => isSameSocket(live.identity, endpoint)))?.name;
  }

  /** Connected plugins (`resource at socket`) whose first good device list has not come yet (reconcile-once waits for them). */
  awaitingFirstList(): string[] {
    return this.#connections.awaitingFirstList();
  }

  resources(): ResourceStatus[] {
    return this.#resources.all().sort(byName).map((state) => this.#statusView.of(state));
  }

  resource(name: string): ResourceStatus | undefined {
    const state = this.#resources.get(name);
    return state ? this.#statusView.of(state) : undefined;
  }

  /** Each allocation with its owner's age and kind (plain, process, lease). */
  allocations(owner?: string): AllocationStatus[] {
    const now = this.#clock.now();
    const entries = owner === undefined ? [...this.#pods.entries()] : this.#pods.ownerEntries(owner);
    return entries.map((entry) => allocationStatus(entry, this.#lifetimes?.describe(entry.owner) ?? { kind: "plain", since: null }, now));
  }

  /** Owners held by a process and owners with a lease now, and whether the lease timer is set. */
  ownerLifetimeCounts(): { processes: number; leases: number; timerSet: boolean } {
    return { ...(this.#lifetimes?.counts ?? { processes: 0, leases: 0 }), timerSet: this.#lifetimes?.timerSet ?? false };
  }

  /** Every resource's state, read-only use (the pod-resources API reads healthy devices and their NUMA nodes). */
  resourceStates(): readonly ResourceState[] {
    return this.#resources.all();
  }

  /** The pod-devices store, read-only use (pod-resources API). */
  get pods(): PodDevices {
    return this.#pods;
  }

  /** Allocates devices (allocator.ts): one request at a time, a bounded line behind it, answered once in the checkpoint. */
  allocate(request: AllocationRequest): Promise<GrantedAllocation[]> {
    return this.#allocator.allocate(request);
  }

  /** Frees every device of `owner` once that is in the checkpoint (allocator.ts); returns what was freed. */
  release(owner: string): Promise<AllocationStatus[]> {
    return this.#allocator.release(owner);
  }

  /** Writes the checkpoint now, changed or not (`--reconcile-once` leaves one behind); true when it is on disk in time. */
  writeCheckpoint(timeoutMs = 10_000): Promise<boolean> {
    this.#checkpointChanged();
    return this.flush(timeoutMs);
  }

  /** Writes every change so far to the checkpoint; true when it is all on disk within `timeoutMs`. */
  flush(timeoutMs = 10_000): Promise<boolean> {
    return this.#checkpoint.flush(timeoutMs);
  }

  /**
   * Closes every endpoint and timer, then writes what is not yet on disk,
   * waiting at most a second (the agent must exit within 2 s). Closing the
   * endpoints changes nothing in the checkpoint: a stopping agent is not a
   * plugin going away.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    this.#stopped = true;
    this.#lifetimes?.stop();
    this.#resources.stop();
    this.#events.stop();
    this.#heapReturn.stop();
    this.#connections.closeAll();
    await this.#checkpoint.stop();
  }

  #checkpointChanged(): void {
    this.#checkpoint.changed();
  }

  /** The checkpoint's data now: every allocation, and the healthy devices of every resource (the kubelet's RegisteredDevices). */
  #snapshot() {
    return {
      podDeviceEntries: this.#pods.toCheckpointEntries(),
      registeredDevices: new Map(this.#resources.all().map((state) => [state.name, healthyIds(state)])),
    };
  }
}

function settingsWithDefaults(settings: DeviceSettings, rules: WatchedEndpointRules): Required<DeviceSettings> {
  const { gracePeriodMs, maxDevicesPerResource, dialTimeoutMs } = settings;
  return { gracePeriodMs, maxDevicesPerResource, dialTimeoutMs, topologyPolicy: settings.topologyPolicy ?? "none", endpointRules: settings.endpointRules ?? rules };
}
