/**
 * The agent's API socket (SPEC.md section 4): one unix socket that answers
 * gRPC (h2c) for programs and the Connect protocol with JSON over HTTP/1.1
 * for `curl --unix-socket`, both from the same Connect routes.
 *
 * Each connection's first bytes decide: the HTTP/2 client preface goes to an
 * http2 server, anything else to an http server. Node's http2 server reads
 * from a socket's native handle, where bytes already read cannot be put back,
 * so it is handed a JS Duplex that replays them and then forwards the socket
 * (reference/runtime-notes.md, "gRPC and HTTP/1.1 on one unix socket").
 *
 * @example
 * ```ts
 * const api = await serveApiSocket({ socketPath: "/run/edgeplug/api.sock", routes, group: "edgeplug", log });
 * // curl --unix-socket /run/edgeplug/api.sock -H 'content-type: application/json' -d '{}' http://localhost/edgeplug.v1.Agent/Status
 * await api.close();
 * ```
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { Duplex } from "node:stream";
import type { ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { withPortableGrpcMessage } from "../rpc/grpc-message.ts";
import type { Logger } from "../log/logger.ts";
import { claimSocketPath } from "./socket-guard.ts";

export interface ApiSocketOptions {
  socketPath: string;
  routes: (router: ConnectRouter) => void;
  /** Permissions of the socket file (default 0o660: owner and group may connect). */
  mode?: number;
  /** Group name (api.socketGroup) given to the socket file; null or absent keeps the agent's group. */
  group?: string | null;
  log: Logger;
  /** Where group names are looked up (default /etc/group). */
  groupFile?: string;
  /** How long close() lets handlers finish after telling them to stop (default 500 ms). */
  closeGraceMs?: number;
  /** A connection that sends nothing for this long is dropped (default 10 s). */
  firstBytesTimeoutMs?: number;
}

export interface ApiSocketServer extends AsyncDisposable {
  readonly socketPath: string;
  /**
   * Stops accepting, ends open calls (streams get a gRPC/Connect `unavailable`
   * status), closes every connection and removes the socket file. Safe to call twice.
   */
  close(): Promise<void>;
}

/** Sent by every HTTP/2 client first (RFC 9113 section 3.4). */
const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
/** sockaddr_un.sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

/**
 * Claims `socketPath` (refusing one that still answers), binds it with `mode`
 * and `group` and serves `routes` on it with gRPC and Connect. The socket
 * never exists at `socketPath` with wider permissions than `mode`: it is bound
 * inside a private 0700 directory next to it, given its mode and group there,
 * then hard-linked into place (which also fails instead of replacing a socket
 * that appeared meanwhile).
 */
export async function serveApiSocket(options: ApiSocketOptions): Promise<ApiSocketServer> {
  const { socketPath, log } = options;
  const mode = options.mode ?? 0o660;
  const gid =
    options.group === undefined || options.group === null
      ? null
      : resolveGroupId(options.group, options.groupFile);
  await claimSocketPath(socketPath, { expect: "edgeplug-api", log });

  const shutdown = new AbortController();
  const handler = withPortableGrpcMessage(
    connectNodeAdapter({
      routes: options.routes,
      grpc: true,
      connect: true,
      grpcWeb: false,
      shutdownSignal: shutdown.signal,
      // SPEC.md section 5: Status answers the canonical proto3 JSON with default values included.
      jsonOptions: { alwaysEmitImplicit: true },
    }),
  );
  const calls = trackCalls(handler);
  const http1Server = http.createServer(calls.handle);
  const http2Server = http2.createServer(calls.handle);
  const sessions = new Set<http2.ServerHttp2Session>();
  http2Server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  for (const server of [http1Server, http2Server]) {
    server.on("error", (error) => log.warn("api socket connection failed", { socket: socketPath, error }));
  }

  const connections = new Set<net.Socket>();
  const firstBytesTimeoutMs = options.firstBytesTimeoutMs ?? 10_000;
  const listener = net.createServer((socket) => {
    connections.add(socket);
    socket.once("close", () => connections.delete(socket));
    socket.on("error", (error) => log.debug("api socket connection error", { socket: socketPath, error }));
    routeByPreface(socket, firstBytesTimeoutMs, (protocol, head) => {
      if (protocol === "http2") {
        http2Server.emit("connection", replayingDuplex(socket, head));
      } else {
        // node:http parses what the JS stream yields, so bytes put back are read again (measured on Node 24 and Deno 2.9).
        socket.unshift(head);
        http1Server.emit("connection", socket);
        socket.resume();
      }
    });
  });

  const inode = await bindPrivately(listener, socketPath, mode, gid);
  log.info("api socket serving", {
    socket: socketPath,
    mode: `0${mode.toString(8)}`,
    ...(gid === null ? {} : { group: options.group, gid }),
  });

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      const listenerClosed = new Promise<void>((resolve) => listener.close(() => resolve()));
      shutdown.abort(new ConnectError("edgeplug is shutting down", Code.Unavailable));
      for (const session of sessions) session.close();
      http1Server.closeIdleConnections();
      await calls.drained(options.closeGraceMs ?? 500);
      for (const socket of connections) socket.destroy();
      await listenerClosed;
      removeIfOurs(socketPath, inode);
    })();
    return closing;
  };
  return { socketPath, close, [Symbol.asyncDispose]: close };
}

/**
 * The gid of a group named in /etc/group (or `groupFile`); a number is taken
 * as a gid. Throws an Error naming the group when there is no such group.
 */
export function resolveGroupId(group: string, groupFile = "/etc/group"): number {
  if (/^\d+$/.test(group)) return Number(group);
  let text: string;
  try {
    text = fs.readFileSync(groupFile, "utf8");
  } catch (error) {
    throw new Error(`api.socketGroup: cannot read ${groupFile} to find group "${group}": ${(error as Error).message}`);
  }
  for (const line of text.split("\n")) {
    const [name, , gid] = line.split(":");
    if (name === group && gid !== undefined && /^\d+$/.test(gid)) return Number(gid);
  }
  throw new Error(`api.socketGroup: no group named "${group}" in ${groupFile}`);
}

type Protocol = "http1" | "http2";

/**
 * Reads until the first bytes either match the whole HTTP/2 preface or stop
 * matching it, however the client split them into packets. A connection
 * that closes or stays silent before that is dropped.
 */
function routeByPreface(
  socket: net.Socket,
  timeoutMs: number,
  route: (protocol: Protocol, head: Buffer) => void,
): void {
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    const compared = Math.min(head.length, HTTP2_PREFACE.length);
    const matches = head.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
    if (matches && head.length < HTTP2_PREFACE.length) return;
    // Stop the flow before handing over, so no chunk is emitted with nobody listening.
    socket.pause();
    socket.off("data", onData);
    socket.off("end", onEnd);
    socket.setTimeout(0);
    route(matches ? "http2" : "http1", head);
  };
  const onEnd = () => socket.destroy();
  socket.on("data", onData);
  socket.once("end", onEnd);
  socket.setTimeout(timeoutMs, () => socket.destroy());
}

/** A Duplex that first yields `head`, then whatever `socket` receives; writes go to `socket`. */
function replayingDuplex(socket: net.Socket, head: Buffer): Duplex {
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _encoding, callback) {
      socket.write(chunk, (error) => callback(error ?? null));
    },
    final(callback) {
      socket.end(() => callback());
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  duplex.push(head);
  socket.on("data", (chunk: Buffer) => {
    if (!duplex.push(chunk)) socket.pause();
  });
  socket.once("end", () => duplex.push(null));
  socket.once("close", () => duplex.destroy());
  return duplex;
}

type NodeHandler = ReturnType<typeof connectNodeAdapter>;

/** Counts calls in progress so that close() can wait for them to wrap up, and no longer. */
function trackCalls(handler: NodeHandler) {
  let active = 0;
  let onIdle: (() => void) | undefined;
  const handle = ((request: http.IncomingMessage, response: http.ServerResponse) => {
    active++;
    response.once("close", () => {
      active--;
      if (active === 0) onIdle?.();
    });
    handler(request, response);
  }) as NodeHandler & http.RequestListener;
  const drained = (graceMs: number) =>
    new Promise<void>((resolve) => {
      if (active === 0) return resolve();
      const timer = setTimeout(resolve, graceMs);
      onIdle = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  return { handle, drained };
}

/**
 * Binds `listener` to a socket in a fresh 0700 directory beside `socketPath`,
 * sets its mode and group there, then links it to `socketPath`. Returns the
 * socket's inode, so that close() removes only its own file.
 */
async function bindPrivately(
  listener: net.Server,
  socketPath: string,
  mode: number,
  gid: number | null,
): Promise<number> {
  const privateDir = fs.mkdtempSync(path.join(path.dirname(socketPath), ".ep-"));
  const boundPath = path.join(privateDir, "s");
  try {
    if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH_BYTES || Buffer.byteLength(boundPath) > MAX_SOCKET_PATH_BYTES) {
      throw new Error(
        `socket path ${socketPath} is too long: unix socket paths (and ${boundPath}, used while binding) must be at most ${MAX_SOCKET_PATH_BYTES} bytes`,
      );
    }
    await new Promise<void>((resolve, reject) => {
      listener.once("error", reject);
      listener.listen(boundPath, () => {
        listener.off("error", reject);
        resolve();
      });
    });
    try {
      fs.chmodSync(boundPath, mode);
      if (gid !== null) fs.chownSync(boundPath, -1, gid);
      fs.linkSync(boundPath, socketPath);
    } catch (error) {
      listener.close();
      throw error;
    }
    return fs.statSync(socketPath).ino;
  } catch (error) {
    throw new Error(`cannot serve the API on ${socketPath}: ${describeBindError(error, gid)}`);
  } finally {
    fs.rmSync(privateDir, { recursive: true, force: true });
  }
}

function describeBindError(error: unknown, gid: number | null): string {
  const code = (error as { code?: string }).code;
  if (code === "EEXIST") return "another process created a file there while edgeplug was binding";
  if (code === "EPERM" && gid !== null) return `not allowed to give the socket group ${gid} (${(error as Error).message})`;
  return (error as Error).message;
}

function removeIfOurs(socketPath: string, inode: number): void {
  try {
    if (fs.lstatSync(socketPath).ino === inode) fs.unlinkSync(socketPath);
  } catch {
    // Already gone: nothing of ours to remove.
  }
}
