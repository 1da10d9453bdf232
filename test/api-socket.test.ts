/**
 * The agent's API socket: one unix socket answering gRPC (a @grpc/grpc-js
 * client and a Connect gRPC client) and Connect JSON over HTTP/1.1 (node:http
 * and curl), its permissions, and a close() that ends long streams.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { Duplex } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { Agent, EventSchema, StatusResponseSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { resolveGroupId, serveApiSocket, type ApiSocketServer } from "../src/api/agent-socket.ts";
import { SocketInUseError } from "../src/api/socket-guard.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { createLogger } from "../src/log/logger.ts";
import { edgeplugV1 } from "./support/kubelet-protos.ts";

const quietLog = createLogger({ level: "error", write: () => {} });

/** A stub Agent: Status names the node; WatchEvents sends a snapshot, then waits for shutdown. */
function stubAgent(options: { ignoreShutdown?: boolean } = {}) {
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

function socketDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ep-api-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function serve(t: TestContext, extra: Partial<Parameters<typeof serveApiSocket>[0]> = {}) {
  const socketPath = path.join(socketDir(t), "api.sock");
  const server = await serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog, ...extra });
  t.after(() => server.close());
  return server;
}

/** POSTs `body` over HTTP/1.1 to the unix socket; resolves with status, content type and body. */
function postHttp1(socketPath: string, route: string, body: string, connection?: () => Duplex) {
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
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, contentType: String(response.headers["content-type"]), body: text }),
        );
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

/**
 * A connection whose first `splitBytes` bytes are written one per write, a
 * millisecond apart, so the server sees the start of the stream in pieces.
 */
function dribblingConnection(socketPath: string, splitBytes: number, counter = { writes: 0 }): Duplex {
  const socket = net.connect(socketPath);
  let remaining = splitBytes;
  const writeOne = (chunk: Buffer) => {
    counter.writes++;
    return new Promise<void>((resolve, reject) => socket.write(chunk, (error) => (error ? reject(error) : resolve())));
  };
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      (async () => {
        let offset = 0;
        for (; remaining > 0 && offset < chunk.length; offset++, remaining--) {
          await writeOne(chunk.subarray(offset, offset + 1));
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        if (offset < chunk.length) await writeOne(chunk.subarray(offset));
      })().then(() => callback(), callback);
    },
    final(callback) {
      socket.end(() => callback());
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  socket.on("data", (chunk: Buffer) => {
    if (!duplex.push(chunk)) socket.pause();
  });
  socket.once("end", () => duplex.push(null));
  socket.once("error", (error) => duplex.destroy(error));
  return duplex;
}

test("one socket answers a grpc-js client, a Connect gRPC client and an HTTP/1.1 JSON POST", async (t) => {
  const server = await serve(t);

  const AgentClient = edgeplugV1().Agent as grpc.ServiceClientConstructor;
  const grpcJs = new AgentClient(`unix://${server.socketPath}`, grpc.credentials.createInsecure());
  t.after(() => grpcJs.close());
  const viaGrpcJs = await new Promise<{ node: string; ok: boolean }>((resolve, reject) =>
    (grpcJs as unknown as Record<string, Function>).Status!.call(
      grpcJs,
      {},
      { deadline: Date.now() + 5000 },
      (error: Error | null, response: { node: string; ok: boolean }) => (error ? reject(error) : resolve(response)),
    ),
  );
  assert.equal(viaGrpcJs.node, "stub-node");
  assert.equal(viaGrpcJs.ok, true);

  await using channel = dialUnix(server.socketPath);
  const viaConnect = await createClient(Agent, channel.transport).status({}, { timeoutMs: 5000 });
  assert.equal(viaConnect.node, "stub-node");

  const viaHttp1 = await postHttp1(server.socketPath, "/edgeplug.v1.Agent/Status", "{}");
  assert.equal(viaHttp1.status, 200);
  assert.match(viaHttp1.contentType, /^application\/json/);
  assert.deepEqual(JSON.parse(viaHttp1.body), { ok: true, node: "stub-node", plugins: [], resources: [], allocations: [] });
});

test("curl --unix-socket gets the Status JSON", async (t) => {
  const server = await serve(t);
  const curl = spawnSync("curl", ["--version"]);
  assert.ok(!curl.error, "curl is not installed (CI installs it; locally: apt-get install -y curl)");
  // Run asynchronously: the server lives in this process's event loop.
  const { execFile } = await import("node:child_process");
  const output = await new Promise<string>((resolve, reject) =>
    execFile(
      "curl",
      ["-sS", "--fail", "--max-time", "5", "--unix-socket", server.socketPath,
        "-H", "content-type: application/json", "-d", "{}", "http://localhost/edgeplug.v1.Agent/Status"],
      (error, stdout, stderr) => (error ? reject(new Error(`curl failed: ${stderr}`)) : resolve(stdout)),
    ),
  );
  assert.deepEqual(JSON.parse(output), { ok: true, node: "stub-node", plugins: [], resources: [], allocations: [] });
});

test("an HTTP/1.1 request is recognised even when its first bytes arrive one at a time", async (t) => {
  const server = await serve(t);
  // "P" and "PO" are also how the HTTP/2 preface starts: the server must wait, then choose HTTP/1.1.
  const counter = { writes: 0 };
  const answer = await postHttp1(server.socketPath, "/edgeplug.v1.Agent/Status", "{}", () =>
    dribblingConnection(server.socketPath, 30, counter),
  );
  assert.ok(counter.writes > 30, `the request went out in ${counter.writes} writes`);
  assert.equal(answer.status, 200);
  assert.equal(JSON.parse(answer.body).node, "stub-node");
});

test("a gRPC client whose HTTP/2 preface arrives one byte at a time is served", async (t) => {
  const server = await serve(t);
  const counter = { writes: 0 };
  const transport = createGrpcTransport({
    baseUrl: "http://localhost",
    nodeOptions: { createConnection: () => dribblingConnection(server.socketPath, 40, counter) },
  });
  const client = createClient(Agent, transport);
  const controller = new AbortController();
  t.after(() => controller.abort());
  const response = await client.status({}, { timeoutMs: 5000, signal: controller.signal });
  assert.ok(counter.writes > 40, `the call went out in ${counter.writes} writes`);
  assert.equal(response.node, "stub-node");
});

test("connections that close or stay silent before sending anything do not disturb the socket", async (t) => {
  const server = await serve(t, { firstBytesTimeoutMs: 50 });
  const closedAtOnce = net.connect(server.socketPath);
  await new Promise((resolve) => closedAtOnce.once("connect", resolve));
  closedAtOnce.end();
  await new Promise((resolve) => closedAtOnce.once("close", resolve));

  const silent = net.connect(server.socketPath);
  silent.on("error", () => {});
  t.after(() => silent.destroy());
  // The server drops a connection that says nothing within firstBytesTimeoutMs.
  await new Promise((resolve) => silent.once("close", resolve));

  const answer = await postHttp1(server.socketPath, "/edgeplug.v1.Agent/Status", "{}");
  assert.equal(answer.status, 200);
});

test("close() ends open WatchEvents streams on both protocols with 'unavailable' and removes the socket", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  const server = await serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog });
  t.after(() => server.close());

  await using channel = dialUnix(socketPath);
  const grpcStream = createClient(Agent, channel.transport).watchEvents({});
  const http1Transport = createConnectTransport({
    baseUrl: "http://localhost",
    httpVersion: "1.1",
    nodeOptions: { createConnection: () => net.connect(socketPath) },
  });
  const http1Stream = createClient(Agent, http1Transport).watchEvents({});

  const drain = async (stream: AsyncIterable<{ kind: { case: string | undefined } }>) => {
    const kinds: (string | undefined)[] = [];
    try {
      for await (const event of stream) kinds.push(event.kind.case);
    } catch (error) {
      return { kinds, error: ConnectError.from(error) };
    }
    return { kinds, error: undefined };
  };
  const grpcIterator = grpcStream[Symbol.asyncIterator]();
  const http1Iterator = http1Stream[Symbol.asyncIterator]();
  // Both streams are open once their snapshot arrived.
  assert.equal((await grpcIterator.next()).value?.kind.case, "snapshot");
  assert.equal((await http1Iterator.next()).value?.kind.case, "snapshot");

  const started = performance.now();
  await server.close();
  const closeMs = performance.now() - started;
  const [grpcEnd, http1End] = await Promise.all([
    drain({ [Symbol.asyncIterator]: () => grpcIterator }),
    drain({ [Symbol.asyncIterator]: () => http1Iterator }),
  ]);
  assert.equal(grpcEnd.error?.code, Code.Unavailable, String(grpcEnd.error));
  assert.match(grpcEnd.error?.rawMessage ?? "", /shutting down/);
  assert.equal(http1End.error?.code, Code.Unavailable, String(http1End.error));
  assert.ok(closeMs < 400, `close() took ${closeMs.toFixed(0)} ms`);
  assert.equal(fs.existsSync(socketPath), false, "the socket file is removed");
});

test("close() cuts a stream whose handler ignores the shutdown after the grace period", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  const server = await serveApiSocket({
    socketPath,
    routes: stubAgent({ ignoreShutdown: true }),
    log: quietLog,
    closeGraceMs: 50,
  });
  await using channel = dialUnix(socketPath);
  const iterator = createClient(Agent, channel.transport).watchEvents({})[Symbol.asyncIterator]();
  assert.equal((await iterator.next()).value?.kind.case, "snapshot");
  const started = performance.now();
  await server.close();
  const closeMs = performance.now() - started;
  await assert.rejects(iterator.next());
  assert.ok(closeMs >= 40 && closeMs < 400, `close() took ${closeMs.toFixed(0)} ms with a 50 ms grace`);
});

test("the socket is created with mode 0660, in the named group, leaving nothing else in its directory", async (t) => {
  const server = await serve(t, { group: "daemon" });
  const stat = fs.statSync(server.socketPath);
  assert.ok(stat.isSocket());
  assert.equal(stat.mode & 0o777, 0o660);
  assert.equal(stat.gid, resolveGroupId("daemon"));
  assert.equal(stat.gid, groupIdFromEtcGroup("daemon"));
  assert.deepEqual(fs.readdirSync(path.dirname(server.socketPath)), ["api.sock"]);
});

test("the mode can be narrowed, and the group stays the agent's when none is given", async (t) => {
  const server = await serve(t, { mode: 0o600 });
  const stat = fs.statSync(server.socketPath);
  assert.equal(stat.mode & 0o777, 0o600);
  assert.equal(stat.gid, process.getgid!());
});

test("an unknown socket group is a startup error naming the group, and binds nothing", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  await assert.rejects(
    serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog, group: "no-such-group-xyz" }),
    /api\.socketGroup: no group named "no-such-group-xyz" in \/etc\/group/,
  );
  assert.deepEqual(fs.readdirSync(path.dirname(socketPath)), []);
});

test("a second agent on the same socket is refused, naming the first one", async (t) => {
  const first = await serve(t);
  const refusal = await serveApiSocket({ socketPath: first.socketPath, routes: stubAgent(), log: quietLog }).then(
    (second: ApiSocketServer) => {
      t.after(() => second.close());
      return undefined;
    },
    (error: unknown) => error,
  );
  assert.ok(refusal instanceof SocketInUseError, String(refusal));
  assert.match(refusal.message, /in use by another edgeplug \(node stub-node\)/);
  // The first agent still serves.
  assert.equal((await postHttp1(first.socketPath, "/edgeplug.v1.Agent/Status", "{}")).status, 200);
});

function groupIdFromEtcGroup(name: string): number {
  const line = fs.readFileSync("/etc/group", "utf8").split("\n").find((entry) => entry.startsWith(`${name}:`));
  assert.ok(line, `group ${name} in /etc/group`);
  return Number(line.split(":")[2]);
}
