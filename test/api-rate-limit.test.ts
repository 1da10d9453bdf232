/**
 * The API's rate limit (100 requests/s, burst 10 per connection, as the
 * kubelet limits pod-resources): HTTP 429 for curl, ResourceExhausted for
 * gRPC, a fresh bucket per connection, and plugin registration that still
 * completes while a flood is being refused.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, createClient } from "@connectrpc/connect";
import { serveApiSocket } from "../src/api/agent-socket.ts";
import { Agent, StatusResponseSchema } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import { parseDescriptorLimit } from "../src/server/fd-limit.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { spawnRegistrationPlugin } from "./support/grpc-peers.ts";
import { requireBinary, startDaemon, waitForPath, writePolicy } from "./support/agent-process.ts";
import { makeShortTempDir, removeDir, tempDir } from "./support/temp-dir.ts";
import { manualClock } from "./support/manual-clock.ts";
import { waitUntil } from "./support/wait.ts";

const quietLog = createLogger({ level: "error", write: () => {} });
const routes = (router: ConnectRouter) => router.service(Agent, { status: () => create(StatusResponseSchema, { ok: true, node: "rate-node" }) });

/** An API socket whose rate limiter reads a manual clock instead of the real one. */
async function serveWithClock(t: TestContext) {
  const clock = manualClock();
  const socketPath = path.join(tempDir(t), "api.sock");
  const server = await serveApiSocket({ socketPath, routes, log: quietLog, now: clock.now });
  t.after(() => server.close());
  return { socketPath, clock };
}

/** Status over HTTP/1.1 JSON on `agent`'s keep-alive connection (one connection: maxSockets 1). */
function postStatus(socketPath: string, agent: http.Agent | false): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { socketPath, agent, method: "POST", path: "/edgeplug.v1.Agent/Status", headers: { "content-type": "application/json" } },
      (response) => {
        let body = "";
        response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
      },
    );
    request.on("error", reject);
    request.end("{}");
  });
}

function keepAlive(t: TestContext): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  return agent;
}

test("HTTP/1.1: a burst of 10 per connection, then 429 until tokens refill at 100/s; a new connection has its own", async (t) => {
  const { socketPath, clock } = await serveWithClock(t);
  const connection = keepAlive(t);
  for (let i = 0; i < 10; i++) assert.equal((await postStatus(socketPath, connection)).status, 200, `request ${i + 1}`);
  const refused = await postStatus(socketPath, connection);
  assert.equal(refused.status, 429);
  assert.equal(JSON.parse(refused.body).code, "resource_exhausted");
  assert.match(JSON.parse(refused.body).message, /rate limit exceeded \(100 requests\/s with bursts of 10 per connection/);

  const other = keepAlive(t);
  assert.equal((await postStatus(socketPath, other)).status, 200, "another connection is not held back by the first");

  clock.advance(30); // three tokens at 100/s
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await postStatus(socketPath, connection)).status);
  assert.deepEqual(statuses, [200, 200, 200, 429]);
});

test("gRPC: the 11th call in a burst on one connection gets ResourceExhausted", async (t) => {
  const { socketPath, clock } = await serveWithClock(t);
  const channel = dialUnix(socketPath);
  t.after(() => channel.close());
  const client = createClient(Agent, channel.transport);
  for (let i = 0; i < 10; i++) assert.equal((await client.status({})).node, "rate-node");
  await assert.rejects(client.status({}), (error) => {
    const connectError = ConnectError.from(error);
    assert.equal(connectError.code, Code.ResourceExhausted);
    assert.match(connectError.rawMessage, /rate limit exceeded/);
    return true;
  });
  clock.advance(10);
  assert.equal((await client.status({})).node, "rate-node", "one token back after 10 ms");
});

test("the whole socket is limited too, so a connection per request gains no fresh bursts past 100", async (t) => {
  const { socketPath } = await serveWithClock(t);
  const statuses = await Promise.all(Array.from({ length: 110 }, () => postStatus(socketPath, false).then((r) => r.status)));
  assert.equal(statuses.filter((status) => status === 200).length, 100);
  assert.equal(statuses.filter((status) => status === 429).length, 10);
});

test("dist/edgeplug: a plugin registers on its first attempt while the API is flooded past its rate limit", async (t) => {
  const { policy, agent } = await startDaemon(t);
  // Four gRPC connections each sending batches of 50 concurrent calls (past any burst however loaded the
  // machine is), and four connection-per-request HTTP/1.1 loops.
  let flooding = true;
  const answered = { ok: 0, limited: 0, failed: 0 };
  const count = (status: number) => {
    if (status === 200) answered.ok++;
    else if (status === 429) answered.limited++;
    else answered.failed++;
  };
  const grpcFlood = async () => {
    await using channel = dialUnix(policy.apiSocket);
    const client = createClient(Agent, channel.transport);
    while (flooding) {
      await Promise.all(
        Array.from({ length: 50 }, () =>
          client.status({}).then(
            () => count(200),
            (error) => count(ConnectError.from(error).code === Code.ResourceExhausted ? 429 : 0),
          )),
      );
    }
  };
  const http1Flood = async () => {
    while (flooding) count((await postStatus(policy.apiSocket, false).catch(() => ({ status: 0 }))).status);
  };
  const loops = [...Array.from({ length: 4 }, grpcFlood), ...Array.from({ length: 4 }, http1Flood)];
  t.after(async () => {
    flooding = false;
    await Promise.all(loops);
  });
  await waitUntil(() => answered.limited > 100, "the flood to be rate-limited", 10_000);

  // The plugin runs in a process of its own: in this one the flood would starve it, not the agent.
  const info = { type: "acme.io/Sensor", name: "acme.io/under-flood", supported_versions: ["v1"] };
  const answeredBefore = answered.ok + answered.limited;
  const plugin = await spawnRegistrationPlugin(path.join(policy.registry, "under-flood.sock"), info);
  t.after(() => plugin.stop());
  // Starved, it would not register until the flood ends, which is only once it has: the wait's bound
  // (10 s) fails it. How long registration takes under a flood is bench/api.ts's figure
  // (registrationDuringFlood, beside registrationWithoutFlood).
  const registered = await agent.waitForLog("plugin registered");
  const answeredDuring = answered.ok + answered.limited - answeredBefore;
  flooding = false;
  await Promise.all(loops);
  assert.equal(registered.socket, plugin.socketPath);
  assert.equal(registered.attempts, 1, "the first attempt registered it");
  assert.ok(answeredDuring > 0, "the flood went on while the plugin registered");
  assert.equal(answered.failed, 0, "every flood request was answered, OK or rate-limited");
});

test("dist/edgeplug started with a soft descriptor limit of 256 runs with its hard limit", async (t) => {
  const dir = makeShortTempDir();
  const policy = writePolicy(dir);
  const child = spawn("sh", ["-c", 'ulimit -Sn 256 && exec "$0" run --config "$1"', requireBinary(), policy.path], {
    stdio: "ignore",
  });
  // The agent goes before its directory: still starting, it creates the checkpoint's directory in it.
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
    removeDir(dir);
  });
  await waitForPath(policy.apiSocket);
  const limits = parseDescriptorLimit(fs.readFileSync(`/proc/${child.pid}/limits`, "utf8"));
  const ours = parseDescriptorLimit(fs.readFileSync("/proc/self/limits", "utf8"));
  assert.ok(limits && ours);
  assert.equal(limits.hard, ours.hard);
  assert.equal(limits.soft, limits.hard, "the soft limit was raised to the hard one");
});
