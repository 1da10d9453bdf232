/**
 * The HTTP endpoint on `api.metrics`: `/metrics` (Prometheus text),
 * `/healthz` and `/readyz`, held to METRICS_LISTENER_LIMITS (connection cap,
 * idle and header deadline, no request bodies to speak of).
 */
import * as http from "node:http";
import type * as net from "node:net";
import type { Logger } from "../log/logger.ts";
import { ConnectionGuard, type GuardAction } from "../server/connection-guard.ts";
import { type Health, serveHealthRequest } from "./health.ts";
import { type ListenerLimits, METRICS_LISTENER_LIMITS } from "../server/limits.ts";
import type { AgentMetrics } from "./metrics.ts";

export interface MetricsEndpointOptions {
  /** api.metrics: `host:port`, `[v6 address]:port`, or `:port` for every interface; port 0 picks one. */
  address: string;
  metrics: AgentMetrics;
  health?: Health;
  log: Logger;
  /** Connection and request limits (default METRICS_LISTENER_LIMITS). */
  limits?: ListenerLimits;
  /** Told of every connection or request the limits refused or ended. */
  onLimit?: (action: GuardAction) => void;
}

export interface MetricsEndpoint extends AsyncDisposable {
  /** Where it listens, with the port actually bound. */
  readonly host: string;
  readonly port: number;
  /** e.g. http://127.0.0.1:9478 */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves `/metrics` (Prometheus text), `/healthz` and `/readyz` on `address`.
 * Rejects with an Error naming api.metrics and the address when it cannot
 * listen (port in use, no such local address, permission denied).
 */
export async function serveMetricsEndpoint(options: MetricsEndpointOptions): Promise<MetricsEndpoint> {
  const { host, port } = parseListenAddress(options.address);
  const { metrics, health, log } = options;
  const limits = options.limits ?? METRICS_LISTENER_LIMITS;
  const guard = new ConnectionGuard("metrics endpoint", limits, log, options.onLimit);
  const server = http.createServer((request, response) => {
    if (!guard.checkRequest(request, response)) return;
    if (request.method !== "GET" && request.method !== "HEAD") {
      response.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8" });
      response.end("method not allowed\n");
      return;
    }
    if (health && serveHealthRequest(health, request, response)) return;
    const pathname = new URL(request.url ?? "/", "http://localhost").pathname;
    if (pathname !== "/metrics") {
      response.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
      response.end("not found: try /metrics, /healthz or /readyz\n");
      return;
    }
    metrics.registry.metrics().then(
      (text) => {
        response.writeHead(200, { "content-type": metrics.registry.contentType, "cache-control": "no-store" });
        response.end(request.method === "HEAD" ? undefined : text);
      },
      (error: unknown) => {
        log.warn("collecting metrics failed", { error });
        response.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
        response.end(`collecting metrics failed: ${(error as Error).message}\n`);
      },
    );
  });
  server.on("connection", (socket: net.Socket) => {
    if (guard.admit(socket)) guard.trackHttp1(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error) => reject(describeListenError(options.address, error)));
    server.listen({ host, port }, () => resolve());
  });
  server.on("error", (error) => log.warn("metrics endpoint error", { error }));
  const bound = server.address() as { address: string; port: number };
  const shownHost = bound.address.includes(":") ? `[${bound.address}]` : bound.address;
  const url = `http://${shownHost}:${bound.port}`;
  log.info("metrics endpoint serving", { url });

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    return closing;
  };
  return { host: bound.address, port: bound.port, url, close, [Symbol.asyncDispose]: close };
}

/** Splits api.metrics into host and port; throws naming the setting on anything else. */
export function parseListenAddress(address: string): { host: string | undefined; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$/.exec(address);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) {
    throw new Error(`api.metrics: expected host:port like "127.0.0.1:9478", got ${JSON.stringify(address)}`);
  }
  const host = match[1] ?? match[2];
  return { host: host === "" ? undefined : host, port };
}

function describeListenError(address: string, error: Error): Error {
  const code = (error as { code?: string }).code;
  const why = code === "EADDRINUSE"
    ? "the address is already in use"
    : code === "EADDRNOTAVAIL" || code === "ENOTFOUND"
    ? "no such local address"
    : code === "EACCES"
    ? "permission denied"
    : error.message;
  return new Error(`api.metrics: cannot listen on ${address}: ${why}`, { cause: error });
}
