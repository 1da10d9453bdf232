/**
 * Real gRPC peers on real unix sockets for tests: @grpc/grpc-js servers and
 * clients (messages encoded by @grpc/proto-loader from proto/, independent of
 * protobuf-es), fake plugins in child processes, stale sockets and listeners
 * that do not speak gRPC. Everything returned here has a close() that
 * releases its sockets, so a test file exits as soon as its tests end.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import { waitUntil } from "./wait.ts";

/** A service definition (from kubelet-protos.ts) and the handlers that serve it. */
export type ServiceBinding = [definition: grpc.ServiceDefinition, implementation: grpc.UntypedServiceImplementation];

export interface GrpcPeer {
  readonly socketPath: string;
  readonly server: grpc.Server;
  /** Stops at once, cancelling open calls and streams; Node removes the socket file. */
  close(): Promise<void>;
}

/** Starts a grpc-js server on `socketPath` serving every binding; resolves once it accepts connections. */
export async function startGrpcServer(socketPath: string, services: ServiceBinding[]): Promise<GrpcPeer> {
  const server = new grpc.Server();
  for (const [definition, implementation] of services) server.addService(definition, implementation);
  await new Promise<void>((resolve, reject) => {
    server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => error ? reject(error) : resolve());
  });
  let closing: Promise<void> | undefined;
  return {
    socketPath,
    server,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        server.forceShutdown();
        // forceShutdown closes the listener asynchronously; wait for the path to go.
        waitUntil(() => !fs.existsSync(socketPath), `grpc-js server on ${socketPath} to stop`, 2_000).then(resolve, resolve);
      });
      return closing;
    },
  };
}

/** A grpc-js client of one service on a unix socket; close() ends its channel. */
export function grpcClient<T extends grpc.Client>(
  service: grpc.ServiceClientConstructor,
  socketPath: string,
): T & { close(): void } {
  return new service(`unix://${socketPath}`, grpc.credentials.createInsecure()) as unknown as T & { close(): void };
}

/** Calls a unary method of a grpc-js client, resolving with the response. */
export function callUnary<Res>(
  client: grpc.Client,
  method: string,
  request: object,
  options: { deadlineMs?: number } = {},
): Promise<Res> {
  const deadline = Date.now() + (options.deadlineMs ?? 5_000);
  return new Promise((resolve, reject) => {
    const fn = (client as unknown as Record<string, (...args: unknown[]) => unknown>)[method];
    if (typeof fn !== "function") throw new Error(`grpc-js client has no method ${method}`);
    fn.call(client, request, new grpc.Metadata(), { deadline }, (error: grpc.ServiceError | null, response: Res) => error ? reject(error) : resolve(response));
  });
}

/** Collects `count` messages from a grpc-js server stream, then cancels it. */
export function readStream<Res>(stream: grpc.ClientReadableStream<Res>, count: number): Promise<Res[]> {
  const received: Res[] = [];
  return new Promise((resolve, reject) => {
    stream.on("data", (message: Res) => {
      received.push(message);
      if (received.length === count) {
        stream.removeAllListeners("error");
        stream.on("error", () => {}); // the CANCELLED status our cancel() causes
        stream.cancel();
        resolve(received);
      }
    });
    stream.on("error", reject);
    stream.on("end", () => reject(new Error(`stream ended after ${received.length} of ${count} messages`)));
  });
}

export interface RawListener {
  readonly socketPath: string;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

/**
 * A plain `net` server on `socketPath` that hands each connection to
 * `onConnection`: a peer that is not gRPC (garbage, HTTP/1.1, silence).
 */
export async function startRawListener(socketPath: string, onConnection: (socket: net.Socket) => void): Promise<RawListener> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on("error", () => {});
    socket.once("close", () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  });
  return {
    socketPath,
    get accepted() {
      return accepted;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const PLUGIN_PROCESS = fileURLToPath(new URL("./plugin-process.ts", import.meta.url));

export interface PluginProcess {
  readonly socketPath: string;
  readonly child: ChildProcess;
  /** SIGKILL: the socket file stays behind, as when a real plugin crashes. */
  kill(): Promise<void>;
  /** SIGTERM: the plugin closes its server and removes its socket. */
  stop(): Promise<void>;
}

/**
 * A fake plugin in its own Node process (grpc-js), serving
 * pluginregistration.Registration.GetInfo with `info` (proto field names)
 * and, given `devices`, v1beta1.DevicePlugin whose ListAndWatch sends them
 * once and stays open. Resolves once the socket accepts connections.
 */
export async function spawnRegistrationPlugin(
  socketPath: string,
  info: Record<string, unknown>,
  devices?: Array<Record<string, unknown>>,
): Promise<PluginProcess> {
  const args = [PLUGIN_PROCESS, socketPath, JSON.stringify(info)];
  if (devices !== undefined) args.push(JSON.stringify(devices));
  const child = spawn(process.execPath, args, {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once("exit", () => resolve());
  });
  await new Promise<void>((resolve, reject) => {
    let output = "";
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => reject(new Error(`plugin process exited (${code ?? signal}) before listening on ${socketPath}`));
    child.once("exit", onExit);
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (!output.includes("ready\n")) return;
      child.off("exit", onExit);
      resolve();
    });
  });
  const end = (signal: NodeJS.Signals) => async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
    child.stdout?.destroy();
  };
  return { socketPath, child, kill: end("SIGKILL"), stop: end("SIGTERM") };
}

/**
 * Leaves a socket file at `socketPath` that nothing listens on, the way a
 * plugin killed with SIGKILL does (Node itself unlinks a socket on close()).
 */
export async function createStaleSocket(socketPath: string): Promise<void> {
  const plugin = await spawnRegistrationPlugin(socketPath, { type: "stale", name: "stale" });
  await plugin.kill();
  if (!fs.lstatSync(socketPath).isSocket()) throw new Error(`expected a stale socket file at ${socketPath}`);
}

/** Open file descriptors of this process, by number. */
export function openDescriptors(): string[] {
  return fs.readdirSync("/proc/self/fd");
}

/** Paths under `dir` that this process holds a descriptor to (sockets opened by path, not connections). */
export function socketsHeldUnder(dir: string): string[] {
  const held: string[] = [];
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) held.push(target);
    } catch {
      // closed meanwhile (readdir's own descriptor)
    }
  }
  return held.sort();
}
