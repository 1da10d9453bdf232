/**
 * The plugin manager, wired as the kubelet's plugin_manager.go: the watcher
 * fills the desired state, the reconciler starts register and unregister
 * operations through the executor, and the observers hear what happened.
 */
import { guarded, type Logger } from "../log/logger.ts";
import { type Clock, systemClock } from "../platform/clock.ts";
import type { Policy } from "../policy/types.ts";
import { OperationExecutor } from "../util/operation-executor.ts";
import { HandlerSet } from "./handler-set.ts";
import { type PluginManagerObserver, Reconciler } from "./reconciler.ts";
import { REGISTRATION_ATTEMPTS_AT_ONCE, type RegistrationContext } from "./registration.ts";
import { ActualStateOfWorld, DesiredStateOfWorld, type RegisteredPlugin } from "./state-of-world.ts";
import type { HandlerFactories } from "./types.ts";
import { WATCH_LIMITS, type WatchLimitsReached } from "./watch-limits.ts";
import { PluginWatcher } from "./watcher.ts";

export type { AttemptReport, PluginManagerObserver, SocketIdentity } from "./reconciler.ts";

export interface PluginManagerOptions {
  policy: Policy;
  log: Logger;
  /** Told in this order. */
  observers?: readonly PluginManagerObserver[];
  handlers: HandlerFactories;
  clock?: Clock;
  /** `security.maxPlugins` slots held by plugins registered elsewhere (device plugins on kubelet.sock). */
  slotsHeldElsewhere?: () => number;
}

export class PluginManager {
  readonly #options: PluginManagerOptions;
  readonly #dsw = new DesiredStateOfWorld();
  readonly #context: RegistrationContext;
  readonly #observer: Required<PluginManagerObserver>;
  readonly #executor: OperationExecutor;
  readonly #reconciler: Reconciler;
  readonly #watcher: PluginWatcher;
  #phase: "new" | "running" | "stopped" = "new";
  #stopped: Promise<void> | null = null;
  readonly #resyncListeners = new Set<() => void>();

  constructor(options: PluginManagerOptions) {
    const { policy, log, observers = [], clock = systemClock } = options;
    this.#options = options;
    this.#context = { policy, handlers: this.#handlerSet(policy), asw: new ActualStateOfWorld(options.slotsHeldElsewhere), log, clock };
    const observer = (this.#observer = guardedObserver(observers, log));
    const executor = (this.#executor = new OperationExecutor({
      backoff: policy.reconcile.backoff,
      clock,
      maxRunning: REGISTRATION_ATTEMPTS_AT_ONCE,
      onReady: (socket) => this.#reconciler.reconcile(socket),
    }));
    const sockets = () => WATCH_LIMITS.socketsPerPluginSlot * this.#context.policy.security.maxPlugins;
    const changed = () => observer.watchLimitsChanged(this.#watcher.limitsReached());
    this.#watcher = new PluginWatcher({ dirs: policy.watch, dsw: this.#dsw, log, clock, limits: { sockets, changed } });
    const { resyncMs } = policy.reconcile;
    this.#reconciler = new Reconciler({
      dsw: this.#dsw,
      executor,
      context: this.#context,
      observer,
      resyncMs,
      clock,
      onResync: () => {
        this.#watcher.rescan();
        for (const listener of this.#resyncListeners) guarded(log, "resync listener failed", listener);
      },
    });
  }

  /**
   * Calls `listener` at each resync, in the same wakeup as the rescan of the
   * watched directories: a periodic check elsewhere in the agent that rides it
   * wakes the process no more often. Returns the unsubscribe.
   */
  onResync(listener: () => void): () => void {
    this.#resyncListeners.add(listener);
    return () => this.#resyncListeners.delete(listener);
  }

  /** Creates, watches and walks the watch directories; rejects (and stops) when one cannot be created. */
  async start(): Promise<void> {
    if (this.#phase !== "new") throw new Error(`plugin manager already ${this.#phase === "running" ? "started" : "stopped"}`);
    this.#phase = "running";
    this.handlers.logUnavailable(this.#options.log);
    this.#dsw.subscribe((change) => this.#observer.socketChanged(change));
    this.#reconciler.start();
    try {
      this.#watcher.start();
    } catch (error) {
      await this.stop();
      throw error;
    }
  }

  /** The policy's handlers, for a handler's own state; replaced by {@link applyPolicy}. */
  get handlers(): HandlerSet {
    return this.#context.handlers;
  }

  /**
   * Applies a validated policy at once (SIGHUP): a plugin it refuses goes
   * back to `pending`, an attempt in flight is judged by it when it ends,
   * every socket not registered is retried now; a lowered `maxPlugins`
   * deregisters nothing, as the kubelet keeps what it has.
   */
  applyPolicy(policy: Policy): void {
    if (this.#phase === "stopped") return;
    const previous = this.#context.handlers;
    this.#context.policy = policy;
    this.#context.handlers = this.#handlerSet(policy, previous);
    this.#executor.setBackoff(policy.reconcile.backoff);
    this.#reconciler.setResyncPeriod(policy.reconcile.resyncMs);
    if (this.#phase === "running") this.#context.handlers.logUnavailable(this.#options.log, previous);
    // Sockets of removed dirs leave first, so that nothing below touches them.
    this.#watcher.setDirs(policy.watch);
    if (this.#phase === "running") this.#reconciler.policyChanged();
  }

  /** Closes every watch and timer and waits (at most 1.5 s) for aborted operations; plugins stay with their handlers. */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#phase = "stopped";
      this.#watcher.stop();
      this.#reconciler.stop();
      await this.#executor.stop();
      this.#observer.stopped();
    })();
    return this.#stopped;
  }

  /** `security.maxPlugins` slots held by registered plugins and registrations in flight. */
  get slotsHeld(): number {
    return this.#context.asw.slotsHeld;
  }

  /** What the watcher leaves out while a watch limit is reached (status's `watchLimits`); null otherwise. */
  watchLimitsReached(): WatchLimitsReached | null {
    return this.#watcher.limitsReached();
  }

  /** Registered plugins no operation is working on (the liveness dial's, src/liveness/dial.ts). */
  idlePlugins(): RegisteredPlugin[] {
    return this.#context.asw.plugins().filter((plugin) => !this.#executor.isRunning(plugin.socket));
  }

  /** A dial to `plugin` was refused: it turns `stale` unless it changed meanwhile (see {@link Reconciler.socketRefused}). */
  socketRefused(plugin: RegisteredPlugin): void {
    this.#reconciler.socketRefused(plugin);
  }

  #handlerSet(policy: Policy, previous?: HandlerSet): HandlerSet {
    return new HandlerSet(policy, this.#options.handlers, { connectionLost: (plugin, reason) => this.#reconciler.connectionLost(plugin, reason) }, previous);
  }
}

/** A Record, so that tsc fails when a hook is added to the observer and not here. */
const OBSERVER_HOOKS: Record<keyof PluginManagerObserver, true> = {
  heartbeat: true,
  socketChanged: true,
  attemptStarted: true,
  attemptEnded: true,
  attemptSettled: true,
  deregistered: true,
  watchLimitsChanged: true,
  stopped: true,
};

/** One observer that tells each of `observers` in turn, logging what one throws. */
function guardedObserver(observers: readonly PluginManagerObserver[], log: Logger): Required<PluginManagerObserver> {
  const each = (hook: keyof PluginManagerObserver) => (...args: unknown[]) => {
    for (const observer of observers) {
      const method = observer[hook] as ((...args: unknown[]) => void) | undefined;
      if (method) guarded(log, "plugin manager observer failed", () => method.apply(observer, args), { hook });
    }
  };
  const hooks = Object.keys(OBSERVER_HOOKS) as (keyof PluginManagerObserver)[];
  return Object.fromEntries(hooks.map((hook) => [hook, each(hook)])) as Required<PluginManagerObserver>;
}
