/**
 * The lean unary path of the unix channel (grpc-unary.ts) against real peers
 * on real unix sockets: @grpc/grpc-js plugins for what gRPC servers do, and
 * a bare node:http2 server for what a broken or foreign peer does (frames
 * and statuses a grpc-js server would never send).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { PluginInfoSchema, Registration, RegistrationStatusSchema } from "../gen/pluginregistration/v1/api_pb.ts";
import { startGrpcServer } from "../../test/support/grpc-peers.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { pluginRegistration } from "../../test/support/kubelet-protos.ts";
import { decodeGrpcMessage, FrameReader, grpcTimeout } from "./grpc-unary.ts";
import { classifyRpcError, type RpcFailure } from "./rpc-error.ts";
import { dialUnix, type DialOptions, type UnixChannel } from "./unix-channel.ts";

function channelTo(t: { after(fn: () => Promise<void>): void }, socketPath: string, options: DialOptions = {}): UnixChannel {
  const channel = dialUnix(socketPath, options);
  t.after(async () => {
    channel.close();
    await channel.closed;
  });
  return channel;
}

interface Failure {
  kind: RpcFailure;
  error: ConnectError;
}

async function failureOf(call: () => Promise<unknown>): Promise<Failure> {
  try {
    await call();
  } catch (error) {
    return { kind: classifyRpcError(error), error: ConnectError.from(error) };
  }
  throw new assert.AssertionError({ message: "the call succeeded but was expected to fail" });
}

/** A grpc-js registration plugin whose handlers are given by the test. */
async function grpcJsPlugin(
  t: { after(fn: () => Promise<void>): void },
  socketPath: string,
  handlers: Partial<Record<"GetInfo" | "NotifyRegistrationStatus", grpc.UntypedHandleCall>>,
) {
  const answer = (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback(null, {});
  const peer = await startGrpcServer(socketPath, [
    [pluginRegistration().service, { GetInfo: answer, NotifyRegistrationStatus: answer, ...handlers }],
  ]);
  t.after(() => peer.close());
  return peer;
}

interface RawPeer {
  readonly socketPath: string;
  /** Request headers of every stream received, in order. */
  readonly requests: http2.IncomingHttpHeaders[];
  /** Request bodies, in the same order. */
  readonly bodies: Buffer[];
}

/**
 * A bare HTTP/2 server on `socketPath`: `answer` writes whatever response
 * the test needs on each stream, after the request body arrived.
 */
async function rawPeer(
  t: { after(fn: () => Promise<void>): void },
  socketPath: string,
  answer: (stream: http2.ServerHttp2Stream, session: http2.ServerHttp2Session) => void,
): Promise<RawPeer> {
  const requests: http2.IncomingHttpHeaders[] = [];
  const bodies: Buffer[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  const server = http2.createServer();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.on("stream", (stream, headers) => {
    requests.push(headers);
    const chunks: Buffer[] = [];
    stream.on("error", () => {});
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("end", () => {
      bodies.push(Buffer.concat(chunks));
      answer(stream, stream.session as http2.ServerHttp2Session);
    });
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
  return { socketPath, requests, bodies };
}

const GRPC_HEADERS = { ":status": 200, "content-type": "application/grpc" };

/** `payload` in a gRPC frame with the given flags byte. */
function frame(payload: Uint8Array, flags = 0): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.byteLength, 1);
  return Buffer.concat([head, payload]);
}

const pluginInfo = (name: string) => toBinary(PluginInfoSchema, create(PluginInfoSchema, { type: "acme.io/Sensor", name, supportedVersions: ["v1"] }));

/** Answers with `body`, then trailers carrying grpc-status 0. */
function answerWith(body: Buffer) {
  return (stream: http2.ServerHttp2Stream) => {
    stream.respond(GRPC_HEADERS, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(body);
  };
}

// --- grpc-js peers --------------------------------------------------------------

test("an error status from grpc-js (a trailers-only response) keeps its code, message and metadata", async (t) => {
  const dir = tempDir(t);
  const peer = await grpcJsPlugin(t, path.join(dir, "p.sock"), {
    GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => {
      const metadata = new grpc.Metadata();
      metadata.set("x-retry-after", "5s");
      callback({ code: grpc.status.RESOURCE_EXHAUSTED, details: "too many plugins", metadata });
    },
  });
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.kind, "status");
  assert.equal(failure.error.code, Code.ResourceExhausted);
  assert.equal(failure.error.message, "[resource_exhausted] too many plugins");
  assert.equal(failure.error.metadata.get("grpc-status"), String(grpc.status.RESOURCE_EXHAUSTED));
  assert.equal(failure.error.metadata.get("x-retry-after"), "5s");
});

test("grpc-message is percent-decoded: what the plugin wrote is what the caller reads", async (t) => {
  const dir = tempDir(t);
  const details = "version v9: unsupported; see /var/lib/kubelet/plugins_registry/ (100% sure) — ü";
  const peer = await grpcJsPlugin(t, path.join(dir, "p.sock"), {
    GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback({ code: grpc.status.FAILED_PRECONDITION, details }),
  });
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.error.code, Code.FailedPrecondition);
  assert.equal(failure.error.rawMessage, details);
});

test("decodeGrpcMessage decodes percent-encoded UTF-8 and keeps what does not decode", () => {
  assert.equal(decodeGrpcMessage("plain text: no escapes"), "plain text: no escapes");
  assert.equal(decodeGrpcMessage("version%3A v9 %E2%80%94 %C3%BC"), "version: v9 — ü");
  assert.equal(decodeGrpcMessage("100% sure, %C3%BC"), "100% sure, ü");
  assert.equal(decodeGrpcMessage("bad %FF byte"), "bad \uFFFD byte");
  assert.equal(decodeGrpcMessage("ends in %4"), "ends in %4");
});

test("response headers and trailers reach onHeader and onTrailer", async (t) => {
  const dir = tempDir(t);
  const peer = await grpcJsPlugin(t, path.join(dir, "p.sock"), {
    GetInfo: (call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      const header = new grpc.Metadata();
      header.set("x-plugin-build", "abc123");
      call.sendMetadata(header);
      const trailer = new grpc.Metadata();
      trailer.set("x-served-by", "worker-2");
      callback(null, { type: "acme.io/Sensor", name: "sensor" }, trailer);
    },
  });
  let header: Headers | undefined;
  let trailer: Headers | undefined;
  const info = await createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo(
    {},
    { onHeader: (h) => (header = h), onTrailer: (h) => (trailer = h) },
  );
  assert.equal(info.name, "sensor");
  assert.equal(header?.get("x-plugin-build"), "abc123");
  assert.equal(header?.get("content-type"), "application/grpc+proto");
  assert.equal(trailer?.get("x-served-by"), "worker-2");
  assert.equal(trailer?.get("grpc-status"), "0");
});

test("an answer larger than readMaxBytes is refused, and the channel still serves the next call", async (t) => {
  const dir = tempDir(t);
  const peer = await grpcJsPlugin(t, path.join(dir, "p.sock"), {
    GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback(null, { type: "acme.io/Sensor", name: "x".repeat(4096) }),
  });
  const client = createClient(Registration, channelTo(t, peer.socketPath, { readMaxBytes: 1024 }).transport);
  const failure = await failureOf(() => client.getInfo({}, { timeoutMs: 5_000 }));
  assert.equal(failure.error.code, Code.ResourceExhausted);
  assert.match(failure.error.message, /p\.sock to \/pluginregistration\.Registration\/GetInfo is 41\d\d bytes, more than the 1024 bytes accepted \(readMaxBytes\)/);
  await client.notifyRegistrationStatus({ pluginRegistered: true }, { timeoutMs: 5_000 });
});

test("an aborted call fails as 'canceled' and the plugin sees the cancellation", async (t) => {
  const dir = tempDir(t);
  let sawCall!: () => void;
  const arrived = new Promise<void>((resolve) => (sawCall = resolve));
  let sawCancel!: () => void;
  const cancelled = new Promise<void>((resolve) => (sawCancel = resolve));
  const peer = await grpcJsPlugin(t, path.join(dir, "p.sock"), {
    GetInfo: (call: grpc.ServerUnaryCall<unknown, unknown>) => {
      call.on("cancelled", sawCancel);
      sawCall(); // never answers
    },
  });
  const abort = new AbortController();
  const pending = failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}, { signal: abort.signal }));
  await arrived;
  abort.abort();
  const failure = await pending;
  assert.equal(failure.kind, "canceled");
  assert.equal(failure.error.code, Code.Canceled);
  await cancelled;
});

// --- bare HTTP/2 peers ----------------------------------------------------------

test("the request carries gRPC's headers, a grpc-timeout only when there is a deadline, and one frame", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(frame(pluginInfo("raw"))));
  const client = createClient(Registration, channelTo(t, peer.socketPath).transport);
  assert.equal((await client.getInfo({}, { timeoutMs: 1_500 })).name, "raw");
  assert.equal((await client.getInfo({})).name, "raw");
  const defaulted = createClient(Registration, channelTo(t, peer.socketPath, { defaultTimeoutMs: 2_000 }).transport);
  await defaulted.getInfo({});
  const [timed, untimed, withDefault] = peer.requests;
  assert.equal(timed?.[":method"], "POST");
  assert.equal(timed?.[":path"], "/pluginregistration.Registration/GetInfo");
  assert.equal(timed?.["content-type"], "application/grpc+proto");
  assert.equal(timed?.te, "trailers");
  assert.match(String(timed?.["user-agent"]), /^edgeplug\/\d+\.\d+\.\d+/);
  assert.equal(timed?.["grpc-timeout"], "1500m");
  assert.equal(untimed?.["grpc-timeout"], undefined);
  assert.equal(withDefault?.["grpc-timeout"], "2000m");
  assert.deepEqual(peer.bodies[0], frame(new Uint8Array(0)), "GetInfo's empty request is one empty frame");
});

test("the request message is sent in one uncompressed frame", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(frame(new Uint8Array(0))));
  const client = createClient(Registration, channelTo(t, peer.socketPath).transport);
  await client.notifyRegistrationStatus({ pluginRegistered: false, error: "no handler for acme.io/Sensor" });
  const body = peer.bodies[0]!;
  assert.equal(body[0], 0, "not compressed");
  assert.equal(body.readUInt32BE(1), body.length - 5, "the length prefix covers the rest of the body");
  const status = fromBinary(RegistrationStatusSchema, body.subarray(5));
  assert.deepEqual([status.pluginRegistered, status.error], [false, "no handler for acme.io/Sensor"]);
});

test("a status in the response headers (trailers-only) is read without trailers", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), (stream) =>
    stream.respond({ ...GRPC_HEADERS, "grpc-status": "5", "grpc-message": "no such plugin%3A gpu-0" }, { endStream: true }),
  );
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.kind, "status");
  assert.equal(failure.error.message, "[not_found] no such plugin: gpu-0");
});

test("an HTTP error status or another content type is 'not-grpc', naming what came back", async (t) => {
  const dir = tempDir(t);
  const notFound = await rawPeer(t, path.join(dir, "404.sock"), (stream) => stream.respond({ ":status": 404 }, { endStream: true }));
  const html = await rawPeer(t, path.join(dir, "html.sock"), (stream) => {
    stream.respond({ ":status": 200, "content-type": "text/html" });
    stream.end("<html></html>");
  });
  const first = await failureOf(() => createClient(Registration, channelTo(t, notFound.socketPath).transport).getInfo({}));
  assert.equal(first.kind, "not-grpc");
  assert.match(first.error.message, /404\.sock answered \/pluginregistration\.Registration\/GetInfo with HTTP status 404/);
  const second = await failureOf(() => createClient(Registration, channelTo(t, html.socketPath).transport).getInfo({}));
  assert.equal(second.kind, "not-grpc");
  assert.match(second.error.message, /html\.sock answered .* with content type text\/html, not application\/grpc/);
});

test("malformed frames fail as 'not-grpc' with what was wrong", async (t) => {
  const dir = tempDir(t);
  const info = pluginInfo("raw");
  const cases: Array<[string, Buffer, RegExp]> = [
    ["flags.sock", frame(info, 0x80), /malformed gRPC response .*: a frame with flags 0x80/],
    ["gzip.sock", frame(info, 0x01), /malformed gRPC response .*: a compressed message, though the request offered no compression/],
    ["short.sock", frame(info).subarray(0, 9), /malformed gRPC response .*: the response ended inside a message frame \(9 bytes of it arrived\)/],
    ["twice.sock", Buffer.concat([frame(info), frame(info)]), /sent more than one message in answer to the unary call/],
  ];
  for (const [name, body, expected] of cases) {
    const peer = await rawPeer(t, path.join(dir, name), answerWith(body));
    const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
    assert.equal(failure.kind, "not-grpc", `${name}: ${failure.error.message}`);
    assert.match(failure.error.message, expected, name);
  }
});

test("a message protobuf cannot decode fails naming the message type", async (t) => {
  const dir = tempDir(t);
  // Field 2 (name, a string) announced 50 bytes long, 1 byte present.
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(frame(Uint8Array.from([0x12, 50, 0x61]))));
  const failure = await failureOf(() => createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}));
  assert.equal(failure.error.code, Code.Internal);
  assert.match(failure.error.message, /cannot decode the pluginregistration\.PluginInfo answer of \/pluginregistration\.Registration\/GetInfo/);
});

test("an answer without a gRPC status, or a connection dropped mid-call, is 'disconnected'", async (t) => {
  const dir = tempDir(t);
  const noStatus = await rawPeer(t, path.join(dir, "cut.sock"), (stream) => {
    stream.respond(GRPC_HEADERS);
    stream.end(frame(pluginInfo("cut")));
  });
  const cut = await failureOf(() => createClient(Registration, channelTo(t, noStatus.socketPath).transport).getInfo({}));
  assert.equal(cut.kind, "disconnected");
  assert.match(cut.error.message, /cut\.sock ended the answer to .* without a gRPC status/);

  const dropping = await rawPeer(t, path.join(dir, "drop.sock"), (_stream, session) => session.destroy());
  const dropped = await failureOf(() => createClient(Registration, channelTo(t, dropping.socketPath).transport).getInfo({}));
  assert.equal(dropped.kind, "disconnected");
  // Node reports the socket's close first, Deno the stream's: either way the message says the peer went away.
  assert.match(dropped.error.message, /drop\.sock closed the (connection during the call|stream of .* before any response \(the peer went away\))/);
});

test("an already aborted signal fails the call without connecting", async (t) => {
  const dir = tempDir(t);
  const peer = await rawPeer(t, path.join(dir, "raw.sock"), answerWith(frame(pluginInfo("raw"))));
  const failure = await failureOf(() =>
    createClient(Registration, channelTo(t, peer.socketPath).transport).getInfo({}, { signal: AbortSignal.abort() }),
  );
  assert.equal(failure.kind, "canceled");
  assert.equal(peer.requests.length, 0);
});

// --- pure helpers ----------------------------------------------------------------

test("grpcTimeout uses at most 8 digits, in the finest unit that fits, rounded up", () => {
  assert.equal(grpcTimeout(1_500), "1500m");
  assert.equal(grpcTimeout(0.2), "1m");
  assert.equal(grpcTimeout(99_999_999), "99999999m");
  assert.equal(grpcTimeout(100_000_000), "100000S");
  assert.equal(grpcTimeout(100_000_000_001), "1666667M");
});

test("FrameReader reassembles a message that arrives one byte at a time", () => {
  const reader = new FrameReader(1024);
  const payload = Buffer.from("hello, plugin");
  const messages: string[] = [];
  for (const byte of frame(payload)) {
    reader.push(Buffer.from([byte]));
    for (let next = reader.next(); next !== undefined; next = reader.next()) messages.push(next.toString());
  }
  assert.deepEqual(messages, ["hello, plugin"]);
  assert.equal(reader.pendingBytes(), 0);
  assert.equal(reader.problem(), undefined);
});

test("FrameReader refuses an oversize frame from its header, before buffering its bytes", () => {
  const reader = new FrameReader(16);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(1_000_000, 1);
  reader.push(head);
  assert.deepEqual(reader.problem(), { oversizeBytes: 1_000_000 });
  assert.equal(reader.next(), undefined);
});
