/**
 * The api.metrics endpoint over real HTTP: Prometheus text computed from
 * providers, /readyz gates, /healthz driven by heartbeats and a manual clock,
 * bind errors, and an endpoint that lets the process exit once closed.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import * as net from "node:net";
import { createHealth } from "../src/api/health.ts";
import { createMetrics, type PluginSample, serveMetricsEndpoint } from "../src/api/metrics.ts";
import { createLogger } from "../src/log/logger.ts";
import { manualClock } from "./support/manual-clock.ts";

const quietLog = createLogger({ level: "error", write: () => {} });

async function serve(t: TestContext, parts: Partial<Parameters<typeof serveMetricsEndpoint>[0]> = {}) {
  const metrics = parts.metrics ?? createMetrics({ plugins: () => [] });
  const endpoint = await serveMetricsEndpoint({ address: "127.0.0.1:0", metrics, log: quietLog, ...parts });
  t.after(async () => {
    await endpoint.close();
    metrics.close();
  });
  return endpoint;
}

async function get(url: string, init: RequestInit = {}) {
  const response = await fetch(url, init);
  return { status: response.status, contentType: response.headers.get("content-type"), body: await response.text() };
}

/** Polls `url` until it answers `status`, failing after `timeoutMs`. */
test("/metrics serves Prometheus text with the plugin gauge from its provider and counted registrations", async (t) => {
  const plugins: PluginSample[] = [
    { socket: "/var/lib/kubelet/plugins_registry/gpu.sock", state: "registered" },
    { socket: "/var/lib/kubelet/plugins_registry/csi.sock", state: "stale" },
  ];
  const metrics = createMetrics({ plugins: () => plugins });
  const endpoint = await serve(t, { metrics });
  metrics.observeRegistration("DevicePlugin", 0.002, null);
  metrics.observeRegistration("CSIPlugin", 0, "stale");

  const answer = await get(`${endpoint.url}/metrics`);
  assert.equal(answer.status, 200);
  assert.equal(answer.contentType, "text/plain; version=0.0.4; charset=utf-8");
  const lines = answer.body.split("\n");
  for (
    const expected of [
      'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/gpu.sock",state="desired_state_of_world"} 1',
      'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/gpu.sock",state="actual_state_of_world"} 1',
      'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/csi.sock",state="desired_state_of_world"} 1',
      'edgeplug_registrations_total{type="DevicePlugin",result="success"} 1',
      'edgeplug_registration_failures_total{type="CSIPlugin",reason="stale"} 1',
      'edgeplug_registration_duration_seconds_bucket{le="0.0025",type="DevicePlugin"} 1',
    ]
  ) {
    assert.ok(lines.includes(expected), `missing: ${expected}`);
  }
  assert.ok(!answer.body.includes('csi.sock",state="actual_state_of_world"'), "a stale socket is not in the actual state");
  assert.match(answer.body, /^process_resident_memory_bytes \d+/m);

  plugins.pop();
  assert.ok(!(await get(`${endpoint.url}/metrics`)).body.includes("csi.sock"), "the next scrape follows the provider");
});

test("/readyz answers 503 listing the gates until all are done, then 200", async (t) => {
  const health = createHealth({ resyncMs: 10_000, gates: ["initial-walk", "api-serving"] });
  const endpoint = await serve(t, { health });
  assert.deepEqual(await get(`${endpoint.url}/readyz`), {
    status: 503,
    contentType: "text/plain; charset=utf-8",
    body: "[-]initial-walk not done\n[-]api-serving not done\nreadyz check failed\n",
  });
  health.markDone("initial-walk");
  assert.equal((await get(`${endpoint.url}/readyz`)).status, 503);
  health.markDone("api-serving");
  const ready = await get(`${endpoint.url}/readyz`);
  assert.equal(ready.status, 200);
  assert.equal(ready.body, "[+]initial-walk ok\n[+]api-serving ok\nreadyz check passed\n");
});

test("/healthz turns 503 when the reconciler's heartbeats stall, and 200 again once it beats", async (t) => {
  const clock = manualClock(1_000_000);
  const health = createHealth({ resyncMs: 20, heartbeats: ["reconciler"], now: clock.now });
  const endpoint = await serve(t, { health });

  assert.deepEqual(await get(`${endpoint.url}/healthz`), { status: 200, contentType: "text/plain; charset=utf-8", body: "ok" });
  clock.advance(60);
  assert.equal((await get(`${endpoint.url}/healthz`)).status, 200, "three periods without a beat are within the bound");
  clock.advance(1);
  const failing = await get(`${endpoint.url}/healthz`);
  assert.equal(failing.status, 503);
  assert.equal(failing.body, "[-]reconciler no heartbeat for 61ms (bound 60ms: 3 resync periods of 20ms)\nhealthz check failed\n");
  health.heartbeat("reconciler");
  assert.deepEqual(await get(`${endpoint.url}/healthz`), { status: 200, contentType: "text/plain; charset=utf-8", body: "ok" });
});

test("unknown paths are 404, other methods 405, HEAD has no body", async (t) => {
  const endpoint = await serve(t, { health: createHealth({ resyncMs: 1000 }) });
  assert.equal((await get(`${endpoint.url}/nope`)).status, 404);
  const post = await fetch(`${endpoint.url}/metrics`, { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD");
  await post.body?.cancel();
  const head = await get(`${endpoint.url}/metrics`, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.body, "");
});

test("a port already in use is a clear startup error naming api.metrics and the address", async (t) => {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const address = `127.0.0.1:${(holder.address() as net.AddressInfo).port}`;
  await assert.rejects(
    serveMetricsEndpoint({ address, metrics: createMetrics({ plugins: () => [], processMetrics: false }), log: quietLog }),
    { message: `api.metrics: cannot listen on ${address}: the address is already in use` },
  );
});

/** node:http's default server.keepAliveTimeout, which the endpoint leaves as it is. */
const NODE_KEEP_ALIVE_TIMEOUT_MS = 5_000;

test("once closed, the endpoint and its metrics let the process exit at once", async () => {
  // A fresh process that ends on its own once everything is closed: nothing may hold it open.
  const script = `
    import { createMetrics, serveMetricsEndpoint } from "./src/api/metrics.ts";
    import { createHealth } from "./src/api/health.ts";
    import { createLogger } from "./src/log/logger.ts";
    const metrics = createMetrics({ plugins: () => [] });
    const endpoint = await serveMetricsEndpoint({ address: "127.0.0.1:0", metrics,
      health: createHealth({ resyncMs: 1000 }), log: createLogger({ level: "error" }) });
    // Connections the endpoint, not the client, has to end: an idle keep-alive one and a half-sent request.
    const response = await fetch(endpoint.url + "/metrics");
    await response.text();
    const net = await import("node:net");
    const halfSent = net.connect(endpoint.port, "127.0.0.1");
    halfSent.on("error", () => {});
    await new Promise((resolve) => halfSent.write("GET /metrics HTTP/1.1\\r\\nhost: x\\r\\n", resolve));
    const closing = performance.now();
    await endpoint.close();
    metrics.close();
    process.on("exit", () => process.stdout.write(String(Math.round(performance.now() - closing))));
  `;
  const output = await new Promise<string>((resolve, reject) =>
    execFile(
      process.execPath,
      ["--input-type=module", "-e", script],
      { cwd: new URL("..", import.meta.url), timeout: 10_000 },
      (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
    )
  );
  const exitMs = Number(output);
  // What a connection left open would hold the process for: Node's keep-alive timeout (5 s) for the idle one, its
  // headers timeout (60 s) for the half-sent one; a timer left running, forever (execFile's 10 s ends it). The bound
  // is a third of the shortest, so that it only tells "exited once closed" from "held by a connection".
  assert.ok(exitMs < NODE_KEEP_ALIVE_TIMEOUT_MS / 3, `the process exited ${output} ms after close() began: held by a connection`);
});
