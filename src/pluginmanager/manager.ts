/**
 * The plugin manager, composed (the kubelet's plugin_manager.go): the
 * watcher fills the desired state, the reconciler compares it with the
 * actual state and starts register/unregister operations through the
 * executor, outcomes feed the status cache, and liveness watches what is
 * registered. Only wiring lives here.
 *
 * @example
 * ```ts
 * const manager = new PluginManager({ policy, log, handlers: handlerFactories() });
 * manager.subscribe((change) => console.log(change.plugin.socket, change.plugin.state));
 * await manager.start();
 * const settled = await manager.whenSettled({ signal: AbortSignal.timeout(10_000) });
 * await manager.stop();
 * ```
 */
import type { Logger } from "../log/logger.ts";
import type { Policy, WatchDir } from "../policy/types.ts";
import { HandlerSet } from "./handler-set.ts";
import { PluginLiveness } from "./liveness.ts";
import type { Clock } from "./operations.ts";
import { OperationExecutor, systemClock } from "./operations.ts";
import type { AttemptReport, SettleOptions } from "./plugin-status.ts";
import { PluginStatusCache } from "./plugin-status.ts";
import { Reconciler } from "./reconciler.ts";
import type { RegistrationContext } from "./registration.ts";
import { ActualStateOfWorld, DesiredStateOfWorld } from "./state.ts";
import type { HandlerContext, HandlerFactories, PluginChange, PluginRecord } from "./types.ts";
import { PluginWatcher } from "./watcher.ts";

export type { AttemptReport, SettleOptions } from "./plugin-status.ts";

/** What the manager reports for metrics and health; every method is optional and must not throw. */
export interface PluginManagerObserver {
  /** Every reconcile pass that ran: on each desired-state event and each periodic resync (source "reconciler"). */
  heartbeat?(source: "reconciler"): void;
  /** Every registration attempt that ended, except aborted ones. */
  attemptEnded?(attempt: AttemptReport): void;
}

export interface PluginManagerOptions {
  policy: Policy;
  log: Logger;
  observer?: PluginManagerObserver;
  /** The handler factories of this build, keyed by built-in type or `generic` (the composition root's). */
  handlers: HandlerFactories;
  clock?: Clock;
}

/** SPEC.md: the agent exits within 2 s of SIGTERM; operations get this long to end. */
const STOP_GRACE_MS = 1500;

export class PluginManager {
  readonly #factories: HandlerFactories;
  readonly #handlerContext: HandlerContext;
  readonly #log: Logger;
  readonly #dsw = new DesiredStateOfWorld();
  /** Everything a registration reads from the policy; a reload swaps it here, in one place. */
  readonly #context: RegistrationContext;
  readonly #status: PluginStatusCache;
  readonly #executor: OperationExecutor;
  readonly #reconciler: Reconciler;
  readonly #liveness: PluginLiveness;
  readonly #watcher: PluginWatcher;
  #phase: "new" | "running" | "stopped" = "new";
  #stopped: Promise<void> | null = null;

  constructor(options: PluginManagerOptions) {
    const { policy, log, observer = {} } = options;
    const clock = options.clock ?? systemClock;
    this.#log = log;
    this.#factories = options.handlers;
    this.#handlerContext = { connectionLost: (plugin, reason) => this.#liveness.connectionLost(plugin, reason) };
    const handlers = new HandlerSet(policy, this.#factories, this.#handlerContext);
    this.#context = { policy, handlers, asw: new ActualStateOfWorld(), log, clock };
    const status = new PluginStatusCache({ log, clock, attemptEnded: (attempt) => observer.attemptEnded?.(attempt) });
    const executor = new OperationExecutor({
      backoff: policy.reconcile.backoff,
      clock,
      onReady: (socket) => {
        this.#liveness.operationEnded(socket);
        this.#reconciler.reconcile(socket);
      },
    });
    this.#status = status;
    this.#executor = executor;
    this.#liveness = new PluginLiveness({ context: this.#context, executor, status, clock });
    this.#watcher = new PluginWatcher({ dirs: policy.watch, dsw: this.#dsw, log, now: () => new Date(clock.now()) });
    this.#reconciler = new Reconciler({
      dsw: this.#dsw,
      executor,
      context: this.#context,
      status,
      resyncMs: policy.reconcile.resyncMs,
      clock,
      onResync: () => this.#watcher.rescan(),
      onPass: () => notify(log, "heartbeat", () => observer.heartbeat?.("reconciler")),
    });
  }

  /**
   * Creates and watches the watch directories, records the sockets already
   * there and starts their registrations. Rejects (and stops) when a watch
   * directory cannot be created.
   */
  async start(): Promise<void> {
    if (this.#phase !== "new") throw new Error(`plugin manager already ${this.#phase === "running" ? "started" : "stopped"}`);
    this.#phase = "running";
    this.handlers.logUnavailable(this.#log);
    this.#dsw.subscribe((change) => this.#status.track(change));
    this.#reconciler.start();
    this.#liveness.start();
    try {
      this.#watcher.start();
    } catch (error) {
      await this.stop();
      throw error;
    }
  }

  /** The policy's handlers, so that callers can reach a handler's own state (replaced by {@link applyPolicy}). */
  get handlers(): HandlerSet {
    return this.#context.handlers;
  }

  /**
   * Applies a new, already validated policy at once (SPEC.md section 2,
   * SIGHUP). Watch dirs: an added one is created, walked and watched; the
   * sockets of a removed one leave the list. A registered plugin the new
   * policy refuses is deregistered and goes back to `pending` with the
   * reason (its next attempt tells it); one still accepted stays with the
   * handler that took it, and a type whose handler policy is unchanged keeps
   * its handler. Every socket not registered is retried at once. An attempt
   * in flight finishes under the policy it started with, then its outcome
   * is checked against the new one. A lowered `security.maxPlugins`
   * deregisters nothing (as the kubelet keeps what it has). Backoff and
   * timeouts apply to the next attempts; a new liveness interval re-arms its
   * timer. Does nothing once stopped.
   */
  applyPolicy(policy: Policy): void {
    if (this.#phase === "stopped") return;
    const previous = { ...this.#context };
    this.#context.policy = policy;
    this.#context.handlers = new HandlerSet(policy, this.#factories, this.#handlerContext, previous.handlers);
    this.#executor.setBackoff(policy.reconcile.backoff);
    this.#reconciler.setResyncPeriod(policy.reconcile.resyncMs);
    this.#liveness.policyChanged();
    if (this.#phase === "new") return this.#watcher.setDirs(policy.watch);
    this.#context.handlers.logUnavailable(this.#log, previous.handlers);
    logWatchChanges(this.#log, previous.policy.watch, policy.watch);
    // Sockets of removed dirs leave first, so that nothing below touches them.
    this.#watcher.setDirs(policy.watch);
    this.#reconciler.policyChanged();
  }

  /**
   * Closes every watcher and timer, aborts registrations in flight and waits
   * for them to end (at most 1.5 s). Registered plugins stay with their
   * handlers. Safe to call twice.
   */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#phase = "stopped";
      this.#watcher.stop();
      this.#reconciler.stop();
      this.#liveness.stop();
      await this.#executor.stop(STOP_GRACE_MS);
      this.#status.close();
    })();
    return this.#stopped;
  }

  /** Every known registration socket, sorted by path (copies). */
  plugins(): PluginRecord[] {
    return this.#status.plugins();
  }

  /** Calls `listener` once per state change of a socket, in order; returns the unsubscribe function. */
  subscribe(listener: (change: PluginChange) => void): () => void {
    return this.#status.subscribe(listener);
  }

  /** Resolves true once `predicate` holds over {@link plugins}, false when `signal` fires or the manager stops. */
  whenSettled(options: SettleOptions = {}): Promise<boolean> {
    return this.#status.whenSettled(options);
  }
}

function logWatchChanges(log: Logger, before: readonly WatchDir[], after: readonly WatchDir[]): void {
  const [was, now] = [before, after].map((dirs) => new Set(dirs.map((dir) => dir.path)));
  for (const dir of now!) if (!was!.has(dir)) log.info("watch directory added", { dir });
  for (const dir of was!) if (!now!.has(dir)) log.info("watch directory no longer watched", { dir });
}

/** Observers must not throw; one that does is logged and the manager goes on. */
function notify(log: Logger, hook: string, call: () => void): void {
  try {
    call();
  } catch (error) {
    log.error("plugin manager observer failed", { hook, error: error instanceof Error ? error.message : String(error) });
  }
}
