/**
 * Unary calls through Connect on the unix channel against peers that do what
 * a grpc-js server never does (a bare node:http2 server writes the answer):
 * each answer that is not gRPC is `not-grpc`, an answer cut off is
 * `disconnected`, a status in the headers is read, an oversize answer is
 * refused without breaking the channel. And what grpc-js plugins see of our
 * requests: gRPC's headers, a grpc-timeout only with a deadline.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { PluginInfoSchema, Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { startGrpcServer } from "./support/grpc-peers.ts";
import { pluginRegistration } from "./support/kubelet-protos.ts";
import { channelTo, failureOf } from "./support/rpc-failure.ts";
import { tempDir } from "./support/temp-dir.ts";

type After = { after(fn: () => Promise<void>): void };

interface RawPeer {
  readonly socketPath: string;
  /** Request headers of every stream received, in order. */
  readonly requests: http2.IncomingHttpHeaders[];
}

/** A bare HTTP/2 server: `answer` writes the response of each stream once its request body arrived. */
async function rawPeer(t: After, socketPath: string, answer: (stream: http2.ServerHttp2Stream) => void): Promise<RawPeer> {
  const requests: http2.IncomingHttpHeaders[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  const server = http2.createServer();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.on("stream", (stream, headers) => {
    requests.push(headers);
    stream.on("error", () => {});
    stream.resume();
    stream.once("end", () => answer(stream));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  });
  t.after(
    () =>
      new Promise<void>((resolve) => {
        for (const session of sessions) session.destroy();
        server.close(() => resolve());
      }),
  );
  return { socketPath, requests };
}

const GRPC_HEADERS = { ":status": 200, "content-type": "application/grpc" };

/** `payload` in an uncompressed gRPC frame. */
function frame(payload: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.byteLength, 1);
  return Buffer.concat([head, payload]);
}

const pluginInfo = (name: string) => frame(toBinary(PluginInfoSchema, create(PluginInfoSchema, { type: "acme.io/Sensor", name, supportedVersions: ["v1"] })));

function answerWith(body: Buffer) {
  return (stream: http2.ServerHttp2Stream) => {
    stream.respond(GRPC_HEADERS, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(body);
  };
}

test("an HTTP error status or another content type is 'not-grpc'", async (t) => {
  const dir = tempDir(t);
  const notFound = await rawPeer(t, path.join(dir, "404.sock"), (stream) => stream.respond({ ":status": 404 }, { endStream: true }));
  const html = await rawPeer(t, path.join(dir, "html.sock"), (stream) => {
    stream.respond({ ":status": 200, "content-type": "text/html" });
    stream.end("<html></html>");
  });
  const first = await failureOf(() => createClient(Registration, channelTo(t, notFound.socketPath).transport).getInfo({}));
  assert.equal(first.kind, "not-grpc", first.message);
  assert.match(first.message, /404/);
  const second = await failureOf(() => createClient(Registration, channelTo(t, html.socketPath).transport).getInfo({}));
  assert.equal(second.kind, "not-grpc", second.message);
  assert.match(second.message, /text\/html/);
});

test("a status in the response headers (trailers-only) keeps its code and decoded message", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), (stream) => stream.respond({ ...GRPC_HEADERS, "grpc-status": "5", "grpc-message": "no such plugin%3A gpu-0" }, { endStream: true }));
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.kind, "status");
  assert.equal(failure.message, "[not_found] no such plugin: gpu-0");
});

test("an answer without a gRPC status, or a connection dropped mid-call, is 'disconnected'", async (t) => {
  const dir = tempDir(t);
  const noStatus = await rawPeer(t, path.join(dir, "cut.sock"), (stream) => {
    stream.respond(GRPC_HEADERS);
    stream.end(pluginInfo("cut"));
  });
  const cut = await failureOf(() => createClient(Registration, channelTo(t, noStatus.socketPath).transport).getInfo({}));
  assert.equal(cut.kind, "disconnected", cut.message);
  const dropping = await rawPeer(t, path.join(dir, "drop.sock"), (stream) => stream.session?.destroy());
  const dropped = await failureOf(() => createClient(Registration, channelTo(t, dropping.socketPath).transport).getInfo({}));
  assert.equal(dropped.kind, "disconnected", dropped.message);
});

test("a truncated message frame is 'not-grpc'", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "short.sock"), answerWith(pluginInfo("raw").subarray(0, 9)));
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.kind, "not-grpc", failure.message);
  assert.match(failure.message, /protocol error/);
});

test("an answer larger than readMaxBytes is refused, and the channel still serves the next call", async (t) => {
  const dir = tempDir(t);
  const answer = (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback(null, {});
  const peer = await startGrpcServer(path.join(dir, "p.sock"), [
    [
      pluginRegistration().service,
      {
        GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback(null, { type: "acme.io/Sensor", name: "x".repeat(4096) }),
        NotifyRegistrationStatus: answer,
      },
    ],
  ]);
  t.after(() => peer.close());
  const client = createClient(Registration, channelTo(t, peer.socketPath, { readMaxBytes: 1024 }).transport);
  const failure = await failureOf(() => client.getInfo({}, { timeoutMs: 5_000 }));
  assert.equal(failure.error.code, Code.ResourceExhausted, failure.message);
  await client.notifyRegistrationStatus({ pluginRegistered: true }, { timeoutMs: 5_000 });
});

test("the request carries gRPC's headers and a grpc-timeout only when there is a deadline", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(pluginInfo("raw")));
  const client = createClient(Registration, channelTo(t, peer.socketPath).transport);
  assert.equal((await client.getInfo({}, { timeoutMs: 1_500 })).name, "raw");
  assert.equal((await client.getInfo({})).name, "raw");
  await createClient(Registration, channelTo(t, peer.socketPath, { defaultTimeoutMs: 2_000 }).transport).getInfo({});
  const [timed, untimed, withDefault] = peer.requests;
  assert.equal(timed?.[":path"], "/pluginregistration.Registration/GetInfo");
  assert.match(String(timed?.["content-type"]), /^application\/grpc/);
  assert.equal(timed?.te, "trailers");
  assert.match(String(timed?.["grpc-timeout"]), /^1[45]\d\dm$/);
  assert.equal(untimed?.["grpc-timeout"], undefined);
  assert.match(String(withDefault?.["grpc-timeout"]), /^(19\d\d|2000)m$/);
});

test("an already aborted signal fails the call as 'canceled' without sending it", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(pluginInfo("raw")));
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}, { signal: AbortSignal.abort() }));
  assert.equal(failure.kind, "canceled");
  assert.equal(peer.requests.length, 0);
});
