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
  /** The caller aborted. */
  "canceled",
  /** The peer accepted the connection but did not speak gRPC over HTTP/2. */
  "not-grpc",
  /** The peer answered with a gRPC error status. */
  "status",
] as const;
export type RpcFailure = (typeof RPC_FAILURES)[number];

/** Classifies any error thrown by a Connect call over a unix socket. */
export function classifyRpcError(reason: unknown): RpcFailure {
  const error = ConnectError.from(reason);
  const nodeCode = findNodeErrorCode(reason);
  if (nodeCode === "ENOENT") return "missing";
  if (nodeCode === "ECONNREFUSED") return "stale";
  if (error.code === Code.DeadlineExceeded) return "deadline";
  if (error.code === Code.Unavailable && /timed out/i.test(error.rawMessage)) return "deadline";
  if (error.code === Code.Canceled) return "canceled";
  if (looksLikeProtocolFailure(error, nodeCode)) return "not-grpc";
  return "status";
}

function looksLikeProtocolFailure(error: ConnectError, nodeCode: string | undefined): boolean {
  if (nodeCode !== undefined && /^(ERR_HTTP2_|ECONNRESET|EPIPE|HPE_)/.test(nodeCode)) return true;
  // Connect reports a response without a gRPC content type or trailers this way.
  return /unexpected (content type|http status)|missing trailer|protocol error|invalid grpc/i.test(
    error.rawMessage,
  );
}

function findNodeErrorCode(reason: unknown): string | undefined {
  const seen = new Set<unknown>();
  let current: unknown = reason;
  while (current instanceof Error && !seen.has(current)) {
    seen.add(current);
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string") return code;
    current = current.cause;
  }
  return undefined;
}
