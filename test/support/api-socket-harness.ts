/**
 * What the API socket tests share: a stub Agent served on a socket in a
 * fresh directory (closed after the test), and an HTTP/1.1 POST over it.
 */
import type { TestContext } from "node:test";
import * as http from "node:http";
import * as path from "node:path";
import type { Duplex } from "node:stream";
import { create } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { Agent, EventSchema, StatusResponseSchema } from "../../src/gen/edgeplug/v1/agent_pb.ts";
import { serveApiSocket } from "../../src/api/agent-socket.ts";
import { createLogger } from "../../src/log/logger.ts";
import { tempDir } from "./temp-dir.ts";

export const quietLog = createLogger({ level: "error", write: () => {} });

/** A stub Agent: Status names the node; WatchEvents sends a snapshot, then waits for shutdown. */
export function stubAgent(options: { ignoreShutdown?: boolean } = {}) {
  return (router: ConnectRouter) =>
    router.service(Agent, {
      status: () => create(StatusResponseSchema, { ok: true, node: "stub-node" }),
      async *watchEvents(_request, context) {
        yield create(EventSchema, {
          sequence: 0n,
          kind: { case: "snapshot", value: create(StatusResponseSchema, { node: "stub-node" }) },
        });
        if (options.ignoreShutdown) await new Promise(() => {});
        await new Promise((resolve) => context.signal.addEventListener("abort", resolve, { once: true }));
        throw context.signal.reason;
      },
    });
}

export function socketDir(t: TestContext): string {
  return tempDir(t, "ep-api-");
}

export async function serve(t: TestContext, extra: Partial<Parameters<typeof serveApiSocket>[0]> = {}) {
  const socketPath = path.join(socketDir(t), "api.sock");
  const server = await serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog, ...extra });
  t.after(() => server.close());
  return server;
}

/** POSTs `body` over HTTP/1.1 to the unix socket; resolves with status, content type and body. */
export function postHttp1(socketPath: string, route: string, body: string, connection?: () => Duplex) {
  return new Promise<{ status: number; contentType: string; body: string }>((resolve, reject) => {
    const request = http.request(
      {
        socketPath,
        method: "POST",
        path: route,
        headers: { "content-type": "application/json" },
        // With an agent, node:http would ignore createConnection.
        ...(connection ? { createConnection: connection } : { agent: false }),
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, contentType: String(response.headers["content-type"]), body: text }));
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}
