/**
 * One fleet link: an MQTT connection (mqtt.js) that publishes this node's
 * online state, status and events (docs/fleet.md) under one `fleet:` policy.
 *
 * It never holds up the node: nothing the agent does waits for it. The
 * status is built at most once per `minInterval` (the latest wins), events
 * wait in a bounded queue ({@link MAX_QUEUED_EVENTS}) whose oldest are
 * dropped for a `gap` event, and a broker that is down, refuses the
 * credentials or an ACL is retried with jittered backoff capped at 60 s, each
 * attempt on the next broker of the list. The log says each change of state
 * once; `status` and the metrics carry the rest.
 */
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { IClientOptions, MqttClient } from "mqtt";
import { clientOptions, closeClient, connectClient, later, reconnectDelay } from "./connect.ts";
import { type FleetLinkStatus, FleetLinkStatusSchema, type StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import type { EventStream } from "../api/event-stream.ts";
import { statusToJson } from "../api/status.ts";
import { eventToJson } from "../api/event-json.ts";
import type { Logger } from "../log/logger.ts";
import { messageOf } from "../log/error-message.ts";
import { EDGEPLUG_VERSION } from "../platform/build-info.ts";
import type { FleetPolicy } from "../policy/types.ts";
import { fleetTopic, type FleetTopicKind, MAX_FLEET_PAYLOAD_BYTES, type OnlinePayload } from "./topics.ts";
import { EventQueue, gapPayload } from "./event-queue.ts";

/** Events published and not yet acknowledged at once. */
const PUBLISH_WINDOW = 64;
/** How often a refused or cut-off event subscription is tried again. */
const RESUBSCRIBE_MS = 5_000;
/** The longest the link's sending waits for registrations in flight to end (a plugin slow to answer must not hold the fleet). */
export const REGISTRATION_HOLD_MAX_MS = 500;

export type LinkState = "connecting" | "connected" | "error";

/** Kept by the agent across links (a reload makes a new link): what the metrics and status count. */
export interface FleetCounters {
  publishes: number;
  drops: number;
  reconnects: number;
}

export interface FleetLinkOptions {
  policy: FleetPolicy;
  node: string;
  log: Logger;
  status: () => StatusResponse;
  events: EventStream;
  counters: FleetCounters;
  /** For the backoff's jitter (default Math.random). */
  random?: () => number;
  /** True while a plugin registration is in flight: status and events wait for {@link FleetLink.resume} (or {@link REGISTRATION_HOLD_MAX_MS}). */
  registering?: () => boolean;
  /**
   * The period the agent wakes at anyway (its reconcile resync), calling
   * {@link FleetLink.agentAwake}: the online refresh rides on those wakeups
   * (default: none; the refresh has a timer of its own).
   */
  agentTickMs?: () => number;
}

export class FleetLink {
  readonly policy: FleetPolicy;
  readonly #log: Logger;
  readonly #status: () => StatusResponse;
  readonly #counters: FleetCounters;
  readonly #random: () => number;
  readonly #registering: () => boolean;
  readonly #agentTickMs: () => number;
  /** When the last online refresh was sent (performance.now()). */
  #lastRefreshAt = 0;
  /** When the sending started waiting for registrations in flight; null while it does not. */
  #heldSince: number | null = null;
  /** Ends a hold that lasted {@link REGISTRATION_HOLD_MAX_MS}. */
  #holdTimer: (() => void) | null = null;
  /** The event consumer waits on this while held. */
  #heldEvents: { promise: Promise<void>; resolve: () => void } | null = null;
  /** A connection attempt came due while held. */
  #attemptHeld = false;
  readonly #topics: Record<FleetTopicKind, string>;
  readonly #abort = new AbortController();

  #state: LinkState = "connecting";
  #error: string | null = null;
  #since = new Date();
  #lastPublishAt: Date | null = null;
  #brokerIndex = 0;
  /** MQTT 5 first (its acknowledgements name an ACL refusal); a broker that answers only 3.1.1 is remembered. */
  readonly #protocol = new Map<string, 4 | 5>();
  #failures = 0;
  #client: MqttClient | null = null;
  #connectedAt: Date | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  /** The online refresh's own timer, for when the agent's resync is longer than the keepalive. */
  #heartbeat: NodeJS.Timeout | null = null;
  /** The last online refresh is not acknowledged yet. */
  #refreshUnanswered = false;
  /** When the broker last sent anything (performance.now()). */
  #lastHeardAt = 0;
  /** Topics whose last publish the broker refused, with its reason: the link is in error while any is. */
  readonly #refused = new Map<FleetTopicKind, string>();

  #statusDirty = true;
  /** Cancels the pending status publish. */
  #statusTimer: (() => void) | null = null;
  #lastStatusAt = Number.NEGATIVE_INFINITY;

  readonly #queue: EventQueue;
  #stopping = false;

  constructor(options: FleetLinkOptions) {
    this.policy = options.policy;
    this.#log = options.log.with({ component: "fleet" });
    this.#status = options.status;
    this.#counters = options.counters;
    this.#random = options.random ?? Math.random;
    this.#registering = options.registering ?? (() => false);
    this.#agentTickMs = options.agentTickMs ?? (() => Number.POSITIVE_INFINITY);
    this.#queue = new EventQueue(() => (this.#counters.drops += 1));
    const topic = (kind: FleetTopicKind) => fleetTopic(options.policy.prefix, options.node, kind);
    this.#topics = { online: topic("online"), status: topic("status"), events: topic("events") };
    void this.#consumeEvents(options.events);
    void this.#attempt();
  }

  get broker(): string {
    return this.policy.brokers[this.#brokerIndex]!;
  }

  /** The link for `status` (StatusResponse.fleet). */
  linkStatus(): FleetLinkStatus {
    return create(FleetLinkStatusSchema, {
      state: this.#state,
      broker: this.broker,
      error: this.#error ?? undefined,
      since: timestampFromDate(this.#since),
      lastPublishAt: this.#lastPublishAt ? timestampFromDate(this.#lastPublishAt) : undefined,
      publishes: this.#counters.publishes,
      drops: this.#counters.drops,
      reconnects: this.#counters.reconnects,
      queuedEvents: this.#queue.waiting,
    });
  }

  /**
   * Publishes `online: false` when connected (waiting at most 1 s for the
   * broker), then disconnects; timers and the event subscription end.
   */
  async stop(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#abort.abort();
    this.#clearTimers();
    this.#heldEvents?.resolve();
    this.#heldEvents = null;
    const client = this.#client;
    this.#client = null;
    if (!client) return;
    const offline: OnlinePayload = { online: false, since: new Date().toISOString(), version: EDGEPLUG_VERSION };
    await closeClient(client, this.#connectedAt === null ? null : { topic: this.#topics.online, payload: JSON.stringify(offline) });
  }

  /** Registrations in flight ended: what waited for them is sent. */
  resume(): void {
    this.#holdTimer?.();
    this.#holdTimer = null;
    this.#heldSince = null;
    this.#releaseHeld();
  }

  /** Lets go what a hold kept: the event consumer, a connection attempt, the status and queued events. */
  #releaseHeld(): void {
    const waiting = this.#heldEvents;
    this.#heldEvents = null;
    waiting?.resolve();
    if (this.#stopping) return;
    if (this.#attemptHeld) {
      this.#attemptHeld = false;
      void this.#attempt();
    }
    if (this.#statusDirty) this.#scheduleStatus();
    this.#pump();
  }

  /** While held, what the event consumer waits on before it serializes the next event (they wait, bounded, in the agent's event stream). */
  #eventsHeld(): Promise<void> | null {
    if (!this.#held()) return null;
    if (this.#heldEvents === null) {
      let resolve!: () => void;
      const promise = new Promise<void>((settle) => (resolve = settle));
      this.#heldEvents = { promise, resolve };
    }
    return this.#heldEvents.promise;
  }

  /**
   * Whether sending waits now: while the agent registers a plugin, the link
   * builds no status and writes nothing, so that a registration never
   * shares its turns of the event loop with the fleet; the registration's
   * end (or {@link REGISTRATION_HOLD_MAX_MS}) sends what waited.
   */
  #held(): boolean {
    if (!this.#registering()) {
      this.#heldSince = null;
      return false;
    }
    const now = performance.now();
    this.#heldSince ??= now;
    const left = this.#heldSince + REGISTRATION_HOLD_MAX_MS - now;
    if (left <= 0) {
      // Held long enough: this send goes; the next one may wait again.
      this.#heldSince = null;
      return false;
    }
    this.#holdTimer ??= later(left, () => {
      this.#holdTimer = null;
      this.#releaseHeld();
    });
    return true;
  }

  #clearTimers(): void {
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#statusTimer?.();
    this.#holdTimer?.();
    this.#retryTimer =
      this.#heartbeat =
      this.#statusTimer =
      this.#holdTimer =
        null;
  }

  #setState(state: LinkState, error: string | null): void {
    const changed = state !== this.#state;
    this.#state = state;
    this.#error = error;
    if (!changed) return;
    this.#since = new Date();
    // One line per change of state, never per retry: a broker away for a day logs once.
    if (state === "connected") this.#log.info("fleet link connected", { broker: this.broker });
    else if (state === "error") this.#log.warn("fleet link error, retrying with backoff", { broker: this.broker, error });
    else this.#log.warn("fleet link lost, reconnecting", { broker: this.broker, error });
  }

  async #attempt(): Promise<void> {
    this.#retryTimer = null;
    if (this.#stopping) return;
    // A broker that is down costs an attempt a while: not during a registration.
    if (this.#held()) {
      this.#attemptHeld = true;
      return;
    }
    const url = this.broker;
    let options: IClientOptions;
    try {
      options = clientOptions(this.policy, url, this.#protocol.get(url) ?? 5, this.#topics.online);
    } catch (error) {
      this.#failed(messageOf(error), false);
      return;
    }
    let client: MqttClient;
    try {
      client = await connectClient(options);
    } catch (error) {
      this.#failed(messageOf(error), false);
      return;
    }
    if (this.#stopping) {
      void closeClient(client, null);
      return;
    }
    this.#log.debug("fleet link connecting", { broker: url, protocol: options.protocolVersion });
    this.#client = client;
    let lastError: string | null = null;
    let protocolRefused = false;
    client.on("connect", () => {
      if (this.#client === client) this.#connected(client);
    });
    client.on("packetreceive", () => (this.#lastHeardAt = performance.now()));
    client.on("error", (error) => {
      const code = (error as { code?: unknown }).code;
      // 1 (3.1.1's answer) or 132 (MQTT 5's): this broker speaks only the older protocol.
      if (options.protocolVersion === 5 && (code === 1 || code === 132)) protocolRefused = true;
      lastError = messageOf(error);
    });
    client.on("close", () => {
      if (this.#client !== client) return;
      this.#client = null;
      void closeClient(client, null);
      if (protocolRefused && this.#connectedAt === null) {
        this.#protocol.set(url, 4);
        void this.#attempt();
        return;
      }
      const wasConnected = this.#connectedAt !== null;
      this.#lost();
      this.#failed(lastError ?? "the broker closed the connection", wasConnected);
    });
  }

  #connected(client: MqttClient): void {
    this.#failures = 0;
    this.#connectedAt = new Date();
    this.#refused.clear();
    this.#setState("connected", null);
    this.#refreshUnanswered = false;
    this.#publishOnline(client);
    this.#statusDirty = true;
    this.#scheduleStatus();
    this.#pump();
  }

  /** The connection went: unacknowledged events are sent again on the next one. */
  #lost(): void {
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#heartbeat = null;
    this.#statusTimer?.();
    this.#statusTimer = null;
    this.#connectedAt = null;
    this.#queue.resend();
  }

  /** The next attempt goes to the next broker, after a jittered, growing delay. */
  #failed(reason: string, wasConnected: boolean): void {
    if (this.#stopping) return;
    this.#setState(wasConnected ? "connecting" : "error", reason);
    this.#brokerIndex = (this.#brokerIndex + 1) % this.policy.brokers.length;
    const delay = reconnectDelay(this.#failures, this.#random);
    this.#failures += 1;
    this.#counters.reconnects += 1;
    this.#retryTimer = setTimeout(() => void this.#attempt(), delay);
  }

  /**
   * The online topic's refresh is also the connection's ping (mqtt.js's
   * own keepalive timer is off, see connect.ts), so the broker hears from
   * the link about once per keepalive, and a broker that left the last
   * refresh unacknowledged until the next, and sent nothing else for a
   * keepalive, is given up, as a missing PINGRESP would be (a broker slow
   * to acknowledge under a burst of the link's events is still there).
   */
  #refreshOnline(client: MqttClient): void {
    if (this.#refreshUnanswered && performance.now() - this.#lastHeardAt > this.policy.keepaliveMs) {
      client.emit("error", new Error(`the broker did not acknowledge the online refresh within the keepalive (${this.policy.keepaliveMs / 1000} s)`));
      client.stream.destroy();
      return;
    }
    this.#publishOnline(client);
  }

  /**
   * The agent woke for its own work: when the refresh would be due before
   * its next such wakeup, it is sent now, so that idle the link adds no
   * wakeup of its own but its acknowledgement's arrival. Refreshes are
   * then keepalive ± half the agent's period apart, within MQTT's 1.5 ×
   * keepalive. An agent that wakes less often than the keepalive leaves the
   * refresh to a timer of its own.
   */
  agentAwake(): void {
    const client = this.#client;
    if (!client || this.#connectedAt === null || this.#stopping) return;
    const tickMs = this.#agentTickMs();
    const keepaliveMs = this.policy.keepaliveMs;
    const elapsed = performance.now() - this.#lastRefreshAt;
    if (tickMs > keepaliveMs) {
      // The resync became longer than the keepalive (a reload): the refresh needs its timer again.
      if (this.#heartbeat === null) this.#armRefreshTimer(client, Math.max(0, keepaliveMs - elapsed));
      return;
    }
    if (elapsed > keepaliveMs - tickMs / 2) this.#refreshOnline(client);
  }

  #armRefreshTimer(client: MqttClient, ms: number): void {
    this.#heartbeat = setTimeout(() => {
      this.#heartbeat = null;
      this.#refreshOnline(client);
    }, ms);
    this.#heartbeat.unref();
  }

  /** QoS 1 whatever fleet.qos: its acknowledgement tells the link the broker is there. */
  #publishOnline(client: MqttClient): void {
    const now = new Date().toISOString();
    const online: OnlinePayload = { online: true, since: this.#connectedAt!.toISOString(), version: EDGEPLUG_VERSION, updatedAt: now };
    this.#lastRefreshAt = performance.now();
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#heartbeat = null;
    // No timer while the agent's resync comes within the keepalive: a timer pushed back at each refresh would wake the
    // agent at the deadline it was first set for all the same (Node's timers fire there and find it moved).
    if (this.#agentTickMs() > this.policy.keepaliveMs) this.#armRefreshTimer(client, this.policy.keepaliveMs);
    this.#refreshUnanswered = true;
    this.#publish(client, "online", JSON.stringify(online), true, () => (this.#refreshUnanswered = false), 1);
  }

  /** Publishes and counts; a refusal the broker names (MQTT 5 reason code) puts the link in error until that topic is accepted again. `done` hears each answer of the broker. */
  #publish(client: MqttClient, kind: FleetTopicKind, payload: string, retain: boolean, done: (accepted: boolean) => void, qos: 0 | 1 = this.policy.qos): void {
    client.publish(this.#topics[kind], payload, { qos, retain }, (error) => {
      if (this.#client !== client) return;
      if (error) {
        const code = (error as { code?: unknown }).code;
        if (typeof code === "number" && code >= 0x80) {
          this.#refused.set(kind, `the broker refused the publish to ${this.#topics[kind]}: ${messageOf(error)}`);
          this.#setState("error", this.#refused.values().next().value!);
          done(false);
        }
        return;
      }
      this.#counters.publishes += 1;
      this.#lastPublishAt = new Date();
      if (this.#refused.delete(kind)) {
        const still = this.#refused.values().next().value;
        this.#setState(still === undefined ? "connected" : "error", still ?? null);
      }
      done(true);
    });
  }

  /**
   * Follows the agent's events (they also mark the status changed). A
   * subscription refused (256 WatchEvents streams open) or cut off (10,000
   * events behind) is tried again every {@link RESUBSCRIBE_MS}, and what was
   * missed becomes a gap of unknown size; the link numbers events itself, so
   * sequences go on across subscriptions.
   */
  async #consumeEvents(events: EventStream): Promise<void> {
    let sequence = 0;
    let failing = false;
    while (!this.#stopping) {
      try {
        for await (const event of events.subscribe(this.#abort.signal)) {
          const held = this.#eventsHeld();
          if (held !== null) await held;
          if (this.#stopping) return;
          if (failing) this.#log.info("fleet link follows the agent's events again");
          failing = false;
          this.#statusDirty = true;
          this.#scheduleStatus();
          if (event.kind.case === "snapshot" || !this.policy.events) continue;
          sequence += 1;
          this.#queue.add(sequence, JSON.stringify({ ...eventToJson(event), sequence }));
          this.#pump();
        }
        return;
      } catch (error) {
        if (this.#stopping) return;
        if (!failing) this.#log.warn("fleet link cannot follow the agent's events; trying again", { error: messageOf(error) });
        failing = true;
        sequence += 1;
        this.#queue.addUnknownGap(sequence);
        await new Promise((resolve) => setTimeout(resolve, RESUBSCRIBE_MS));
      }
    }
  }

  /** The status is published at most once per minInterval, the latest one; with 0, once per turn of the event loop. */
  #scheduleStatus(): void {
    if (this.#statusTimer !== null || this.#client === null || this.#connectedAt === null) return;
    const wait = this.#lastStatusAt + this.policy.minIntervalMs - performance.now();
    this.#statusTimer = later(wait, () => this.#publishStatus());
  }

  #publishStatus(): void {
    this.#statusTimer = null;
    const client = this.#client;
    if (!client || this.#connectedAt === null || !this.#statusDirty || this.#held()) return;
    this.#statusDirty = false;
    this.#lastStatusAt = performance.now();
    const payload = JSON.stringify(statusToJson(this.#status()));
    if (Buffer.byteLength(payload) > MAX_FLEET_PAYLOAD_BYTES) {
      this.#counters.drops += 1;
      this.#refused.set("status", `the status is ${Buffer.byteLength(payload)} bytes of JSON, over the ${MAX_FLEET_PAYLOAD_BYTES} published`);
      this.#setState("error", this.#refused.get("status")!);
      return;
    }
    this.#publish(client, "status", payload, true, () => {});
  }

  /** Sends queued events in order, at most {@link PUBLISH_WINDOW} unacknowledged. */
  #pump(): void {
    const client = this.#client;
    if (!client || this.#connectedAt === null || this.#held()) return;
    for (const entry of this.#queue.nextToSend(PUBLISH_WINDOW)) {
      this.#publish(client, "events", entry.payload ?? gapPayload(entry, new Date()), false, (accepted) => {
        this.#queue.settle(entry, accepted);
        this.#pump();
      });
    }
  }
}
