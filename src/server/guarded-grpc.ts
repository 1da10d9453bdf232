/**
 * A gRPC-only listener on one of the kubelet's sockets (kubelet.sock, the
 * pod-resources socket), as both are served: every connection bounded by a
 * ConnectionGuard, a client that does not open with HTTP/2's preface
 * closed, a grpc-go client's socket-path :authority served, the socket bound
 * aside and linked into place with its mode, and removed on close only if it
 * is still the one bound.
 *
 * @example
 * ```ts
 * const server = await serveGuardedGrpc({ socketPath, routes, log, limits, mode: 0o660, name: "pod-resources socket", purpose: "the pod-resources API" });
 * await server.close();
 * ```
 */
import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger } from "../log/logger.ts";
import { handOverHttp2 } from "../rpc/authority-rewrite.ts";
import type { RequestReports } from "../rpc/request-reports.ts";
import { serveUnix, type ServeUnixOptions, type UnixServer } from "../rpc/unix-server.ts";
import { ConnectionGuard, type GuardAction } from "./connection-guard.ts";
import type { ListenerLimits } from "./limits.ts";
import { routeByPreface } from "./protocol-router.ts";
import { bindPrivately, removeIfOurs } from "./socket-bind.ts";

export interface GuardedGrpcOptions extends Pick<ServeUnixOptions, "maxConcurrentStreams" | "contextValues" | "requestGate"> {
  socketPath: string;
  routes: (router: ConnectRouter) => void;
  log: Logger;
  limits: ListenerLimits;
  /** The socket file's mode once linked into place. */
  mode: number;
  /** The listener as the guard's log lines name it ("pod-resources socket"). */
  name: string;
  /** What the socket serves, as a failed bind names it ("the pod-resources API"). */
  purpose: string;
  /** Told of every connection or request the guard refused or ended (for metrics). */
  onLimit?: (action: GuardAction) => void;
  /** Told of requests served as `localhost` (their authority was no host) and of those node:http2 reset unseen. */
  reports?: RequestReports;
  /** Where a handler's failure is logged (serveUnix's default when absent). */
  handlerLog?: Logger;
}

/** Binds `socketPath` (which the caller has claimed) and serves `routes` on it with gRPC only. */
export async function serveGuardedGrpc(options: GuardedGrpcOptions): Promise<UnixServer> {
  const { socketPath, limits, reports } = options;
  const guard = new ConnectionGuard(options.name, limits, options.log, options.onLimit);
  let inode = 0;
  const server = await serveUnix(socketPath, options.routes, {
    maxConcurrentStreams: options.maxConcurrentStreams,
    contextValues: options.contextValues,
    requestGate: options.requestGate,
    accept(socket, serve) {
      if (!guard.admit(socket)) return;
      socket.on("error", () => {});
      // gRPC only, as the kubelet serves these sockets.
      routeByPreface(socket, limits.idleTimeoutMs, (protocol, head) => {
        if (protocol !== "http2") return void socket.destroy();
        // grpc-go clients and plugins send the socket path as :authority, which node:http2 alone would reset.
        handOverHttp2(socket, head, serve, reports && ((authority) => reports.authorityReplaced(authority)));
      });
    },
    onSession: (session) => guard.trackHttp2(session),
    onRequest: (request, response) => guard.checkRequest(request, response),
    reports,
    onClose: () => guard.destroyAll(),
    readMaxBytes: limits.maxRequestBodyBytes,
    log: options.handlerLog,
    // Bound aside and linked into place, so that closing removes only this socket, never a file put there since.
    bind: async (listener) => void (inode = await bindPrivately(listener, socketPath, options.mode, null, options.purpose)),
  });
  const close = async () => {
    await server.close();
    removeIfOurs(socketPath, inode);
  };
  return { socketPath, close, [Symbol.asyncDispose]: close };
}
