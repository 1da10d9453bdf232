/**
 * A Connect gRPC client channel to one unix socket. Each channel owns exactly
 * one HTTP/2 connection, opened on first use and closed by {@link UnixChannel.close}:
 * short-lived callers (registration attempts, probes) never leave an idle
 * session or a descriptor behind.
 *
 * @example
 * ```ts
 * await using channel = dialUnix("/var/lib/kubelet/plugins_registry/gpu.sock", { connectTimeoutMs: 10_000 });
 * const client = createClient(Registration, channel.transport);
 * const info = await client.getInfo({}, { timeoutMs: 1000 });
 * ```
 */
import * as net from "node:net";
import type { Transport } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

export interface DialOptions {
  /** Bound on connecting plus the HTTP/2 handshake. */
  connectTimeoutMs?: number;
  /** Largest message accepted from the peer (default 16 MiB, as pod-resources consumers use). */
  readMaxBytes?: number;
}

export interface UnixChannel extends AsyncDisposable {
  readonly socketPath: string;
  readonly transport: Transport;
  /** Closes the connection and every stream on it. Safe to call twice. */
  close(): void;
}

const DEFAULT_READ_MAX_BYTES = 16 * 1024 * 1024;

export function dialUnix(socketPath: string, options: DialOptions = {}): UnixChannel {
  const sessionManager = new Http2SessionManager(
    // The authority the kubelet sends to plugins; the socket path decides where we connect.
    "http://localhost",
    {
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      // Closed explicitly by close(); an idle timer would only keep the process alive.
      idleConnectionTimeoutMs: 2 ** 31 - 1,
    },
    { createConnection: () => net.connect(socketPath) },
  );
  const transport = createGrpcTransport({
    baseUrl: "http://localhost",
    sessionManager,
    readMaxBytes: options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES,
  });
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    sessionManager.abort(new ConnectError("channel closed", Code.Canceled));
  };
  return {
    socketPath,
    transport,
    close,
    [Symbol.asyncDispose]: async () => close(),
  };
}
