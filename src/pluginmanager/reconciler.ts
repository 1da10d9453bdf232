/**
 * The reconciler compares the desired state of world with the actual one
 * and starts register and unregister operations through the executor; it
 * reacts to each desired-state change at once, for that socket, where the
 * kubelet loops every second, and a periodic resync catches what an event
 * missed. A registered plugin found dead (its connection lost, the liveness
 * dial refused) turns `stale` and is registered again after a backoff window.
 */
import { type Clock, systemClock } from "../platform/clock.ts";
import type { OperationExecutor, OperationResult } from "../util/operation-executor.ts";
import type { PluginInfoSummary } from "./registration-client.ts";
import type { RegistrationContext } from "./registration.ts";
import { registeredPluginRefusal, registerPlugin, staleSocket, unregisterPlugin } from "./registration.ts";
import type { DesiredChange, DesiredSocket, DesiredStateOfWorld, RegisteredPlugin } from "./state-of-world.ts";
import type { AttemptFailure, AttemptState, Failure, PluginRegistration } from "./types.ts";
import type { WatchLimitsReached } from "./watch-limits.ts";

export type SocketIdentity = Pick<DesiredSocket, "socket" | "inode">;

/** One attempt that ended (aborted ones are not reported), for metrics and the status cache. */
export interface AttemptReport extends SocketIdentity {
  state: Exclude<AttemptState, "aborted">;
  /** What GetInfo answered; null when it did not. */
  info: PluginInfoSummary | null;
  /** null exactly when it registered. */
  reason: AttemptFailure | null;
  error: string | null;
  endedAt: number;
  durationMs: number;
}

/** What the plugin manager reports (health, metrics, src/api/plugin-status.ts); it reads nothing back, and a throw is logged. */
export interface PluginManagerObserver {
  /** Every reconcile pass: each desired-state event and each periodic resync. */
  heartbeat?(source: "reconciler"): void;
  /** A socket was discovered, re-created or removed; heard before the reconciler acts on it. */
  socketChanged?(change: DesiredChange): void;
  attemptStarted?(socket: SocketIdentity, at: number): void;
  /** Every attempt that ended, except aborted ones. */
  attemptEnded?(attempt: AttemptReport): void;
  /** Every attempt once it is over, aborted ones too (after attemptEnded): with attemptStarted, what is in flight. */
  attemptSettled?(socket: SocketIdentity): void;
  /** A registered plugin left the actual state outside an attempt: `stale` (its connection or socket died) or `pending` (the policy now refuses it). */
  deregistered?(socket: SocketIdentity, state: "stale" | "pending", failure: Failure): void;
  /** The watcher started or stopped leaving something out, or left out other counts; null: nothing left out. */
  watchLimitsChanged?(reached: WatchLimitsReached | null): void;
  /** The manager stopped; nothing follows. */
  stopped?(): void;
}

export interface ReconcilerOptions {
  dsw: DesiredStateOfWorld;
  executor: OperationExecutor;
  context: RegistrationContext;
  /** Guarded by the manager: a throw must not reach the reconciler. */
  observer: PluginManagerObserver;
  resyncMs: number;
  clock?: Clock;
  /** Before each periodic full compare (the watcher's rescan). */
  onResync?: () => void;
}

export class Reconciler {
  readonly #options: ReconcilerOptions;
  readonly #clock: Clock;
  #resyncMs: number;
  #unsubscribe: () => void = () => {};
  #cancelResync: () => void = () => {};
  #running = false;
  /** Sockets whose attempt has not recorded its outcome yet. */
  readonly #attempting = new Set<string>();
  /** Losses reported while the socket's operation was still running: applied when it ends. */
  readonly #lostWhileRunning = new Map<string, { lost: PluginRegistration; error: string }>();

  constructor(options: ReconcilerOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#resyncMs = options.resyncMs;
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#unsubscribe = this.#options.dsw.subscribe((change) => this.#onDesiredChange(change));
    this.#armResync();
    this.reconcileAll();
  }

  /** Operations are the executor's to stop. */
  stop(): void {
    this.#running = false;
    this.#unsubscribe();
    this.#cancelResync();
    this.#lostWhileRunning.clear();
  }

  setResyncPeriod(resyncMs: number): void {
    this.#resyncMs = resyncMs;
    if (this.#running) this.#armResync();
  }

  /** Converges one socket: unregister a plugin whose socket left or changed, register a desired one. */
  reconcile(socket: string): void {
    if (!this.#running) return;
    const { dsw, executor, context } = this.#options;
    const deferred = this.#lostWhileRunning.get(socket);
    if (deferred && !executor.isRunning(socket)) {
      this.#lostWhileRunning.delete(socket);
      this.connectionLost(deferred.lost, deferred.error);
    }
    const desired = dsw.get(socket);
    const actual = context.asw.get(socket);
    if (actual && actual.inode !== desired?.inode) {
      // One operation per socket: a registration still in flight ends first,
      // and its end (the executor's onReady) brings us back here.
      if (executor.isRunning(socket)) {
        executor.abort(socket);
        return;
      }
      unregisterPlugin(actual, context.asw, context.log);
    }
    if (desired && !context.asw.has(socket, desired.inode)) {
      executor.run(socket, (signal) => this.#register(desired, signal));
    }
  }

  /** The full compare: every unregistration first, then every registration. */
  reconcileAll(): void {
    if (!this.#running) return;
    const { dsw, context } = this.#options;
    for (const plugin of context.asw.plugins()) {
      if (dsw.get(plugin.socket)?.inode !== plugin.inode) this.reconcile(plugin.socket);
    }
    for (const desired of dsw.sockets()) this.reconcile(desired.socket);
    this.#options.observer.heartbeat?.("reconciler");
  }

  /** After a reload: deregisters what it refuses (an attempt in flight judges its own outcome), retries the rest now. */
  policyChanged(): void {
    const { dsw, executor, context } = this.#options;
    for (const plugin of context.asw.plugins()) {
      if (!this.#attempting.has(plugin.socket)) this.#deregisterIfRefused(plugin);
    }
    for (const desired of dsw.sockets()) {
      if (!context.asw.has(desired.socket, desired.inode)) executor.resetBackoff(desired.socket);
    }
    this.reconcileAll();
  }

  /** {@link HandlerContext.connectionLost}: ignored unless registered with that name and endpoint. */
  connectionLost(lost: PluginRegistration, error: string): void {
    if (!this.#running) return;
    const plugin = this.#options.context.asw.get(lost.socket);
    if (plugin?.registration.name !== lost.name || plugin.registration.endpoint !== lost.endpoint) return;
    if (this.#options.executor.isRunning(lost.socket)) this.#lostWhileRunning.set(lost.socket, { lost, error });
    else this.#deregister(plugin, "stale", { reason: "connection_lost", error });
  }

  /** The liveness dial was refused: ignored unless `plugin` is still what is registered there, with no operation running. */
  socketRefused(plugin: RegisteredPlugin): void {
    const { context, executor } = this.#options;
    if (!this.#running || context.asw.get(plugin.socket) !== plugin || executor.isRunning(plugin.socket)) return;
    this.#deregister(plugin, "stale", staleSocket(plugin.socket));
  }

  async #register(desired: DesiredSocket, signal: AbortSignal): Promise<OperationResult> {
    const { context, observer } = this.#options;
    const policy = context.policy;
    const startedAt = this.#clock.now();
    observer.attemptStarted?.(desired, startedAt);
    this.#attempting.add(desired.socket);
    const outcome = await registerPlugin(desired, context, signal);
    this.#attempting.delete(desired.socket);
    if (outcome.state !== "aborted") {
      const endedAt = this.#clock.now();
      // Wall-clock times (status shows them); a step back between the two must not record a negative duration.
      observer.attemptEnded?.({ socket: desired.socket, inode: desired.inode, ...outcome, endedAt, durationMs: Math.max(0, endedAt - startedAt) });
    }
    // registerPlugin never throws, and the manager's observer is guarded: every attemptStarted gets this.
    observer.attemptSettled?.(desired);
    const result = outcome.state === "registered" ? "succeeded" : outcome.state === "aborted" ? "aborted" : "failed";
    if (context.policy === policy) return result;
    // Decided under a superseded policy, whose reload forgot this socket's backoff: decide again now.
    const plugin = context.asw.get(desired.socket);
    if (plugin?.inode === desired.inode) this.#deregisterIfRefused(plugin);
    return result === "succeeded" ? result : "aborted";
  }

  #deregisterIfRefused(plugin: RegisteredPlugin): void {
    const { context } = this.#options;
    const refusal = registeredPluginRefusal(plugin, context.policy, context.handlers);
    if (refusal) this.#deregister(plugin, "pending", refusal);
  }

  /** Out of the actual state outside an attempt: `stale` is retried after a backoff window, `pending` at once. */
  #deregister(plugin: RegisteredPlugin, state: "stale" | "pending", failure: Failure): void {
    const { executor, context, observer } = this.#options;
    unregisterPlugin(plugin, context.asw, context.log);
    if (state === "stale") executor.backOff(plugin.socket);
    else executor.resetBackoff(plugin.socket);
    observer.deregistered?.(plugin, state, failure);
  }

  #onDesiredChange(change: DesiredChange): void {
    const { executor } = this.#options;
    // A new socket at the path is a new plugin: its predecessor's backoff and attempt do not apply to it.
    executor.resetBackoff(change.socket);
    if (change.kind !== "added") executor.abort(change.socket);
    this.reconcile(change.socket);
    this.#options.observer.heartbeat?.("reconciler");
  }

  /** Replaces the pending resync, if any. */
  #armResync(): void {
    this.#cancelResync();
    this.#cancelResync = this.#clock.setTimer(() => {
      if (!this.#running) return;
      this.#options.onResync?.();
      this.reconcileAll();
      this.#armResync();
    }, this.#resyncMs);
  }
}
