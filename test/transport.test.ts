/**
 * The unix-socket transport (src/rpc) against real peers: each way a call
 * can fail gets its own classification and message, failures that need no
 * waiting do not wait, nothing is left open after close(), and serveUnix
 * ends its streams when it stops.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { DevicePlugin } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { Agent, EventSchema, type Event } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { classifyRpcError, type RpcFailure } from "../src/rpc/rpc-error.ts";
import { dialUnix, type DialOptions } from "../src/rpc/unix-channel.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";
import { devicePluginV1beta1, edgeplugV1, pluginRegistration, serviceOf } from "./support/kubelet-protos.ts";
import {
  callUnary,
  createStaleSocket,
  grpcClient,
  openDescriptors,
  spawnRegistrationPlugin,
  startGrpcServer,
  startRawListener,
} from "./support/grpc-peers.ts";
import { tempDir } from "./support/temp-dir.ts";

interface Failure {
  kind: RpcFailure;
  message: string;
  elapsedMs: number;
}

/** Runs `call`, which must fail, and reports how. */
async function failureOf(call: () => Promise<unknown>): Promise<Failure> {
  const started = performance.now();
  try {
    await call();
  } catch (error) {
    return { kind: classifyRpcError(error), message: ConnectError.from(error).message, elapsedMs: performance.now() - started };
  }
  throw new assert.AssertionError({ message: "the call succeeded but was expected to fail" });
}

/** One GetInfo through a fresh channel, closed (and its connections gone) before returning. */
async function getInfoFailure(socketPath: string, dial: DialOptions = {}, timeoutMs?: number): Promise<Failure> {
  const channel = dialUnix(socketPath, dial);
  try {
    return await failureOf(() => createClient(Registration, channel.transport).getInfo({}, { timeoutMs }));
  } finally {
    channel.close();
    await channel.closed;
  }
}


/** Every failure message seen, by kind, to check that each kind reads differently. */
const messagesByKind = new Map<RpcFailure, string>();

function expectFailure(failure: Failure, kind: RpcFailure, messagePattern: RegExp): void {
  assert.equal(failure.kind, kind, `classified as ${failure.kind}: ${failure.message}`);
  assert.match(failure.message, messagePattern);
  messagesByKind.set(kind, failure.message);
}

/** A failure that needs no waiting must not wait for the (10 s) connect timeout. */
const FAST_MS = 1_000;

test("a call whose deadline passes fails as 'deadline', and the plugin sees the cancellation", async (t) => {
  const dir = tempDir(t);
  let sawCancel!: () => void;
  const cancelled = new Promise<void>((resolve) => (sawCancel = resolve));
  const peer = await startGrpcServer(path.join(dir, "slow.sock"), [
    [
      pluginRegistration().service,
      {
        GetInfo: (call: grpc.ServerUnaryCall<unknown, unknown>) => call.on("cancelled", sawCancel), // never answers
        NotifyRegistrationStatus: () => {},
      },
    ],
  ]);
  t.after(() => peer.close());
  const failure = await getInfoFailure(peer.socketPath, {}, 150);
  expectFailure(failure, "deadline", /timed out/);
  assert.ok(failure.elapsedMs >= 140 && failure.elapsedMs < 2_000, `failed after ${failure.elapsedMs} ms`);
  await cancelled;
});

test("an aborted ListAndWatch stream fails as 'canceled', and the plugin sees the cancellation", async (t) => {
  const dir = tempDir(t);
  let sawCancel!: () => void;
  const cancelled = new Promise<void>((resolve) => (sawCancel = resolve));
  const peer = await startGrpcServer(path.join(dir, "dp.sock"), [
    [
      serviceOf(devicePluginV1beta1(), "DevicePlugin").service,
      {
        ListAndWatch: (call: grpc.ServerWritableStream<unknown, unknown>) => {
          call.on("cancelled", sawCancel);
          call.write({ devices: [{ ID: "gpu-0", health: "Healthy" }] });
        },
      },
    ],
  ]);
  t.after(() => peer.close());
  const channel = dialUnix(peer.socketPath);
  t.after(() => channel.close());
  const abort = new AbortController();
  const seen: string[] = [];
  const failure = await failureOf(async () => {
    for await (const update of createClient(DevicePlugin, channel.transport).listAndWatch({}, { signal: abort.signal })) {
      seen.push(...update.devices.map((d) => d.ID));
      abort.abort();
    }
  });
  assert.deepEqual(seen, ["gpu-0"]);
  expectFailure(failure, "canceled", /abort/i);
  await cancelled;
});

test("a socket path with nothing there fails fast as 'missing'", async (t) => {
  const dir = tempDir(t);
  const failure = await getInfoFailure(path.join(dir, "absent.sock"));
  expectFailure(failure, "missing", /no socket at .*absent\.sock/);
  assert.ok(failure.elapsedMs < FAST_MS, `took ${failure.elapsedMs} ms`);
});

test("a socket left behind by a killed plugin fails fast as 'stale'", async (t) => {
  const dir = tempDir(t);
  const socketPath = path.join(dir, "crashed.sock");
  await createStaleSocket(socketPath);
  const failure = await getInfoFailure(socketPath, { connectTimeoutMs: 10_000 });
  expectFailure(failure, "stale", /connection refused .*crashed\.sock.*stale socket/);
  assert.ok(failure.elapsedMs < FAST_MS, `took ${failure.elapsedMs} ms`);
  assert.ok(fs.lstatSync(socketPath).isSocket(), "the stale socket file is left for its owner to remove");
});

test("a listener that answers garbage and hangs up fails fast as 'not-grpc'", async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "garbage.sock"), (socket) => socket.end("HELLO\r\n"));
  t.after(() => listener.close());
  const failure = await getInfoFailure(listener.socketPath, { connectTimeoutMs: 10_000 });
  expectFailure(failure, "not-grpc", /garbage\.sock closed the connection before any HTTP\/2 handshake/);
  assert.ok(failure.elapsedMs < FAST_MS, `took ${failure.elapsedMs} ms`);
  assert.equal(listener.accepted, 1);
});

test("an HTTP/1.1 server fails fast as 'not-grpc', naming the protocol error", async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "http1.sock"), (socket) =>
    socket.once("data", () => socket.write("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")),
  );
  t.after(() => listener.close());
  const failure = await getInfoFailure(listener.socketPath, { connectTimeoutMs: 10_000 });
  assert.equal(failure.kind, "not-grpc", failure.message);
  assert.match(failure.message, /http1\.sock accepted the connection but does not speak HTTP\/2/);
  assert.ok(failure.elapsedMs < FAST_MS, `took ${failure.elapsedMs} ms`);
});

test("a listener that accepts but never completes the HTTP/2 handshake is bounded by the connect timeout ('deadline')", async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "silent.sock"), () => {});
  t.after(() => listener.close());
  const failure = await getInfoFailure(listener.socketPath, { connectTimeoutMs: 200 });
  assert.equal(failure.kind, "deadline", failure.message);
  assert.match(failure.message, /no HTTP\/2 handshake from .*silent\.sock within 200 ms/);
  assert.ok(failure.elapsedMs >= 190 && failure.elapsedMs < 2_000, `failed after ${failure.elapsedMs} ms`);
});

test("a plugin killed during a ListAndWatch stream fails the stream as 'disconnected'", async (t) => {
  const dir = tempDir(t);
  const plugin = await spawnRegistrationPlugin(path.join(dir, "dying.sock"), { name: "dying" }, [{ ID: "gpu-0", health: "Healthy" }]);
  t.after(() => plugin.kill());
  const channel = dialUnix(plugin.socketPath);
  t.after(() => channel.close());
  const failure = await failureOf(async () => {
    for await (const _update of createClient(DevicePlugin, channel.transport).listAndWatch({})) await plugin.kill();
  });
  expectFailure(failure, "disconnected", /dying\.sock closed the connection during the call/);
});

test("each kind of failure reads differently", () => {
  const kinds: RpcFailure[] = ["deadline", "canceled", "missing", "stale", "not-grpc", "disconnected"];
  assert.deepEqual([...messagesByKind.keys()].sort(), [...kinds].sort());
  assert.equal(new Set(messagesByKind.values()).size, kinds.length, [...messagesByKind.values()].join("\n"));
});

test("a gRPC error status from the plugin is classified 'status' and keeps its message", async (t) => {
  const dir = tempDir(t);
  const peer = await startGrpcServer(path.join(dir, "refusing.sock"), [
    [
      pluginRegistration().service,
      {
        GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) =>
          callback({ code: grpc.status.FAILED_PRECONDITION, details: "not ready: GPU firmware loading" }),
        NotifyRegistrationStatus: () => {},
      },
    ],
  ]);
  t.after(() => peer.close());
  const failure = await getInfoFailure(peer.socketPath);
  assert.equal(failure.kind, "status");
  assert.equal(failure.message, "[failed_precondition] not ready: GPU firmware loading");
});

test("a channel reaches a plugin restarted on the same path again (re-dial after the peer went away)", async (t) => {
  const dir = tempDir(t);
  const socketPath = path.join(dir, "restarting.sock");
  const channel = dialUnix(socketPath);
  t.after(() => channel.close());
  const client = createClient(Registration, channel.transport);
  const first = await spawnRegistrationPlugin(socketPath, { name: "first" });
  assert.equal((await client.getInfo({}, { timeoutMs: 2_000 })).name, "first");
  await first.stop();
  const second = await spawnRegistrationPlugin(socketPath, { name: "second" });
  t.after(() => second.stop());
  assert.equal((await client.getInfo({}, { timeoutMs: 2_000 })).name, "second");
});

test("no descriptor stays open after calls complete and their channels close", async (t) => {
  const dir = tempDir(t);
  const plugin = await spawnRegistrationPlugin(path.join(dir, "plugin.sock"), { name: "fd-check" }, [{ ID: "d0", health: "Healthy" }]);
  t.after(() => plugin.stop());
  const stalePath = path.join(dir, "stale.sock");
  await createStaleSocket(stalePath);
  // Warm up lazily loaded modules and their descriptors before the baseline.
  await roundTrip(plugin.socketPath);
  const before = openDescriptors();
  const rounds = 25;
  for (let i = 0; i < rounds; i++) {
    assert.equal(await roundTrip(plugin.socketPath), "fd-check");
    assert.equal((await getInfoFailure(stalePath)).kind, "stale");
    assert.equal((await getInfoFailure(path.join(dir, "absent.sock"))).kind, "missing");
    await abortedStream(plugin.socketPath);
  }
  assert.deepEqual(openDescriptors(), before, `after ${rounds} rounds of calls`);
});

async function roundTrip(socketPath: string): Promise<string> {
  const channel = dialUnix(socketPath);
  try {
    return (await createClient(Registration, channel.transport).getInfo({}, { timeoutMs: 2_000 })).name;
  } finally {
    channel.close();
    await channel.closed;
  }
}

async function abortedStream(socketPath: string): Promise<void> {
  const channel = dialUnix(socketPath);
  const abort = new AbortController();
  try {
    const failure = await failureOf(async () => {
      for await (const _update of createClient(DevicePlugin, channel.transport).listAndWatch({}, { signal: abort.signal })) abort.abort();
    });
    assert.equal(failure.kind, "canceled");
  } finally {
    channel.close();
    await channel.closed;
  }
}

test("closing a channel fails its calls in flight as 'canceled' and refuses new ones", async (t) => {
  const dir = tempDir(t);
  let callArrived!: () => void;
  const arrived = new Promise<void>((resolve) => (callArrived = resolve));
  const peer = await startGrpcServer(path.join(dir, "hang.sock"), [
    [pluginRegistration().service, { GetInfo: () => callArrived(), NotifyRegistrationStatus: () => {} }],
  ]);
  t.after(() => peer.close());
  const channel = dialUnix(peer.socketPath);
  const pending = failureOf(() => createClient(Registration, channel.transport).getInfo({}));
  await arrived;
  channel.close();
  const failure = await pending;
  assert.equal(failure.kind, "canceled");
  assert.match(failure.message, /channel to .*hang\.sock was closed/);
  await channel.closed;
  const after = await failureOf(() => createClient(Registration, channel.transport).getInfo({}));
  assert.equal(after.kind, "canceled");
  assert.match(after.message, /was closed/);
});

const DIAL_AND_EXIT = fileURLToPath(new URL("./support/dial-and-exit.ts", import.meta.url));

/** Runs dial-and-exit.ts; resolves with its output once it exits, rejects if it is still alive after `boundMs`. */
function dialInChildProcess(args: string[], boundMs: number): Promise<{ code: number | null; output: string; ms: number }> {
  const started = performance.now();
  const child = spawn(process.execPath, [DIAL_AND_EXIT, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    const watchdog = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the process was still alive ${boundMs} ms after close() (output: ${output.trim()})`));
    }, boundMs);
    child.once("exit", (code) => {
      clearTimeout(watchdog);
      resolve({ code, output, ms: performance.now() - started });
    });
  });
}

test("after close() a channel keeps nothing alive: the process exits on its own", async (t) => {
  const dir = tempDir(t);
  const plugin = await spawnRegistrationPlugin(path.join(dir, "p.sock"), { name: "exit-check" });
  t.after(() => plugin.stop());
  const served = await dialInChildProcess([plugin.socketPath, "60000", "5000"], 5_000);
  assert.equal(served.code, 0);
  assert.deepEqual(JSON.parse(served.output), { ok: true, name: "exit-check" });

  // The call gives up (deadline) while the 60 s connect timer is still pending: close() must clear it.
  const silent = await startRawListener(path.join(dir, "silent.sock"), () => {});
  t.after(() => silent.close());
  const gaveUp = await dialInChildProcess([silent.socketPath, "60000", "100"], 5_000);
  assert.equal(gaveUp.code, 0);
  assert.deepEqual(JSON.parse(gaveUp.output), { ok: false, failure: "deadline" });
});

// --- serveUnix -------------------------------------------------------------

test("serveUnix.close() ends an open WatchEvents stream at once and aborts its handler", async (t) => {
  const dir = tempDir(t);
  let handlerAborted!: () => void;
  const aborted = new Promise<void>((resolve) => (handlerAborted = resolve));
  const server = await serveUnix(path.join(dir, "api.sock"), (router) =>
    router.service(Agent, {
      async *watchEvents(_request, context) {
        context.signal.addEventListener("abort", () => handlerAborted());
        yield create(EventSchema, { sequence: 0n, time: timestampFromMs(Date.now()) });
        await new Promise((resolve) => context.signal.addEventListener("abort", resolve));
      },
    }),
  );
  t.after(() => server.close());
  const client = grpcClient<grpc.Client>(serviceOf(edgeplugV1(), "Agent"), server.socketPath);
  t.after(() => client.close());
  const stream = (client as unknown as { WatchEvents(r: object): grpc.ClientReadableStream<Event> }).WatchEvents({});
  const ended = new Promise<string>((resolve) => {
    stream.on("error", (error: grpc.ServiceError) => resolve(`error ${grpc.status[error.code]}`));
    stream.on("end", () => resolve("end"));
  });
  await new Promise<void>((resolve) => stream.once("data", () => resolve()));
  const started = performance.now();
  await server.close();
  const closeMs = performance.now() - started;
  await aborted;
  const how = await ended;
  assert.ok(closeMs < 500, `close() took ${closeMs} ms`);
  assert.notEqual(how, "end", "the client learns the stream was cut, not that it finished");
  assert.equal(fs.existsSync(server.socketPath), false, "the socket file is removed");
});

test("serveUnix error messages reach grpc-js and Connect clients unmangled", async (t) => {
  const dir = tempDir(t);
  const message = "version v9: unsupported; see /var/lib/kubelet/device-plugins/ (100% sure) — ü";
  const server = await serveUnix(path.join(dir, "api.sock"), (router) =>
    router.service(Agent, {
      status() {
        throw new ConnectError(message, Code.FailedPrecondition);
      },
    }),
  );
  t.after(() => server.close());
  const grpcJs = grpcClient<grpc.Client>(serviceOf(edgeplugV1(), "Agent"), server.socketPath);
  t.after(() => grpcJs.close());
  await assert.rejects(callUnary(grpcJs, "Status", {}), (error: grpc.ServiceError) => {
    assert.equal(error.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(error.details, message);
    return true;
  });
  const channel = dialUnix(server.socketPath);
  t.after(() => channel.close());
  const failure = await failureOf(() => createClient(Agent, channel.transport).status({}));
  assert.equal(failure.kind, "status");
  assert.equal(failure.message, `[failed_precondition] ${message}`);
});
