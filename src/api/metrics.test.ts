import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { ATTEMPT_FAILURES, FAILURE_REASONS } from "../pluginmanager/types.ts";
import { createMetrics, parseListenAddress, type PluginSample, type ResourceSample } from "./metrics.ts";

/** The value of one series in Prometheus text, or undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((entry) => entry.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

test("plugin_manager_total_plugins follows the provider at every scrape, as the kubelet's does", async () => {
  let plugins: PluginSample[] = [
    { socket: "/r/a.sock", state: "registered" },
    { socket: "/r/b.sock", state: "failed" },
  ];
  const metrics = createMetrics({ plugins: () => plugins, processMetrics: false });
  const first = await metrics.registry.metrics();
  assert.match(first, /# TYPE plugin_manager_total_plugins gauge/);
  assert.equal(sample(first, 'plugin_manager_total_plugins{socket_path="/r/a.sock",state="desired_state_of_world"}'), 1);
  assert.equal(sample(first, 'plugin_manager_total_plugins{socket_path="/r/a.sock",state="actual_state_of_world"}'), 1);
  assert.equal(sample(first, 'plugin_manager_total_plugins{socket_path="/r/b.sock",state="desired_state_of_world"}'), 1);
  assert.equal(sample(first, 'plugin_manager_total_plugins{socket_path="/r/b.sock",state="actual_state_of_world"}'), undefined);
  assert.equal(sample(first, 'edgeplug_plugins{state="failed"}'), 1);
  assert.equal(sample(first, 'edgeplug_plugins{state="stale"}'), 0);

  plugins = [{ socket: "/r/b.sock", state: "registered" }];
  const second = await metrics.registry.metrics();
  assert.equal(sample(second, 'plugin_manager_total_plugins{socket_path="/r/a.sock",state="desired_state_of_world"}'), undefined, "a deleted socket leaves the metric");
  assert.equal(sample(second, 'plugin_manager_total_plugins{socket_path="/r/b.sock",state="actual_state_of_world"}'), 1);
  metrics.close();
});

test("registrations, failures by reason and the latency histogram count what they are told", async () => {
  const metrics = createMetrics({ plugins: () => [], processMetrics: false });
  metrics.observeRegistration("DevicePlugin", 0.003, null);
  metrics.observeRegistration("DevicePlugin", 0.02, null);
  metrics.observeRegistration("CSIPlugin", 1, "get_info");
  metrics.observeRegistration(null, 0.0001, "stale");
  metrics.observeRegistration("CSIPlugin", 0.5, "get_info");
  const text = await metrics.registry.metrics();
  assert.equal(sample(text, 'edgeplug_registrations_total{type="DevicePlugin",result="success"}'), 2);
  assert.equal(sample(text, 'edgeplug_registrations_total{type="CSIPlugin",result="failure"}'), 2);
  assert.equal(sample(text, 'edgeplug_registration_failures_total{type="CSIPlugin",reason="get_info"}'), 2);
  assert.equal(sample(text, 'edgeplug_registration_failures_total{type="unknown",reason="stale"}'), 1);
  assert.equal(sample(text, 'edgeplug_registration_duration_seconds_bucket{le="0.001",type="DevicePlugin"}'), 0);
  assert.equal(sample(text, 'edgeplug_registration_duration_seconds_bucket{le="0.005",type="DevicePlugin"}'), 1);
  assert.equal(sample(text, 'edgeplug_registration_duration_seconds_bucket{le="10",type="DevicePlugin"}'), 2);
  assert.equal(sample(text, 'edgeplug_registration_duration_seconds_count{type="DevicePlugin"}'), 2);
  assert.equal(sample(text, 'edgeplug_registration_duration_seconds_count{type="CSIPlugin"}'), undefined, "failures are not latencies");
  metrics.close();
});

test("every attempt failure reason is a label of its own, and docs/metrics.md lists exactly that set", async () => {
  const metrics = createMetrics({ plugins: () => [], processMetrics: false });
  for (const reason of ATTEMPT_FAILURES) metrics.observeRegistration("acme.io/Sensor", 0, reason);
  const text = await metrics.registry.metrics();
  for (const reason of ATTEMPT_FAILURES) {
    assert.equal(sample(text, `edgeplug_registration_failures_total{type="acme.io/Sensor",reason="${reason}"}`), 1, reason);
  }
  metrics.close();
  const docs = fs.readFileSync(new URL("../../docs/metrics.md", import.meta.url), "utf8");
  const section = docs.slice(docs.indexOf("### Failure reasons"));
  const rows = [...section.matchAll(/^\| `([a-z_]+)` \| (yes|no) \|/gm)].map((match) => [match[1]!, match[2]!]);
  assert.deepEqual(rows.map(([reason]) => reason), [...FAILURE_REASONS], "one row per reason, in the union's order");
  assert.deepEqual(rows.filter(([, counted]) => counted === "yes").map(([reason]) => reason), [...ATTEMPT_FAILURES]);
});

test("plugin types past 64 distinct values are counted as 'other'", async () => {
  const metrics = createMetrics({ plugins: () => [], processMetrics: false });
  for (let i = 0; i < 70; i++) metrics.observeRegistration(`acme.io/t${i}`, 0, "no_handler");
  const text = await metrics.registry.metrics();
  assert.equal(sample(text, 'edgeplug_registrations_total{type="acme.io/t63",result="failure"}'), 1);
  assert.equal(sample(text, 'edgeplug_registrations_total{type="acme.io/t64",result="failure"}'), undefined);
  assert.equal(sample(text, 'edgeplug_registrations_total{type="other",result="failure"}'), 6);
  metrics.close();
});

test("device gauges come from the resources provider; allocations are counted per resource", async () => {
  const resources: ResourceSample[] = [{ name: "acme.io/gpu", healthy: ["gpu0", "gpu1", "gpu2"], unhealthy: ["gpu3"] }];
  const metrics = createMetrics({ plugins: () => [], resources: () => resources, processMetrics: false });
  metrics.observeAllocation("acme.io/gpu");
  const text = await metrics.registry.metrics();
  assert.equal(sample(text, 'edgeplug_devices{resource="acme.io/gpu",health="healthy"}'), 3);
  assert.equal(sample(text, 'edgeplug_devices{resource="acme.io/gpu",health="unhealthy"}'), 1);
  assert.equal(sample(text, 'edgeplug_allocations_total{resource="acme.io/gpu"}'), 1);
  metrics.close();
});

test("edgeplug_watch_left_out follows what the watcher leaves out at every scrape, 0 while nothing is", async () => {
  let reached: { skippedDirectories: number; skippedSockets: number } | null = { skippedDirectories: 2, skippedSockets: 5 };
  const metrics = createMetrics({ plugins: () => [], watchLimits: () => reached, processMetrics: false });
  const left = async () => {
    const text = await metrics.registry.metrics();
    return [sample(text, 'edgeplug_watch_left_out{kind="directories"}'), sample(text, 'edgeplug_watch_left_out{kind="sockets"}')];
  };
  assert.deepEqual(await left(), [2, 5]);
  reached = null;
  assert.deepEqual(await left(), [0, 0]);
  metrics.close();
});

test("process metrics are in the agent's registry, not prom-client's global one", async () => {
  const { register } = await import("prom-client");
  const first = createMetrics({ plugins: () => [] });
  const second = createMetrics({ plugins: () => [] });
  for (const metrics of [first, second]) {
    const text = await metrics.registry.metrics();
    assert.match(text, /^process_cpu_user_seconds_total \d/m);
    assert.match(text, /^process_start_time_seconds \d/m);
  }
  assert.equal((await register.metrics()).trim(), "");
  first.close();
  assert.match(await second.registry.metrics(), /^process_cpu_user_seconds_total \d/m, "closing one agent's metrics leaves the other's");
  second.close();
});

test("api.metrics addresses: host:port, [v6]:port, :port; anything else names the setting", () => {
  assert.deepEqual(parseListenAddress("127.0.0.1:9478"), { host: "127.0.0.1", port: 9478 });
  assert.deepEqual(parseListenAddress("[::1]:9478"), { host: "::1", port: 9478 });
  assert.deepEqual(parseListenAddress(":9478"), { host: undefined, port: 9478 });
  assert.deepEqual(parseListenAddress("localhost:0"), { host: "localhost", port: 0 });
  for (const bad of ["9478", "127.0.0.1", "127.0.0.1:70000", "::1:9478", "host:port"]) {
    assert.throws(() => parseListenAddress(bad), new RegExp(`api\\.metrics: expected host:port like "127\\.0\\.0\\.1:9478", got "${bad.replace(/[.]/g, "\\.")}"`));
  }
});

test("edgeplug_build_info names the build, and the reload gauges follow each reload's outcome", async () => {
  let now = 1_700_000_000;
  const metrics = createMetrics({
    plugins: () => [],
    processMetrics: false,
    build: { version: "0.1.0", commit: "abc1234", runtime: "node v24.21.0" },
    nowSeconds: () => now,
  });
  const atStart = await metrics.registry.metrics();
  assert.equal(sample(atStart, 'edgeplug_build_info{version="0.1.0",commit="abc1234",runtime="node v24.21.0"}'), 1);
  assert.equal(sample(atStart, "edgeplug_config_last_reload_successful"), 1, "the policy loaded at start counts");
  assert.equal(sample(atStart, "edgeplug_config_last_reload_success_timestamp_seconds"), 1_700_000_000);

  now += 60;
  metrics.observeConfigReload(false);
  const refused = await metrics.registry.metrics();
  assert.equal(sample(refused, "edgeplug_config_last_reload_successful"), 0);
  assert.equal(sample(refused, "edgeplug_config_last_reload_success_timestamp_seconds"), 1_700_000_000, "still the policy in force");

  now += 60;
  metrics.observeConfigReload(true);
  const applied = await metrics.registry.metrics();
  assert.equal(sample(applied, "edgeplug_config_last_reload_successful"), 1);
  assert.equal(sample(applied, "edgeplug_config_last_reload_success_timestamp_seconds"), 1_700_000_120);
  metrics.close();
});

test("limit refusals are counted by listener and a fixed action word", async () => {
  const metrics = createMetrics({ plugins: () => [], processMetrics: false });
  metrics.observeLimit("api", "rate_limited");
  metrics.observeLimit("api", "rate_limited");
  metrics.observeLimit("metrics", "connection_cap");
  metrics.observeLimit("api", "not a word\nwith newline");
  const text = await metrics.registry.metrics();
  assert.equal(sample(text, 'edgeplug_limited_total{listener="api",action="rate_limited"}'), 2);
  assert.equal(sample(text, 'edgeplug_limited_total{listener="metrics",action="connection_cap"}'), 1);
  assert.equal(sample(text, 'edgeplug_limited_total{listener="api",action="other"}'), 1);
  metrics.close();
});
