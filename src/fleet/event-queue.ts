/**
 * The fleet link's events on their way to the broker: kept in order until
 * acknowledged, at most {@link MAX_QUEUED_EVENTS} (and
 * {@link MAX_QUEUED_EVENT_BYTES} of JSON). When more arrive, the oldest not
 * yet sent are dropped for one `gap` entry in their place that counts them,
 * so a subscriber learns how many it missed and where.
 */
import { MAX_FLEET_PAYLOAD_BYTES } from "./topics.ts";

export const MAX_QUEUED_EVENTS = 1000;
export const MAX_QUEUED_EVENT_BYTES = 8 * 1024 * 1024;

export interface QueuedEvent {
  /** The event's JSON; null for a gap, whose JSON is made when it is sent. */
  payload: string | null;
  /** The event's sequence (a gap: that of the first event it stands for). */
  sequence: number;
  /** A gap: how many events it stands for (NaN: not known). */
  dropped: number;
  sent: boolean;
  done: boolean;
}

export class EventQueue {
  readonly #entries: QueuedEvent[] = [];
  readonly #onDrop: () => void;
  #bytes = 0;
  #inflight = 0;

  /** `onDrop` is called once per event dropped. */
  constructor(onDrop: () => void) {
    this.#onDrop = onDrop;
  }

  /** Events not yet acknowledged (gaps not counted). */
  get waiting(): number {
    let count = 0;
    for (const entry of this.#entries) if (entry.payload !== null && !entry.done) count += 1;
    return count;
  }

  add(sequence: number, payload: string): void {
    const bytes = Buffer.byteLength(payload);
    if (bytes > MAX_FLEET_PAYLOAD_BYTES) {
      this.#dropAt(this.#entries.length, sequence);
      return;
    }
    while (this.waiting >= MAX_QUEUED_EVENTS || this.#bytes + bytes > MAX_QUEUED_EVENT_BYTES) {
      const oldest = this.#entries.findIndex((entry) => !entry.sent && entry.payload !== null);
      if (oldest < 0) break;
      const [dropped] = this.#entries.splice(oldest, 1);
      this.#bytes -= Buffer.byteLength(dropped!.payload!);
      this.#dropAt(oldest, dropped!.sequence);
    }
    this.#entries.push({ payload, sequence, dropped: 0, sent: false, done: false });
    this.#bytes += bytes;
  }

  /** Events were missed, how many is not known: a gap with `dropped: null` at `sequence`, the next event's number. */
  addUnknownGap(sequence: number): void {
    this.#entries.push({ payload: null, sequence, dropped: Number.NaN, sent: false, done: false });
  }

  /** The next entries to send, in order, so that at most `window` are unacknowledged; each is marked sent. */
  nextToSend(window: number): QueuedEvent[] {
    const next: QueuedEvent[] = [];
    for (const entry of this.#entries) {
      if (this.#inflight >= window) break;
      if (entry.sent || entry.done) continue;
      entry.sent = true;
      this.#inflight += 1;
      next.push(entry);
    }
    return next;
  }

  /** The broker acknowledged `entry`, or refused it (a drop). */
  settle(entry: QueuedEvent, accepted: boolean): void {
    if (entry.done) return;
    this.#inflight -= 1;
    entry.done = true;
    if (entry.payload !== null) {
      this.#bytes -= Buffer.byteLength(entry.payload);
      if (!accepted) this.#onDrop();
    }
    while (this.#entries[0]?.done) this.#entries.shift();
  }

  /** The connection went: whatever was not acknowledged is sent again on the next one. */
  resend(): void {
    this.#inflight = 0;
    for (const entry of this.#entries) if (!entry.done) entry.sent = false;
  }

  /** One more event dropped where `index` is: counted by the unsent gap just before it, or by a new one. */
  #dropAt(index: number, sequence: number): void {
    this.#onDrop();
    const before = this.#entries[index - 1];
    if (before && before.payload === null && !before.sent) {
      before.dropped += 1;
      return;
    }
    this.#entries.splice(index, 0, { payload: null, sequence, dropped: 1, sent: false, done: false });
  }
}

/** The JSON of a gap: like an event, `kind: "gap"`; the next event's sequence is `sequence + dropped` (`dropped` null: not known). */
export function gapPayload(entry: QueuedEvent, now: Date): string {
  return JSON.stringify({ sequence: entry.sequence, time: now.toISOString(), kind: "gap", dropped: Number.isNaN(entry.dropped) ? null : entry.dropped });
}
