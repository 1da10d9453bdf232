/**
 * A Connect gRPC client channel to one unix socket: every call, unary or
 * streaming, goes through Connect's gRPC transport on the channel's own HTTP/2
 * connection (one transport per channel). The channel opens its
 * HTTP/2 connection on first use, re-dials on the next call after the peer went
 * away (a plugin restarted on the same path), and closes everything on
 * {@link UnixChannel.close}: short-lived callers (registration attempts,
 * probes) never leave an idle session, a timer or a descriptor behind.
 *
 * Connecting counts as done only when the peer's HTTP/2 SETTINGS arrive, so
 * a socket that accepts but never speaks HTTP/2 is bounded by the connect
 * timeout, and one that answers with something else fails at once.
 *
 * @example
 * ```ts
 * await using channel = dialUnix("/var/lib/kubelet/plugins_registry/gpu.sock", { connectTimeoutMs: 10_000 });
 * const client = createClient(Registration, channel.transport);
 * const info = await client.getInfo({}, { timeoutMs: 1000 });
 * ```
 */
import * as http2 from "node:http2";
import * as net from "node:net";
import type { Transport } from "@connectrpc/connect";
import { Code } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { type Clock, systemClock } from "../platform/clock.ts";
import { callObserver, observeStream } from "./call-observer.ts";
import { markDialFailure, transportError } from "./rpc-error.ts";

export interface DialOptions {
  /** Bound on connecting plus the HTTP/2 handshake (default 10 s, the kubelet's dial timeout). */
  connectTimeoutMs?: number;
  /** Deadline for calls that do not pass `timeoutMs` themselves (default: none). */
  defaultTimeoutMs?: number;
  /** Largest message accepted from the peer (default 16 MiB, as pod-resources consumers use). */
  readMaxBytes?: number;
  /** Where to connect when not `socketPath` itself (a pinned socket's /proc/self/fd path); messages still name `socketPath`. */
  connectPath?: string;
  /** Times the connect timeout (default: the system clock); tests drive it with a manual clock. */
  clock?: Clock;
}

export interface UnixChannel extends AsyncDisposable {
  readonly socketPath: string;
  readonly transport: Transport;
  /** Closes the connection and fails every call still on it (as canceled). Safe to call twice. */
  close(): void;
  /** Settles once close() was called and every connection the channel opened has closed. */
  readonly closed: Promise<void>;
  /**
   * Connects now (or takes the live connection) without making a call, for
   * callers that watch a plugin's service connection (DRA). Fails as a call
   * would (missing, stale, not-grpc, deadline); `lost` settles when that
   * connection closes, whichever side closed it.
   */
  connect(): Promise<{ lost: Promise<void> }>;
}

/** What connect-node's HTTP/2 client asks of a session manager (its interface is not exported). */
interface Http2SessionProvider {
  authority: string;
  request(
    method: string,
    path: string,
    headers: http2.OutgoingHttpHeaders,
    options: Omit<http2.ClientSessionRequestOptions, "signal">,
  ): Promise<http2.ClientHttp2Stream>;
  notifyResponseByteRead(stream: http2.ClientHttp2Stream): void;
}

/** The authority the kubelet sends to plugins; the socket path decides where we connect. */
const BASE_URL = "http://localhost";
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_READ_MAX_BYTES = 16 * 1024 * 1024;

/** One HTTP/2 connection of a channel and the calls in flight on it. */
interface Connection {
  readonly socket: net.Socket;
  readonly h2: http2.ClientHttp2Session;
  readonly streams: Set<http2.ClientHttp2Stream>;
  /** Settles when the socket has closed. */
  readonly lost: Promise<void>;
}

/** Opens a channel to the gRPC server on `socketPath`; nothing is dialed until the first call. */
export function dialUnix(socketPath: string, options: DialOptions = {}): UnixChannel {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const clock = options.clock ?? systemClock;
  /** Every socket opened and not yet closed, whatever state its connection is in. */
  const openSockets = new Set<net.Socket>();
  const pendingDials = new Set<(error: Error) => void>();
  const connections = new Set<Connection>();
  let current: Promise<Connection> | undefined;
  let isClosed = false;
  let resolveClosed = () => {};
  const closed = new Promise<void>((resolve) => (resolveClosed = resolve));

  const settleClosedIfDone = () => {
    if (isClosed && openSockets.size === 0) resolveClosed();
  };
  const channelClosedError = () => transportError("canceled", `channel to ${socketPath} was closed`, Code.Canceled);

  function connect(): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(options.connectPath ?? socketPath);
      let markLost = () => {};
      const lost = new Promise<void>((resolve) => (markLost = resolve));
      const connection: Connection = { socket, h2: undefined as unknown as http2.ClientHttp2Session, streams: new Set(), lost };
      openSockets.add(socket);
      // Registered before http2's own listener: when the peer goes away, fail
      // the calls on this connection as "disconnected" before Node closes
      // their streams, which Connect would report as cancelled or truncated.
      socket.once("close", () => {
        markLost();
        openSockets.delete(socket);
        connections.delete(connection);
        if (!isClosed) {
          for (const stream of connection.streams) {
            stream.destroy(
              transportError("disconnected", `${socketPath} closed the connection during the call (the peer went away)`, Code.Unavailable),
            );
          }
        }
        settleClosedIfDone();
      });
      let socketConnected = false;
      socket.once("connect", () => (socketConnected = true));
      const h2 = http2.connect(BASE_URL, { createConnection: () => socket, settings: { enablePush: false } });
      (connection as { h2: http2.ClientHttp2Session }).h2 = h2;

      let settled = false;
      const fail = (error: Error) => {
        if (settled) return;
        settled = true;
        cancelTimer();
        pendingDials.delete(fail);
        h2.destroy();
        socket.destroy();
        reject(markDialFailure(error));
      };
      pendingDials.add(fail);
      const cancelTimer = clock.setTimer(() => {
        const message = `no HTTP/2 handshake from ${socketPath} within ${connectTimeoutMs} ms (connect timeout)`;
        fail(transportError("deadline", message, Code.DeadlineExceeded));
      }, connectTimeoutMs);

      h2.on("error", (error: Error) => {
        // After the handshake, each stream reports the failure to its own call.
        if (!settled) fail(connectFailure(socketPath, error, socketConnected));
      });
      h2.once("close", () => {
        // Every connection closes; only one closed before its handshake is a failure
        // (errors are not built otherwise: registration is a hot path).
        if (settled) return;
        const message = `${socketPath} closed the connection before any HTTP/2 handshake: not a gRPC server`;
        fail(transportError("not-grpc", message, Code.Unavailable));
      });
      h2.once("remoteSettings", () => {
        if (settled) return;
        settled = true;
        cancelTimer();
        pendingDials.delete(fail);
        h2.unref();
        connections.add(connection);
        resolve(connection);
      });
    });
  }

  /** The live connection, dialing a new one when there is none or the old one is going away. */
  function connection(): Promise<Connection> {
    if (current === undefined) {
      const attempt = connect();
      current = attempt;
      attempt.catch(() => {
        if (current === attempt) current = undefined;
      });
    }
    return current;
  }

  /** The live connection, re-dialing when the last one went away (or received GOAWAY) since it was made. */
  async function liveConnection(): Promise<Connection> {
    for (;;) {
      if (isClosed) throw channelClosedError();
      const attempt = connection();
      const conn = await attempt;
      if (isClosed) throw channelClosedError();
      if (!conn.h2.closed && !conn.h2.destroyed) return conn;
      if (current === attempt) current = undefined;
    }
  }

  async function openStream(headers: http2.OutgoingHttpHeaders, requestOptions: http2.ClientSessionRequestOptions) {
    const conn = await liveConnection();
    const stream = conn.h2.request(headers, requestOptions);
    observeStream(stream);
    holdWhileOpen(conn, stream);
    return stream;
  }

  const sessionManager: Http2SessionProvider = {
    authority: new URL(BASE_URL).origin,
    request: (method, path, headers, requestOptions) => openStream({ ...headers, ":method": method, ":path": path }, requestOptions),
    notifyResponseByteRead() {
      // No keepalive pings on a local socket: a dead peer closes the connection.
    },
  };

  // One transport per channel, made once: Connect's client keeps no state per
  // call beyond the stream, and the session manager above replaces its own
  // (no pings, no idle timer: close() ends the connection). The one
  // interceptor records what each call's stream showed, to classify failures.
  const transport = createGrpcTransport({
    baseUrl: BASE_URL,
    sessionManager,
    interceptors: [callObserver],
    readMaxBytes: options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES,
    defaultTimeoutMs: options.defaultTimeoutMs,
    acceptCompression: [],
  });

  const close = () => {
    if (isClosed) return;
    isClosed = true;
    current = undefined;
    for (const fail of [...pendingDials]) fail(channelClosedError());
    for (const conn of [...connections]) {
      if (conn.streams.size === 0) conn.h2.destroy();
      else conn.h2.destroy(channelClosedError(), http2.constants.NGHTTP2_CANCEL);
      // A destroyed session only half-closes its socket and waits for the
      // peer's end; a busy or broken plugin must not hold our descriptor.
      conn.socket.destroy();
    }
    settleClosedIfDone();
  };

  return {
    socketPath,
    transport,
    close,
    closed,
    connect: async () => ({ lost: (await liveConnection()).lost }),
    [Symbol.asyncDispose]: async () => {
      close();
      await closed;
    },
  };
}

/**
 * An idle connection must not keep the process alive (as with connect-node's
 * own session manager); one with calls in flight must.
 */
function holdWhileOpen(conn: Connection, stream: http2.ClientHttp2Stream): void {
  if (conn.streams.size === 0) conn.h2.ref();
  conn.streams.add(stream);
  stream.once("close", () => {
    conn.streams.delete(stream);
    if (conn.streams.size === 0 && !conn.h2.destroyed) conn.h2.unref();
  });
}

/** Names what went wrong before the HTTP/2 handshake completed. */
function connectFailure(socketPath: string, error: Error, socketConnected: boolean): Error {
  const code = (error as { code?: unknown }).code;
  if (code === "ENOENT") {
    return transportError("missing", `no socket at ${socketPath}`, Code.Unavailable, error);
  }
  if (code === "ECONNREFUSED") {
    const message = `connection refused by ${socketPath}: the socket file exists but nothing listens on it (stale socket)`;
    return transportError("stale", message, Code.Unavailable, error);
  }
  if (!socketConnected) {
    return transportError("status", `cannot connect to ${socketPath}: ${error.message}`, Code.Unavailable, error);
  }
  const message = `${socketPath} accepted the connection but does not speak HTTP/2 (${error.message})`;
  return transportError("not-grpc", message, Code.Unavailable, error);
}
