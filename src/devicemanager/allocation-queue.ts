/**
 * The queue allocation requests wait in: one request holds the turn, at most
 * `maxWaiting` wait behind it in order of arrival, and one more is refused
 * at once. A waiting request whose caller gives up leaves the queue at once
 * rather than at its turn, so callers that cancel cannot keep the queue full.
 */
import { AllocationError, AllocationQueueFullError } from "./allocation.ts";

interface Waiter {
  start(): void;
}

export class AllocationQueue {
  readonly #maxWaiting: number;
  readonly #refusedFull: () => void;
  readonly #waiting: Waiter[] = [];
  #turnTaken = false;

  /** `refusedFull` is told of each request refused because the queue was full. */
  constructor(maxWaiting: number, refusedFull: () => void = () => {}) {
    this.#maxWaiting = maxWaiting;
    this.#refusedFull = refusedFull;
  }

  /** Requests waiting behind the one that holds the turn. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * Resolves once `owner`'s request holds the turn, with the function that
   * gives it up (call it once the request is done, whatever its outcome).
   * Rejects at once when the queue is full, and when `signal` aborts first.
   */
  async take(owner: string, signal: AbortSignal | undefined): Promise<() => void> {
    if (signal?.aborted) throw cancelledBeforeTurn(owner);
    if (this.#turnTaken) {
      if (this.#waiting.length >= this.#maxWaiting) {
        this.#refusedFull();
        throw new AllocationQueueFullError(this.#waiting.length);
      }
      await this.#wait(owner, signal);
    }
    this.#turnTaken = true;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.#passTurn();
    };
  }

  #wait(owner: string, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const leave = () => {
        const at = this.#waiting.indexOf(waiter);
        if (at >= 0) this.#waiting.splice(at, 1);
        reject(cancelledBeforeTurn(owner));
      };
      const waiter: Waiter = {
        start: () => {
          signal?.removeEventListener("abort", leave);
          resolve();
        },
      };
      signal?.addEventListener("abort", leave, { once: true });
      this.#waiting.push(waiter);
    });
  }

  #passTurn(): void {
    const next = this.#waiting.shift();
    // The turn goes straight to the next waiter, so no arrival in between can take it out of order.
    if (next) next.start();
    else this.#turnTaken = false;
  }
}

function cancelledBeforeTurn(owner: string): AllocationError {
  return new AllocationError(`the request of owner ${owner} was cancelled before its turn`);
}
