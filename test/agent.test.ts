/**
 * The daemon in-process: the event stream, the API socket speaking gRPC and
 * JSON over HTTP/1.1, metrics, readiness and liveness, and live policy
 * changes as the agent applies them.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { Agent, type Event } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Verdict } from "../src/api/health.ts";
import type { Clock } from "../src/platform/clock.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { leaveStaleSocket, startFakePlugin, startTestPlugin } from "./support/fake-plugin.ts";
import { manualClock } from "./support/manual-clock.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";
import { curlAgentStatus } from "./support/curl.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };

interface Harness {
  dir: string;
  registry: string;
  policy: Policy;
  agent: EdgeplugAgent;
  logs: Array<Record<string, unknown>>;
}

/** An agent with its API socket and metrics on a free port, all under a temp dir. */
async function startAgent(
  t: test.TestContext,
  options: { policy?: (policy: Policy) => Policy; clock?: Clock; start?: boolean } = {},
): Promise<Harness> {
  const dir = tempDir(t);
  const registry = path.join(dir, "registry");
  const base = testPolicy({ watch: [registry] });
  const policy = (options.policy ?? ((p) => p))({
    ...base,
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: "127.0.0.1:0" },
  });
  const logs: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: "debug", format: "json", write: (line) => void logs.push(JSON.parse(line)) });
  const agent = new EdgeplugAgent({ policy, log, clock: options.clock });
  t.after(() => agent.stop());
  if (options.start !== false) await agent.start();
  return { dir, registry, policy, agent, logs };
}

/** The agent's event stream, read one event at a time. */
function watchEvents(t: test.TestContext, socket: string) {
  const channel = dialUnix(socket);
  const abort = new AbortController();
  t.after(() => {
    abort.abort();
    channel.close();
  });
  const iterator = createClient(Agent, channel.transport).watchEvents({}, { signal: abort.signal })[Symbol.asyncIterator]();
  return async (): Promise<Event> => {
    const { value, done } = await iterator.next();
    assert.equal(done, false, "the event stream ended");
    return value;
  };
}

const pluginEvent = (event: Event) => {
  assert.equal(event.kind.case, "plugin");
  const { plugin, removed } = event.kind.value as { plugin: { socket: string; state: string }; removed: boolean };
  return [path.basename(plugin.socket), removed ? "removed" : plugin.state];
};

test("WatchEvents sends a snapshot, then register, deregister and stale events in order", async (t) => {
  const { agent, registry, policy } = await startAgent(t);
  const first = await startTestPlugin(t, { socketPath: path.join(registry, "early.sock"), info: sensor });
  await first.waitForNotify();

  const next = watchEvents(t, policy.api.socket!);
  const snapshot = await next();
  assert.equal(snapshot.sequence, 0n);
  assert.equal(snapshot.kind.case, "snapshot");
  assert.deepEqual(
    snapshot.kind.value!.plugins.map((p) => [path.basename(p.socket), p.state]),
    [["early.sock", "registered"]],
  );

  const second = await startFakePlugin({ socketPath: path.join(registry, "late.sock"), info: sensor });
  assert.deepEqual(pluginEvent(await next()), ["late.sock", "pending"]);
  assert.deepEqual(pluginEvent(await next()), ["late.sock", "registered"]);
  await second.stop();
  assert.deepEqual(pluginEvent(await next()), ["late.sock", "removed"]);
  await leaveStaleSocket(path.join(registry, "dead.sock"));
  assert.deepEqual(pluginEvent(await next()), ["dead.sock", "pending"]);
  const stale = await next();
  assert.deepEqual(pluginEvent(stale), ["dead.sock", "stale"]);
  assert.equal(stale.sequence, 5n, "one sequence number per event, in order");
  assert.equal(agent.status().ok, false);
});

test("the API socket answers gRPC and curl's JSON over HTTP/1.1 with the same status", async (t) => {
  const { registry, policy } = await startAgent(t);
  const plugin = await startTestPlugin(t, { socketPath: path.join(registry, "p.sock"), info: sensor });
  await plugin.waitForNotify();

  const channel = dialUnix(policy.api.socket!);
  t.after(() => channel.close());
  const viaGrpc = await createClient(Agent, channel.transport).status({});
  const viaCurl = await curlAgentStatus(policy.api.socket!);
  assert.equal(viaCurl.ok, true);
  assert.equal(viaCurl.node, viaGrpc.node);
  assert.deepEqual(viaCurl.resources, [], "default values are included");
  assert.equal(viaCurl.plugins.length, 1);
  assert.equal(viaCurl.plugins[0].socket, viaGrpc.plugins[0]!.socket);
  assert.equal(viaCurl.plugins[0].state, "registered");
  assert.equal(viaCurl.plugins[0].name, sensor.name);
  assert.equal(viaCurl.plugins[0].attempts, 1);
  assert.match(viaCurl.plugins[0].registeredAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  assert.equal((fs.statSync(policy.api.socket!).mode & 0o777).toString(8), "660");
});

test("/metrics counts registrations and reports the kubelet's plugin gauge", async (t) => {
  const { agent, registry } = await startAgent(t);
  const plugins = await Promise.all(
    ["a", "b"].map((name) => startTestPlugin(t, { socketPath: path.join(registry, `${name}.sock`), info: sensor })),
  );
  const refused = await startTestPlugin(t, {
    socketPath: path.join(registry, "x.sock"),
    info: { type: "other.io/Thing", name: "other.io/x" },
  });
  await Promise.all([...plugins, refused].map((p) => p.waitForNotify()));

  const text = await (await fetch(`${agent.metricsUrl}/metrics`)).text();
  const socketOf = (name: string) => path.join(registry, name);
  assert.match(text, new RegExp(`plugin_manager_total_plugins\\{socket_path="${socketOf("a.sock")}",state="actual_state_of_world"\\} 1`));
  assert.match(text, new RegExp(`plugin_manager_total_plugins\\{socket_path="${socketOf("x.sock")}",state="desired_state_of_world"\\} 1`));
  assert.doesNotMatch(text, new RegExp(`socket_path="${socketOf("x.sock")}",state="actual_state_of_world"`));
  assert.match(text, /edgeplug_registrations_total\{type="acme.io\/Sensor",result="success"\} 2/);
  assert.match(text, /edgeplug_registration_failures_total\{type="other.io\/Thing",reason="no_handler"\} [1-9]/);
  assert.match(text, /edgeplug_registration_duration_seconds_count\{type="acme.io\/Sensor"\} 2/);
  assert.match(text, /process_resident_memory_bytes \d+/);
});

test("/readyz turns ready only once the initial walk is done", async (t) => {
  const harness = await startAgent(t, { start: false });
  // A socket there before start is found by the initial walk: its discovery is seen from inside the walk.
  fs.mkdirSync(harness.registry, { recursive: true });
  await startTestPlugin(t, { socketPath: path.join(harness.registry, "early.sock"), info: sensor });
  let duringWalk: Verdict | undefined;
  harness.agent.pluginStatus.subscribe(() => (duringWalk ??= harness.agent.health.readiness()));
  await harness.agent.start();
  assert.deepEqual(
    duringWalk?.checks.map((check) => [check.name, check.ok]),
    [["api-serving", true], ["checkpoint-restored", true], ["initial-walk", false]],
    "serving and restored, not yet walked",
  );
  const after = await fetch(`${harness.agent.metricsUrl}/readyz`);
  assert.equal(after.status, 200, await after.text());
});

test("/healthz turns 503 when the reconciler stalls and recovers when it beats again", async (t) => {
  const clock = manualClock(Date.now());
  const { agent } = await startAgent(t, { clock, policy: (p) => ({ ...p, reconcile: { ...p.reconcile, resyncMs: 40 } }) });
  const healthz = async () => {
    const response = await fetch(`${agent.metricsUrl}/healthz`);
    return `${response.status} ${await response.text()}`;
  };
  assert.equal(await healthz(), "200 ok");
  // Three resync periods and a bit go by and the reconciler's timer does not fire: stuck.
  clock.skip(121);
  assert.equal(await healthz(), "503 [-]reconciler no heartbeat for 121ms (bound 120ms: 3 resync periods of 40ms)\nhealthz check failed\n");
  // The overdue resync runs: one pass, one heartbeat.
  clock.advance(0);
  assert.equal(await healthz(), "200 ok");
});

test("a reload that changes api.socket is logged as needing a restart and the old socket keeps serving", async (t) => {
  const { agent, policy, logs } = await startAgent(t);
  agent.applyPolicy({ ...policy, api: { ...policy.api, socket: `${policy.api.socket}.new` } });
  const warning = logs.find((record) => record.msg === "policy change needs a restart to take effect");
  assert.equal(warning?.key, "api.socket");
  assert.equal(warning?.running, policy.api.socket);
  const channel = dialUnix(policy.api.socket!);
  t.after(() => channel.close());
  assert.equal((await createClient(Agent, channel.transport).status({})).node, policy.nodeName);
  assert.equal(fs.existsSync(`${policy.api.socket}.new`), false);
});

test("a reload that declares a handler registers the plugin that was waiting for it", async (t) => {
  const { agent, registry, policy } = await startAgent(t, {
    policy: (p) => ({ ...p, handlers: new Map() }),
  });
  const waiting = await startTestPlugin(t, { socketPath: path.join(registry, "w.sock"), info: sensor });
  const refusal = await waiting.waitForNotify();
  assert.match(refusal.error, /no handler registered for plugin type: acme\.io\/Sensor/);
  agent.applyPolicy({ ...policy, handlers: testPolicy({ watch: [registry] }).handlers });
  const accepted = await waiting.waitForNotify((n) => n.registered);
  assert.equal(accepted.error, "");
  assert.equal(await agent.pluginStatus.whenSettled({ signal: AbortSignal.timeout(5000) }), true);
  assert.equal(agent.status().plugins[0]!.state, "registered");
});
