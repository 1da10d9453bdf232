/**
 * The plugin manager: watcher → desired state → reconciler → operations →
 * registration → handlers, composed; plus the per-socket records that
 * `status`, `--reconcile-once` and the API show (SPEC.md section 5).
 *
 * @example
 * ```ts
 * const manager = new PluginManager({ policy, log });
 * manager.subscribe((change) => console.log(change.plugin.socket, change.plugin.state));
 * await manager.start();
 * const settled = await manager.whenSettled({ signal: AbortSignal.timeout(10_000) });
 * await manager.stop();
 * ```
 */
import type { Logger } from "../log/logger.ts";
import type { Policy, WatchDir } from "../policy/types.ts";
import { HandlerSet } from "./handler-set.ts";
import type { Clock } from "./operations.ts";
import { OperationExecutor, systemClock } from "./operations.ts";
import { Reconciler } from "./reconciler.ts";
import type { AttemptOutcome, RegistrationContext } from "./registration.ts";
import { registeredPluginRefusal, registerPlugin, unregisterPlugin } from "./registration.ts";
import type { DesiredChange, DesiredSocket, RegisteredPlugin } from "./state.ts";
import { ActualStateOfWorld, DesiredStateOfWorld } from "./state.ts";
import type { HandlerContext, HandlerFactories, PluginChange, PluginRecord, PluginRegistration } from "./types.ts";
import { PluginWatcher } from "./watcher.ts";

/** What the manager reports for metrics and health; every method is optional and must not throw. */
export interface PluginManagerObserver {
  /** Every reconcile pass that ran: on each desired-state event and each periodic resync (source "reconciler"). */
  heartbeat?(source: "reconciler"): void;
  /** Every registration attempt that ended, except aborted ones. */
  attemptEnded?(attempt: {
    socket: string;
    type: string | null;
    name: string | null;
    state: "registered" | "failed" | "stale";
    durationMs: number;
    error: string | null;
  }): void;
}

export interface PluginManagerOptions {
  policy: Policy;
  log: Logger;
  observer?: PluginManagerObserver;
  /** The handler factories of this build, keyed by built-in type or `generic` (the composition root's). */
  handlers: HandlerFactories;
  clock?: Clock;
}

export interface SettleOptions {
  /** What to wait for; default: every known socket is registered (true when none is known). */
  predicate?: (plugins: PluginRecord[]) => boolean;
  /** Gives up (resolving false) when it fires. */
  signal?: AbortSignal;
}

/** SPEC.md: the agent exits within 2 s of SIGTERM; operations get this long to end. */
const STOP_GRACE_MS = 1500;

export class PluginManager {
  readonly #factories: HandlerFactories;
  readonly #handlerContext: HandlerContext;
  /** Connections lost while the socket's operation was still running: applied when it ends. */
  readonly #lostWhileRegistering = new Map<string, { plugin: PluginRegistration; reason: string }>();
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #observer: PluginManagerObserver;
  readonly #dsw = new DesiredStateOfWorld();
  readonly #asw = new ActualStateOfWorld();
  // Everything a registration reads from the policy goes through this
  // context, so that a policy reload swaps it in one place.
  readonly #context: RegistrationContext;
  /** Bumped by each policy reload, so that an attempt can tell it ran under a superseded policy. */
  #policyGeneration = 0;
  readonly #executor: OperationExecutor;
  readonly #reconciler: Reconciler;
  readonly #watcher: PluginWatcher;
  readonly #records = new Map<string, { record: PluginRecord; inode: string }>();
  readonly #listeners = new Set<(change: PluginChange) => void>();
  readonly #onStop = new Set<() => void>();
  #phase: "new" | "running" | "stopped" = "new";
  #stopped: Promise<void> | null = null;

  constructor(options: PluginManagerOptions) {
    const { policy } = options;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
    this.#observer = options.observer ?? {};
    this.#factories = options.handlers;
    this.#handlerContext = { connectionLost: (plugin, reason) => this.#connectionLost(plugin, reason) };
    const handlers = new HandlerSet(policy, this.#factories, this.#handlerContext);
    this.#context = { policy, handlers, asw: this.#asw, log: this.#log, clock: this.#clock };
    this.#executor = new OperationExecutor({
      backoff: policy.reconcile.backoff,
      clock: this.#clock,
      onReady: (socket) => {
        const lost = this.#lostWhileRegistering.get(socket);
        this.#lostWhileRegistering.delete(socket);
        if (lost) this.#connectionLost(lost.plugin, lost.reason);
        this.#reconciler.reconcile(socket);
      },
    });
    this.#watcher = new PluginWatcher({ dirs: policy.watch, dsw: this.#dsw, log: this.#log, now: () => this.#now() });
    this.#reconciler = new Reconciler({
      dsw: this.#dsw,
      asw: this.#asw,
      executor: this.#executor,
      register: (desired, signal) => this.#register(desired, signal),
      unregister: (plugin) => this.#unregister(plugin),
      resyncMs: policy.reconcile.resyncMs,
      clock: this.#clock,
      onResync: () => this.#watcher.rescan(),
      onPass: () => this.#notifyObserver("heartbeat", () => this.#observer.heartbeat?.("reconciler")),
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
    this.#dsw.subscribe((change) => this.#track(change));
    this.#reconciler.start();
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
   * SIGHUP); synchronous: what it starts (registrations, deregistrations)
   * shows up as change events. Watch dirs: an added one is created, walked
   * and watched; the sockets of a removed one leave the list (registered
   * plugins are deregistered, never dialled). Handlers: a type whose handler
   * policy is unchanged keeps its handler; a registered plugin the new policy
   * refuses (owner, type, dir `types`, allow/deny, versions) is deregistered,
   * goes back to `pending` and is registered again, so that it ends `failed`
   * with the reason (and is told, when it can be dialled); one still accepted
   * is not touched, even when its type's handler was rebuilt (it stays with
   * the handler that took it). Every socket not registered is retried at
   * once, its backoff forgotten: the new policy may accept it. An attempt in
   * flight finishes under the policy it started with; its outcome is then
   * checked against the new one. `security.maxPlugins` lowered below the
   * registered count deregisters nothing (as the kubelet keeps what it has):
   * new plugins are refused until enough leave. Backoff and timeouts apply to
   * the next attempts; a new resync period re-arms the timer. `api.*`,
   * `checkpoint` and `devicePlugins` are not the manager's: the caller says
   * they need a restart. Does nothing once stopped.
   */
  applyPolicy(policy: Policy): void {
    if (this.#phase === "stopped") return;
    const previous = { ...this.#context };
    const handlers = new HandlerSet(policy, this.#factories, this.#handlerContext, previous.handlers);
    this.#context.policy = policy;
    this.#context.handlers = handlers;
    this.#policyGeneration++;
    this.#executor.setBackoff(policy.reconcile.backoff);
    this.#reconciler.setResyncPeriod(policy.reconcile.resyncMs);
    if (this.#phase === "new") return this.#watcher.setDirs(policy.watch);
    handlers.logUnavailable(this.#log, previous.handlers);
    this.#logWatchChanges(previous.policy.watch, policy.watch);
    // Sockets of removed dirs leave now, so that nothing below touches them.
    this.#watcher.setDirs(policy.watch);
    for (const plugin of this.#asw.plugins()) {
      // An attempt that has not recorded its outcome yet checks it when it does.
      if (this.#recordOf(plugin)?.state === "registered") this.#deregisterIfRefused(plugin);
    }
    for (const desired of this.#dsw.sockets()) {
      if (!this.#asw.has(desired.socket, desired.inode)) this.#executor.resetBackoff(desired.socket);
    }
    this.#reconciler.reconcileAll();
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
      await this.#executor.stop(STOP_GRACE_MS);
      for (const callback of [...this.#onStop]) callback();
    })();
    return this.#stopped;
  }

  /** Every known registration socket, sorted by path (copies). */
  plugins(): PluginRecord[] {
    return [...this.#records.values()]
      .map(({ record }) => copyRecord(record))
      .sort((a, b) => (a.socket < b.socket ? -1 : a.socket > b.socket ? 1 : 0));
  }

  /** Calls `listener` once per state change of a socket, in order; returns the unsubscribe function. */
  subscribe(listener: (change: PluginChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Resolves true as soon as `predicate` holds over {@link plugins} (checked
   * now and after every change), false when `signal` fires or the manager stops.
   */
  whenSettled(options: SettleOptions = {}): Promise<boolean> {
    const predicate = options.predicate ?? ((plugins) => plugins.every((plugin) => plugin.state === "registered"));
    const { signal } = options;
    return new Promise((resolve) => {
      const finish = (settled: boolean) => {
        unsubscribe();
        this.#onStop.delete(onStop);
        signal?.removeEventListener("abort", onStop);
        resolve(settled);
      };
      const onStop = () => finish(false);
      const unsubscribe = this.subscribe(() => {
        if (predicate(this.plugins())) finish(true);
      });
      this.#onStop.add(onStop);
      signal?.addEventListener("abort", onStop, { once: true });
      if (signal?.aborted || this.#phase === "stopped") finish(false);
      else if (predicate(this.plugins())) finish(true);
    });
  }

  #now(): Date {
    return new Date(this.#clock.now());
  }

  /** Keeps one record per desired socket: a new one is pending, a re-created one replaces its predecessor. */
  #track(change: DesiredChange): void {
    if (change.previous) {
      const previous = this.#records.get(change.socket);
      this.#records.delete(change.socket);
      if (previous) {
        this.#log.info(change.current ? "plugin socket re-created" : "plugin socket removed", fieldsOf(previous.record));
        this.#emit(previous.record, true);
      }
    }
    if (change.current) {
      const record: PluginRecord = {
        socket: change.socket,
        type: null,
        name: null,
        endpoint: null,
        versions: [],
        state: "pending",
        attempts: 0,
        registeredAt: null,
        error: null,
        discoveredAt: change.current.discoveredAt,
        lastAttemptAt: null,
      };
      this.#records.set(change.socket, { record, inode: change.current.inode });
      this.#log.debug("plugin socket discovered", { socket: change.socket });
      this.#emit(record, false);
    }
  }

  async #register(desired: DesiredSocket, signal: AbortSignal): Promise<void> {
    const tracked = this.#records.get(desired.socket);
    const record = tracked?.inode === desired.inode ? tracked.record : undefined;
    if (record) {
      record.attempts++;
      record.lastAttemptAt = this.#now();
    }
    const startedAt = this.#clock.now();
    const generation = this.#policyGeneration;
    const outcome = await registerPlugin(desired, this.#context, signal);
    if (outcome.state === "aborted") throw new Error(outcome.error ?? "registration aborted");
    const { state, error, info } = outcome;
    const attempt = { socket: desired.socket, type: info?.type ?? null, name: info?.name ?? null, state, error };
    this.#notifyObserver("attemptEnded", () => this.#observer.attemptEnded?.({ ...attempt, durationMs: this.#clock.now() - startedAt }));
    if (record && this.#records.get(desired.socket)?.record === record) this.#recordOutcome(record, outcome);
    if (generation !== this.#policyGeneration) {
      // Decided under a superseded policy: decide again under the new one at
      // once (resolving, the executor opens no backoff window and reconciles).
      const plugin = this.#asw.get(desired.socket);
      if (plugin?.inode === desired.inode) this.#deregisterIfRefused(plugin);
      return;
    }
    if (outcome.state !== "registered") throw new Error(outcome.error ?? outcome.state);
  }

  /**
   * A handler says a registered plugin's connection dropped: it is
   * deregistered, marked stale and registered again after a backoff window.
   */
  #connectionLost(lost: PluginRegistration, reason: string): void {
    if (this.#phase !== "running") return;
    const plugin = this.#asw.get(lost.socket);
    if (!plugin || plugin.registration.name !== lost.name || plugin.registration.endpoint !== lost.endpoint) return;
    if (this.#executor.isRunning(plugin.socket)) {
      this.#lostWhileRegistering.set(plugin.socket, { plugin: lost, reason });
      return;
    }
    this.#unregister(plugin);
    this.#executor.backOff(plugin.socket);
    const record = this.#recordOf(plugin);
    if (!record) return;
    Object.assign(record, { state: "stale", error: reason, registeredAt: null });
    this.#log.warn("plugin connection lost", fieldsOf(record));
    this.#emit(record, false);
  }

  /** Deregisters a plugin the current policy refuses; its record goes back to pending, with the reason. */
  #deregisterIfRefused(plugin: RegisteredPlugin): void {
    const reason = registeredPluginRefusal(plugin, this.#context.policy, this.#context.handlers);
    if (reason === null) return;
    this.#unregister(plugin);
    this.#executor.resetBackoff(plugin.socket);
    const record = this.#recordOf(plugin);
    if (!record) return;
    Object.assign(record, { state: "pending", error: reason, registeredAt: null });
    this.#log.info("plugin deregistered: the policy now refuses it", fieldsOf(record));
    this.#emit(record, false);
  }

  #recordOf(plugin: RegisteredPlugin): PluginRecord | undefined {
    const tracked = this.#records.get(plugin.socket);
    return tracked?.inode === plugin.inode ? tracked.record : undefined;
  }

  #logWatchChanges(before: readonly WatchDir[], after: readonly WatchDir[]): void {
    const paths = (dirs: readonly WatchDir[]) => new Set(dirs.map((dir) => dir.path));
    const [was, now] = [paths(before), paths(after)];
    for (const dir of now) if (!was.has(dir)) this.#log.info("watch directory added", { dir });
    for (const dir of was) if (!now.has(dir)) this.#log.info("watch directory no longer watched", { dir });
  }

  #recordOutcome(record: PluginRecord, outcome: AttemptOutcome): void {
    const changed = record.state !== outcome.state || record.error !== outcome.error;
    if (outcome.info) Object.assign(record, { ...outcome.info, versions: [...outcome.info.versions] });
    record.state = outcome.state as PluginRecord["state"];
    record.error = outcome.error;
    if (outcome.state === "registered") record.registeredAt = this.#now();
    const fields = fieldsOf(record);
    if (!changed) this.#log.debug("registration attempt failed again", fields);
    else if (outcome.state === "registered") this.#log.info("plugin registered", fields);
    else this.#log.warn(outcome.state === "stale" ? "plugin socket is stale" : "plugin registration failed", fields);
    if (changed) this.#emit(record, false);
  }

  #unregister(plugin: RegisteredPlugin): void {
    unregisterPlugin(plugin, this.#asw, this.#log);
    const { socket, type, name } = plugin.registration;
    this.#log.debug("plugin deregistered", { socket, type, name });
  }

  /** Observers must not throw; one that does is logged and the manager goes on. */
  #notifyObserver(hook: string, call: () => void): void {
    try {
      call();
    } catch (error) {
      this.#log.error("plugin manager observer failed", { hook, error: error instanceof Error ? error.message : String(error) });
    }
  }

  #emit(record: PluginRecord, removed: boolean): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener({ plugin: copyRecord(record), removed });
      } catch (error) {
        this.#log.error("plugin change listener failed", { error: error instanceof Error ? error.message : String(error) });
      }
    }
  }
}

function copyRecord(record: PluginRecord): PluginRecord {
  return { ...record, versions: [...record.versions] };
}

function fieldsOf(record: PluginRecord): Record<string, unknown> {
  const { socket, type, name, state, attempts, error } = record;
  return { socket, type, name, state, attempts, ...(error === null ? {} : { reason: error }) };
}
