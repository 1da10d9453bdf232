/**
 * A Connect-protocol client over HTTP/1.1 on a unix socket, built on node:http
 * alone: what the CLI uses to talk to the agent's own API socket, which
 * answers the Connect protocol on HTTP/1.1 beside gRPC on HTTP/2
 * (src/api/agent-socket.ts). A command that asks the agent once gains no
 * multiplexing from HTTP/2, while loading node:http2 (and connect-node, which
 * also loads https and zlib) is most of its start-up time (docs/performance.md,
 * "Command start-up"). Calls to plugins stay on gRPC over HTTP/2
 * (unix-channel.ts): plugins speak nothing else.
 *
 * Every request opens its own connection, closed when its response ends,
 * fails or is abandoned, so a short-lived command leaves nothing behind;
 * {@link UnixHttp1Channel.close} ends every request still open. What the
 * socket sends is bounded: response headers by MAX_HEADER_BYTES, each
 * message by `readMaxBytes` (Connect checks unary bodies and stream
 * envelopes), the connection by a connect timeout; each call's deadline and
 * abort signal come from Connect. Failures carry the same kinds as the
 * gRPC channel's (rpc-error.ts): missing, stale, deadline, disconnected.
 *
 * @example
 * ```ts
 * const channel = dialUnixHttp1("/run/edgeplug/api.sock", { connectTimeoutMs: 5000 });
 * try {
 *   const status = await createClient(Agent, channel.transport).status({}, { timeoutMs: 5000 });
 * } finally {
 *   channel.close();
 * }
 * ```
 */
import * as http from "node:http";
import type { Transport } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { UniversalClientFn, UniversalClientRequest, UniversalClientResponse } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import { classifiedAs, transportError } from "./rpc-error.ts";

export interface Http1DialOptions {
  /** Bound on connecting to the socket (default 10 s). */
  connectTimeoutMs?: number;
  /** Largest message accepted from the peer (default 16 MiB, as the gRPC channel's). */
  readMaxBytes?: number;
}

export interface UnixHttp1Channel {
  readonly socketPath: string;
  readonly transport: Transport;
  /** Ends every request still open (their calls fail as canceled). Safe to call twice. */
  close(): void;
}

/** The authority sent; the socket path decides where we connect. */
const BASE_URL = "http://localhost";
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_READ_MAX_BYTES = 16 * 1024 * 1024;
/** Response header block: Connect's are a few hundred bytes; node:http's default is 16 KiB. */
const MAX_HEADER_BYTES = 16 * 1024;

/** A channel to the Connect server on `socketPath`; nothing is dialled until the first call. */
export function dialUnixHttp1(socketPath: string, options: Http1DialOptions = {}): UnixHttp1Channel {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const readMaxBytes = options.readMaxBytes ?? DEFAULT_READ_MAX_BYTES;
  const open = new Set<http.ClientRequest>();
  let isClosed = false;
  const closedError = () => transportError("canceled", `channel to ${socketPath} was closed`, Code.Canceled);

  const httpClient: UniversalClientFn = (request) => {
    if (isClosed) return Promise.reject(closedError());
    return send(socketPath, request, connectTimeoutMs, open);
  };

  const transport = createTransport({
    httpClient,
    baseUrl: BASE_URL,
    useBinaryFormat: true,
    interceptors: [],
    // No compression: a local socket gains nothing, and zlib is start-up time.
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes,
    writeMaxBytes: readMaxBytes,
  });

  return {
    socketPath,
    transport,
    close() {
      if (isClosed) return;
      isClosed = true;
      for (const request of [...open]) request.destroy(closedError());
    },
  };
}

/** One HTTP/1.1 request on its own connection; resolves when the response headers arrive. */
function send(socketPath: string, request: UniversalClientRequest, connectTimeoutMs: number, open: Set<http.ClientRequest>): Promise<UniversalClientResponse> {
  return new Promise((resolve, reject) => {
    const { signal } = request;
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const url = new URL(request.url);
    const headers: Record<string, string> = {};
    request.header.forEach((value, key) => (headers[key] = value));
    // node:http's agent reads `servername` (its types only declare it for https).
    const options: http.RequestOptions & { servername: string } = {
      socketPath,
      method: request.method,
      path: url.pathname + url.search,
      headers,
      agent: false,
      maxHeaderSize: MAX_HEADER_BYTES,
      // Only TLS reads a servername. Left unset, node:http's agent derives one from
      // the host and tests it with net.isIP, whose first use compiles the IPv6
      // pattern, a visible part of a status command's start
      // (docs/performance.md, "Costs behind choices in the code").
      servername: "",
    };
    const outgoing = http.request(options);
    open.add(outgoing);
    let connected = false;
    let answered = false;

    const connectTimer = setTimeout(() => {
      const message = `no connection to ${socketPath} within ${connectTimeoutMs} ms (connect timeout)`;
      outgoing.destroy(transportError("deadline", message, Code.DeadlineExceeded));
    }, connectTimeoutMs);
    const onAbort = () => outgoing.destroy(signal?.reason instanceof Error ? signal.reason : new Error(String(signal?.reason)));
    signal?.addEventListener("abort", onAbort, { once: true });

    outgoing.once("socket", (socket) => {
      socket.once("connect", () => {
        connected = true;
        clearTimeout(connectTimer);
      });
    });
    outgoing.once("close", () => {
      clearTimeout(connectTimer);
      signal?.removeEventListener("abort", onAbort);
      open.delete(outgoing);
    });
    outgoing.on("error", (error) => {
      // After the response headers, the body's reader reports the failure.
      if (!answered) reject(requestFailure(socketPath, error, connected));
    });
    outgoing.once("response", (response) => {
      answered = true;
      resolve({
        status: response.statusCode ?? 0,
        header: headersOf(response.headers),
        body: readBody(socketPath, response, outgoing),
        // The Connect protocol sends no HTTP trailers (unary trailers are `trailer-` headers).
        trailer: new Headers(),
      });
    });

    writeBody(request.body, outgoing).catch((error: unknown) => outgoing.destroy(error instanceof Error ? error : new Error(String(error))));
  });
}

async function writeBody(body: AsyncIterable<Uint8Array> | undefined, outgoing: http.ClientRequest): Promise<void> {
  if (body !== undefined) {
    for await (const chunk of body) {
      if (outgoing.destroyed) return;
      if (!outgoing.write(chunk)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            outgoing.off("drain", done);
            outgoing.off("close", done);
            resolve();
          };
          outgoing.on("drain", done);
          outgoing.on("close", done);
        });
      }
    }
  }
  if (!outgoing.destroyed) outgoing.end();
}

/**
 * The response body; a connection that closes before the body's end is the
 * agent going away. The connection is closed however the reader stops.
 */
async function* readBody(socketPath: string, response: http.IncomingMessage, outgoing: http.ClientRequest): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of response as AsyncIterable<Buffer>) yield chunk;
    if (!response.complete) throw disconnected(socketPath);
  } catch (error) {
    if (error instanceof ConnectError || classifiedAs(error) !== undefined) throw error;
    throw disconnected(socketPath, error);
  } finally {
    outgoing.destroy();
  }
}

function disconnected(socketPath: string, cause?: unknown): ConnectError {
  return transportError("disconnected", `${socketPath} closed the connection during the call (the peer went away)`, Code.Unavailable, cause);
}

function headersOf(incoming: http.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(incoming)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(key, item);
  }
  return headers;
}

/** Names what went wrong before the response headers arrived. */
function requestFailure(socketPath: string, error: Error, connected: boolean): Error {
  if (error instanceof ConnectError || classifiedAs(error) !== undefined) return error;
  const code = (error as { code?: unknown }).code;
  if (code === "ENOENT") return transportError("missing", `no socket at ${socketPath}`, Code.Unavailable, error);
  if (code === "ECONNREFUSED") {
    const message = `connection refused by ${socketPath}: the socket file exists but nothing listens on it (stale socket)`;
    return transportError("stale", message, Code.Unavailable, error);
  }
  if (!connected) return transportError("status", `cannot connect to ${socketPath}: ${error.message}`, Code.Unavailable, error);
  if (code === "HPE_HEADER_OVERFLOW") {
    return transportError("oversize", `${socketPath} sent response headers over ${MAX_HEADER_BYTES} bytes`, Code.ResourceExhausted, error);
  }
  if (code?.toString().startsWith("HPE_")) {
    return transportError("not-grpc", `${socketPath} did not answer HTTP/1.1 (${error.message})`, Code.Unavailable, error);
  }
  return disconnected(socketPath, error);
}
