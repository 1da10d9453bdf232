/**
 * Liveness of registered plugins (SPEC.md section 6): a handler that keeps
 * a connection to its plugin (device plugins, DRA) reports its loss; the
 * plugin is then deregistered, marked `stale` with an event, and registered
 * again after a backoff window, like any stale socket.
 */
import type { OperationExecutor } from "./operations.ts";
import type { PluginStatusCache } from "./plugin-status.ts";
import type { RegistrationContext } from "./registration.ts";
import { unregisterPlugin } from "./registration.ts";
import type { RegisteredPlugin } from "./state.ts";
import type { Failure, PluginRegistration } from "./types.ts";

export interface LivenessOptions {
  context: RegistrationContext;
  executor: OperationExecutor;
  status: PluginStatusCache;
}

export class PluginLiveness {
  readonly #options: LivenessOptions;
  /** Losses reported while the socket's operation was still running: applied when it ends. */
  readonly #lostWhileRunning = new Map<string, { plugin: PluginRegistration; error: string }>();
  #running = false;

  constructor(options: LivenessOptions) {
    this.#options = options;
  }

  start(): void {
    this.#running = true;
  }

  stop(): void {
    this.#running = false;
    this.#lostWhileRunning.clear();
  }

  /**
   * A handler says a registered plugin's connection dropped (the
   * HandlerContext hook). A plugin that is not (or no longer) registered
   * with that name and endpoint is ignored.
   */
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

  /** The socket's operation ended (the executor's onReady): applies a loss reported meanwhile. */
  operationEnded(socket: string): void {
    const lost = this.#lostWhileRunning.get(socket);
    this.#lostWhileRunning.delete(socket);
    if (lost) this.connectionLost(lost.plugin, lost.error);
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
