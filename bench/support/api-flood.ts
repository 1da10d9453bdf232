/**
 * A flood client for bench/api.ts, forked as a process of its own so the
 * flood is not limited by the bench's event loop. Told over IPC where and
 * how to flood, it calls Status as fast as answers come for `durationMs` and
 * replies with what it was answered and how fast.
 *
 * Modes: `keepalive` (HTTP/1.1 JSON, one request at a time on each of
 * `connections` kept-alive sockets), `per-request` (HTTP/1.1, a new
 * connection for every request), `grpc` (one HTTP/2 connection per
 * `connections`, 20 calls in flight on each).
 */
import * as http from "node:http";
import process from "node:process";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Agent } from "../../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../../src/rpc/unix-channel.ts";

export type FloodMode = "keepalive" | "per-request" | "grpc";

export interface FloodRequest {
  socket: string;
  mode: FloodMode;
  connections: number;
  durationMs: number;
}

export interface FloodReply {
  ok: number;
  limited: number;
  failed: number;
  /** Latency of every answered request (ok or limited), milliseconds. */
  latenciesMs: number[];
  firstError: string | null;
}

const GRPC_IN_FLIGHT = 20;

function postStatus(socketPath: string, agent: http.Agent | false): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { socketPath, agent, method: "POST", path: "/edgeplug.v1.Agent/Status", headers: { "content-type": "application/json" } },
      (response) => {
        response.resume();
        response.on("end", () => resolve(response.statusCode ?? 0));
      },
    );
    request.on("error", reject);
    request.end("{}");
  });
}

async function flood(request: FloodRequest): Promise<FloodReply> {
  const reply: FloodReply = { ok: 0, limited: 0, failed: 0, latenciesMs: [], firstError: null };
  const until = performance.now() + request.durationMs;
  const record = (startedAt: number, outcome: "ok" | "limited" | "failed", error?: unknown) => {
    reply[outcome]++;
    if (outcome === "failed") reply.firstError ??= String((error as Error)?.message ?? error);
    else reply.latenciesMs.push(performance.now() - startedAt);
  };
  const http1Loop = async (agent: http.Agent | false) => {
    while (performance.now() < until) {
      const startedAt = performance.now();
      try {
        const status = await postStatus(request.socket, agent);
        record(startedAt, status === 200 ? "ok" : status === 429 ? "limited" : "failed", `HTTP ${status}`);
      } catch (error) {
        record(startedAt, "failed", error);
      }
    }
  };
  const grpcConnection = async () => {
    await using channel = dialUnix(request.socket);
    const client = createClient(Agent, channel.transport);
    const caller = async () => {
      while (performance.now() < until) {
        const startedAt = performance.now();
        try {
          await client.status({});
          record(startedAt, "ok");
        } catch (error) {
          const limited = ConnectError.from(error).code === Code.ResourceExhausted;
          record(startedAt, limited ? "limited" : "failed", error);
        }
      }
    };
    await Promise.all(Array.from({ length: GRPC_IN_FLIGHT }, caller));
  };
  const agents: http.Agent[] = [];
  const loops = Array.from({ length: request.connections }, () => {
    if (request.mode === "grpc") return grpcConnection();
    if (request.mode === "per-request") return http1Loop(false);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    agents.push(agent);
    return http1Loop(agent);
  });
  await Promise.all(loops);
  for (const agent of agents) agent.destroy();
  return reply;
}

// Loaded and ready: the flood starts, and its clock with it, when the request arrives.
process.send!({ ready: true });
process.once("message", (request: FloodRequest) => {
  flood(request).then(
    (reply) => process.send!(reply, () => process.disconnect()),
    (error: unknown) => {
      process.stderr.write(`api-flood: ${String(error)}\n`);
      process.exit(1);
    },
  );
});
