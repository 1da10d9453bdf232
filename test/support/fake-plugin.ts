/**
 * Registration plugins for tests: real @grpc/grpc-js servers on real unix
 * sockets, encoding with @grpc/proto-loader (independent of edgeplug's
 * generated code), with hooks for the ways real plugins misbehave.
 */
import { spawn } from "node:child_process";
import { EventEmitter, once } from "node:events";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { pluginRegistration } from "./kubelet-protos.ts";
import { waitUntil } from "./wait.ts";

export interface FakePluginOptions {
  socketPath: string;
  info: { type: string; name: string; endpoint?: string; versions?: string[] };
  /** Every GetInfo answers this much later. */
  getInfoDelayMs?: number;
  /** GetInfo never answers (until the plugin stops). */
  hangGetInfo?: boolean;
  /** The first N GetInfo calls fail with UNAVAILABLE. */
  failGetInfoTimes?: number;
  /** Every GetInfo fails with INTERNAL and this message. */
  getInfoError?: string;
  /** Every NotifyRegistrationStatus fails with INTERNAL (it is still recorded). */
  failNotify?: boolean;
  /**
   * The socket file is bound at once but listens only this much later, as
   * a plugin between bind() and listen(): connections meanwhile are refused.
   */
  listenDelayMs?: number;
}

export interface Notification {
  registered: boolean;
  error: string;
  /** performance.now() when it arrived. */
  at: number;
}

export interface FakePlugin {
  readonly socketPath: string;
  /** GetInfo calls received so far. */
  getInfoCalls(): number;
  notifications(): Notification[];
  /** Resolves with the first notification (already received or not) matching `predicate`. */
  waitForNotify(predicate?: (notification: Notification) => boolean, timeoutMs?: number): Promise<Notification>;
  /** Resolves once `count` connections were accepted; counted only for a plugin given `listenDelayMs` (its own listener). */
  waitForConnections(count: number, timeoutMs?: number): Promise<void>;
  /** Resolves once `count` GetInfo calls have arrived. */
  waitForGetInfo(count?: number, timeoutMs?: number): Promise<void>;
  /** Closes every open connection (the server keeps listening). */
  dropConnections(): void;
  /** Stops serving; the socket file is removed. */
  stop(): Promise<void>;
}

const registrationService = pluginRegistration().service;

/** Starts a registration plugin serving `info` on `socketPath`. */
export async function startFakePlugin(options: FakePluginOptions): Promise<FakePlugin> {
  const events = new EventEmitter();
  const notifications: Notification[] = [];
  let getInfoCalls = 0;
  let connections = 0;
  const server = new grpc.Server();
  server.addService(registrationService, {
    GetInfo(_call: unknown, callback: grpc.sendUnaryData<unknown>) {
      getInfoCalls++;
      events.emit("change");
      if (options.hangGetInfo) return;
      if (options.getInfoError !== undefined) return callback({ code: grpc.status.INTERNAL, details: options.getInfoError });
      if (getInfoCalls <= (options.failGetInfoTimes ?? 0)) {
        return callback({ code: grpc.status.UNAVAILABLE, details: "plugin not ready yet" });
      }
      const answer = () =>
        callback(null, {
          type: options.info.type,
          name: options.info.name,
          endpoint: options.info.endpoint ?? "",
          supported_versions: options.info.versions ?? ["v1"],
        });
      if (options.getInfoDelayMs) setTimeout(answer, options.getInfoDelayMs);
      else answer();
    },
    NotifyRegistrationStatus(call: grpc.ServerUnaryCall<{ plugin_registered?: boolean; error?: string }, unknown>, callback: grpc.sendUnaryData<unknown>) {
      notifications.push({ registered: call.request.plugin_registered ?? false, error: call.request.error ?? "", at: performance.now() });
      if (options.failNotify) callback({ code: grpc.status.INTERNAL, details: "cannot take a notification" });
      else callback(null, {});
      events.emit("change");
    },
  });
  const address = `unix:${options.socketPath}`;
  let stopListening = () => {};
  let dropConnections = () => server.drain(address, 0);
  if (options.listenDelayMs === undefined) {
    await new Promise<void>((resolve, reject) => server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())));
  } else {
    const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
    stopListening = bindThenListen(options.socketPath, options.listenDelayMs, (connection) => {
      connections++;
      events.emit("change");
      injector.injectConnection(connection);
    });
    dropConnections = () => injector.drain(0);
  }
  const waitFor = (what: string, check: () => boolean, timeoutMs = 5000) => waitForEvent(events, what, check, timeoutMs);
  return {
    socketPath: options.socketPath,
    getInfoCalls: () => getInfoCalls,
    notifications: () => [...notifications],
    async waitForNotify(predicate = () => true, timeoutMs) {
      await waitFor(`a notification at ${options.socketPath}`, () => notifications.some(predicate), timeoutMs);
      return notifications.find(predicate)!;
    },
    waitForConnections: (count, timeoutMs) => waitFor(`${count} connections at ${options.socketPath}`, () => connections >= count, timeoutMs),
    waitForGetInfo: (count = 1, timeoutMs) => waitFor(`${count} GetInfo calls at ${options.socketPath}`, () => getInfoCalls >= count, timeoutMs),
    dropConnections: () => dropConnections(),
    async stop() {
      stopListening();
      server.forceShutdown();
      // grpc-js closes its listener asynchronously; the file goes with it.
      await waitUntil(() => !fs.existsSync(options.socketPath), `${options.socketPath} to be removed`);
    },
  };
}

/** What startTestPlugin needs of a test: node:test's TestContext has it. */
export interface StopsAfter {
  after(fn: () => Promise<void>): void;
}

/** Starts a registration plugin (see startFakePlugin) that is stopped after the test `t`. */
export async function startTestPlugin(t: StopsAfter, options: FakePluginOptions): Promise<FakePlugin> {
  const started = await startFakePlugin(options);
  t.after(() => started.stop());
  return started;
}

/** The info of an `acme.io/Sensor` plugin named `name`, speaking v1. */
export function sensor(name = "acme.io/temp"): FakePluginOptions["info"] {
  return { type: "acme.io/Sensor", name, versions: ["v1"] };
}

/** libuv's pipe handle, as Node's pipe_wrap binding exposes it. */
interface PipeHandle {
  bind(path: string): number;
  listen(backlog: number): number;
  close(callback?: () => void): void;
  onconnection: (status: number, client: unknown) => void;
}

/**
 * Binds a unix socket at `socketPath` now and listens `delayMs` later,
 * handing each accepted connection to `onConnection`. Node has no public
 * bind-without-listen, so this uses the pipe_wrap binding that net.Server
 * is built on. Returns the function that closes the socket (removing its file).
 */
function bindThenListen(socketPath: string, delayMs: number, onConnection: (connection: net.Socket) => void): () => void {
  const { Pipe, constants } = (process as unknown as { binding(name: "pipe_wrap"): { Pipe: new (type: number) => PipeHandle; constants: { SERVER: number } } }).binding("pipe_wrap");
  const pipe = new Pipe(constants.SERVER);
  const bound = pipe.bind(socketPath);
  if (bound !== 0) throw new Error(`cannot bind ${socketPath}: uv error ${bound}`);
  pipe.onconnection = (status, client) => {
    if (status === 0) onConnection(new net.Socket({ handle: client } as net.SocketConstructorOpts));
  };
  const timer = setTimeout(() => pipe.listen(511), delayMs);
  let closed = false;
  return () => {
    if (closed) return;
    closed = true;
    clearTimeout(timer);
    pipe.close();
  };
}

/** A listener that accepts connections and answers garbage, not gRPC. */
export async function startGarbageListener(socketPath: string): Promise<{ close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.end("HTTP/1.1 418 I'm a teapot\r\ncontent-length: 0\r\n\r\n");
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Leaves a stale socket at `socketPath`, as a plugin killed with SIGKILL does:
 * a child process listens on it and is killed; the file stays, nothing listens.
 * The child listens under a hidden name, renamed into place once it is dead,
 * so that a watcher never sees the socket while something still listens.
 */
export async function leaveStaleSocket(socketPath: string): Promise<void> {
  const hidden = path.join(path.dirname(socketPath), `.${path.basename(socketPath)}`);
  const child = spawn(
    process.execPath,
    ["-e", `require("net").createServer().listen(${JSON.stringify(hidden)}, () => console.log("listening"))`],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const [line] = (await once(child.stdout!, "data")) as [Buffer];
  if (!line.toString().includes("listening")) throw new Error(`stale-socket child said ${line}`);
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  await exited;
  fs.renameSync(hidden, socketPath);
  if (!fs.lstatSync(socketPath).isSocket()) throw new Error(`${socketPath} was not left behind`);
}

/**
 * Resolves when `check()` holds, re-checking on each `change` event of
 * `events`; rejects naming `what` after `timeoutMs` (a function is asked at
 * the deadline, so that the message tells the state the wait ended on).
 * (State that emits no event is for waitUntil, in wait.ts.)
 */
export function waitForEvent(events: EventEmitter, what: string | (() => string), check: () => boolean, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (check()) return resolve();
    const onChange = () => {
      if (!check()) return;
      cleanup();
      resolve();
    };
    const deadline = AbortSignal.timeout(timeoutMs);
    const onDeadline = () => {
      cleanup();
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}`));
    };
    const cleanup = () => {
      events.off("change", onChange);
      deadline.removeEventListener("abort", onDeadline);
    };
    deadline.addEventListener("abort", onDeadline, { once: true });
    events.on("change", onChange);
  });
}
