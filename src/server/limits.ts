/**
 * The bounds every listener of the agent holds its clients to (issue 7,
 * docs/api.md "Limits"), and the token buckets of the API's rate
 * limit. The values are documented in docs/api.md; change both together.
 *
 * @example
 * ```ts
 * const bucket = new TokenBucket({ perSecond: 100, burst: 10 });
 * if (!bucket.take()) throw new ConnectError("slow down", Code.ResourceExhausted);
 * ```
 */

export interface ListenerLimits {
  /** Connections held open at once; one more is closed as soon as it is accepted. */
  maxConnections: number;
  /**
   * A connection with no request in progress (just opened, between keep-alive
   * requests, or still sending request headers however slowly) is closed after
   * this long. For HTTP/2 it is a session with no open stream, e.g. a client
   * that sent the preface and then nothing.
   */
  idleTimeoutMs: number;
  /** A request whose body has not fully arrived this long after its headers is dropped. */
  requestBodyTimeoutMs: number;
  /** Request bodies (and each gRPC message) larger than this are refused without being read. */
  maxRequestBodyBytes: number;
}

export interface RateLimit {
  perSecond: number;
  burst: number;
}

export interface ApiRateLimits {
  /** Each client connection (unix sockets carry no peer address to key on). */
  perConnection: RateLimit;
  /**
   * All connections together: a client opening a connection per request
   * would otherwise get a fresh burst every time.
   */
  listener: RateLimit;
}

const MiB = 1024 * 1024;

/** The API socket (api.socket). */
export const API_SOCKET_LIMITS: ListenerLimits = {
  maxConnections: 128,
  idleTimeoutMs: 10_000,
  requestBodyTimeoutMs: 30_000,
  maxRequestBodyBytes: 4 * MiB,
};

/**
 * An Allocate or Release request on the API socket (each gRPC message, each
 * Connect body, decompressed), far below the socket's 4 MiB: an Allocate
 * request holds its memory while it waits in the allocation queue, where up
 * to 128 may wait. The largest request that can be granted (64 resources,
 * each an extended resource name of 316 ASCII characters, with an owner of
 * 253 and a container of 63 characters of 3 bytes each: the bounds of
 * allocation.ts) takes 22 KB as protobuf and 25 KB as JSON with every
 * non-ASCII character escaped; limits.test.ts holds it under half of this.
 */
export const ALLOCATION_REQUEST_MAX_BYTES = 64 * 1024;

/** The metrics, health and readiness endpoint (api.metrics): scraped by a few collectors at most. */
export const METRICS_LISTENER_LIMITS: ListenerLimits = {
  maxConnections: 64,
  idleTimeoutMs: 10_000,
  requestBodyTimeoutMs: 10_000,
  // GET only: a body is never wanted, so a small one is tolerated and anything larger refused.
  maxRequestBodyBytes: 64 * 1024,
};

/**
 * The device-plugin registration socket (devicePlugins.registrationSocket):
 * each plugin makes one short Register call when it starts, whose request
 * holds a version, a socket file name, a resource name and two flags.
 */
export const REGISTRATION_SOCKET_LIMITS: ListenerLimits = {
  maxConnections: 64,
  idleTimeoutMs: 10_000,
  requestBodyTimeoutMs: 10_000,
  maxRequestBodyBytes: 64 * 1024,
};

/**
 * The pod-resources socket (podResources.socket): monitoring agents call
 * List, Get or GetAllocatableResources now and then. A request is at most a
 * pod name and a namespace; the kubelet takes up to grpc-go's default 4 MiB
 * per message, which no valid request comes near, so the bound here is the
 * registration socket's.
 */
export const POD_RESOURCES_SOCKET_LIMITS: ListenerLimits = {
  maxConnections: 64,
  idleTimeoutMs: 10_000,
  requestBodyTimeoutMs: 10_000,
  maxRequestBodyBytes: 64 * 1024,
};

/**
 * The kubelet's pod-resources rate limit (DefaultQPS 100, DefaultBurstTokens
 * 10), one bucket for the whole socket as the kubelet keeps it; a refused
 * call gets ResourceExhausted with POD_RESOURCES_RATE_LIMITED.
 */
export const POD_RESOURCES_RATE_LIMIT: RateLimit = { perSecond: 100, burst: 10 };
/** The kubelet's words for a call over its rate limit. */
export const POD_RESOURCES_RATE_LIMITED = "rejected by rate limit";

/**
 * The device-plugin registration socket: a plugin calls Register once when
 * it starts (and when kubelet.sock is re-created); a node starting a few
 * dozen plugins at once stays well under the socket's bucket.
 */
export const REGISTRATION_RATE_LIMITS: ApiRateLimits = {
  perConnection: { perSecond: 10, burst: 10 },
  listener: { perSecond: 100, burst: 100 },
};

/** The kubelet's pod-resources limit (100 qps, burst 10), per connection; ten times that for the whole socket. */
export const API_RATE_LIMITS: ApiRateLimits = {
  perConnection: { perSecond: 100, burst: 10 },
  listener: { perSecond: 1000, burst: 100 },
};

/**
 * A token bucket: holds at most `burst` tokens, refilled continuously at
 * `perSecond`; take() spends one when there is one.
 */
export class TokenBucket {
  readonly #perMs: number;
  readonly #burst: number;
  readonly #now: () => number;
  #tokens: number;
  #updatedAt: number;

  constructor(limit: RateLimit, now: () => number = performance.now.bind(performance)) {
    if (!(limit.perSecond > 0) || !(limit.burst >= 1)) {
      throw new RangeError(`rate limit needs a positive rate and a burst of at least 1, got ${limit.perSecond}/s burst ${limit.burst}`);
    }
    this.#perMs = limit.perSecond / 1000;
    this.#burst = limit.burst;
    this.#now = now;
    this.#tokens = limit.burst;
    this.#updatedAt = now();
  }

  take(): boolean {
    const at = this.#now();
    this.#tokens = Math.min(this.#burst, this.#tokens + (at - this.#updatedAt) * this.#perMs);
    this.#updatedAt = at;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}

/**
 * The API's rate limit: a call is admitted when both its connection's bucket
 * and the listener's bucket have a token. Buckets live as long as their
 * connection object (a WeakMap), so closed connections cost nothing.
 */
export class ApiRateLimiter {
  readonly #limits: ApiRateLimits;
  readonly #now: (() => number) | undefined;
  readonly #listener: TokenBucket;
  readonly #connections = new WeakMap<object, TokenBucket>();

  constructor(limits: ApiRateLimits = API_RATE_LIMITS, now?: () => number) {
    this.#limits = limits;
    this.#now = now;
    this.#listener = new TokenBucket(limits.listener, now);
  }

  /** True when a call on `connection` may run now; false means answer ResourceExhausted / 429. */
  admit(connection: object): boolean {
    let bucket = this.#connections.get(connection);
    if (!bucket) {
      bucket = new TokenBucket(this.#limits.perConnection, this.#now);
      this.#connections.set(connection, bucket);
    }
    // The connection's own bucket first, so a flooding connection does not drain the shared one.
    return bucket.take() && this.#listener.take();
  }

  describe(): string {
    const { perConnection, listener } = this.#limits;
    return `${perConnection.perSecond} requests/s with bursts of ${perConnection.burst} per connection, ${listener.perSecond}/s for the whole socket`;
  }
}
