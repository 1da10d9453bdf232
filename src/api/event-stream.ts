/**
 * Fans agent events out to WatchEvents subscribers. Each subscriber gets a
 * snapshot taken at the moment it subscribed, then every later event in
 * order. A subscriber that stops reading is cut off once its queue is full,
 * so one slow client never holds memory for the others.
 */
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Event, StatusResponse } from "../gen/edgeplug/v1/agent_pb.ts";
import { EventSchema } from "../gen/edgeplug/v1/agent_pb.ts";

/** An event without its per-stream sequence number and time, which the stream assigns. */
export type EventKind = Exclude<Event["kind"], { case: undefined } | { case: "snapshot" }>;

interface Subscriber {
  queue: EventKind[];
  wake: (() => void) | null;
  overflowed: boolean;
}

export const DEFAULT_SUBSCRIBER_QUEUE = 10_000;
/** WatchEvents streams open at once (the API socket's 128 connections could otherwise hold 12,800). */
export const DEFAULT_MAX_SUBSCRIBERS = 256;

export class EventStream {
  readonly #subscribers = new Set<Subscriber>();
  readonly #snapshot: () => StatusResponse;
  readonly #maxQueue: number;
  readonly #maxSubscribers: number;
  #closed = false;

  constructor(snapshot: () => StatusResponse, maxQueue = DEFAULT_SUBSCRIBER_QUEUE, maxSubscribers = DEFAULT_MAX_SUBSCRIBERS) {
    this.#snapshot = snapshot;
    this.#maxQueue = maxQueue;
    this.#maxSubscribers = maxSubscribers;
  }

  get subscriberCount(): number {
    return this.#subscribers.size;
  }

  publish(kind: EventKind): void {
    for (const subscriber of this.#subscribers) {
      if (subscriber.queue.length >= this.#maxQueue) {
        subscriber.overflowed = true;
      } else {
        subscriber.queue.push(kind);
      }
      subscriber.wake?.();
    }
  }

  /** Ends every stream (the agent is stopping). */
  close(): void {
    this.#closed = true;
    for (const subscriber of this.#subscribers) subscriber.wake?.();
  }

  /** The snapshot, then events until `signal` aborts or the stream is closed. */
  async *subscribe(signal: AbortSignal): AsyncGenerator<Event> {
    if (this.#subscribers.size >= this.#maxSubscribers) {
      throw new ConnectError(
        `too many WatchEvents streams open (${this.#maxSubscribers}); close one or retry later`,
        Code.ResourceExhausted,
      );
    }
    const subscriber: Subscriber = { queue: [], wake: null, overflowed: false };
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
        if (subscriber.overflowed) {
          throw new ConnectError(
            `event stream fell more than ${this.#maxQueue} events behind; subscribe again`,
            Code.ResourceExhausted,
          );
        }
        const next = subscriber.queue.shift();
        if (next === undefined) {
          await new Promise<void>((resolve) => (subscriber.wake = resolve));
          subscriber.wake = null;
          continue;
        }
        sequence += 1n;
        yield create(EventSchema, { sequence, time: timestampNow(), kind: next });
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#subscribers.delete(subscriber);
    }
  }
}
