/**
 * Ending one server stream at once from its handler, whatever its client
 * is doing: a WatchEvents stream whose client stopped reading cannot be
 * ended by an answer (the write it would take is the one that is stuck), so
 * its HTTP/2 stream is reset (CANCEL), or its HTTP/1.1 connection closed,
 * and what it held is dropped (src/api/event-stream.ts).
 */
import * as http2 from "node:http2";
import { createContextKey } from "@connectrpc/connect";
import type { ServerRequest } from "./connection-guard.ts";

/** The call's way to be cut off, for the handlers of long streams; null where the call was not made on the API socket. */
export const streamCutOffKey = createContextKey<(() => void) | null>(null, { description: "edgeplug stream cut-off" });

/** Resets the stream `request` came on (HTTP/2), or closes its connection (HTTP/1.1). */
export function cutOffOf(request: ServerRequest): () => void {
  return () => {
    if ("stream" in request) request.stream.close(http2.constants.NGHTTP2_CANCEL);
    else request.socket.destroy();
  };
}
