/**
 * The daemon: the plugin manager, the local API socket, the event stream,
 * metrics and health, started in the order that keeps a failed start
 * harmless (the API socket is claimed before any plugin is dialled) and
 * stopped together within 2 s of SIGTERM. A new policy is applied live by
 * {@link EdgeplugAgent.applyPolicy} (SIGHUP). `run --reconcile-once` builds
 * the same agent in its once mode (once.ts), so that the two cannot differ.
 */
import { create } from "@bufbuild/protobuf";
import { AllocationEventSchema, PluginEventSchema, ResourceEventSchema, type StatusResponse, WatchLimitsEventSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { agentRoutes, type AgentServiceDeps, binaryAgentRoutes } from "../api/agent-service.ts";
import { type ApiSocketServer, serveApiSocket } from "../api/agent-socket.ts";
import { requestReporter } from "../rpc/request-reports.ts";
import { SocketKeeper } from "../server/socket-keeper.ts";
import type { UnixServer } from "../rpc/unix-server.ts";
import { EventStream } from "../api/event-stream.ts";
import { createHealth, type Health } from "../api/health.ts";
import { type AgentMetrics, createMetrics, type MetricsEndpoint, serveMetricsEndpoint, type SocketSample } from "../api/metrics.ts";
import { buildStatus, pluginStatusFromRecord } from "../api/status.ts";
import { handlerFactories } from "../handlers/factories.ts";
import { type DeviceChange, DeviceManager } from "../devicemanager/device-manager.ts";
import { deviceSettings } from "../devicemanager/device-settings.ts";
import { CheckpointStore } from "../devicemanager/checkpoint/checkpoint.ts";
import { checkpointStatus } from "../devicemanager/device-status.ts";
import { csiDraDetails, type CsiDraDrivers, csiDraDrivers, csiDraEndpointHolder } from "../handlers/csi-dra.ts";
import { endpointRules } from "../endpoints/endpoint-rules.ts";
import type { RegistrationServer } from "../devicemanager/registration-server.ts";
import { type AgentSocketDeps, keeping, keepPodResourcesSocket, keepRegistrationSocket, type OnceRegistration, serveRegistrationOnce } from "./agent-sockets.ts";
import type { Logger } from "../log/logger.ts";
import { buildCommit, EDGEPLUG_VERSION } from "../platform/build-info.ts";
import { logDescriptorLimit } from "../server/fd-limit.ts";
import { runtimeName, runtimeVersion } from "../platform/runtime.ts";
import type { Policy } from "../policy/types.ts";
import type { Clock } from "../platform/clock.ts";
import type { SocketIdentity } from "../platform/pinned-socket.ts";
import { PluginManager, type PluginManagerObserver } from "../pluginmanager/manager.ts";
import { REGISTRATION_ATTEMPTS_AT_ONCE } from "../pluginmanager/registration.ts";
import { PluginStatusCache } from "../api/plugin-status.ts";
import { LivenessDial } from "../liveness/dial.ts";
import { Fleet } from "../fleet/fleet.ts";
import { OWNER_LIFETIME_LIMITS, ownerLifetimesFile } from "../devicemanager/owner-lifetimes.ts";
import { lazyProcessWatcher } from "../platform/process-watch.ts";

/** The handler factories live in handlers/factories.ts; re-exported for callers that compose an agent. */
export { handlerFactories } from "../handlers/factories.ts";

export interface AgentOptions {
  policy: Policy;
  log: Logger;
  /** The clock of the plugin manager's timers and of health's heartbeat bound (default: the system's). */
  clock?: Clock;
  /** `run --reconcile-once` (once.ts): discovery, devices and kubelet.sock only; absent, the daemon. */
  once?: OnceMode;
}

export interface OnceMode {
  /** A daemon beside the run serves the API socket: it owns the checkpoint (read, not written) and kubelet.sock (not served). */
  daemonBeside: boolean;
}

/** Readiness gates (docs/api.md, /readyz). */
const GATE_INITIAL_WALK = "initial-walk";
const GATE_API_SERVING = "api-serving";
const GATE_CHECKPOINT = "checkpoint-restored";

/** Settings that are bound at start; a reload that changes them is logged as needing a restart. */
const RESTART_SETTINGS: ReadonlyArray<[string, (policy: Policy) => unknown]> = [
  ["api.socket", (policy) => policy.api.socket],
  ["api.socketGroup", (policy) => policy.api.socketGroup],
  ["api.metrics", (policy) => policy.api.metrics],
  ["checkpoint.path", (policy) => policy.checkpoint.path],
  ["podResources.socket", (policy) => policy.podResources.socket],
  ["devicePlugins.registrationSocket", (policy) => policy.devicePlugins.registrationSocket],
];

export class EdgeplugAgent {
  readonly manager: PluginManager;
  /** The per-socket records behind status, events and metrics, fed by the manager. */
  readonly pluginStatus: PluginStatusCache;
  readonly devices: DeviceManager;
  readonly #csiDra: CsiDraDrivers;
  readonly events: EventStream;
  readonly health: Health;
  readonly #liveness: LivenessDial;
  readonly #fleet: Fleet;
  /** Registration attempts running now: the fleet link sends nothing meanwhile (src/fleet/link.ts). */
  #attemptsInFlight = 0;
  readonly metrics: AgentMetrics | null;
  /** The policy the running parts follow; its restart-bound settings are the ones bound at start. */
  #policy: Policy;
  readonly #log: Logger;
  #api: SocketKeeper<ApiSocketServer> | null = null;
  #metricsEndpoint: MetricsEndpoint | null = null;
  #registrationServer: SocketKeeper<RegistrationServer> | null = null;
  #podResources: SocketKeeper<UnixServer> | null = null;
  readonly #once: OnceMode | null;
  #onceRegistration: OnceRegistration | null = null;
  /** Once mode: who serves kubelet.sock instead of this run, when someone does. */
  #onceRegistrationHolder: string | null = null;
  #stopped: Promise<void> | null = null;

  constructor(options: AgentOptions) {
    const { policy, log } = options;
    this.#policy = policy;
    this.#log = log;
    this.#once = options.once ?? null;
    this.health = createHealth({
      resyncMs: policy.reconcile.resyncMs,
      heartbeats: ["reconciler"],
      gates: policy.api.socket === null ? [GATE_CHECKPOINT, GATE_INITIAL_WALK] : [GATE_API_SERVING, GATE_CHECKPOINT, GATE_INITIAL_WALK],
      now: options.clock ? () => options.clock!.now() : undefined,
    });
    this.metrics = policy.api.metrics === null || this.#once !== null ? null : createMetrics({
      plugins: () => this.pluginStatus.plugins(),
      resources: () => this.devices.resources(),
      allocations: () => this.devices.allocations(),
      sockets: () => this.#socketSamples(),
      watchLimits: () => this.manager.watchLimitsReached(),
      build: { version: EDGEPLUG_VERSION, commit: buildCommit(), runtime: `${runtimeName()} ${runtimeVersion()}` },
    });
    this.devices = new DeviceManager({
      log,
      ...deviceSettings(policy),
      store: new CheckpointStore({ path: policy.checkpoint.path, log }),
      readOnly: this.#once?.daemonBeside,
      observeCheckpointWrite: ({ ok, seconds }) => this.metrics?.observeCheckpointWrite(ok, seconds),
      observeAllocationQueueFull: () => this.metrics?.observeAllocationQueueFull(),
      liveElsewhere: (endpoint) => csiDraEndpointHolder(this.#csiDra, endpoint),
      // --reconcile-once serves no API and runs too briefly to watch processes or leases: it leaves the side file alone.
      ownerLifetimes: this.#once !== null ? undefined : {
        file: ownerLifetimesFile(policy.checkpoint.path),
        watcher: lazyProcessWatcher(),
        observeAutomaticRelease: (cause) => this.metrics?.observeAutomaticRelease(cause),
      },
    });
    // The rules of the policy in force (a reload changes them for the next registration), and the device plugins' endpoints.
    const liveElsewhere = (endpoint: SocketIdentity) => this.devices.endpointHolder(endpoint);
    this.#csiDra = csiDraDrivers({ log, dialTimeoutMs: policy.reconcile.timeouts.dialMs, endpointRules: () => endpointRules(this.#policy), liveElsewhere });
    this.pluginStatus = new PluginStatusCache({ log });
    this.manager = new PluginManager({
      policy,
      log,
      observers: [this.#observer(), this.pluginStatus],
      handlers: handlerFactories(this.devices, this.#csiDra),
      clock: options.clock,
      slotsHeldElsewhere: () => this.#registrationServer?.server?.slotsHeld ?? this.#onceRegistration?.server.slotsHeld ?? this.devices.registrationSocketPlugins,
    });
    this.#liveness = new LivenessDial(this.manager, policy, options.clock);
    this.events = new EventStream(() => this.status(), undefined, undefined, { log: log.with({ component: "api" }) });
    this.#fleet = new Fleet({
      log,
      status: () => this.status(),
      events: this.events,
      registry: this.metrics?.registry,
      registering: () => this.#attemptsInFlight > 0,
      agentTickMs: () => this.#policy.reconcile.resyncMs,
    });
    this.pluginStatus.subscribe(({ plugin, removed }) =>
      this.events.publish({
        case: "plugin",
        value: create(PluginEventSchema, { plugin: pluginStatusFromRecord(plugin, csiDraDetails(this.#csiDra, plugin)), removed }),
      })
    );
    this.devices.subscribe((change) => {
      if (change.kind === "allocation" && !change.released) { for (const resource of change.resources) this.metrics?.observeAllocation(resource); }
      this.#publishDeviceChange(change);
    });
  }

  /**
   * Serves the API and metrics, then starts discovery. Rejects (having
   * released whatever it had taken) when the API socket is held by a live
   * process, the metrics address cannot be bound, or a watch directory
   * cannot be created.
   */
  async start(): Promise<void> {
    if (this.#once) return this.#startOnce(this.#once);
    const { api } = this.#policy;
    try {
      if (api.socket !== null) {
        const socketPath = api.socket;
        this.#api = await SocketKeeper.start({
          ...keeping(this.#socketDeps(), "api socket", socketPath),
          serve: () =>
            serveApiSocket({
              socketPath,
              group: api.socketGroup,
              routes: agentRoutes(this.#serviceDeps()),
              binaryRoutes: binaryAgentRoutes(this.#serviceDeps()),
              log: this.#log,
              health: this.health,
              onLimit: (action) => this.metrics?.observeLimit("api", action),
              reports: requestReporter(this.#log, "api", this.metrics?.requestCounters("api")),
            }),
        });
        this.health.markDone(GATE_API_SERVING);
      }
      if (api.metrics !== null && this.metrics) {
        this.#metricsEndpoint = await serveMetricsEndpoint({
          address: api.metrics,
          metrics: this.metrics,
          health: this.health,
          log: this.#log,
          onLimit: (action) => this.metrics?.observeLimit("metrics", action),
        });
      }
      this.#registrationServer = await keepRegistrationSocket(this.#socketDeps(), () => this.manager.slotsHeld);
      // After the sockets are claimed (a live agent beside this one keeps its checkpoint untouched), before any plugin connects.
      const restored = await this.devices.restore();
      this.metrics?.observeCheckpointRestore(restored.kind);
      this.health.markDone(GATE_CHECKPOINT);
      // After the restore, so that a monitoring agent never reads an empty list of restored allocations.
      this.#podResources = await keepPodResourcesSocket(this.#socketDeps());
      await this.manager.start();
      this.#liveness.start();
    } catch (error) {
      await this.stop();
      throw error;
    }
    this.health.markDone(GATE_INITIAL_WALK);
    this.#fleet.apply(this.#policy);
    logDescriptorLimit(this.#log, this.#policy, { attemptsAtOnce: REGISTRATION_ATTEMPTS_AT_ONCE, maxProcessOwners: OWNER_LIFETIME_LIMITS.maxProcessOwners });
    this.#log.info("edgeplug running", {
      version: EDGEPLUG_VERSION,
      commit: buildCommit(),
      node: this.#policy.nodeName,
      policy: this.#policy.source,
      api: api.socket,
      podResources: this.#policy.podResources.socket,
      metrics: this.#metricsEndpoint?.url ?? null,
      watch: this.#policy.watch.map((dir) => dir.path),
    });
  }

  /** Once mode: discovery and kubelet.sock (unless a daemon beside serves it), after the checkpoint is read. */
  async #startOnce(once: OnceMode): Promise<void> {
    try {
      const { registrationSocket } = this.#policy.devicePlugins;
      if (once.daemonBeside) {
        if (registrationSocket !== null && this.#policy.handlers.has("DevicePlugin")) this.#onceRegistrationHolder = `the edgeplug daemon serving ${this.#policy.api.socket}`;
      } else {
        const served = await serveRegistrationOnce(this.#socketDeps(), () => this.manager.slotsHeld);
        if (served !== null && "heldBy" in served) this.#onceRegistrationHolder = served.heldBy;
        else this.#onceRegistration = served;
      }
      await this.devices.restore();
      await this.manager.start();
    } catch (error) {
      await this.stop();
      throw error;
    }
    if (once.daemonBeside) {
      this.#log.warn("an edgeplug daemon serves the API socket: the checkpoint is read, not written, and device plugins registered with it on kubelet.sock are not seen", {
        socket: this.#policy.api.socket,
        checkpoint: this.#policy.checkpoint.path,
      });
    }
  }

  /** Once mode: kubelet.sock as this run serves it, or null (not served). */
  get onceRegistration(): OnceRegistration | null {
    return this.#onceRegistration;
  }

  /** Once mode: who serves kubelet.sock instead of this run (its device plugins are not seen), or null. */
  get onceRegistrationHolder(): string | null {
    return this.#onceRegistrationHolder;
  }

  #socketSamples(): SocketSample[] {
    const samples: SocketSample[] = [];
    if (this.#api) samples.push({ socket: "api", serving: this.#api.serving });
    if (this.#registrationServer) samples.push({ socket: "registration", serving: this.#registrationServer.serving });
    if (this.#podResources) samples.push({ socket: "pod-resources", serving: this.#podResources.serving });
    return samples;
  }

  #socketDeps(): AgentSocketDeps {
    return { policy: () => this.#policy, log: this.#log, devices: this.devices, metrics: this.metrics, resyncTicks: (check) => this.manager.onResync(check) };
  }

  /** Where /metrics, /healthz and /readyz are served (the bound port), or null. */
  get metricsUrl(): string | null {
    return this.#metricsEndpoint?.url ?? null;
  }

  status(): StatusResponse {
    return Object.assign(
      buildStatus({
        node: this.#policy.nodeName,
        plugins: this.pluginStatus.plugins(),
        details: (record) => csiDraDetails(this.#csiDra, record),
        resources: this.devices.resources(),
        allocations: this.devices.allocations(),
        checkpoint: checkpointStatus(this.#policy.checkpoint.path, this.devices.checkpointState()),
        watchLimits: this.manager.watchLimitsReached(),
      }),
      { fleet: this.#fleet.linkStatus() },
    );
  }

  /** Applies a validated policy at once (watch dirs, handlers, security, reconcile, log, fleet); settings bound at start keep their old value, logged as needing a restart. */
  applyPolicy(next: Policy): void {
    const previous = this.#policy;
    const needRestart = RESTART_SETTINGS.filter(([, read]) => read(previous) !== read(next));
    for (const [key, read] of needRestart) {
      this.#log.warn("policy change needs a restart to take effect", { key, running: read(previous), requested: read(next) });
    }
    const effective: Policy = {
      ...next,
      api: previous.api,
      checkpoint: previous.checkpoint,
      podResources: previous.podResources,
      devicePlugins: { ...next.devicePlugins, registrationSocket: previous.devicePlugins.registrationSocket },
    };
    this.#log.configure(effective.log);
    this.health.setResyncPeriod(effective.reconcile.resyncMs);
    this.devices.applySettings(deviceSettings(effective));
    this.manager.applyPolicy(effective);
    this.#liveness.setPolicy(effective);
    this.#fleet.apply(effective);
    this.#policy = effective;
    this.metrics?.observeConfigReload(true);
    this.#log.info("policy reloaded", { policy: next.source, restartNeeded: needRestart.map(([key]) => key) });
  }

  /** A reload was refused (invalid policy file): the running policy stays, and the metrics say so. */
  policyReloadFailed(): void {
    this.metrics?.observeConfigReload(false);
  }

  /** Ends event streams, closes the API socket (removing it) and metrics, and stops the plugin manager. */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.events.close();
      this.#liveness.stop();
      await Promise.all([
        this.#api?.close(),
        this.#metricsEndpoint?.close(),
        this.#registrationServer?.close(),
        this.#onceRegistration?.server.close(),
        this.#podResources?.close(),
        this.manager.stop(),
        this.#fleet.stop(),
      ]);
      await Promise.all([this.devices.stop(), this.#csiDra.dra.close()]);
      this.metrics?.close();
    })();
    return this.#stopped;
  }

  #serviceDeps(): AgentServiceDeps {
    return { status: () => this.status(), events: this.events, devices: this.devices };
  }

  /** Resource and allocation events for WatchEvents, built only while someone watches. */
  #publishDeviceChange(change: DeviceChange): void {
    if (this.events.subscriberCount === 0) return;
    if (change.kind === "resource") {
      const resource = this.devices.resource(change.resource);
      this.events.publish({
        case: "resource",
        value: create(ResourceEventSchema, { resource: resource ?? { name: change.resource }, removed: change.removed }),
      });
      return;
    }
    this.events.publish({
      case: "allocation",
      value: create(AllocationEventSchema, { owner: change.owner, allocations: this.devices.allocations(change.owner), released: change.released, releaseCause: change.cause }),
    });
  }

  #observer(): PluginManagerObserver {
    return {
      heartbeat: (source) => {
        this.health.heartbeat(source);
        // The agent is awake anyway: the fleet's keepalive refresh rides along when it is nearly due.
        this.#fleet.agentAwake();
      },
      attemptStarted: () => void (this.#attemptsInFlight += 1),
      attemptEnded: (attempt) => this.metrics?.observeRegistration(attempt.info?.type ?? null, attempt.durationMs / 1000, attempt.reason),
      attemptSettled: () => {
        this.#attemptsInFlight -= 1;
        if (this.#attemptsInFlight === 0) this.#fleet.registrationsSettled();
      },
      watchLimitsChanged: (reached) => this.events.publish({ case: "watchLimits", value: create(WatchLimitsEventSchema, { watchLimits: reached ?? undefined }) }),
    };
  }
}
