/**
 * The agent's side of the fleet (docs/fleet.md): the link the policy's
 * `fleet:` asks for, replaced when a reload changes it and closed when a
 * reload removes it; counters that outlive links, for status and metrics.
 */
import { Counter, Gauge, type Registry } from "prom-client";
import type { FleetLinkStatus, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import type { EventStream } from "../api/event-stream.ts";
import type { Logger } from "../log/logger.ts";
import type { Policy } from "../policy/types.ts";
import { type FleetCounters, FleetLink } from "./link.ts";

export interface FleetOptions {
  log: Logger;
  status: () => StatusResponse;
  events: EventStream;
  /** The agent's metrics registry, where edgeplug_fleet_* are added; absent without metrics. */
  registry?: Registry;
  /** True while a plugin registration is in flight: the link holds its sending until {@link Fleet.registrationsSettled}. */
  registering?: () => boolean;
  /** The period the agent wakes at for its own work (the reconcile resync), which calls {@link Fleet.agentAwake}. */
  agentTickMs?: () => number;
}

export class Fleet {
  readonly counters: FleetCounters = { publishes: 0, drops: 0, reconnects: 0 };
  readonly #options: FleetOptions;
  #link: FleetLink | null = null;
  /** The settings of the link wanted now (null: off), to tell a reload that changes nothing. */
  #wanted: string | null = null;
  /** The link being replaced or closed: the next one starts after it said goodbye (one client id, one session). */
  #closing: Promise<void> = Promise.resolve();

  constructor(options: FleetOptions) {
    this.#options = options;
    if (options.registry) this.#registerMetrics(options.registry);
  }

  /** Starts, replaces or closes the link for `policy`; returns at once (the link connects on its own). */
  apply(policy: Policy): void {
    const fleet = policy.fleet;
    const wanted = fleet === null ? null : JSON.stringify({ node: policy.nodeName, ...fleet });
    if (wanted === this.#wanted) return;
    this.#wanted = wanted;
    const previous = this.#link;
    this.#link = null;
    if (previous) {
      this.#options.log.info(fleet === null ? "fleet link off" : "fleet link settings changed, reconnecting", { broker: previous.broker });
      this.#closing = this.#closing.then(() => previous.stop());
    }
    if (fleet === null) return;
    void this.#closing.then(() => {
      if (this.#wanted !== wanted) return;
      const { log, status, events, registering, agentTickMs } = this.#options;
      this.#link = new FleetLink({ log, status, events, registering, agentTickMs, policy: fleet, node: policy.nodeName, counters: this.counters });
    });
  }

  /** No registration is in flight any more: what the link held goes out now. */
  registrationsSettled(): void {
    this.#link?.resume();
  }

  /** The agent woke for its own work (each reconcile pass). */
  agentAwake(): void {
    this.#link?.agentAwake();
  }

  /** StatusResponse.fleet: undefined while the fleet is off. */
  linkStatus(): FleetLinkStatus | undefined {
    return this.#link?.linkStatus();
  }

  /** Says `online: false` and disconnects (bounded: about 2 s at most). */
  async stop(): Promise<void> {
    this.#wanted = null;
    const link = this.#link;
    this.#link = null;
    await this.#closing;
    await link?.stop();
  }

  /** edgeplug_fleet_* in the agent's registry, read from the counters at each scrape. */
  #registerMetrics(registry: Registry): void {
    const counters = this.counters;
    const counted = (name: string, help: string, read: () => number) =>
      new Counter({
        name,
        help,
        registers: [registry],
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    counted("edgeplug_fleet_publishes_total", "Publishes the fleet broker acknowledged (online, status and events).", () => counters.publishes);
    counted("edgeplug_fleet_dropped_events_total", "Fleet events dropped: the queue was full while the broker was away, or the broker refused them.", () => counters.drops);
    counted("edgeplug_fleet_reconnects_total", "Fleet connection attempts after a failure or a lost connection.", () => counters.reconnects);
    const linkStatus = () => this.linkStatus();
    new Gauge({
      name: "edgeplug_fleet_connected",
      help: "1 while the fleet link is connected and the broker takes its publishes, 0 otherwise (absent while fleet: is off).",
      registers: [registry],
      collect() {
        this.reset();
        const status = linkStatus();
        if (status) this.set(status.state === "connected" ? 1 : 0);
      },
    });
  }
}
