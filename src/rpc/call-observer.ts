/**
 * What the peer did on each call's HTTP/2 stream, so that a failed call is
 * classified by what happened on the wire (an answer or none, gRPC or not,
 * a status or none) rather than by the words of Connect's error messages.
 * The unix channel reports each stream it opens ({@link observeStream});
 * {@link callObserver}, a Connect interceptor, tags the call's error.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type * as http2 from "node:http2";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { classifiedAs, markFailure, type RpcFailure } from "./rpc-error.ts";

interface StreamFacts {
  /** The call got a stream on a live connection. */
  opened: boolean;
  /** The response headers: whether they said gRPC (HTTP 200, a gRPC content type). */
  answer?: "grpc" | "other";
  /** A grpc-status arrived (in the headers or the trailers). */
  status: boolean;
}

const currentCall = new AsyncLocalStorage<StreamFacts>();

/** Records what the peer does on `stream` for the call that opened it (called by the channel's session manager). */
export function observeStream(stream: http2.ClientHttp2Stream): void {
  const facts = currentCall.getStore();
  if (!facts) return;
  facts.opened = true;
  stream.once("response", (headers) => {
    const contentType = String(headers["content-type"] ?? "");
    facts.answer = headers[":status"] === 200 && /^application\/grpc(\+|;|$)/.test(contentType) ? "grpc" : "other";
    if (headers["grpc-status"] !== undefined) facts.status = true;
  });
  stream.once("trailers", (trailers) => {
    if (trailers["grpc-status"] !== undefined) facts.status = true;
  });
}

/** Tags every failed call (unary, or a stream's messages) with what its stream showed. */
export const callObserver: Interceptor = (next) => async (request) => {
  const facts: StreamFacts = { opened: false, status: false };
  try {
    const response = await currentCall.run(facts, () => next(request));
    return response.stream ? { ...response, message: tagged(response.message, facts) } : response;
  } catch (error) {
    throw tag(error, facts);
  }
};

async function* tagged<T>(messages: AsyncIterable<T>, facts: StreamFacts): AsyncGenerator<T> {
  try {
    yield* messages;
  } catch (error) {
    throw tag(error, facts);
  }
}

function tag(error: unknown, facts: StreamFacts): unknown {
  const kind = classifiedAs(error) === undefined ? wireFailure(error, facts) : undefined;
  if (kind !== undefined) markFailure(error, kind);
  return error;
}

/** What the stream says about a failed call, when it says more than the error's code and cause. */
function wireFailure(error: unknown, facts: StreamFacts): RpcFailure | undefined {
  // Never reached the peer (the dial failed; the cause says why), or ended by a deadline or by us.
  if (!facts.opened || !(error instanceof ConnectError)) return undefined;
  if (error.code === Code.DeadlineExceeded || error.code === Code.Canceled) return undefined;
  // A status the peer sent is its answer.
  if (error.metadata.has("grpc-status")) return "status";
  if (facts.answer === undefined) return "disconnected";
  if (facts.answer === "other") return "not-grpc";
  // Connect refused a message larger than the channel's readMaxBytes.
  if (error.code === Code.ResourceExhausted) return "oversize";
  return facts.status ? "not-grpc" : "disconnected";
}
