/**
 * The unix-socket transport (src/rpc) against real peers: each way a call
 * can fail gets its own classification and message, and failures that need
 * no waiting do not wait. Lifecycle (re-dial, close, descriptors) is in
 * transport-lifecycle.test.ts, answers no gRPC server sends in
 * transport-peers.test.ts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { DevicePlugin } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import type { RpcFailure } from "../src/rpc/rpc-error.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { devicePluginV1beta1, pluginRegistration, serviceOf } from "./support/kubelet-protos.ts";
import { createStaleSocket, spawnRegistrationPlugin, startGrpcServer, startRawListener } from "./support/grpc-peers.ts";
import { manualClock } from "./support/manual-clock.ts";
import { type Failure, failureOf, getInfoFailure } from "./support/rpc-failure.ts";
import { tempDir } from "./support/temp-dir.ts";
import { waitUntil } from "./support/wait.ts";

/** Every failure message seen, by kind, to check that each kind reads differently. */
const messagesByKind = new Map<RpcFailure, string>();

function expectFailure(failure: Failure, kind: RpcFailure, messagePattern: RegExp): void {
  assert.equal(failure.kind, kind, `classified as ${failure.kind}: ${failure.message}`);
  assert.match(failure.message, messagePattern);
  messagesByKind.set(kind, failure.message);
}

/**
 * A failure that needs no waiting must not wait for the connect timeout. Its
 * timer runs on a manual clock that never moves here: a dial that waited for
 * it would never fail, and the test's timeout (HANG_BOUND) would end it.
 */
async function failureWithoutWaiting(socketPath: string): Promise<Failure> {
  const clock = manualClock();
  const failure = await getInfoFailure(socketPath, { connectTimeoutMs: 10_000, clock });
  assert.equal(clock.pendingTimers(), 0, "the connect timer is cancelled with the failure, not left to fire");
  return failure;
}

/** Only for the tests whose failure must come without the connect timer: how a dial that waits for it shows. */
const HANG_BOUND = { timeout: 30_000 };

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
  // Connected first: a deadline that passed before the request left would never reach the plugin.
  const channel = dialUnix(peer.socketPath);
  t.after(() => channel.close());
  await channel.connect();
  const failure = await failureOf(() => createClient(Registration, channel.transport).getInfo({}, { timeoutMs: 300 }));
  expectFailure(failure, "deadline", /timed out/);
  // Not before its deadline (timers may fire a millisecond early); how soon after is bench/unary.ts's to say.
  assert.ok(failure.elapsedMs >= 290, `failed after ${failure.elapsedMs} ms`);
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

test("a socket path with nothing there fails fast as 'missing'", HANG_BOUND, async (t) => {
  const dir = tempDir(t);
  const failure = await failureWithoutWaiting(path.join(dir, "absent.sock"));
  expectFailure(failure, "missing", /no socket at .*absent\.sock/);
});

test("a socket left behind by a killed plugin fails fast as 'stale'", HANG_BOUND, async (t) => {
  const dir = tempDir(t);
  const socketPath = path.join(dir, "crashed.sock");
  await createStaleSocket(socketPath);
  const failure = await failureWithoutWaiting(socketPath);
  expectFailure(failure, "stale", /connection refused .*crashed\.sock.*stale socket/);
  assert.ok(fs.lstatSync(socketPath).isSocket(), "the stale socket file is left for its owner to remove");
});

test("a listener that answers garbage and hangs up fails fast as 'not-grpc'", HANG_BOUND, async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "garbage.sock"), (socket) => socket.end("HELLO\r\n"));
  t.after(() => listener.close());
  const failure = await failureWithoutWaiting(listener.socketPath);
  expectFailure(failure, "not-grpc", /garbage\.sock closed the connection before any HTTP\/2 handshake/);
  assert.equal(listener.accepted, 1);
});

test("an HTTP/1.1 server fails fast as 'not-grpc', naming the protocol error", HANG_BOUND, async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "http1.sock"), (socket) => socket.once("data", () => socket.write("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")));
  t.after(() => listener.close());
  const failure = await failureWithoutWaiting(listener.socketPath);
  assert.equal(failure.kind, "not-grpc", failure.message);
  assert.match(failure.message, /http1\.sock accepted the connection but does not speak HTTP\/2/);
});

test("a listener that accepts but never completes the HTTP/2 handshake is bounded by the connect timeout ('deadline')", async (t) => {
  const dir = tempDir(t);
  const listener = await startRawListener(path.join(dir, "silent.sock"), () => {});
  t.after(() => listener.close());
  const clock = manualClock();
  const failing = getInfoFailure(listener.socketPath, { connectTimeoutMs: 200, clock });
  await waitUntil(() => listener.accepted === 1, "the listener to accept the connection");
  clock.advance(199);
  assert.equal(clock.pendingTimers(), 1, "still waiting for the handshake a millisecond before the connect timeout");
  clock.advance(1);
  const failure = await failing;
  assert.equal(failure.kind, "deadline", failure.message);
  assert.match(failure.message, /no HTTP\/2 handshake from .*silent\.sock within 200 ms/);
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
        GetInfo: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => callback({ code: grpc.status.FAILED_PRECONDITION, details: "not ready: GPU firmware loading" }),
        NotifyRegistrationStatus: () => {},
      },
    ],
  ]);
  t.after(() => peer.close());
  const failure = await getInfoFailure(peer.socketPath);
  assert.equal(failure.kind, "status");
  assert.equal(failure.message, "[failed_precondition] not ready: GPU firmware loading");
});
