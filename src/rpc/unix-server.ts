/**
 * Serves Connect routes with gRPC (h2c) on a unix socket. Used by the agent's
 * own sockets and by tests that play the kubelet's side.
 */
import * as http2 from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

export interface UnixServer extends AsyncDisposable {
  readonly socketPath: string;
  /** Stops accepting, ends open sessions and removes nothing: callers own the path. */
  close(): Promise<void>;
}

export async function serveUnix(
  socketPath: string,
  routes: (router: ConnectRouter) => void,
): Promise<UnixServer> {
  const sessions = new Set<http2.ServerHttp2Session>();
  const server = http2.createServer(connectNodeAdapter({ routes, grpc: true, connect: true, grpcWeb: false }));
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
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const session of sessions) session.destroy();
    });
  return { socketPath, close, [Symbol.asyncDispose]: close };
}
