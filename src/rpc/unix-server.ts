/**
 * Serves Connect routes with gRPC (h2c) on a unix socket. Used by the agent's
 * own sockets and by tests that play the kubelet's side.
 */
import * as http2 from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { withPortableGrpcMessage } from "./grpc-message.ts";

export interface UnixServer extends AsyncDisposable {
  readonly socketPath: string;
  /**
   * Stops accepting, ends every open call and stream at once (their handlers'
   * `context.signal` aborts), and resolves when the listener is closed. Node
   * removes the socket file when the listener closes.
   */
  close(): Promise<void>;
}

/**
 * Listens on `socketPath` (which must not exist) and serves `routes` with the
 * gRPC protocol (and the Connect protocol) over HTTP/2 without TLS.
 */
export async function serveUnix(socketPath: string, routes: (router: ConnectRouter) => void): Promise<UnixServer> {
  const sessions = new Set<http2.ServerHttp2Session>();
  const server = http2.createServer(
    withPortableGrpcMessage(connectNodeAdapter({ routes, grpc: true, connect: true, grpcWeb: false })),
  );
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => {
      server.off("error", reject);
      resolve();
    });
  });
  // Errors after listening (e.g. a session torn down mid-write) concern one
  // client; without a listener they would crash the process.
  server.on("error", () => {});
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const session of sessions) session.destroy();
    });
    return closing;
  };
  return { socketPath, close, [Symbol.asyncDispose]: close };
}
