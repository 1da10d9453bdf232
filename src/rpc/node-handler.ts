/**
 * Connect's routes as a node:http/node:http2 request listener, as
 * @connectrpc/connect-node's connectNodeAdapter makes one, except for what
 * happens when a handler fails after its answer started (a client that went
 * away mid-stream, a broken pipe, a cancelled write): connectNodeAdapter
 * prints the error with console.error, a stack trace of many lines among
 * the agent's JSON log lines, once per failed call. Here each failure is
 * one record of edgeplug's logger, at most {@link FAILURE_LINES_PER_WINDOW}
 * per {@link FAILURE_WINDOW_MS}; the next one logged after that counts
 * those left out.
 */
import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, type ConnectNodeAdapterOptions, universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { Logger } from "../log/logger.ts";
import { peerMessageOf } from "../log/error-message.ts";

type NodeServerRequest = Parameters<typeof universalRequestFromNodeRequest>[0];
type NodeServerResponse = Parameters<typeof universalResponseToNodeResponse>[1];

/** A listener for node:http's and node:http2's `request` events. */
export type NodeRequestListener = (request: NodeServerRequest, response: NodeServerResponse) => void;

/** How many handler failures are logged in one window; the rest are counted. */
export const FAILURE_LINES_PER_WINDOW = 10;
export const FAILURE_WINDOW_MS = 60_000;

/** `options` as connectNodeAdapter takes them (no path prefix); `failures` logs handler failures. */
export function connectRequestListener(options: Omit<ConnectNodeAdapterOptions, "requestPathPrefix" | "fallback">, failures: HandlerFailureLog): NodeRequestListener {
  const router = createConnectRouter({ ...options, acceptCompression: options.acceptCompression ?? [compressionGzip, compressionBrotli] });
  options.routes(router);
  const byPath = new Map(router.handlers.map((handler) => [handler.requestPath, handler]));
  return (request, response) => {
    const handler = byPath.get((request.url ?? "").split("?", 1)[0]!);
    if (handler === undefined) {
      response.writeHead(404);
      response.end();
      return;
    }
    const universal = universalRequestFromNodeRequest(request, response, undefined, options.contextValues?.(request));
    handler(universal)
      .then((answer) => universalResponseToNodeResponse(answer, response))
      .catch((reason: unknown) => {
        // The call was cancelled (the client's deadline, or it went away): nothing failed here.
        if (ConnectError.from(reason).code === Code.Aborted) return;
        failures.failed(`${handler.service.typeName}/${handler.method.name}`, reason);
      });
  };
}

/** Logs handler failures as single records, a bounded number per window. */
export class HandlerFailureLog {
  readonly #log: Logger;
  readonly #now: () => number;
  #windowStart = -Infinity;
  #logged = 0;
  #left = 0;

  constructor(log: Logger, now: () => number = () => performance.now()) {
    this.#log = log;
    this.#now = now;
  }

  failed(rpc: string, reason: unknown): void {
    const now = this.#now();
    if (now - this.#windowStart >= FAILURE_WINDOW_MS) {
      this.#windowStart = now;
      this.#logged = 0;
    }
    if (this.#logged >= FAILURE_LINES_PER_WINDOW) {
      this.#left++;
      return;
    }
    this.#logged++;
    const notLogged = this.#left;
    this.#left = 0;
    this.#log.warn("rpc handler failed", { rpc, error: peerMessageOf(reason), ...(notLogged > 0 ? { notLogged } : {}) });
  }
}
