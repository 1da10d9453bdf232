/**
 * Serves Connect routes with gRPC (h2c) on a unix socket. Used by the agent's
 * own sockets and by tests that play the kubelet's side.
 */
import * as http2 from "node:http2";
import * as net from "node:net";
import type { ConnectRouter, ContextValues, HandlerContext } from "@connectrpc/connect";
import type { Duplex } from "node:stream";
import { createLogger, type Logger } from "../log/logger.ts";
import { withServableAuthority } from "./authority.ts";
import { reportRefusedStreams, type RequestReports } from "./request-reports.ts";
import { withPortableGrpcMessage } from "./grpc-message.ts";
import { connectRequestListener, HandlerFailureLog } from "./node-handler.ts";

export interface UnixServer extends AsyncDisposable {
  readonly socketPath: string;
  /**
   * Stops accepting, ends every open call and stream at once (their handlers'
   * `context.signal` aborts), and resolves when the listener is closed. Node
   * removes the path the listener was bound to when it closes.
   */
  close(): Promise<void>;
}

/** Hooks by which a listener bounds its clients (src/devicemanager/registration-server.ts uses them). */
export interface ServeUnixOptions {
  /**
   * Each accepted connection: call `serve` to hand it to HTTP/2 (when it has shown to be HTTP/2: the socket, or
   * a stream over it), or destroy it.
   */
  accept?: (socket: net.Socket, serve: (connection: Duplex) => void) => void;
  onSession?: (session: http2.ServerHttp2Session) => void;
  /** Before Connect sees a request: false when it has answered the request itself. */
  onRequest?: (request: http2.Http2ServerRequest, response: http2.Http2ServerResponse) => boolean;
  /** Told of requests whose authority was replaced and of those node:http2 reset unseen (request-reports.ts). */
  reports?: RequestReports;
  /** Largest request message Connect reads (its default is 4 GiB). */
  readMaxBytes?: number;
  /** On close, with the sessions: for connections `accept` holds that never reached HTTP/2. */
  onClose?: () => void;
  /** Binds the listener instead of listen(socketPath); rejects when it cannot (src/server/socket-bind.ts binds privately). */
  bind?: (listener: net.Server) => Promise<void>;
  /** Where a handler's failure is logged, one line each (node-handler.ts); default: warnings as JSON lines on stderr. */
  log?: Logger;
  /** Calls one HTTP/2 connection may have in flight at once (its SETTINGS_MAX_CONCURRENT_STREAMS); default: Node's. */
  maxConcurrentStreams?: number;
  /** Connect's: values each call's context starts with, from its request (the connection, for a rate limit). */
  contextValues?: (request: http2.Http2ServerRequest) => ContextValues;
  /** Connect's: runs before a call's request is read; a throw answers the call with that error. */
  requestGate?: (context: HandlerContext) => void;
}

/**
 * Listens on `socketPath` (which must not exist) and serves `routes` with the
 * gRPC protocol (and the Connect protocol) over HTTP/2 without TLS.
 */
export async function serveUnix(socketPath: string, routes: (router: ConnectRouter) => void, options: ServeUnixOptions = {}): Promise<UnixServer> {
  const { accept, onSession, onRequest, readMaxBytes } = options;
  const sessions = new Set<http2.ServerHttp2Session>();
  const failures = new HandlerFailureLog(options.log ?? createLogger({ level: "warn" }));
  const { contextValues, requestGate } = options;
  const connect = { routes, grpc: true, connect: true, grpcWeb: false, readMaxBytes, requestGate } as const;
  const handler = withServableAuthority(
    withPortableGrpcMessage(
      connectRequestListener({ ...connect, contextValues: contextValues && ((request) => contextValues(request as http2.Http2ServerRequest)) }, failures),
    ),
    options.reports && ((authority) => options.reports?.authorityReplaced(authority)),
  );
  const settings = options.maxConcurrentStreams === undefined ? {} : { settings: { maxConcurrentStreams: options.maxConcurrentStreams } };
  const server = http2.createServer(settings, onRequest ? (request, response) => onRequest(request, response) && handler(request, response) : handler);
  // With `accept`, a plain listener takes the connections and hands over those it keeps:
  // an HTTP/2 session made at accept time keeps its socket open after destroy() when no preface came.
  const listener: net.Server = accept ? net.createServer((socket) => accept(socket, (kept) => server.emit("connection", kept))) : server;
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    if (options.reports) reportRefusedStreams(session, options.reports);
    onSession?.(session);
  });
  if (options.bind) {
    await options.bind(listener);
  } else {
    await new Promise<void>((resolve, reject) => {
      listener.once("error", reject);
      listener.listen(socketPath, () => {
        listener.off("error", reject);
        resolve();
      });
    });
  }
  // Errors after listening (e.g. a session torn down mid-write) concern one
  // client; without a listener they would crash the process.
  server.on("error", () => {});
  if (listener !== server) listener.on("error", () => {});
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      listener.close(() => resolve());
      for (const session of sessions) session.destroy();
      options.onClose?.();
    });
    return closing;
  };
  return { socketPath, close, [Symbol.asyncDispose]: close };
}
