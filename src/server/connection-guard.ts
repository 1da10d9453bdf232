/**
 * Holds one listener's clients to its {@link ListenerLimits}: a connection
 * cap, an idle deadline for connections with no request in progress (which
 * also closes slow-header HTTP/1.1 clients and HTTP/2 clients silent after
 * the preface), a deadline for request bodies, and a refusal of declared
 * bodies over the size limit before any of them is read.
 *
 * The deadlines are kept here, per socket and per session, rather than in
 * node:http's own headersTimeout: that one only runs for servers that listen
 * themselves, while the API's HTTP servers are handed connections by the
 * socket's protocol router.
 *
 * @example
 * ```ts
 * const guard = new ConnectionGuard("api socket", API_SOCKET_LIMITS, log);
 * net.createServer((socket) => { if (guard.admit(socket)) { guard.trackHttp1(socket); http1.emit("connection", socket); } });
 * http1.on("request", (req, res) => { if (guard.checkRequest(req, res)) handler(req, res); });
 * ```
 */
import type * as http from "node:http";
import * as http2 from "node:http2";
import type { Duplex } from "node:stream";
import type { Logger } from "../log/logger.ts";
import type { ListenerLimits } from "./limits.ts";

export type ServerRequest = http.IncomingMessage | http2.Http2ServerRequest;
export type ServerResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Why the guard ended or refused something; counted by the agent's metrics. */
export type GuardAction = "connection_cap" | "idle_timeout" | "body_timeout" | "body_too_large";

interface Activity {
  active: number;
  timer: ReturnType<typeof setTimeout> | undefined;
}

/** How long an idle HTTP/2 session may take to close after GOAWAY before it is destroyed. */
const GOAWAY_GRACE_MS = 1000;
/** Warn about the connection cap at most this often: a flood must not flood the log too. */
const CAP_WARNING_INTERVAL_MS = 60_000;

export class ConnectionGuard {
  readonly limits: ListenerLimits;
  readonly #name: string;
  readonly #log: Logger;
  readonly #onAction: ((action: GuardAction) => void) | undefined;
  readonly #open = new Set<Duplex>();
  readonly #http1 = new WeakMap<object, Activity>();
  #lastCapWarning = -Infinity;

  constructor(name: string, limits: ListenerLimits, log: Logger, onAction?: (action: GuardAction) => void) {
    this.#name = name;
    this.limits = limits;
    this.#log = log;
    this.#onAction = onAction;
  }

  /** Connections open now. */
  get size(): number {
    return this.#open.size;
  }

  /** Counts a new connection; past the cap it is destroyed at once (freeing its descriptor) and false returned. */
  admit(socket: Duplex): boolean {
    if (this.#open.size >= this.limits.maxConnections) {
      socket.destroy();
      this.#onAction?.("connection_cap");
      const now = performance.now();
      if (now - this.#lastCapWarning >= CAP_WARNING_INTERVAL_MS) {
        this.#lastCapWarning = now;
        this.#log.warn("connection limit reached; refusing new connections", {
          listener: this.#name,
          maxConnections: this.limits.maxConnections,
        });
      }
      return false;
    }
    this.#open.add(socket);
    socket.once("close", () => this.#open.delete(socket));
    return true;
  }

  /** Destroys every connection still open (the listener is closing). */
  destroyAll(): void {
    for (const socket of this.#open) socket.destroy();
  }

  /**
   * An HTTP/1.1 connection: closed once it has gone idleTimeoutMs without a
   * request whose headers arrived, counted from its opening and from the end
   * of each response. Data trickling in does not extend the deadline.
   */
  trackHttp1(socket: Duplex): void {
    const activity: Activity = { active: 0, timer: undefined };
    this.#http1.set(socket, activity);
    this.#armIdle(activity, () => socket.destroy());
    socket.once("close", () => clearTimeout(activity.timer));
  }

  /** An HTTP/2 session: closed once it has gone idleTimeoutMs with no open stream. */
  trackHttp2(session: http2.ServerHttp2Session): void {
    const activity: Activity = { active: 0, timer: undefined };
    const closeIdle = () => {
      session.close();
      setTimeout(() => session.destroy(), GOAWAY_GRACE_MS).unref();
    };
    this.#armIdle(activity, closeIdle);
    session.on("stream", (stream) => {
      activity.active++;
      clearTimeout(activity.timer);
      stream.once("close", () => {
        if (--activity.active === 0) this.#armIdle(activity, closeIdle);
      });
    });
    session.once("close", () => clearTimeout(activity.timer));
  }

  /**
   * Applies the per-request limits. Returns false when it has answered the
   * request itself (a declared body over the limit: 413, connection closed);
   * otherwise the caller serves it.
   */
  checkRequest(request: ServerRequest, response: ServerResponse): boolean {
    const http1Activity = "stream" in request ? undefined : this.#http1.get(request.socket);
    if (http1Activity) {
      http1Activity.active++;
      clearTimeout(http1Activity.timer);
      response.once("close", () => {
        if (--http1Activity.active === 0) this.#armIdle(http1Activity, () => request.socket.destroy());
      });
    }
    const bodyTimer = setTimeout(() => {
      if (request.complete) return;
      this.#onAction?.("body_timeout");
      dropRequest(request);
    }, this.limits.requestBodyTimeoutMs);
    response.once("close", () => clearTimeout(bodyTimer));
    // A response that ends before its request body was read: stop the client sending the rest.
    response.once("finish", () => {
      if (!request.complete) dropRequest(request);
    });

    const declared = Number(request.headers["content-length"]);
    // gRPC (HTTP/2) bodies are bounded per message by Connect's readMaxBytes, which answers in gRPC's terms.
    if ("stream" in request || !(declared > this.limits.maxRequestBodyBytes)) return true;
    this.#onAction?.("body_too_large");
    const message = `request body of ${declared} bytes is larger than the limit of ${this.limits.maxRequestBodyBytes} bytes`;
    const body = JSON.stringify({ code: "resource_exhausted", message });
    (response as http.ServerResponse).writeHead(413, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      connection: "close",
    });
    response.end(body);
    return false;
  }

  #armIdle(activity: Activity, close: () => void): void {
    clearTimeout(activity.timer);
    activity.timer = setTimeout(() => {
      this.#onAction?.("idle_timeout");
      close();
    }, this.limits.idleTimeoutMs);
    activity.timer.unref?.();
  }
}

/** Ends a request's transfer: the HTTP/2 stream is reset, an HTTP/1.1 connection closed once the response is out. */
function dropRequest(request: ServerRequest): void {
  if ("stream" in request) {
    if (!request.stream.closed) request.stream.close(http2.constants.NGHTTP2_NO_ERROR);
    return;
  }
  const socket = request.socket;
  if (!socket.destroyed) socket.end(() => socket.destroy());
}
