/**
 * Serves Connect routes with gRPC (h2c) on a unix socket. Used by the agent's
 * own sockets and by tests that play the kubelet's side.
 */
import * as http2 from "node:http2";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

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
  const handler = connectNodeAdapter({ routes, grpc: true, connect: true, grpcWeb: false });
  const server = http2.createServer((request, response) => {
    portableGrpcMessage(response);
    handler(request, response);
  });
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

/**
 * Connect percent-encodes `grpc-message` with encodeURIComponent, but
 * @grpc/grpc-js decodes it with decodeURI, which leaves `%3A`, `%2F` and the
 * like in place: a grpc-js plugin would log "version%3A v9". Re-encoding as
 * the gRPC spec asks (only '%' and bytes outside printable ASCII) reads the
 * same to every client.
 */
function portableGrpcMessage(response: http2.Http2ServerResponse): void {
  const addTrailers = response.addTrailers.bind(response);
  response.addTrailers = (headers) => addTrailers(reencodeGrpcMessage(headers));
  const writeHead = response.writeHead.bind(response) as (...args: unknown[]) => http2.Http2ServerResponse;
  response.writeHead = ((...args: unknown[]) => {
    const last = args[args.length - 1];
    if (typeof last === "object" && last !== null && !Array.isArray(last)) {
      args[args.length - 1] = reencodeGrpcMessage(last as http2.OutgoingHttpHeaders);
    }
    return writeHead(...args);
  }) as typeof response.writeHead;
}

function reencodeGrpcMessage(headers: http2.OutgoingHttpHeaders): http2.OutgoingHttpHeaders {
  const message = headers["grpc-message"];
  if (typeof message !== "string") return headers;
  let text: string;
  try {
    text = decodeURIComponent(message);
  } catch {
    return headers;
  }
  let encoded = "";
  for (const byte of Buffer.from(text, "utf8")) {
    encoded += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return { ...headers, "grpc-message": encoded };
}
