/**
 * The unix channel's lifecycle against real peers: it re-dials a plugin
 * restarted on the same path, close() fails what is in flight and leaves no
 * descriptor, timer or session behind; and serveUnix ends its streams when it
 * stops and sends error messages every client reads the same.
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
import { Agent, type Event, EventSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";
import { edgeplugV1, pluginRegistration, serviceOf } from "./support/kubelet-protos.ts";
import { callUnary, createStaleSocket, grpcClient, openDescriptors, spawnRegistrationPlugin, startGrpcServer, startRawListener } from "./support/grpc-peers.ts";
import { failureOf, getInfoFailure } from "./support/rpc-failure.ts";
import { tempDir } from "./support/temp-dir.ts";

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

/**
 * A channel whose connection is up. Under Deno (2.9) a fresh connection to the
 * grpc-js plugin is now and then reset before the HTTP/2 handshake (ECONNRESET
 * on read, about 1 dial in 600 here; never under Node): such a dial is made
 * again, at most twice, so that the call below meets what it is meant to.
 */
async function connectedChannel(socketPath: string): Promise<ReturnType<typeof dialUnix>> {
  for (let attempt = 1;; attempt++) {
    const channel = dialUnix(socketPath);
    try {
      await channel.connect();
      return channel;
    } catch (error) {
      channel.close();
      await channel.closed;
      const reset = String((error as { cause?: unknown }).cause).includes("ECONNRESET");
      if (!reset || attempt === 3) throw error;
    }
  }
}

async function abortedStream(socketPath: string): Promise<void> {
  const channel = await connectedChannel(socketPath);
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

test("connect() dials without a call, and reports when that connection is lost", async (t) => {
  const dir = tempDir(t);
  const missing = await failureOf(() => dialUnix(path.join(dir, "absent.sock")).connect());
  assert.equal(missing.kind, "missing");
  const peer = await startGrpcServer(path.join(dir, "service.sock"), [
    [pluginRegistration().service, { GetInfo: () => {}, NotifyRegistrationStatus: () => {} }],
  ]);
  t.after(() => peer.close());
  const channel = dialUnix(peer.socketPath);
  t.after(() => channel.close());
  const { lost } = await channel.connect();
  let isLost = false;
  void lost.then(() => (isLost = true));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(isLost, false, "the connection stays up while the peer does");
  await peer.close();
  await lost;
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

/** For the test whose close() must not wait for a stream that never ends: how such a close shows. */
const HANG_BOUND = { timeout: 30_000 };

test("serveUnix.close() ends an open WatchEvents stream at once and aborts its handler", HANG_BOUND, async (t) => {
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
    }));
  t.after(() => server.close());
  const client = grpcClient<grpc.Client>(serviceOf(edgeplugV1(), "Agent"), server.socketPath);
  t.after(() => client.close());
  const stream = (client as unknown as { WatchEvents(r: object): grpc.ClientReadableStream<Event> }).WatchEvents({});
  const ended = new Promise<string>((resolve) => {
    stream.on("error", (error: grpc.ServiceError) => resolve(`error ${grpc.status[error.code]}`));
    stream.on("end", () => resolve("end"));
  });
  await new Promise<void>((resolve) => stream.once("data", () => resolve()));
  // close() settles once the listener has closed, which the open session would hold for as long as the stream
  // lasts: the handler never ends it. That close() settles at all is the check (a close that waited for the stream
  // never would: HANG_BOUND), with the handler aborted and the client told.
  await server.close();
  await aborted;
  const how = await ended;
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
    }));
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
