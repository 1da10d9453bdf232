/**
 * Tells apart the ways a call to a plugin socket can fail, so that callers can
 * report a stale socket differently from a slow or broken plugin.
 */
import { Code, ConnectError } from "@connectrpc/connect";

export const RPC_FAILURES = [
  /** No file at the socket path. */
  "missing",
  /** The path exists but nothing accepts connections: a plugin died and left its socket. */
  "stale",
  /** The call's deadline (or the connect timeout) elapsed. */
  "deadline",
  /** The caller aborted, or closed the channel under the call. */
  "canceled",
  /**
   * The peer accepted the connection but did not speak gRPC over HTTP/2: another
   * protocol, an HTTP error status or content type, or malformed gRPC frames
   * (Connect's "protocol error").
   */
  "not-grpc",
  /**
   * The connection or the call's stream broke after the HTTP/2 handshake, before
   * the call finished (no gRPC status arrived): the peer went away.
   */
  "disconnected",
  /** Anything else; usually the peer answered with a gRPC error status. */
  "status",
] as const;
export type RpcFailure = (typeof RPC_FAILURES)[number];

/** Where the transport records what it already knows about a failure it raised itself. */
const FAILURE_KIND = Symbol.for("edgeplug.rpcFailure");

/**
 * A ConnectError raised by edgeplug's own transport (src/rpc) whose kind is
 * known at the point of failure; {@link classifyRpcError} returns that kind.
 */
export function transportError(kind: RpcFailure, message: string, code: Code, cause?: unknown): ConnectError {
  const error = new ConnectError(message, code, undefined, undefined, cause);
  Object.defineProperty(error, FAILURE_KIND, { value: kind, enumerable: false });
  return error;
}

/** Classifies any error thrown by a Connect call over a unix socket. */
export function classifyRpcError(reason: unknown): RpcFailure {
  const chain = errorChain(reason);
  for (const link of chain) {
    const known = (link as { [FAILURE_KIND]?: RpcFailure })[FAILURE_KIND];
    if (known !== undefined) return known;
  }
  const nodeCodes = chain.map((link) => (link as { code?: unknown }).code).filter((c) => typeof c === "string");
  if (nodeCodes.includes("ENOENT")) return "missing";
  if (nodeCodes.includes("ECONNREFUSED")) return "stale";
  const error = ConnectError.from(reason);
  if (error.code === Code.DeadlineExceeded) return "deadline";
  if (error.code === Code.Canceled) return "canceled";
  if (error.metadata.has("grpc-status")) return "status";
  // An HTTP/2 answer that is not gRPC: an HTTP error status or another content type.
  if (/^(HTTP \d{3}$|unsupported content type)/.test(error.rawMessage)) return "not-grpc";
  // A gRPC response cut off before its status: the peer closed the connection mid-call.
  if (error.rawMessage.startsWith("protocol error: missing status")) return "disconnected";
  // connect-node's words for a stream the peer ended before answering (Deno reports a dropped session so).
  if (/^http\/2 stream closed with error code .* before the response was received$/.test(error.rawMessage)) return "disconnected";
  // Any other protocol error of Connect's client: the answer broke gRPC's framing rules.
  if (error.rawMessage.startsWith("protocol error:")) return "not-grpc";
  if (nodeCodes.some((c) => /^(ECONNRESET|EPIPE|ERR_HTTP2_)/.test(c))) return "disconnected";
  return "status";
}

function errorChain(reason: unknown): object[] {
  const chain: object[] = [];
  let current: unknown = reason;
  while (typeof current === "object" && current !== null && !chain.includes(current)) {
    chain.push(current);
    current = (current as { cause?: unknown }).cause;
  }
  return chain;
}
