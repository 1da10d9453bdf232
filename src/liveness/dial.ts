/**
 * The optional liveness dial (docs/policy.md), which the kubelet does not
 * have. Every `reconcile.liveness.interval` (0: off) each registered plugin
 * whose handler does not watch its own connection is dialled: connect and
 * HTTP/2 handshake, no call, so that a plugin still sees one GetInfo and one
 * Notify per registration, as with the kubelet. A socket that refuses (its
 * plugin died and left it) is reported to the plugin manager, which turns the
 * plugin `stale` and registers it again after a backoff window. It reads the
 * plugin manager's public surface only; src/agent/agent.ts wires it.
 */
import { type Clock, systemClock } from "../platform/clock.ts";
import type { PluginManager } from "../pluginmanager/manager.ts";
import type { RegisteredPlugin } from "../pluginmanager/state-of-world.ts";
import type { Policy } from "../policy/types.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import { dialUnix, type UnixChannel } from "../rpc/unix-channel.ts";

/** Dials in flight at once: a pass over thousands of plugins never holds thousands of descriptors. */
const MAX_CONCURRENT_DIALS = 8;

export class LivenessDial {
  readonly #manager: PluginManager;
  readonly #clock: Clock;
  readonly #dialling = new Set<UnixChannel>();
  #policy: Policy;
  #intervalMs = 0;
  #running = false;
  /** A pass is dialling: it arms the next one when it ends, with the interval then in force. */
  #passing = false;
  #cancelTimer: () => void = () => {};

  constructor(manager: PluginManager, policy: Policy, clock: Clock = systemClock) {
    this.#manager = manager;
    this.#policy = policy;
    this.#clock = clock;
  }

  start(): void {
    this.#running = true;
    this.setPolicy(this.#policy);
  }

  /** Closes the timer and every dial in flight. */
  stop(): void {
    this.#running = false;
    this.#cancelTimer();
    for (const channel of this.#dialling) channel.close();
  }

  /** A reload: re-arms the dial when the interval changed. */
  setPolicy(policy: Policy): void {
    this.#policy = policy;
    const { intervalMs } = policy.reconcile.liveness;
    if (!this.#running || intervalMs === this.#intervalMs) return;
    this.#intervalMs = intervalMs;
    this.#cancelTimer();
    // Arming now as well would start a second chain of passes beside the one in flight.
    if (!this.#passing) this.#arm();
  }

  /** The next pass starts an interval after the previous one ended, so passes never overlap. */
  #arm(): void {
    this.#cancelTimer = () => {};
    if (this.#intervalMs === 0) return;
    this.#cancelTimer = this.#clock.setTimer(() => {
      this.#cancelTimer = () => {};
      this.#passing = true;
      void this.#pass().then(() => {
        this.#passing = false;
        if (this.#running) this.#arm();
      });
    }, this.#intervalMs);
  }

  async #pass(): Promise<void> {
    const due = this.#manager.idlePlugins().filter((plugin) => !plugin.handler.watchesConnection);
    const worker = async () => {
      for (let plugin = due.shift(); plugin && this.#running; plugin = due.shift()) await this.#check(plugin);
    };
    await Promise.all(Array.from({ length: Math.min(MAX_CONCURRENT_DIALS, due.length) }, worker));
  }

  async #check(plugin: RegisteredPlugin): Promise<void> {
    const channel = dialUnix(plugin.socket, { connectTimeoutMs: this.#policy.reconcile.timeouts.dialMs });
    this.#dialling.add(channel);
    try {
      await channel.connect();
    } catch (error) {
      // Only a socket that refuses, or is gone, is dead; a slow or busy plugin is not.
      const failure = classifyRpcError(error);
      if (this.#running && (failure === "stale" || failure === "missing")) this.#manager.socketRefused(plugin);
    } finally {
      channel.close();
      this.#dialling.delete(channel);
    }
  }
}
