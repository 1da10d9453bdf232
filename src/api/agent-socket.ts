/**
 * The agent's API socket (docs/api.md): one unix socket that answers
 * gRPC (h2c) for programs and the Connect protocol with JSON over HTTP/1.1
 * for `curl --unix-socket`, both from the same Connect routes.
 *
 * Each connection's first bytes decide: the HTTP/2 client preface goes to an
 * http2 server, anything else to an http server. The bytes read to decide
 * are put back into the socket, and the socket itself is handed over.
 *
 * @example
 * ```ts
 * const api = await serveApiSocket({ socketPath: "/run/edgeplug/api.sock", routes, group: "edgeplug", log });
 * // curl --unix-socket /run/edgeplug/api.sock -H 'content-type: application/json' -d '{}' http://localhost/edgeplug.v1.Agent/Status
 * await api.close();
 * ```
 */
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError, createContextKey, createContextValues } from "@connectrpc/connect";
import { withServableAuthority } from "../rpc/authority.ts";
import { handOverHttp2 } from "../rpc/authority-rewrite.ts";
import { reportRefusedStreams, type RequestReports } from "../rpc/request-reports.ts";
import { withPortableGrpcMessage } from "../rpc/grpc-message.ts";
import { connectRequestListener, HandlerFailureLog } from "../rpc/node-handler.ts";
import type { Logger } from "../log/logger.ts";
import { ConnectionGuard, type GuardAction, type ServerRequest, type ServerResponse } from "../server/connection-guard.ts";
import { type Health, type HealthResponse, serveHealthRequest } from "./health.ts";
import { API_RATE_LIMITS, API_SOCKET_LIMITS, ApiRateLimiter, type ApiRateLimits, type ListenerLimits } from "../server/limits.ts";
import { routeByPreface } from "../server/protocol-router.ts";
import { cutOffOf, streamCutOffKey } from "../server/stream-cutoff.ts";
import { bindPrivately, removeIfOurs, resolveGroupId } from "../server/socket-bind.ts";
import { claimSocketPath } from "../server/socket-guard.ts";
import { type Clock, systemClock } from "../platform/clock.ts";

export { resolveGroupId } from "../server/socket-bind.ts";

export interface ApiSocketOptions {
  socketPath: string;
  routes: (router: ConnectRouter) => void;
  /**
   * The same services for calls in the binary protobuf encoding (gRPC,
   * Connect with application/proto), which may answer views of the same
   * wire format (binary-answers.ts); default `routes`.
   */
  binaryRoutes?: (router: ConnectRouter) => void;
  /** Permissions of the socket file (default 0o660: owner and group may connect). */
  mode?: number;
  /** Group name (api.socketGroup) given to the socket file; null or absent keeps the agent's group. */
  group?: string | null;
  log: Logger;
  /** Where group names are looked up (default /etc/group). */
  groupFile?: string;
  /** How long close() lets handlers finish after telling them to stop (default 500 ms). */
  closeGraceMs?: number;
  /** The clock of close()'s grace period; tests pass a manual one. */
  clock?: Clock;
  /** A connection that sends nothing for this long is dropped (default 10 s). */
  firstBytesTimeoutMs?: number;
  /** Answers GET /healthz and /readyz on the socket too (docs/api.md). */
  health?: Health;
  /** Connection, timeout and body limits (default API_SOCKET_LIMITS). */
  limits?: ListenerLimits;
  /** Rate limits (default API_RATE_LIMITS); `now` is the limiter's clock, for tests. */
  rateLimits?: ApiRateLimits;
  now?: () => number;
  /**
   * Told of each request whose authority was no host (a grpc-go client's socket path): it is served as
   * `localhost` (src/rpc/authority.ts, src/rpc/authority-rewrite.ts).
   */
  /** Told of requests served as `localhost` (their authority was no host) and of those node:http2 reset unseen. */
  reports?: RequestReports;
  /** Told of every connection or request the limits refused or ended (for metrics). */
  onLimit?: (action: GuardAction | "rate_limited") => void;
}

export interface ApiSocketServer extends AsyncDisposable {
  readonly socketPath: string;
  /** Connections open now. */
  readonly connections: number;
  /**
   * Stops accepting, ends open calls (streams get a gRPC/Connect `unavailable`
   * status), closes every connection and removes the socket file. Safe to call twice.
   */
  close(): Promise<void>;
}

/**
 * The protocols the API socket speaks. A route given options of its own
 * (router.rpc's third argument) must repeat them: Connect takes a route's
 * protocols from its own options, and would serve gRPC-web on it otherwise.
 */
export const API_PROTOCOLS = { grpc: true, connect: true, grpcWeb: false } as const;

/** Concurrent streams one HTTP/2 connection may open (each WatchEvents call holds one). */
const MAX_STREAMS_PER_SESSION = 100;
/** The connection (HTTP/1.1 socket or HTTP/2 session) a call arrived on: what the rate limit is kept per. */
const connectionKey = createContextKey<object>({}, { description: "edgeplug API connection" });

/**
 * Claims `socketPath` (refusing one that still answers), binds it with `mode`
 * and `group` and serves `routes` on it with gRPC and Connect. The socket
 * never exists at `socketPath` with wider permissions than `mode`: it is bound
 * inside a private 0700 directory next to it, given its mode and group there,
 * then hard-linked into place (which also fails instead of replacing a socket
 * that appeared meanwhile). Every connection is held to `limits` and every
 * call to the rate limit (see docs/api.md, "Limits").
 */
export async function serveApiSocket(options: ApiSocketOptions): Promise<ApiSocketServer> {
  const { socketPath, log } = options;
  const mode = options.mode ?? 0o660;
  const gid = options.group === undefined || options.group === null ? null : resolveGroupId(options.group, options.groupFile);
  await claimSocketPath(socketPath, { expect: "edgeplug-api", log });

  const limits = options.limits ?? API_SOCKET_LIMITS;
  const guard = new ConnectionGuard("api socket", limits, log, options.onLimit);
  const rateLimiter = new ApiRateLimiter(options.rateLimits ?? API_RATE_LIMITS, options.now);
  const rateLimited = () => {
    options.onLimit?.("rate_limited");
    return `rate limit exceeded (${rateLimiter.describe()}); retry later`;
  };
  const shutdown = new AbortController();
  const failures = new HandlerFailureLog(log.with({ socket: socketPath }));
  const adapter = (routes: (router: ConnectRouter) => void) =>
    withServableAuthority(
      withPortableGrpcMessage(
        connectRequestListener({
          routes,
          ...API_PROTOCOLS,
          shutdownSignal: shutdown.signal,
          // docs/status-json.md: Status answers the canonical proto3 JSON with default values included.
          jsonOptions: { alwaysEmitImplicit: true },
          readMaxBytes: limits.maxRequestBodyBytes,
          contextValues: (request) => createContextValues().set(connectionKey, connectionOf(request)).set(streamCutOffKey, cutOffOf(request)),
          // Runs before the request body is read, so a refused call costs no parsing.
          requestGate: (context) => {
            if (!rateLimiter.admit(context.values.get(connectionKey))) {
              throw new ConnectError(rateLimited(), Code.ResourceExhausted);
            }
          },
        }, failures),
      ),
      options.reports && ((authority) => options.reports?.authorityReplaced(authority)),
    );
  const handler = adapter(options.routes);
  const binaryHandler = options.binaryRoutes ? adapter(options.binaryRoutes) : handler;
  const calls = trackCalls((request, response) => {
    if (!guard.checkRequest(request, response)) return;
    if (options.health && isHealthPath(request)) {
      if (!rateLimiter.admit(connectionOf(request))) {
        const refusal: HealthResponse = response;
        refusal.writeHead(429, { "content-type": "text/plain; charset=utf-8", "retry-after": "1" });
        refusal.end(`${rateLimited()}\n`);
        return;
      }
      request.resume();
      serveHealthRequest(options.health, request, response);
      return;
    }
    (isBinaryProtobuf(request) ? binaryHandler : handler)(request, response);
  });
  const http1Server = http.createServer(calls.handle as http.RequestListener);
  const http2Server = http2.createServer({ settings: { maxConcurrentStreams: MAX_STREAMS_PER_SESSION } }, calls.handle);
  const sessions = new Set<http2.ServerHttp2Session>();
  http2Server.on("session", (session) => {
    sessions.add(session);
    guard.trackHttp2(session);
    if (options.reports) reportRefusedStreams(session, options.reports);
    session.once("close", () => sessions.delete(session));
  });
  for (const server of [http1Server, http2Server]) {
    server.on("error", (error) => log.warn("api socket connection failed", { socket: socketPath, error }));
  }

  const firstBytesTimeoutMs = options.firstBytesTimeoutMs ?? 10_000;
  const listener = net.createServer((socket) => {
    if (!guard.admit(socket)) return;
    socket.on("error", (error) => log.debug("api socket connection error", { socket: socketPath, error }));
    routeByPreface(socket, firstBytesTimeoutMs, (protocol, head) => {
      // Both servers read bytes put back into the socket before their own reads (measured on Node 24 and Deno 2.9).
      // The socket itself is handed over where it can be, not a JS stream around it: node:http2 then writes to
      // the native handle. Only a connection whose requests carry an authority node:http2 would reset is read
      // through a stream (src/rpc/authority-rewrite.ts).
      if (protocol === "http2") {
        handOverHttp2(socket, head, (connection) => http2Server.emit("connection", connection), options.reports && ((authority) => options.reports?.authorityReplaced(authority)));
      } else {
        socket.unshift(head);
        guard.trackHttp1(socket);
        http1Server.emit("connection", socket);
        socket.resume();
      }
    });
  });

  const inode = await bindPrivately(listener, socketPath, mode, gid);
  log.info("api socket serving", {
    socket: socketPath,
    mode: `0${mode.toString(8)}`,
    ...(gid === null ? {} : { group: options.group, gid }),
    maxConnections: limits.maxConnections,
  });

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      const listenerClosed = new Promise<void>((resolve) => listener.close(() => resolve()));
      shutdown.abort(new ConnectError("edgeplug is shutting down", Code.Unavailable));
      for (const session of sessions) session.close();
      http1Server.closeIdleConnections();
      await calls.drained(options.closeGraceMs ?? 500, options.clock ?? systemClock);
      guard.destroyAll();
      await listenerClosed;
      removeIfOurs(socketPath, inode);
    })();
    return closing;
  };
  return {
    socketPath,
    get connections() {
      return guard.size;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** HTTP/1.1: the socket; HTTP/2: the session, shared by the connection's streams. */
function connectionOf(request: ServerRequest): object {
  return "stream" in request ? request.stream.session ?? request.stream : request.socket;
}

/** gRPC with protobuf (its default), Connect unary and streaming with protobuf: what the binary routes answer. */
const BINARY_PROTOBUF = /^application\/(?:grpc|grpc\+proto|proto|connect\+proto)$/;

function isBinaryProtobuf(request: ServerRequest): boolean {
  const type = request.headers["content-type"];
  return typeof type === "string" && BINARY_PROTOBUF.test(type.split(";", 1)[0]!.trim().toLowerCase());
}

function isHealthPath(request: ServerRequest): boolean {
  if (request.method !== "GET" && request.method !== "HEAD") return false;
  const url = request.url ?? "/";
  return url === "/healthz" || url === "/readyz" || url.startsWith("/healthz?") || url.startsWith("/readyz?");
}

type RequestHandler = (request: ServerRequest, response: ServerResponse) => void;

/** Counts calls in progress so that close() can wait for them to wrap up, and no longer. */
function trackCalls(handler: RequestHandler) {
  let active = 0;
  let onIdle: (() => void) | undefined;
  const handle = (request: ServerRequest, response: ServerResponse) => {
    active++;
    response.once("close", () => {
      active--;
      if (active === 0) onIdle?.();
    });
    handler(request, response);
  };
  const drained = (graceMs: number, clock: Clock) =>
    new Promise<void>((resolve) => {
      if (active === 0) return resolve();
      const cancel = clock.setTimer(resolve, graceMs);
      onIdle = () => {
        cancel();
        resolve();
      };
    });
  return { handle, drained };
}
