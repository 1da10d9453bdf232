/**
 * The CLI's Connect client over HTTP/1.1 on a unix socket
 * (src/rpc/unix-http1-transport.ts) against a real Connect server and
 * against servers that misbehave: an answer over the size limit, a
 * connection closed mid-answer, a server that never answers, a missing
 * socket, and close() during a call. Each case also checks that the
 * client's connection is gone afterwards, as the server sees it.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import type * as net from "node:net";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Agent, EventSchema, StatusResponseSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { LightHeaders } from "../src/cli/light-headers.ts";
import { classifyRpcError } from "../src/rpc/rpc-error.ts";
import { dialUnixHttp1 } from "../src/rpc/unix-http1-transport.ts";
import { tempDir } from "./support/temp-dir.ts";
import { connectRejection } from "./support/rejection.ts";
import { waitUntil } from "./support/wait.ts";

/** An HTTP/1.1 server on a fresh unix socket that records its connections; closed after the test. */
async function serve(t: TestContext, handler: http.RequestListener) {
  const socketPath = path.join(tempDir(t, "ep-h1-"), "api.sock");
  const server = http.createServer(handler);
  const connections = new Set<net.Socket>();
  let opened = 0;
  server.on("connection", (socket: net.Socket) => {
    opened++;
    connections.add(socket);
    socket.once("close", () => connections.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  t.after(async () => {
    for (const socket of connections) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    socketPath,
    opened: () => opened,
    /** Resolves once the server has seen every client connection close. */
    allClosed: () => waitUntil(() => opened > 0 && connections.size === 0, "the client's connection to close"),
  };
}

test("a unary call and a server stream reach a Connect server over HTTP/1.1, with the CLI's Headers as the global", async (t) => {
  const realHeaders = globalThis.Headers;
  globalThis.Headers = LightHeaders;
  t.after(() => (globalThis.Headers = realHeaders));
  const server = await serve(
    t,
    connectNodeAdapter({
      grpc: false,
      grpcWeb: false,
      routes: (router) =>
        router.service(Agent, {
          status: (_request, context) => {
            context.responseHeader.set("x-seen-agent", context.requestHeader.get("user-agent") ?? "none");
            return { ok: true, node: "node-a" };
          },
          async *watchEvents() {
            yield { sequence: 1n };
            yield { sequence: 2n };
          },
        }),
    }) as http.RequestListener,
  );
  const channel = dialUnixHttp1(server.socketPath, { connectTimeoutMs: 5000 });
  t.after(() => channel.close());
  const client = createClient(Agent, channel.transport);

  let seenHeader: string | null = null;
  const status = await client.status({}, { timeoutMs: 5000, onHeader: (header) => (seenHeader = header.get("x-seen-agent")) });
  assert.equal(status.ok, true);
  assert.equal(status.node, "node-a");
  assert.match(seenHeader ?? "", /connect-es/);

  const sequences: bigint[] = [];
  for await (const event of client.watchEvents({})) sequences.push(event.sequence);
  assert.deepEqual(sequences, [1n, 2n]);
  await server.allClosed();
  assert.equal(server.opened(), 2, "one connection per call");
});

test("an answer larger than readMaxBytes fails as resource_exhausted and its connection is closed", async (t) => {
  const big = toBinary(StatusResponseSchema, create(StatusResponseSchema, { node: "n".repeat(4096) }));
  const server = await serve(t, (_request, response) => {
    response.writeHead(200, { "content-type": "application/proto" });
    // Without a content-length, so the limit must hold while reading, not only from the header.
    response.write(big.subarray(0, 2048));
    response.write(big.subarray(2048));
    // The response never ends: the client has to give up on its own.
  });
  const channel = dialUnixHttp1(server.socketPath, { readMaxBytes: 1024 });
  t.after(() => channel.close());
  const error = await connectRejection(createClient(Agent, channel.transport).status({}, { timeoutMs: 10_000 }));
  assert.equal(error.code, Code.ResourceExhausted);
  await server.allClosed();
});

test("an agent that closes the connection mid-answer is told apart as disconnected", async (t) => {
  const event = toBinary(EventSchema, create(EventSchema, { sequence: 7n }));
  const envelope = Buffer.alloc(5 + event.length);
  envelope.writeUInt32BE(event.length, 1);
  envelope.set(event, 5);
  const server = await serve(t, (_request, response) => {
    response.writeHead(200, { "content-type": "application/connect+proto" });
    // One whole message, then half a message, then the agent goes away.
    response.write(envelope);
    response.write(envelope.subarray(0, 3), () => response.socket?.destroy());
  });
  const channel = dialUnixHttp1(server.socketPath);
  t.after(() => channel.close());
  const received: bigint[] = [];
  const error = await connectRejection(
    (async () => {
      for await (const message of createClient(Agent, channel.transport).watchEvents({})) received.push(message.sequence);
    })(),
  );
  assert.deepEqual(received, [7n]);
  assert.equal(classifyRpcError(error), "disconnected");
  assert.match(error.message, /closed the connection during the call/);
});

test("a server that never answers is bounded by the call's deadline, and the connection is closed", async (t) => {
  const server = await serve(t, () => {
    // Reads the request and says nothing.
  });
  const channel = dialUnixHttp1(server.socketPath);
  t.after(() => channel.close());
  const error = await connectRejection(createClient(Agent, channel.transport).status({}, { timeoutMs: 200 }));
  assert.equal(error.code, Code.DeadlineExceeded);
  assert.equal(classifyRpcError(error), "deadline");
  await server.allClosed();
});

test("close() fails the call in flight as canceled and closes its connection", async (t) => {
  let answering = () => {};
  const requested = new Promise<void>((resolve) => (answering = resolve));
  const server = await serve(t, () => answering());
  const channel = dialUnixHttp1(server.socketPath);
  const call = connectRejection(createClient(Agent, channel.transport).status({}));
  await requested;
  channel.close();
  const error = await call;
  assert.equal(error.code, Code.Canceled);
  await server.allClosed();
  const after = await connectRejection(createClient(Agent, channel.transport).status({}));
  assert.equal(after.code, Code.Canceled, "a closed channel makes no new connection");
  assert.equal(server.opened(), 1);
});

test("no socket at the path is reported as missing", async (t) => {
  const channel = dialUnixHttp1(path.join(tempDir(t, "ep-h1-"), "absent.sock"));
  t.after(() => channel.close());
  const error = await connectRejection(createClient(Agent, channel.transport).status({}, { timeoutMs: 5000 }));
  assert.equal(classifyRpcError(error), "missing");
  assert.equal(error.code, Code.Unavailable);
});

test("response headers over the bound fail the call instead of being buffered", async (t) => {
  const server = await serve(t, (_request, response) => {
    response.writeHead(200, { "content-type": "application/proto", "x-padding": "p".repeat(32 * 1024) });
    response.end();
  });
  const channel = dialUnixHttp1(server.socketPath);
  t.after(() => channel.close());
  const error = await connectRejection(createClient(Agent, channel.transport).status({}, { timeoutMs: 5000 }));
  assert.equal(classifyRpcError(error), "oversize");
  assert.equal(error.code, Code.ResourceExhausted);
  await server.allClosed();
});
