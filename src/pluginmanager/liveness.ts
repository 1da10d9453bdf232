/**
 * Liveness of registered plugins (SPEC.md section 6). Handlers that keep a
 * connection (device plugins, DRA) report its loss; the others are dialled
 * every `reconcile.liveness.interval` when set: connect and HTTP/2
 * handshake, no call, so a plugin still sees one GetInfo and one Notify per
 * registration, as with the kubelet. A dead or lost plugin is deregistered,
 * turns `stale` and is registered again after a backoff window.
 */
import type { Clock } from "../platform/clock.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { dialUnix, type UnixChannel } from "../rpc/unix-channel.ts";
import type { OperationExecutor } from "./operations.ts";
import type { PluginStatusCache } from "./plugin-status.ts";
import { type RegistrationContext, staleSocket, unregisterPlugin } from "./registration.ts";
import type { RegisteredPlugin } from "./state.ts";
import type { Failure, HandlerContext, PluginRegistration } from "./types.ts";

export interface LivenessOptions {
  context: RegistrationContext;
  executor: OperationExecutor;
  status: PluginStatusCache;
  clock: Clock;
}

/** Dials in flight at once: a pass over thousands of plugins never holds thousands of descriptors. */
const MAX_CONCURRENT_DIALS = 8;

export class PluginLiveness {
  readonly #options: LivenessOptions;
  /** Losses reported while the socket's operation was still running: applied when it ends. */
  readonly #lostWhileRunning = new Map<string, { plugin: PluginRegistration; error: string }>();
  readonly #dialling = new Set<UnixChannel>();
  #running = false;
  #intervalMs = 0;
  #cancelTimer: () => void = () => {};

  constructor(options: LivenessOptions) {
    this.#options = options;
  }

  start(): void {
    this.#running = true;
    this.policyChanged();
  }

  stop(): void {
    this.#running = false;
    this.#cancelTimer();
    for (const channel of this.#dialling) channel.close();
    this.#lostWhileRunning.clear();
  }

  /** Re-arms the dial when the interval changed (0: off). */
  policyChanged(): void {
    const intervalMs = this.#options.context.policy.reconcile.liveness.intervalMs;
    if (!this.#running || intervalMs === this.#intervalMs) return;
    this.#intervalMs = intervalMs;
    this.#cancelTimer();
    this.#arm();
  }

  /** {@link HandlerContext.connectionLost}: ignored unless registered with that name and endpoint. */
  connectionLost(lost: PluginRegistration, error: string): void {
    if (!this.#running) return;
    const plugin = this.#registered(lost);
    if (!plugin) return;
    if (this.#options.executor.isRunning(plugin.socket)) {
      this.#lostWhileRunning.set(plugin.socket, { plugin: lost, error });
      return;
    }
    this.#markStale(plugin, { reason: "connection_lost", error }, "plugin connection lost");
  }

  /** Applies a loss reported while the socket's operation ran. */
  operationEnded(socket: string): void {
    const lost = this.#lostWhileRunning.get(socket);
    this.#lostWhileRunning.delete(socket);
    if (lost) this.connectionLost(lost.plugin, lost.error);
  }

  /** The next pass starts an interval after the previous one ended, so passes never overlap. */
  #arm(): void {
    this.#cancelTimer = () => {};
    if (this.#intervalMs === 0) return;
    this.#cancelTimer = this.#options.clock.setTimer(() => {
      void this.#pass().then(() => {
        if (this.#running) this.#arm();
      });
    }, this.#intervalMs);
  }

  async #pass(): Promise<void> {
    const { context, executor } = this.#options;
    const due = context.asw.plugins().filter((plugin) => !plugin.handler.watchesConnection && !executor.isRunning(plugin.socket));
    const worker = async () => {
      for (let plugin = due.shift(); plugin && this.#running; plugin = due.shift()) await this.#check(plugin);
    };
    await Promise.all(Array.from({ length: Math.min(MAX_CONCURRENT_DIALS, due.length) }, worker));
  }

  async #check(plugin: RegisteredPlugin): Promise<void> {
    const channel = dialUnix(plugin.socket, { connectTimeoutMs: this.#options.context.policy.reconcile.timeouts.dialMs });
    this.#dialling.add(channel);
    let dead = false;
    try {
      await channel.connect();
    } catch (error) {
      // Only a socket that refuses, or is gone, is dead; a slow or busy plugin is not.
      const failure = classifyRpcError(error);
      dead = failure === "stale" || failure === "missing";
    } finally {
      channel.close();
      this.#dialling.delete(channel);
    }
    const { context, executor } = this.#options;
    if (!dead || !this.#running || context.asw.get(plugin.socket) !== plugin || executor.isRunning(plugin.socket)) return;
    this.#markStale(plugin, staleSocket(plugin.socket), "plugin socket is stale");
  }

  #registered(registration: PluginRegistration): RegisteredPlugin | undefined {
    const plugin = this.#options.context.asw.get(registration.socket);
    const same = plugin?.registration.name === registration.name && plugin.registration.endpoint === registration.endpoint;
    return same ? plugin : undefined;
  }

  #markStale(plugin: RegisteredPlugin, failure: Failure, message: string): void {
    const { context, executor, status } = this.#options;
    unregisterPlugin(plugin, context.asw, context.log);
    executor.backOff(plugin.socket);
    status.deregistered(plugin, "stale", failure, message);
  }
}
