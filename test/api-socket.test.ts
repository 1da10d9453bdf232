/**
 * The agent's API socket, its protocols: one unix socket answering gRPC (a
 * @grpc/grpc-js client and a Connect gRPC client) and Connect JSON over
 * HTTP/1.1 (node:http and curl), however its first bytes arrive.
 * Its lifecycle (close, permissions, a second agent): api-socket-lifecycle.test.ts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as net from "node:net";
import { Duplex } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { edgeplugV1 } from "./support/kubelet-protos.ts";
import { postHttp1, serve } from "./support/api-socket-harness.ts";

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
    (grpcJs as unknown as Record<string, (this: grpc.Client, ...args: unknown[]) => void>).Status!.call(
      grpcJs,
      {},
      { deadline: Date.now() + 5000 },
      (error: Error | null, response: { node: string; ok: boolean }) => (error ? reject(error) : resolve(response)),
    )
  );
  assert.equal(viaGrpcJs.node, "stub-node");
  assert.equal(viaGrpcJs.ok, true);

  await using channel = dialUnix(server.socketPath);
  const viaConnect = await createClient(Agent, channel.transport).status({}, { timeoutMs: 5000 });
  assert.equal(viaConnect.node, "stub-node");

  const viaHttp1 = await postHttp1(server.socketPath, "/edgeplug.v1.Agent/Status", "{}");
  assert.equal(viaHttp1.status, 200);
  assert.match(viaHttp1.contentType, /^application\/json/);
  assert.deepEqual(JSON.parse(viaHttp1.body), { ok: true, node: "stub-node", plugins: [], resources: [], allocations: [], version: "", commit: "" });
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
      ["-sS", "--fail", "--max-time", "5", "--unix-socket", server.socketPath, "-H", "content-type: application/json", "-d", "{}", "http://localhost/edgeplug.v1.Agent/Status"],
      (error, stdout, stderr) => (error ? reject(new Error(`curl failed: ${stderr}`)) : resolve(stdout)),
    )
  );
  assert.deepEqual(JSON.parse(output), { ok: true, node: "stub-node", plugins: [], resources: [], allocations: [], version: "", commit: "" });
});

test("an HTTP/1.1 request is recognised even when its first bytes arrive one at a time", async (t) => {
  const server = await serve(t);
  // "P" and "PO" are also how the HTTP/2 preface starts: the server must wait, then choose HTTP/1.1.
  const counter = { writes: 0 };
  const answer = await postHttp1(server.socketPath, "/edgeplug.v1.Agent/Status", "{}", () => dribblingConnection(server.socketPath, 30, counter));
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
