/**
 * Fans agent events out to WatchEvents subscribers. Each subscriber gets a
 * snapshot taken at the moment it subscribed, then every later event in
 * order. Connect takes the next event of a stream only once the last one
 * was written, so a client that stops reading leaves later events in its
 * subscriber's queue: the queue is bounded in events and in bytes (each
 * event's encoded size), and a subscriber past either bound is ended (its
 * queue dropped at once). A subscriber that takes nothing for
 * {@link DEFAULT_DRAIN_DEADLINE_MS} while events wait for it, or while it
 * is ended and has not noticed, is cut off (src/server/stream-cutoff.ts). So
 * one slow client never holds memory for the others, nor for long.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Event, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { EventSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import type { Logger } from "../log/logger.ts";

/** An event without its per-stream sequence number and time, which the stream assigns. */
export type EventKind = Exclude<Event["kind"], { case: undefined } | { case: "snapshot" }>;

interface Subscriber {
  queue: EventKind[];
  queuedBytes: number;
  wake: (() => void) | null;
  /** Why the stream ends at its next step (it fell behind), or null. */
  overflow: string | null;
  /** Armed while the subscriber owes a step: events wait, or an end it has not taken. */
  stall: ReturnType<typeof setTimeout> | null;
  cutOff: (() => void) | null;
}

export const DEFAULT_SUBSCRIBER_QUEUE = 10_000;
/** WatchEvents streams open at once (the API socket's 128 connections could otherwise hold 12,800). */
export const DEFAULT_MAX_SUBSCRIBERS = 256;
/** Encoded bytes of the events one subscriber's queue may hold. */
export const DEFAULT_MAX_BACKLOG_BYTES = 4 * 1024 * 1024;
/** How long a subscriber with events waiting may take nothing before it is cut off. */
export const DEFAULT_DRAIN_DEADLINE_MS = 10_000;

export interface EventStreamBounds {
  maxBacklogBytes?: number;
  drainDeadlineMs?: number;
  /** Where a cut-off is logged. */
  log?: Logger;
}

/** Encoded sizes, computed once per published event whatever the number of subscribers. */
const sizes = new WeakMap<EventKind, number>();

function sizeOf(kind: EventKind): number {
  let size = sizes.get(kind);
  if (size === undefined) {
    size = toBinary(EventSchema, create(EventSchema, { kind })).length;
    sizes.set(kind, size);
  }
  return size;
}

export class EventStream {
  readonly #subscribers = new Set<Subscriber>();
  readonly #snapshot: () => StatusResponse;
  readonly #maxQueue: number;
  readonly #maxSubscribers: number;
  readonly #maxBacklogBytes: number;
  readonly #drainDeadlineMs: number;
  readonly #log: Logger | undefined;
  #closed = false;
  #cutOffs = 0;

  constructor(snapshot: () => StatusResponse, maxQueue = DEFAULT_SUBSCRIBER_QUEUE, maxSubscribers = DEFAULT_MAX_SUBSCRIBERS, bounds: EventStreamBounds = {}) {
    this.#snapshot = snapshot;
    this.#maxQueue = maxQueue;
    this.#maxSubscribers = maxSubscribers;
    this.#maxBacklogBytes = bounds.maxBacklogBytes ?? DEFAULT_MAX_BACKLOG_BYTES;
    this.#drainDeadlineMs = bounds.drainDeadlineMs ?? DEFAULT_DRAIN_DEADLINE_MS;
    this.#log = bounds.log;
  }

  get subscriberCount(): number {
    return this.#subscribers.size;
  }

  /** Streams cut off since start because they took nothing within the drain deadline. */
  get cutOffCount(): number {
    return this.#cutOffs;
  }

  publish(kind: EventKind): void {
    if (this.#subscribers.size === 0) return;
    const bytes = sizeOf(kind);
    for (const subscriber of this.#subscribers) {
      if (subscriber.overflow !== null) continue;
      if (subscriber.queue.length >= this.#maxQueue) {
        this.#overflow(subscriber, `event stream fell more than ${this.#maxQueue} events behind; subscribe again`);
      } else if (subscriber.queuedBytes + bytes > this.#maxBacklogBytes) {
        this.#overflow(subscriber, `event stream fell more than ${this.#maxBacklogBytes} bytes of events behind; subscribe again`);
      } else {
        subscriber.queue.push(kind);
        subscriber.queuedBytes += bytes;
        this.#armStall(subscriber);
      }
      subscriber.wake?.();
    }
  }

  /** Ends every stream (the agent is stopping). */
  close(): void {
    this.#closed = true;
    for (const subscriber of this.#subscribers) subscriber.wake?.();
  }

  /**
   * The snapshot, then events until `signal` aborts or the stream is closed;
   * `cutOff` ends the call at once when it takes nothing in time.
   */
  async *subscribe(signal: AbortSignal, cutOff: (() => void) | null = null): AsyncGenerator<Event> {
    if (this.#subscribers.size >= this.#maxSubscribers) {
      throw new ConnectError(
        `too many WatchEvents streams open (${this.#maxSubscribers}); close one or retry later`,
        Code.ResourceExhausted,
      );
    }
    const subscriber: Subscriber = { queue: [], queuedBytes: 0, wake: null, overflow: null, stall: null, cutOff };
    // Subscribe before taking the snapshot so no event falls between the two.
    this.#subscribers.add(subscriber);
    const onAbort = () => subscriber.wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      let sequence = 0n;
      yield create(EventSchema, {
        sequence,
        time: timestampNow(),
        kind: { case: "snapshot", value: this.#snapshot() },
      });
      while (!signal.aborted && !this.#closed) {
        if (subscriber.overflow !== null) throw new ConnectError(subscriber.overflow, Code.ResourceExhausted);
        const next = subscriber.queue.shift();
        if (next === undefined) {
          await new Promise<void>((resolve) => (subscriber.wake = resolve));
          subscriber.wake = null;
          continue;
        }
        subscriber.queuedBytes -= sizeOf(next);
        // It took a step: the deadline starts again for what still waits.
        this.#clearStall(subscriber);
        if (subscriber.queue.length > 0) this.#armStall(subscriber);
        sequence += 1n;
        yield create(EventSchema, { sequence, time: timestampNow(), kind: next });
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#clearStall(subscriber);
      this.#subscribers.delete(subscriber);
    }
  }

  #overflow(subscriber: Subscriber, reason: string): void {
    subscriber.overflow = reason;
    subscriber.queue = [];
    subscriber.queuedBytes = 0;
    this.#armStall(subscriber);
  }

  #armStall(subscriber: Subscriber): void {
    subscriber.stall ??= setTimeout(() => this.#stalled(subscriber), this.#drainDeadlineMs);
  }

  #clearStall(subscriber: Subscriber): void {
    if (subscriber.stall !== null) clearTimeout(subscriber.stall);
    subscriber.stall = null;
  }

  /** The subscriber took nothing within the deadline: its client is not reading. */
  #stalled(subscriber: Subscriber): void {
    subscriber.stall = null;
    if (!this.#subscribers.has(subscriber)) return;
    this.#cutOffs++;
    this.#log?.warn("WatchEvents stream cut off: its client did not read", {
      drainDeadlineMs: this.#drainDeadlineMs,
      queuedEvents: subscriber.queue.length,
      queuedBytes: subscriber.queuedBytes,
      fellBehind: subscriber.overflow !== null,
    });
    subscriber.overflow ??= `event stream took nothing for ${this.#drainDeadlineMs} ms; cut off`;
    subscriber.queue = [];
    subscriber.queuedBytes = 0;
    this.#subscribers.delete(subscriber);
    subscriber.cutOff?.();
    subscriber.wake?.();
  }
}
