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
  /** The peer answered with a message larger than the channel accepts (its readMaxBytes). */
  "oversize",
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
  return markFailure(new ConnectError(message, code, undefined, undefined, cause), kind);
}

/** Records on `error` the kind of failure the transport saw (call-observer.ts); returns it. */
export function markFailure<T>(error: T, kind: RpcFailure): T {
  if (typeof error === "object" && error !== null) Object.defineProperty(error, FAILURE_KIND, { value: kind, enumerable: false, configurable: true });
  return error;
}

/** Where the transport marks a failure of the dial itself (before the connection's HTTP/2 handshake). */
const DIAL_FAILURE = Symbol.for("edgeplug.dialFailure");

/** Marks `error` as the dial's failure: nothing of the call reached the peer. Returns it. */
export function markDialFailure<T>(error: T): T {
  if (typeof error === "object" && error !== null) Object.defineProperty(error, DIAL_FAILURE, { value: true, enumerable: false, configurable: true });
  return error;
}

/** True when `reason` (or its cause chain) is a failure of the dial, not of a call on a connection. */
export function failedToDial(reason: unknown): boolean {
  return errorChain(reason).some((link) => (link as { [DIAL_FAILURE]?: boolean })[DIAL_FAILURE] === true);
}

/** The kind the transport recorded anywhere in `reason`'s cause chain, if any. */
export function classifiedAs(reason: unknown): RpcFailure | undefined {
  for (const link of errorChain(reason)) {
    const known = (link as { [FAILURE_KIND]?: RpcFailure })[FAILURE_KIND];
    if (known !== undefined) return known;
  }
  return undefined;
}

/**
 * Classifies any error thrown by a Connect call over a unix socket, by what
 * the transport recorded (the unix channel tags its own failures and what
 * each call's stream showed), then by the Node error codes in the cause
 * chain and Connect's code. Never by message text.
 */
export function classifyRpcError(reason: unknown): RpcFailure {
  const known = classifiedAs(reason);
  if (known !== undefined) return known;
  const nodeCodes = errorChain(reason).map((link) => (link as { code?: unknown }).code).filter((c) => typeof c === "string");
  if (nodeCodes.includes("ENOENT")) return "missing";
  if (nodeCodes.includes("ECONNREFUSED")) return "stale";
  const error = ConnectError.from(reason);
  if (error.code === Code.DeadlineExceeded) return "deadline";
  if (error.code === Code.Canceled) return "canceled";
  if (error.metadata.has("grpc-status")) return "status";
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

/**
 * A failed call as a grpc-go client prints it, `rpc error: code = Unavailable
 * desc = ...`: what the kubelet's handlers pass on, and so what a plugin reads
 * inside a RegistrationStatus error. Connect's code names are grpc-go's.
 */
export function grpcStatusText(error: unknown): string {
  const connectError = ConnectError.from(error);
  return `rpc error: code = ${Code[connectError.code]} desc = ${connectError.rawMessage}`;
}
