/**
 * Unary gRPC calls made directly on an HTTP/2 stream, for the unix-socket
 * channel (unix-channel.ts). Connect's generic client runs every unary call
 * through abort-signal chains, web Headers and async-iterable pipelines; on
 * the registration path (dial, GetInfo, NotifyRegistrationStatus per
 * plugin) that machinery cost more CPU than the calls themselves. This path
 * does what a unary call needs and no more: one request frame, one response
 * frame read with a size limit, the status from the headers (trailers-only)
 * or the trailers, a deadline, an AbortSignal. Compression is neither
 * offered nor accepted, and there are no interceptors.
 *
 * Failures are ConnectErrors, classified like the rest of src/rpc
 * (see rpc-error.ts): an HTTP error status, another content type or a
 * malformed frame is `not-grpc`, a stream that ends without a status is
 * `disconnected`, the deadline is `deadline`, the caller's abort `canceled`,
 * and a status the peer sent keeps its code and message (`status`).
 */
import type * as http2 from "node:http2";
import { constants as h2constants } from "node:http2";
import { create, fromBinary, toBinary, type DescMessage, type DescMethodUnary, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { codeFromHttpStatus, findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { EDGEPLUG_VERSION } from "../platform/build-info.ts";
import { transportError } from "./rpc-error.ts";

/** Where the calls go: the channel owns the connection, this module only the streams. */
export interface UnaryTarget {
  /** Names the peer in error messages (the socket path). */
  readonly peer: string;
  /** Largest response message accepted, in bytes. */
  readonly readMaxBytes: number;
  /** Deadline for calls that pass no `timeoutMs`; undefined for none. */
  readonly defaultTimeoutMs: number | undefined;
  /** Opens a request stream with these headers, connecting first when needed. */
  openStream(headers: http2.OutgoingHttpHeaders): Promise<http2.ClientHttp2Stream>;
}

/** What Connect's clients pass as request headers (`headers` of the call options). */
type RequestHeaderInit = ConstructorParameters<typeof Headers>[0];

const USER_AGENT = `edgeplug/${EDGEPLUG_VERSION} (grpc unary)`;
const FRAME_HEADER_BYTES = 5;
/** The response content types of gRPC with the protobuf codec. */
const GRPC_PROTO_CONTENT_TYPE = /^application\/grpc(\+proto)?\s*(;.*)?$/i;
/** Request headers the protocol sets; a caller's value for one is ignored. */
const PROTOCOL_HEADERS = new Set([":method", ":path", ":scheme", ":authority", "content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"]);
/** HTTP/2 error codes (RFC 9113 section 7) by number, to name a reset stream in an error message. */
const H2_ERROR_NAMES = [
  "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR",
  "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
];

/**
 * Connect's `Transport.unary` for `target`: the call goes out as soon as a
 * stream is open and settles on the response's status, the deadline, or the
 * caller's signal, whichever comes first.
 */
export function createGrpcUnary(target: UnaryTarget): Transport["unary"] {
  return function unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: RequestHeaderInit | undefined,
    input: MessageInitShape<I>,
  ): Promise<UnaryResponse<I, O>> {
    // As Connect's transports: no timeout given means the default, zero or less means none.
    const deadlineMs = timeoutMs === undefined ? target.defaultTimeoutMs : timeoutMs <= 0 ? undefined : timeoutMs;
    return new Promise((resolve, reject) => callUnary(target, method, signal, deadlineMs, header, input, resolve, reject));
  };
}

/** One unary call; settles exactly once through `resolve` or `reject`. */
function callUnary<I extends DescMessage, O extends DescMessage>(
  target: UnaryTarget,
  method: DescMethodUnary<I, O>,
  signal: AbortSignal | undefined,
  deadlineMs: number | undefined,
  header: RequestHeaderInit | undefined,
  input: MessageInitShape<I>,
  resolve: (response: UnaryResponse<I, O>) => void,
  reject: (error: ConnectError) => void,
): void {
  const path = `/${method.parent.typeName}/${method.name}`;
  const { peer } = target;
  let settled = false;
  let stream: http2.ClientHttp2Stream | undefined;
  let timer: NodeJS.Timeout | undefined;
  let responseHeaders: http2.IncomingHttpHeaders | undefined;
  let responseTrailers: http2.IncomingHttpHeaders | undefined;
  let output: MessageShape<O> | undefined;
  const body = new FrameReader(target.readMaxBytes);

  const fail = (error: ConnectError) => {
    if (settled) return;
    settled = true;
    cleanUp();
    if (stream !== undefined && !stream.destroyed) {
      // RST_STREAM(CANCEL) tells the peer the call is over, as gRPC clients do on
      // a deadline or cancellation; destroy() drops whatever it still sends.
      stream.close(h2constants.NGHTTP2_CANCEL);
      stream.destroy();
    }
    reject(error);
  };
  const onAbort = () => fail(ConnectError.from(signal!.reason, Code.Canceled));
  const cleanUp = () => {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  };

  if (signal?.aborted) return onAbort();
  let request: Buffer;
  try {
    request = encodeFrame(toBinary(method.input, create(method.input, input)));
  } catch (error) {
    return reject(new ConnectError(`cannot encode the ${method.input.typeName} request of ${path}: ${messageOf(error)}`, Code.Internal, undefined, undefined, error));
  }
  signal?.addEventListener("abort", onAbort, { once: true });
  if (deadlineMs !== undefined) {
    timer = setTimeout(() => {
      fail(transportError("deadline", `${path}: no answer from ${peer} within ${deadlineMs} ms (the operation timed out)`, Code.DeadlineExceeded));
    }, deadlineMs);
  }

  const onResponse = (headers: http2.IncomingHttpHeaders) => {
    if (settled) return;
    responseHeaders = headers;
    // Node gives :status as a number, whatever its typings say.
    const status = Number(headers[":status"]);
    if (status !== 200) {
      const message = `${peer} answered ${path} with HTTP status ${status}, not a gRPC response`;
      return fail(transportError("not-grpc", message, codeFromHttpStatus(status)));
    }
    const contentType = headers["content-type"];
    if (contentType === undefined || !GRPC_PROTO_CONTENT_TYPE.test(contentType)) {
      const message = `${peer} answered ${path} with content type ${contentType ?? "(none)"}, not application/grpc: not a gRPC server`;
      return fail(transportError("not-grpc", message, Code.Unknown));
    }
    readMessages();
  };
  const onData = (chunk: Buffer) => {
    if (settled) return;
    body.push(chunk);
    // Deno's node:http2 may emit body data before "response": hold it until the headers say it is gRPC.
    if (responseHeaders !== undefined) readMessages();
  };
  const readMessages = () => {
    for (let payload = body.next(); payload !== undefined; payload = body.next()) {
      if (output !== undefined) {
        return fail(transportError("not-grpc", `${peer} sent more than one message in answer to the unary call ${path}`, Code.Internal));
      }
      try {
        output = fromBinary(method.output, payload);
      } catch (error) {
        const message = `cannot decode the ${method.output.typeName} answer of ${path} from ${peer}: ${messageOf(error)}`;
        return fail(new ConnectError(message, Code.Internal, undefined, undefined, error));
      }
    }
    const problem = body.problem();
    if (problem !== undefined) fail(frameError(problem, peer, path, target.readMaxBytes));
  };
  const onClose = () => {
    if (settled) return;
    const grpcStatus = responseTrailers?.["grpc-status"] ?? responseHeaders?.["grpc-status"];
    if (grpcStatus === undefined) return fail(unfinished(stream!, responseHeaders !== undefined, peer, path));
    if (grpcStatus !== "0") return fail(statusError(grpcStatus, responseHeaders!, responseTrailers));
    if (body.pendingBytes() > 0) {
      const problem = `the response ended inside a message frame (${body.pendingBytes()} bytes of it arrived)`;
      return fail(frameError({ malformed: problem }, peer, path, target.readMaxBytes));
    }
    if (output === undefined) {
      return fail(new ConnectError(`${peer} answered ${path} with status OK but no message`, Code.Internal, webHeaders(responseHeaders!, responseTrailers)));
    }
    settled = true;
    cleanUp();
    resolve(unaryResponse(method, output, responseHeaders!, responseTrailers));
  };

  const headers = requestHeaders(path, deadlineMs, header);
  target.openStream(headers).then(
    (opened) => {
      if (settled) {
        // The call ended (deadline, abort) while the connection was being made.
        opened.close(h2constants.NGHTTP2_CANCEL);
        opened.destroy();
        return;
      }
      stream = opened;
      opened.on("response", onResponse);
      opened.on("data", onData);
      opened.on("trailers", (trailers: http2.IncomingHttpHeaders) => (responseTrailers = trailers));
      opened.on("error", (error: Error) => fail(streamError(error, peer, path)));
      opened.on("close", onClose);
      opened.end(request);
    },
    (error: unknown) => fail(streamError(error, peer, path)),
  );
}

function requestHeaders(path: string, deadlineMs: number | undefined, header: RequestHeaderInit | undefined): http2.OutgoingHttpHeaders {
  const headers: http2.OutgoingHttpHeaders = { ":method": "POST", ":path": path };
  if (header !== undefined) {
    new Headers(header).forEach((value, key) => {
      if (!PROTOCOL_HEADERS.has(key)) headers[key] = value;
    });
  }
  headers["content-type"] = "application/grpc+proto";
  headers.te = "trailers";
  headers["user-agent"] ??= USER_AGENT;
  if (deadlineMs !== undefined) headers["grpc-timeout"] = grpcTimeout(deadlineMs);
  return headers;
}

/**
 * The `grpc-timeout` value for `ms`: at most 8 digits (the gRPC spec's
 * limit), in the finest unit that fits, rounded up.
 */
export function grpcTimeout(ms: number): string {
  const units: Array<[number, string]> = [
    [1, "m"],
    [1000, "S"],
    [60_000, "M"],
    [3_600_000, "H"],
  ];
  for (const [unitMs, unit] of units) {
    const value = Math.max(1, Math.ceil(ms / unitMs));
    if (value <= 99_999_999) return `${value}${unit}`;
  }
  return "99999999H";
}

/** The 5-byte gRPC frame header (uncompressed, length big-endian) followed by `message`. */
function encodeFrame(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + message.byteLength);
  frame[0] = 0;
  frame.writeUInt32BE(message.byteLength, 1);
  frame.set(message, FRAME_HEADER_BYTES);
  return frame;
}

/**
 * Splits the response body into gRPC message frames. Chunks are kept as they
 * arrive and joined only when a frame is complete, so a large message is not
 * copied once per chunk; a frame longer than the limit is refused from its
 * header, before its bytes are buffered.
 */
export class FrameReader {
  readonly #readMaxBytes: number;
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** The payload length of the frame being read; -1 while its header is incomplete. */
  #frameLength = -1;
  #problem: FrameProblem | undefined;

  constructor(readMaxBytes: number) {
    this.#readMaxBytes = readMaxBytes;
  }

  /** Adds a chunk of the body (dropped once the body is known to be bad). */
  push(chunk: Buffer): void {
    if (this.#problem !== undefined) return;
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    this.#readHeader();
  }

  /** The next complete message payload, or undefined until more bytes arrive. */
  next(): Buffer | undefined {
    if (this.#problem !== undefined || this.#frameLength < 0 || this.#buffered < this.#frameLength) return undefined;
    const payload = this.#take(this.#frameLength);
    this.#frameLength = -1;
    this.#readHeader();
    return payload;
  }

  /** What is wrong with the body, found while reading frame headers; reading stops there. */
  problem(): FrameProblem | undefined {
    return this.#problem;
  }

  /** Bytes of an incomplete frame (header or payload) held back. */
  pendingBytes(): number {
    return this.#buffered + (this.#frameLength >= 0 ? FRAME_HEADER_BYTES : 0);
  }

  #readHeader(): void {
    if (this.#problem !== undefined || this.#frameLength >= 0 || this.#buffered < FRAME_HEADER_BYTES) return;
    const head = this.#take(FRAME_HEADER_BYTES);
    const flags = head[0]!;
    const length = head.readUInt32BE(1);
    if (flags === 1) {
      this.#problem = { malformed: "a compressed message, though the request offered no compression" };
    } else if (flags !== 0) {
      this.#problem = { malformed: `a frame with flags 0x${flags.toString(16).padStart(2, "0")} (a gRPC message frame has 0x00 or 0x01)` };
    } else if (length > this.#readMaxBytes) {
      this.#problem = { oversizeBytes: length };
    } else {
      this.#frameLength = length;
    }
  }

  #take(bytes: number): Buffer {
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#buffered);
    const taken = all.subarray(0, bytes);
    const rest = all.subarray(bytes);
    this.#chunks = rest.length > 0 ? [rest] : [];
    this.#buffered -= bytes;
    return taken;
  }
}

/** A message too large to accept, or a body that is not gRPC framing. */
export type FrameProblem = { oversizeBytes: number } | { malformed: string };

function frameError(problem: FrameProblem, peer: string, path: string, readMaxBytes: number): ConnectError {
  if ("oversizeBytes" in problem) {
    // A limit of ours, not a fault of the peer: a status (resource exhausted), as gRPC clients report it.
    const message = `the answer of ${peer} to ${path} is ${problem.oversizeBytes} bytes, more than the ${readMaxBytes} bytes accepted (readMaxBytes)`;
    return new ConnectError(message, Code.ResourceExhausted);
  }
  return transportError("not-grpc", `${peer} sent a malformed gRPC response to ${path}: ${problem.malformed}`, Code.Internal);
}

/** Why a stream closed without a gRPC status: reset by the peer, closed before any response, or cut off. */
function unfinished(stream: http2.ClientHttp2Stream, responded: boolean, peer: string, path: string): ConnectError {
  const rstCode = stream.rstCode ?? h2constants.NGHTTP2_NO_ERROR;
  if (rstCode !== h2constants.NGHTTP2_NO_ERROR) {
    const name = H2_ERROR_NAMES[rstCode] ?? `0x${rstCode.toString(16)}`;
    const code = rstCode === h2constants.NGHTTP2_REFUSED_STREAM ? Code.Unavailable : rstCode === h2constants.NGHTTP2_CANCEL ? Code.Canceled : Code.Internal;
    return transportError("disconnected", `${peer} reset the stream of ${path} (HTTP/2 ${name}) before the call completed`, code);
  }
  if (!responded) {
    return transportError("disconnected", `${peer} closed the stream of ${path} before any response (the peer went away)`, Code.Unavailable);
  }
  return transportError("disconnected", `${peer} ended the answer to ${path} without a gRPC status: the response was cut off`, Code.Unavailable);
}

/** The error for a non-OK `grpc-status`, from the trailers or, in a trailers-only response, the headers. */
function statusError(grpcStatus: string | string[], headers: http2.IncomingHttpHeaders, trailers: http2.IncomingHttpHeaders | undefined): ConnectError {
  const metadata = webHeaders(headers, trailers);
  if (metadata.has("grpc-status-details-bin")) {
    // Rare (error details); Connect's own decoder reads them, message and code included.
    try {
      const detailed = findTrailerError(metadata);
      if (detailed !== undefined) return detailed;
    } catch {
      // Undecodable details: fall back to grpc-status and grpc-message.
    }
  }
  const text = String(grpcStatus);
  const code = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  const source = trailers?.["grpc-status"] !== undefined ? trailers : headers;
  const rawMessage = source["grpc-message"];
  const message = decodeGrpcMessage(typeof rawMessage === "string" ? rawMessage : "");
  const error =
    code >= 1 && code <= 16
      ? new ConnectError(message, code as Code, metadata)
      : new ConnectError(`invalid grpc-status ${JSON.stringify(text)}${message ? `: ${message}` : ""}`, Code.Unknown, metadata);
  error.isWireError = true;
  return error;
}

/**
 * Decodes a `grpc-message` value: percent-encoded UTF-8, as the gRPC spec
 * has it. A sequence that does not decode is kept as it came (a lone "%"),
 * and bytes that are not UTF-8 read as U+FFFD, so a peer's message is never
 * lost to a decoding error.
 */
export function decodeGrpcMessage(value: string): string {
  if (!value.includes("%")) return value;
  try {
    return decodeURIComponent(value);
  } catch {
    // Malformed for decodeURIComponent: decode what is a valid escape, byte by byte.
  }
  const bytes: number[] = [];
  for (let i = 0; i < value.length; i++) {
    const escape = value[i] === "%" ? value.slice(i + 1, i + 3) : "";
    if (/^[0-9a-fA-F]{2}$/.test(escape)) {
      bytes.push(Number.parseInt(escape, 16));
      i += 2;
    } else {
      // Header values reach us one byte per character (latin1).
      bytes.push(value.charCodeAt(i) & 0xff);
    }
  }
  return new TextDecoder().decode(Uint8Array.from(bytes));
}

/** A failure of the stream itself (or of opening it) as a ConnectError; the cause keeps Node's error code for classifyRpcError. */
function streamError(error: unknown, peer: string, path: string): ConnectError {
  if (error instanceof ConnectError) return error;
  return new ConnectError(`${path} on ${peer} failed: ${messageOf(error)}`, Code.Internal, undefined, undefined, error);
}

function unaryResponse<I extends DescMessage, O extends DescMessage>(
  method: DescMethodUnary<I, O>,
  message: MessageShape<O>,
  headers: http2.IncomingHttpHeaders,
  trailers: http2.IncomingHttpHeaders | undefined,
): UnaryResponse<I, O> {
  // Built on first use: callers rarely ask (onHeader / onTrailer), and web Headers are not cheap.
  let header: Headers | undefined;
  let trailer: Headers | undefined;
  return {
    stream: false,
    service: method.parent,
    method,
    message,
    get header() {
      return (header ??= webHeaders(headers, undefined));
    },
    get trailer() {
      return (trailer ??= webHeaders(trailers ?? {}, undefined));
    },
  };
}

/** Node's incoming headers (and trailers) as web Headers, without the HTTP/2 pseudo-headers. */
function webHeaders(headers: http2.IncomingHttpHeaders, trailers: http2.IncomingHttpHeaders | undefined): Headers {
  const result = new Headers();
  for (const source of trailers === undefined ? [headers] : [headers, trailers]) {
    for (const [key, value] of Object.entries(source)) {
      if (key.startsWith(":") || value === undefined) continue;
      if (Array.isArray(value)) for (const item of value) result.append(key, item);
      else result.append(key, String(value));
    }
  }
  return result;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
