/**
 * Issue 7, defect 3: what a hostile local client can no longer do to the API
 * socket and the metrics port. Slow-header HTTP/1.1 and silent HTTP/2
 * connections are closed, the connection cap holds and frees nothing it
 * should keep, and huge request bodies are refused without being read.
 * Deadlines are shortened per test; the defaults are in src/server/limits.ts.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { serveApiSocket } from "../src/api/agent-socket.ts";
import { API_SOCKET_LIMITS, type ListenerLimits } from "../src/server/limits.ts";
import { createMetrics, serveMetricsEndpoint } from "../src/api/metrics.ts";
import { Agent, StatusResponseSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import { edgeplugV1, serviceOf } from "./support/kubelet-protos.ts";
import { tempDir } from "./support/temp-dir.ts";
import { waitUntil } from "./support/wait.ts";

const quietLog = createLogger({ level: "error", write: () => {} });
const HTTP2_PREFACE = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const routes = (router: ConnectRouter) => router.service(Agent, { status: () => create(StatusResponseSchema, { ok: true, node: "limits-node" }) });

async function serve(t: TestContext, limits: Partial<ListenerLimits> = {}) {
  const socketPath = path.join(tempDir(t), "api.sock");
  const server = await serveApiSocket({ socketPath, routes, log: quietLog, limits: { ...API_SOCKET_LIMITS, ...limits } });
  t.after(() => server.close());
  return server;
}

/** A raw connection and the time it was closed by the other side (resolves on close). */
async function connect(target: string | { port: number; host: string }) {
  const socket = typeof target === "string" ? net.connect(target) : net.connect(target.port, target.host);
  socket.on("error", () => {});
  let received = "";
  socket.setEncoding("latin1").on("data", (chunk: string) => (received += chunk));
  // Not events.once: it would reject on the EPIPE a refused sender is meant to meet.
  const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(performance.now())));
  await once(socket, "connect");
  return { socket, closed, received: () => received };
}

test("an HTTP/1.1 client that sends its headers a byte at a time is cut off at the idle deadline", async (t) => {
  const server = await serve(t, { idleTimeoutMs: 300 });
  const client = await connect(server.socketPath);
  const openedAt = performance.now();
  client.socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\n");
  // One header byte every 20 ms: activity all along, never a complete request.
  const dribble = setInterval(() => client.socket.write("X"), 20);
  t.after(() => clearInterval(dribble));
  const closedAt = await client.closed;
  clearInterval(dribble);
  assert.ok(closedAt - openedAt >= 250, `closed after ${closedAt - openedAt} ms, before the deadline`);
  await waitUntil(() => server.connections === 0, "the server to forget the connection", 5_000);
});

test("an HTTP/2 client silent after the preface, and one idle after its call, are closed", async (t) => {
  const server = await serve(t, { idleTimeoutMs: 300 });
  const silent = await connect(server.socketPath);
  silent.socket.write(HTTP2_PREFACE);
  await silent.closed;

  // A real gRPC client: its call succeeds, then its idle connection is closed by the server.
  const Client = grpc.makeClientConstructor(serviceOf(edgeplugV1(), "Agent").service, "Agent");
  const client = new Client(`unix:${server.socketPath}`, grpc.credentials.createInsecure()) as unknown as {
    status(request: object, callback: (error: grpc.ServiceError | null, response: { node: string }) => void): void;
    close(): void;
  };
  t.after(() => client.close());
  const answer = await new Promise<{ node: string }>((resolve, reject) => client.status({}, (error, response) => (error ? reject(error) : resolve(response))));
  assert.equal(answer.node, "limits-node");
  assert.equal(server.connections, 1);
  await waitUntil(() => server.connections === 0, "the idle gRPC connection to be closed", 5_000);
});

test("a keep-alive HTTP/1.1 connection is closed once idle after its response", async (t) => {
  const server = await serve(t, { idleTimeoutMs: 300 });
  const client = await connect(server.socketPath);
  client.socket.write("GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n");
  await client.closed;
  assert.match(client.received(), /^HTTP\/1\.1 404/);
});

test("past the connection cap new connections are closed at once, the admitted ones keep working", async (t) => {
  const server = await serve(t, { maxConnections: 4 });
  const admitted = await Promise.all([1, 2, 3, 4].map(() => connect(server.socketPath)));
  await waitUntil(() => server.connections === 4, "four admitted connections", 5_000);
  const refused = await Promise.all([1, 2, 3].map(() => connect(server.socketPath)));
  await Promise.all(refused.map((client) => client.closed));
  assert.equal(server.connections, 4);

  // An admitted connection still gets answers; once one closes, a newcomer is admitted.
  admitted[0]!.socket.write("POST /edgeplug.v1.Agent/Status HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  await waitUntil(() => admitted[0]!.received().includes("limits-node"), "a Status answer on an admitted connection", 5_000);
  admitted[1]!.socket.destroy();
  await waitUntil(() => server.connections === 3, "the closed connection to be forgotten", 5_000);
  const newcomer = await connect(server.socketPath);
  newcomer.socket.write("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  await waitUntil(() => newcomer.received().startsWith("HTTP/1.1 404"), "an answer to the newcomer", 5_000);
  for (const client of [...admitted, newcomer]) client.socket.destroy();
});

/**
 * Sends a POST declaring (or, chunked, not declaring) a 1 GiB body as fast as
 * the server takes it, until the server answers or closes; returns what was
 * sent and answered.
 */
async function floodBody(socketPath: string, route: string, declareLength: boolean) {
  const client = await connect(socketPath);
  const framing = declareLength ? `Content-Length: ${2 ** 30}` : "Transfer-Encoding: chunked";
  client.socket.write(`POST ${route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`);
  const chunk = Buffer.alloc(1024 * 1024, 0x20);
  const frame = declareLength ? chunk : Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]);
  let sent = 0;
  let closed = false;
  void client.closed.then(() => (closed = true));
  while (!closed && sent < 2 ** 30) {
    if (!client.socket.write(frame)) await Promise.race([new Promise((resolve) => client.socket.once("drain", resolve)), client.closed]);
    sent += chunk.length;
  }
  await client.closed;
  return { sent, answer: client.received() };
}

test("a 1 GiB request body is refused without being read, declared or chunked, and memory stays flat", async (t) => {
  const server = await serve(t);
  const rssBefore = process.memoryUsage().rss;

  const declared = await floodBody(server.socketPath, "/edgeplug.v1.Agent/Status", true);
  assert.match(declared.answer, /^HTTP\/1\.1 413 /);
  assert.match(declared.answer, /larger than the limit of 4194304 bytes/);
  assert.ok(declared.sent < 64 * 2 ** 20, `the server read ${declared.sent} bytes of a refused body`);

  const chunked = await floodBody(server.socketPath, "/edgeplug.v1.Agent/Status", false);
  assert.ok(chunked.sent < 64 * 2 ** 20, `the server read ${chunked.sent} bytes of a chunked body`);
  // Connect answers resource_exhausted (HTTP 429) once the body passes readMaxBytes, unless the reset won the race.
  if (chunked.answer !== "") assert.match(chunked.answer, /^HTTP\/1\.1 429 [\s\S]*resource_exhausted/);

  const grown = process.memoryUsage().rss - rssBefore;
  assert.ok(grown < 48 * 2 ** 20, `RSS grew by ${Math.round(grown / 2 ** 20)} MiB`);
});

test("a gRPC message over the limit gets RESOURCE_EXHAUSTED and the connection stays usable", async (t) => {
  const server = await serve(t, { maxRequestBodyBytes: 64 * 1024 });
  const Client = grpc.makeClientConstructor(serviceOf(edgeplugV1(), "Agent").service, "Agent");
  const client = new Client(`unix:${server.socketPath}`, grpc.credentials.createInsecure()) as unknown as {
    status(request: object, callback: (error: grpc.ServiceError | null, response: { node: string }) => void): void;
    allocate(request: object, callback: (error: grpc.ServiceError | null) => void): void;
    close(): void;
  };
  t.after(() => client.close());
  const refusal = await new Promise<grpc.ServiceError | null>((resolve) => client.allocate({ owner: "x".repeat(100 * 1024) }, (error) => resolve(error)));
  assert.equal(refusal?.code, grpc.status.RESOURCE_EXHAUSTED);
  const answer = await new Promise<{ node: string }>((resolve, reject) => client.status({}, (error, response) => (error ? reject(error) : resolve(response))));
  assert.equal(answer.node, "limits-node");
});

test("the metrics port caps its connections and closes slow-header clients", async (t) => {
  const metrics = createMetrics({ plugins: () => [], processMetrics: false });
  const endpoint = await serveMetricsEndpoint({
    address: "127.0.0.1:0",
    metrics,
    log: quietLog,
    limits: { maxConnections: 3, idleTimeoutMs: 300, requestBodyTimeoutMs: 300, maxRequestBodyBytes: 1024 },
  });
  t.after(async () => {
    await endpoint.close();
    metrics.close();
  });
  const address = { port: endpoint.port, host: "127.0.0.1" };
  const held = await Promise.all([1, 2, 3].map(() => connect(address)));
  for (const client of held) client.socket.write("GET /metrics HTTP/1.1\r\nHost: x\r\n");
  const refused = await connect(address);
  await refused.closed;
  assert.equal(refused.received(), "");
  // The three never finish their headers: each is closed at the deadline, freeing room for scrapes.
  await Promise.all(held.map((client) => client.closed));
  const scrape = await fetch(`${endpoint.url}/metrics`);
  assert.equal(scrape.status, 200);
  await scrape.text();
});
