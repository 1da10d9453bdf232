/**
 * The agent's API socket, its lifecycle: a close() that ends long streams,
 * the socket's mode and group, and a second agent on the same socket.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { type ApiSocketServer, resolveGroupId, serveApiSocket } from "../src/api/agent-socket.ts";
import { SocketInUseError } from "../src/server/socket-guard.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { postHttp1, quietLog, serve, socketDir, stubAgent } from "./support/api-socket-harness.ts";
import { manualClock } from "./support/manual-clock.ts";
import { waitUntil } from "./support/wait.ts";

test("close() ends open WatchEvents streams on both protocols with 'unavailable' and removes the socket, without waiting out its grace", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  // Never advanced: close() can only finish because the streams ended, not because the grace ran out.
  const clock = manualClock();
  const server = await serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog, clock });
  t.after(() => server.close());

  await using channel = dialUnix(socketPath);
  const grpcStream = createClient(Agent, channel.transport).watchEvents({});
  const http1Transport = createConnectTransport({
    baseUrl: "http://localhost",
    httpVersion: "1.1",
    nodeOptions: { createConnection: () => net.connect(socketPath) },
  });
  const http1Stream = createClient(Agent, http1Transport).watchEvents({});

  const drain = async (stream: AsyncIterable<{ kind: { case: string | undefined } }>) => {
    const kinds: (string | undefined)[] = [];
    try {
      for await (const event of stream) kinds.push(event.kind.case);
    } catch (error) {
      return { kinds, error: ConnectError.from(error) };
    }
    return { kinds, error: undefined };
  };
  const grpcIterator = grpcStream[Symbol.asyncIterator]();
  const http1Iterator = http1Stream[Symbol.asyncIterator]();
  // Both streams are open once their snapshot arrived.
  assert.equal((await grpcIterator.next()).value?.kind.case, "snapshot");
  assert.equal((await http1Iterator.next()).value?.kind.case, "snapshot");

  await server.close();
  assert.equal(clock.pendingTimers(), 0, "the grace timer was cancelled once the streams ended");
  const [grpcEnd, http1End] = await Promise.all([
    drain({ [Symbol.asyncIterator]: () => grpcIterator }),
    drain({ [Symbol.asyncIterator]: () => http1Iterator }),
  ]);
  assert.equal(grpcEnd.error?.code, Code.Unavailable, String(grpcEnd.error));
  assert.match(grpcEnd.error?.rawMessage ?? "", /shutting down/);
  assert.equal(http1End.error?.code, Code.Unavailable, String(http1End.error));
  assert.equal(fs.existsSync(socketPath), false, "the socket file is removed");
});

test("close() cuts a stream whose handler ignores the shutdown once the grace period has passed, not before", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  const clock = manualClock();
  const server = await serveApiSocket({
    socketPath,
    routes: stubAgent({ ignoreShutdown: true }),
    log: quietLog,
    closeGraceMs: 50,
    clock,
  });
  await using channel = dialUnix(socketPath);
  const iterator = createClient(Agent, channel.transport).watchEvents({})[Symbol.asyncIterator]();
  assert.equal((await iterator.next()).value?.kind.case, "snapshot");
  let closed = false;
  const closing = server.close().then(() => (closed = true));
  await waitUntil(() => clock.pendingTimers() === 1, "close() to start its grace period");
  clock.advance(49);
  // The stream is still open (its handler ignores the shutdown): close() waits for the grace's last millisecond.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(closed, false, "close() finished before its grace period ran out");
  clock.advance(1);
  await closing;
  await assert.rejects(iterator.next());
});

test("the socket is created with mode 0660, in the named group, leaving nothing else in its directory", async (t) => {
  const server = await serve(t, { group: "daemon" });
  const stat = fs.statSync(server.socketPath);
  assert.ok(stat.isSocket());
  assert.equal(stat.mode & 0o777, 0o660);
  assert.equal(stat.gid, resolveGroupId("daemon"));
  assert.equal(stat.gid, groupIdFromEtcGroup("daemon"));
  assert.deepEqual(fs.readdirSync(path.dirname(server.socketPath)), ["api.sock"]);
});

test("the mode can be narrowed, and the group stays the agent's when none is given", async (t) => {
  const server = await serve(t, { mode: 0o600 });
  const stat = fs.statSync(server.socketPath);
  assert.equal(stat.mode & 0o777, 0o600);
  assert.equal(stat.gid, process.getgid!());
});

test("an unknown socket group is a startup error naming the group, and binds nothing", async (t) => {
  const socketPath = path.join(socketDir(t), "api.sock");
  await assert.rejects(
    serveApiSocket({ socketPath, routes: stubAgent(), log: quietLog, group: "no-such-group-xyz" }),
    /api\.socketGroup: no group named "no-such-group-xyz" in \/etc\/group/,
  );
  assert.deepEqual(fs.readdirSync(path.dirname(socketPath)), []);
});

test("a second agent on the same socket is refused, naming the first one", async (t) => {
  const first = await serve(t);
  const refusal = await serveApiSocket({ socketPath: first.socketPath, routes: stubAgent(), log: quietLog }).then(
    (second: ApiSocketServer) => {
      t.after(() => second.close());
      return undefined;
    },
    (error: unknown) => error,
  );
  assert.ok(refusal instanceof SocketInUseError, String(refusal));
  assert.match(refusal.message, /in use by another edgeplug \(node stub-node\)/);
  // The first agent still serves.
  assert.equal((await postHttp1(first.socketPath, "/edgeplug.v1.Agent/Status", "{}")).status, 200);
});

function groupIdFromEtcGroup(name: string): number {
  const line = fs.readFileSync("/etc/group", "utf8").split("\n").find((entry) => entry.startsWith(`${name}:`));
  assert.ok(line, `group ${name} in /etc/group`);
  return Number(line.split(":")[2]);
}
