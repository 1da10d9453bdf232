/**
 * Makes sure a socket path edgeplug is about to bind is free, without ever
 * taking over a socket somebody still serves (docs/commands.md, `run`): a socket
 * that refuses connections is stale and is removed; one that answers is
 * identified and reported through a {@link SocketInUseError}.
 *
 * @example
 * ```ts
 * await claimSocketPath("/run/edgeplug/api.sock", { expect: "edgeplug-api" });
 * // now bind /run/edgeplug/api.sock
 * ```
 */
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { Agent } from "../gen/edgeplug/v1/agent_pb.ts";
import { Registration } from "../gen/deviceplugin/v1beta1/api_pb.ts";
import { PodResourcesLister } from "../gen/podresources/v1/api_pb.ts";
import { dialUnix } from "../rpc/unix-channel.ts";
import { classifyRpcError } from "../rpc/rpc-error.ts";
import type { Logger } from "../log/logger.ts";
import { messageOf } from "../log/error-message.ts";

/** Which of edgeplug's sockets is being claimed; it decides the hint in the error. */
export type SocketRole = "edgeplug-api" | "kubelet-registration" | "kubelet-pod-resources";

export interface ClaimOptions {
  expect: SocketRole;
  /** Bound on each identification call to a socket that answers (default 1000 ms). */
  probeTimeoutMs?: number;
  /** Mode of parent directories that have to be created (default 0o755). */
  directoryMode?: number;
  /** Told when a stale socket is removed. */
  log?: Logger;
}

/** A live process serves the socket path; edgeplug must not start on it. */
export class SocketInUseError extends Error {
  readonly path: string;
  /** Who answers, e.g. `another edgeplug (node edge-01)`. */
  readonly holder: string;
  constructor(socketPath: string, holder: string, hint: string) {
    super(`socket ${socketPath} is in use by ${holder}; ${hint}`);
    this.name = "SocketInUseError";
    this.path = socketPath;
    this.holder = holder;
  }
}

const hints: Record<SocketRole, string> = {
  "edgeplug-api": "stop it or set api.socket to another path (null disables the API)",
  "kubelet-registration": "stop it or set devicePlugins.registrationSocket to another path (null disables it)",
  "kubelet-pod-resources": "stop it or set podResources.socket to another path (null disables it)",
};

/**
 * Prepares `socketPath` for binding: creates its parent directories, removes
 * a stale socket, and throws {@link SocketInUseError} when something answers
 * there, or a plain Error naming the path when a non-socket file is in the way
 * or the directory cannot be created.
 */
export async function claimSocketPath(socketPath: string, options: ClaimOptions): Promise<void> {
  const directory = path.dirname(socketPath);
  try {
    fs.mkdirSync(directory, { recursive: true, mode: options.directoryMode ?? 0o755 });
  } catch (error) {
    throw new Error(`cannot create directory ${directory} for socket ${socketPath}: ${messageOf(error)}`);
  }
  let stat: fs.Stats;
  try {
    stat = fs.lstatSync(socketPath);
  } catch (error) {
    if (nodeCode(error) === "ENOENT") return;
    throw new Error(`cannot inspect ${socketPath}: ${messageOf(error)}`);
  }
  if (!stat.isSocket()) {
    throw new Error(
      `${socketPath} exists and is not a socket (${fileKind(stat)}); refusing to replace it`,
    );
  }
  const reachability = await tryConnect(socketPath);
  if (reachability === "gone") return;
  if (reachability === "refused") {
    if (removeStale(socketPath, stat)) options.log?.info("removed stale socket", { socket: socketPath });
    return;
  }
  const holder = await identifyHolder(socketPath, options.probeTimeoutMs ?? 1000);
  throw new SocketInUseError(socketPath, holder, hints[options.expect]);
}

type Reachability = "answers" | "refused" | "gone";

function tryConnect(socketPath: string): Promise<Reachability> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    socket.once("connect", () => {
      socket.destroy();
      resolve("answers");
    });
    socket.once("error", (error) => {
      socket.destroy();
      const code = nodeCode(error);
      if (code === "ECONNREFUSED") resolve("refused");
      else if (code === "ENOENT") resolve("gone");
      else reject(new Error(`cannot connect to ${socketPath}: ${messageOf(error)}`));
    });
  });
}

/** Removes the stale socket, unless another process replaced it since we looked; true when removed. */
function removeStale(socketPath: string, seen: fs.Stats): boolean {
  try {
    const now = fs.lstatSync(socketPath);
    if (now.ino !== seen.ino || now.dev !== seen.dev) return false;
    fs.unlinkSync(socketPath);
    return true;
  } catch (error) {
    if (nodeCode(error) === "ENOENT") return false;
    throw new Error(`cannot remove stale socket ${socketPath}: ${messageOf(error)}`);
  }
}

/**
 * Asks the peer what it is with calls that change nothing on either side:
 * edgeplug's Status, then the kubelet's services with empty requests (an
 * empty RegisterRequest is refused by a kubelet for its missing version).
 */
async function identifyHolder(socketPath: string, timeoutMs: number): Promise<string> {
  const agent = await probe(socketPath, Agent, "status", timeoutMs);
  if (agent.kind === "answered") {
    const node = (agent.response as { node?: string }).node;
    return node ? `another edgeplug (node ${node})` : "another edgeplug";
  }
  if (agent.kind === "status") return "another edgeplug (its Status call failed)";
  if (agent.kind === "not-grpc") return "an unknown process (it does not speak gRPC)";
  if (agent.kind === "silent") return "an unknown process (it accepts connections but does not answer)";
  if (agent.kind === "gone") return "an unknown process (it went away while being identified)";
  for (
    const [service, method] of [
      [Registration, "register"],
      [PodResourcesLister, "list"],
    ] as const
  ) {
    const result = await probe(socketPath, service, method, timeoutMs);
    if (result.kind === "answered" || result.kind === "status") {
      return `a kubelet or another edgeplug (it serves ${service.typeName})`;
    }
  }
  return "a gRPC server that is neither edgeplug nor a kubelet";
}

type ProbeResult =
  | { kind: "answered"; response: unknown }
  | { kind: "unimplemented" | "status" | "not-grpc" | "silent" | "gone" };

async function probe(
  socketPath: string,
  service: DescService,
  method: string,
  timeoutMs: number,
): Promise<ProbeResult> {
  await using channel = dialUnix(socketPath, { connectTimeoutMs: timeoutMs });
  const client = createClient(service, channel.transport) as unknown as Record<
    string,
    (request: object, options: { timeoutMs: number }) => Promise<unknown>
  >;
  try {
    return { kind: "answered", response: await client[method]!({}, { timeoutMs }) };
  } catch (error) {
    const connectError = ConnectError.from(error);
    // Only a gRPC status proves a gRPC server: anything that merely fails is classified by the transport.
    if (connectError.metadata.has("grpc-status")) {
      return connectError.code === Code.Unimplemented ? { kind: "unimplemented" } : { kind: "status" };
    }
    // A Connect server (edgeplug's kubelet.sock and pod-resources socket) answers an unknown service with HTTP 404.
    if (connectError.code === Code.Unimplemented) return { kind: "unimplemented" };
    const failure = classifyRpcError(error);
    if (failure === "deadline") return { kind: "silent" };
    if (failure === "missing" || failure === "stale") return { kind: "gone" };
    return { kind: "not-grpc" };
  }
}

function fileKind(stat: fs.Stats): string {
  if (stat.isSymbolicLink()) return "a symbolic link";
  if (stat.isDirectory()) return "a directory";
  if (stat.isFile()) return "a regular file";
  return "not a regular file";
}

function nodeCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}
