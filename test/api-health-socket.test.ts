/**
 * Issue 9: /healthz and /readyz on the API socket (not only on the metrics
 * port, which is off by default), over HTTP/1.1 and HTTP/2, and what a gRPC
 * health client gets; the build and reload metrics of a running agent.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Clock } from "../src/platform/clock.ts";
import { manualClock } from "./support/manual-clock.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const quietLog = createLogger({ level: "error", write: () => {} });

async function startAgent(t: TestContext, options: { metrics?: boolean; clock?: Clock } = {}) {
  const dir = tempDir(t);
  const socket = path.join(dir, "api.sock");
  const policy = {
    ...testPolicy({ watch: [path.join(dir, "registry")], resyncMs: 40 }),
    api: { socket, socketGroup: null, metrics: options.metrics ? "127.0.0.1:0" : null },
  };
  const agent = new EdgeplugAgent({ policy, log: quietLog, clock: options.clock });
  t.after(() => agent.stop());
  await agent.start();
  return { agent, socket };
}

async function curl(socket: string, ...args: string[]) {
  const { stdout } = await promisify(execFile)("curl", ["--silent", "--unix-socket", socket, "--write-out", "\n%{http_code}", ...args]);
  const lines = stdout.split("\n");
  return { status: Number(lines.pop()), body: lines.join("\n") };
}

test("curl --unix-socket GET /healthz and /readyz: every gate listed once ready, and /healthz says when the reconciler stalls", async (t) => {
  const clock = manualClock(Date.now());
  const { socket } = await startAgent(t, { clock });
  assert.deepEqual(await curl(socket, "http://localhost/healthz"), { status: 200, body: "ok" });
  assert.deepEqual(await curl(socket, "http://localhost/readyz"), {
    status: 200,
    body: "[+]api-serving ok\n[+]checkpoint-restored ok\n[+]initial-walk ok\nreadyz check passed\n",
  });
  const head = await curl(socket, "--head", "http://localhost/healthz");
  assert.equal(head.status, 200);
  // Three resync periods of 40 ms and a bit without the reconciler's timer firing.
  clock.skip(121);
  assert.deepEqual(await curl(socket, "http://localhost/healthz"), {
    status: 503,
    body: "[-]reconciler no heartbeat for 121ms (bound 120ms: 3 resync periods of 40ms)\nhealthz check failed\n",
  });
  clock.advance(0);
  assert.deepEqual(await curl(socket, "http://localhost/healthz"), { status: 200, body: "ok" });
});

test("HTTP/2 clients get the same /healthz; a gRPC health check is answered Unimplemented", async (t) => {
  const { socket } = await startAgent(t);

  const session = http2.connect("http://localhost", { createConnection: () => net.connect(socket) });
  t.after(() => session.close());
  const request = session.request({ ":method": "GET", ":path": "/healthz" });
  let body = "";
  request.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
  const [headers] = (await new Promise((resolve) => request.once("response", (h) => resolve([h])))) as [http2.IncomingHttpHeaders];
  await new Promise((resolve) => request.once("end", resolve));
  assert.equal(headers[":status"], 200);
  assert.equal(body, "ok");

  const client = new grpc.Client(`unix:${socket}`, grpc.credentials.createInsecure());
  t.after(() => client.close());
  const error = await new Promise<grpc.ServiceError | null>((resolve) =>
    client.makeUnaryRequest(
      "/grpc.health.v1.Health/Check",
      (request: Buffer) => request,
      (response: Buffer) => response,
      Buffer.alloc(0),
      (failure) => resolve(failure),
    )
  );
  assert.equal(error?.code, grpc.status.UNIMPLEMENTED);
});

test("a running agent exports edgeplug_build_info, and a refused reload turns the reload gauge to 0", async (t) => {
  const { agent } = await startAgent(t, { metrics: true });
  const scrape = async () => (await fetch(`${agent.metricsUrl}/metrics`)).text();

  const first = await scrape();
  assert.match(first, /^edgeplug_build_info\{version="\d+\.\d+\.\d+[^"]*",commit="[^"]+",runtime="node v24\.[\d.]+"\} 1$/m);
  assert.match(first, /^edgeplug_config_last_reload_successful 1$/m);
  const loadedAt = Number(/^edgeplug_config_last_reload_success_timestamp_seconds (\S+)$/m.exec(first)?.[1]);
  assert.ok(Math.abs(loadedAt - Date.now() / 1000) < 600, `load time ${loadedAt} is now`);

  agent.policyReloadFailed();
  assert.match(await scrape(), /^edgeplug_config_last_reload_successful 0$/m);
});
