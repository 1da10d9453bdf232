/**
 * claimSocketPath: a stale socket is replaced, a socket that answers is never
 * taken over and its holder is named, and anything that is not a socket is
 * left alone. Peers are real: grpc-js servers, a plain listener, and a
 * process killed with SIGKILL that leaves its socket file behind.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { claimSocketPath, SocketInUseError } from "../src/server/socket-guard.ts";
import { serveApiSocket } from "../src/api/agent-socket.ts";
import { createLogger } from "../src/log/logger.ts";
import { devicePluginV1beta1, edgeplugV1, pluginRegistration, podResourcesV1 } from "./support/kubelet-protos.ts";
import { tempDir } from "./support/temp-dir.ts";

function socketDir(t: TestContext): string {
  return tempDir(t, "ep-guard-");
}

/** A socket file nobody listens on: a child process binds it and is killed with SIGKILL. */
async function leaveStaleSocket(socketPath: string): Promise<void> {
  const child = spawn(
    process.execPath,
    ["-e", 'require("node:net").createServer().listen(process.argv[1], () => process.stdout.write("ready\\n"))', socketPath],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`listener exited (${code}) before listening`)));
    child.stdout.on("data", (chunk: Buffer) => chunk.toString().includes("ready") && resolve());
  });
  child.removeAllListeners("exit");
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
  child.stdout.destroy();
}

async function startGrpcServer(t: TestContext, socketPath: string, services: [grpc.ServiceDefinition, grpc.UntypedServiceImplementation][]) {
  const server = new grpc.Server();
  for (const [definition, implementation] of services) server.addService(definition, implementation);
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())));
  t.after(() => server.forceShutdown());
}

async function startRawListener(t: TestContext, socketPath: string, onConnection: (socket: net.Socket) => void) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
}

const service = (ctor: unknown) => (ctor as grpc.ServiceClientConstructor).service;
type UnaryHandler = (call: unknown, callback: grpc.sendUnaryData<unknown>) => void;
const answer = (value: unknown): UnaryHandler => (_call, callback) => callback(null, value);

async function refusal(socketPath: string, role: "edgeplug-api" | "kubelet-registration" = "edgeplug-api") {
  const error = await claimSocketPath(socketPath, { expect: role, probeTimeoutMs: 300 }).then(
    () => undefined,
    (reason: unknown) => reason,
  );
  assert.ok(error instanceof Error, "claimSocketPath should have refused the path");
  return error;
}

test("a stale socket left by a killed process is removed, and the path is free to bind", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  await leaveStaleSocket(socketPath);
  assert.ok(fs.lstatSync(socketPath).isSocket(), "the killed process left its socket file");
  await claimSocketPath(socketPath, { expect: "edgeplug-api" });
  assert.equal(fs.existsSync(socketPath), false);
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

test("the API socket is served in place of a stale one, and the replacement is logged", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  await leaveStaleSocket(socketPath);
  const lines: string[] = [];
  const log = createLogger({ format: "json", write: (line) => lines.push(line) });
  const server = await serveApiSocket({ socketPath, routes: () => {}, log });
  t.after(() => server.close());
  // A connection is accepted where the stale socket refused one (its inode may well be reused).
  await new Promise<void>((resolve, reject) =>
    net.connect(socketPath).on("connect", function (this: net.Socket) {
      this.destroy();
      resolve();
    }).on("error", reject)
  );
  const removed = lines.map((line) => JSON.parse(line)).find((record) => record.msg === "removed stale socket");
  assert.equal(removed?.socket, socketPath);
});

test("a missing parent directory is created and a free path is accepted", async (t) => {
  const socketPath = path.join(socketDir(t), "a", "b", "api.sock");
  await claimSocketPath(socketPath, { expect: "edgeplug-api" });
  assert.ok(fs.statSync(path.dirname(socketPath)).isDirectory());
});

test("a live edgeplug is never taken over: the error names the path and its node", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  await startGrpcServer(t, socketPath, [
    [service(edgeplugV1().Agent), { Status: answer({ ok: true, node: "edge-07" }) }],
  ]);
  const error = await refusal(socketPath);
  assert.ok(error instanceof SocketInUseError);
  assert.equal(error.path, socketPath);
  assert.equal(error.holder, "another edgeplug (node edge-07)");
  assert.match(error.message, new RegExp(`socket ${socketPath} is in use by another edgeplug \\(node edge-07\\); .*api\\.socket`));
  assert.ok(fs.lstatSync(socketPath).isSocket(), "the live socket is left in place");
});

test("a kubelet's device-plugin registration server is named as a kubelet", async (t) => {
  const socketPath = path.join(socketDir(t), "kubelet.sock");
  // A kubelet refuses an empty RegisterRequest for its missing version; still a gRPC answer.
  const refuseEmpty: UnaryHandler = (_call, callback) => callback({ code: grpc.status.UNKNOWN, details: "Unsupported version" } as grpc.ServiceError);
  await startGrpcServer(t, socketPath, [
    [service(devicePluginV1beta1().Registration), { Register: refuseEmpty }],
  ]);
  const error = await refusal(socketPath, "kubelet-registration");
  assert.ok(error instanceof SocketInUseError);
  assert.equal(error.holder, "a kubelet or another edgeplug (it serves v1beta1.Registration)");
  assert.match(error.message, /devicePlugins\.registrationSocket/);
});

test("a kubelet's pod-resources socket is named as a kubelet", async (t) => {
  const socketPath = path.join(socketDir(t), "pr.sock");
  await startGrpcServer(t, socketPath, [
    [service(podResourcesV1().PodResourcesLister), { List: answer({ pod_resources: [] }) }],
  ]);
  const error = await refusal(socketPath);
  assert.ok(error instanceof SocketInUseError);
  assert.equal(error.holder, "a kubelet or another edgeplug (it serves v1.PodResourcesLister)");
});

test("another gRPC server is named as neither edgeplug nor a kubelet", async (t) => {
  const socketPath = path.join(socketDir(t), "plugin.sock");
  await startGrpcServer(t, socketPath, [
    [service(pluginRegistration()), { GetInfo: answer({}), NotifyRegistrationStatus: answer({}) }],
  ]);
  const error = await refusal(socketPath);
  assert.ok(error instanceof SocketInUseError);
  assert.equal(error.holder, "a gRPC server that is neither edgeplug nor a kubelet");
});

test("a listener that does not speak gRPC, or says nothing, is an unknown process", async (t) => {
  const dir = socketDir(t);
  const garbage = path.join(dir, "garbage.sock");
  await startRawListener(t, garbage, (socket) => socket.end("hello, this is not HTTP/2\n"));
  const silent = path.join(dir, "silent.sock");
  await startRawListener(t, silent, () => {});

  const garbageError = await refusal(garbage);
  assert.ok(garbageError instanceof SocketInUseError);
  assert.equal(garbageError.holder, "an unknown process (it does not speak gRPC)");
  const silentError = await refusal(silent);
  assert.ok(silentError instanceof SocketInUseError);
  assert.equal(silentError.holder, "an unknown process (it accepts connections but does not answer)");
});

test("a regular file, a directory or a symlink at the path is refused and left untouched", async (t) => {
  const dir = socketDir(t);
  const file = path.join(dir, "file.sock");
  fs.writeFileSync(file, "keep me");
  const directory = path.join(dir, "dir.sock");
  fs.mkdirSync(directory);
  const link = path.join(dir, "link.sock");
  fs.symlinkSync(file, link);

  assert.match((await refusal(file)).message, new RegExp(`${file} exists and is not a socket \\(a regular file\\)`));
  assert.match((await refusal(directory)).message, /is not a socket \(a directory\)/);
  assert.match((await refusal(link)).message, /is not a socket \(a symbolic link\)/);
  assert.equal(fs.readFileSync(file, "utf8"), "keep me");
  assert.ok(fs.statSync(directory).isDirectory());
  assert.ok(fs.lstatSync(link).isSymbolicLink());
});

test("a parent directory that cannot be created is an error naming it", async (t) => {
  const dir = socketDir(t);
  fs.writeFileSync(path.join(dir, "file"), "");
  const socketPath = path.join(dir, "file", "api.sock");
  assert.match((await refusal(socketPath)).message, new RegExp(`cannot create directory ${dir}/file for socket`));
});
