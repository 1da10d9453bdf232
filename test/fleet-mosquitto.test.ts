/**
 * The fleet link (docs/fleet.md) of dist/edgeplug against a real Mosquitto
 * on loopback: the retained status a subscriber sees, events in order, the
 * will on kill -9 (when the broker sees the connection close, not at its
 * keepalive) and `online: false` on a clean stop; the broker stopped
 * while plugins churn (reconnect, republish, the queue and its gap); wrong
 * credentials and an ACL refusal that leave the agent healthy, named in
 * `status` and logged once; a TLS listener; a frozen broker, given up when
 * the online refresh (the keepalive) goes unacknowledged.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { type AgentProcess, runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { type Received, startMosquitto, subscribe, writeFleetPolicy } from "./support/brokers.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { type FakePlugin, startFakePlugin, startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const sensor = (name: string) => ({ type: "acme.io/Sensor", name, versions: ["v1"] });

async function startAgent(t: Parameters<typeof killAfter>[0], policyPath: string): Promise<AgentProcess> {
  const agent = startEdgeplug(["run", "--config", policyPath]);
  killAfter(t, agent.child);
  await agent.waitForLog("edgeplug running");
  return agent;
}

/** Status JSON (docs/status-json.md), and the retained status the link publishes, as far as these tests read them. */
interface StatusView {
  ok: boolean;
  plugins?: { name: string; state: string }[];
  fleet: { state: string; error: string; drops: number; reconnects: number; queuedEvents: number };
}

/** A published event, as far as these tests read it (a gap says how many were dropped). */
interface EventView {
  kind: string;
  sequence: number;
  dropped: number;
  plugin: { name: string; state: string };
}

async function statusJson(apiSocket: string): Promise<StatusView> {
  const answer = await runEdgeplug(["status", "--api", apiSocket, "--output", "json", "--exit-zero"]);
  assert.equal(answer.code, 0, answer.stderr);
  return JSON.parse(answer.stdout);
}

/** The events of `messages`, parsed, in arrival order. */
const eventsIn = (messages: Received[], topic: string) => messages.filter((m) => m.topic === topic).map((m) => JSON.parse(m.text) as EventView);

/**
 * The keepalive of the kill -9 test: the broker would publish the will of a connection it never saw close once 1.5 x
 * this passed in silence. Long, so that the will arriving in under a third of that (the wait's bound) shows it came
 * from the closed connection, and a loaded machine is never near the bound.
 */
const KILL_TEST_KEEPALIVE_S = 30;

test("mosquitto: a registered plugin is in the retained status, events arrive in order, kill -9 turns online false as the connection closes, a clean stop says so itself", async (t) => {
  const broker = await startMosquitto(t);
  const dir = tempDir(t);
  const policy = writeFleetPolicy(dir, "node-a", `  brokers: ["${broker.url}"]\n  keepalive: ${KILL_TEST_KEEPALIVE_S}s\n  minInterval: 0s`);
  const watcher = await subscribe(t, broker.url, "edgeplug/v1/node-a/#");
  const agent = await startAgent(t, policy.path);
  await watcher.waitFor("online true", () => watcher.latest("edgeplug/v1/node-a/online")?.online === true);

  const plugin = await startTestPlugin(t, { socketPath: path.join(policy.registry, "thermo.sock"), info: sensor("acme.io/thermo") });
  await plugin.waitForNotify();
  const registered = (status: StatusView | undefined) => status?.plugins?.some((p: Record<string, unknown>) => p.name === "acme.io/thermo" && p.state === "registered") === true;
  await watcher.waitFor("the status with the registered plugin", () => registered(watcher.latest("edgeplug/v1/node-a/status") as StatusView | undefined));
  // Retained: a subscriber arriving now gets it at once, in the shape of `status --output json`.
  const late = await subscribe(t, broker.url, "edgeplug/v1/node-a/status");
  await late.waitFor("the retained status", () => late.messages.some((m) => m.retain && registered(JSON.parse(m.text))));
  const fromApi = await statusJson(policy.apiSocket);
  const retained = JSON.parse(late.messages.find((m) => m.retain)!.text);
  assert.deepEqual(Object.keys(retained), Object.keys(fromApi), "the same members as status --output json");
  assert.deepEqual(fromApi.fleet.state, "connected");

  const events = eventsIn(watcher.messages, "edgeplug/v1/node-a/events");
  assert.ok(events.some((e) => e.kind === "plugin" && e.plugin.state === "registered"), JSON.stringify(events));
  const sequences = events.map((e) => e.sequence);
  assert.deepEqual(sequences, sequences.map((_, i) => sequences[0] + i), "in order, none missing");

  agent.child.kill("SIGKILL");
  const willBoundMs = (1.5 * KILL_TEST_KEEPALIVE_S * 1000) / 3;
  await watcher.waitFor("online false from the will, once the connection closed", () => watcher.latest("edgeplug/v1/node-a/online")?.online === false, willBoundMs);
  // The broker's will, not a message of the agent: the will carries no `since`.
  assert.equal(watcher.latest("edgeplug/v1/node-a/online")?.since, undefined);

  const again = await startAgent(t, policy.path);
  await watcher.waitFor("online again", () => watcher.latest("edgeplug/v1/node-a/online")?.online === true);
  again.child.kill("SIGTERM");
  assert.equal((await again.exited).code, 0);
  // The agent's own offline message (with `since`; a clean disconnect gets no will): without it the node would stay
  // online until --stale. The wait's bound only ends a wait for a message that never comes.
  await watcher.waitFor("online false from the clean stop", () => {
    const online = watcher.latest("edgeplug/v1/node-a/online");
    return online?.online === false && typeof online.since === "string";
  }, 15_000);
});

test("mosquitto frozen (SIGSTOP, its connections open): the link gives the connection up as its online refresh goes unacknowledged, and is back once the broker answers", async (t) => {
  const broker = await startMosquitto(t);
  const dir = tempDir(t);
  const keepaliveMs = 2_000;
  const policy = writeFleetPolicy(dir, "node-z", `  brokers: ["${broker.url}"]\n  keepalive: ${keepaliveMs / 1000}s`);
  const agent = await startAgent(t, policy.path);
  await agent.waitForLog("fleet link connected");
  broker.signal("SIGSTOP");
  try {
    // A frozen broker keeps the connection open and sends nothing: only the refresh check gives it up (about 2 x
    // keepalive after the freeze: the last acknowledged refresh at most a keepalive before it, the next unanswered
    // one given up a keepalive later). The error names that check; the wait's bound (15 x keepalive) only ends a
    // wait for a link that never gives up.
    const lost = await agent.waitForLog("fleet link lost, reconnecting", 15 * keepaliveMs);
    assert.match(String(lost.error), /did not acknowledge the online refresh within the keepalive/);
    assert.notEqual((await statusJson(policy.apiSocket)).fleet.state, "connected");
  } finally {
    broker.signal("SIGCONT");
  }
  await agent.waitForLog("fleet link connected", 30_000, () => agent.logs().filter((r) => r.msg === "fleet link connected").length >= 2);
  assert.equal((await statusJson(policy.apiSocket)).fleet.state, "connected");
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("mosquitto: with the agent's resync (1 s) within the keepalive (2 s), the online refresh rides on it: about one a keepalive, never two a resync apart, within the broker's 1.5 x keepalive", async (t) => {
  const broker = await startMosquitto(t);
  const dir = tempDir(t);
  const policy = writeFleetPolicy(dir, "node-r", `  brokers: ["${broker.url}"]\n  keepalive: 2s`);
  fs.writeFileSync(policy.path, fs.readFileSync(policy.path, "utf8").replace("reconcile: { backoff", "reconcile: { resync: 1s, backoff"));
  const watcher = await subscribe(t, broker.url, "edgeplug/v1/node-r/online");
  const agent = await startAgent(t, policy.path);
  await agent.waitForLog("fleet link connected");
  const refreshes = () => watcher.messages.filter((m) => !m.retain && JSON.parse(m.text).online === true);
  await watcher.waitFor("five refreshes", () => refreshes().length >= 5, 20_000);
  const times = refreshes().map((m) => Date.parse(JSON.parse(m.text).updatedAt));
  const gaps = times.slice(1).map((time, i) => time - times[i]!);
  // Due after keepalive - resync/2 = 1.5 s, so sent on the resync at about 2 s; one per resync would be 1 s apart.
  // A lower bound: a loaded machine only delays a resync, which widens a gap.
  assert.ok(gaps.every((gap) => gap >= 1_300), `refreshes ${gaps.join(", ")} ms apart: two a resync apart`);
  // Within the broker's 1.5 x keepalive: Mosquitto ends a connection silent for longer, and the link would log it.
  assert.equal(agent.logs().filter((r) => r.msg === "fleet link lost, reconnecting").length, 0);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("mosquitto stopped while 20 plugins churn: the agent reconnects by itself, republishes online and status, sends queued events in order, and a gap beyond the bound", async (t) => {
  const broker = await startMosquitto(t, { persistence: true });
  const dir = tempDir(t);
  const policy = writeFleetPolicy(dir, "node-b", `  brokers: ["${broker.url}"]\n  keepalive: 2s\n  minInterval: 0s`);
  const agent = await startAgent(t, policy.path);
  // Events are not retained: a subscriber that came back after the restarted broker took the agent's queue would miss it.
  // A persistent session subscribed now is restored by the broker before it listens again, so it gets every event sent after.
  const watcher = await subscribe(t, broker.url, "edgeplug/v1/node-b/#", { session: "test-watcher-node-b" });
  await watcher.waitFor("online", () => watcher.latest("edgeplug/v1/node-b/online")?.online === true);
  await broker.stop();
  /**
   * The events that came from the message at `mark` on, read as docs/fleet.md tells a subscriber to: a sequence seen
   * before dropped. The restarted broker redelivers, marked DUP, what it had sent the session and not seen acknowledged.
   */
  const eventsAfter = (mark: number) => {
    const seen = new Set(eventsIn(watcher.messages.slice(0, mark), "edgeplug/v1/node-b/events").map((e) => e.sequence));
    const fresh: EventView[] = [];
    for (const event of eventsIn(watcher.messages.slice(mark), "edgeplug/v1/node-b/events")) {
      if (seen.has(event.sequence)) continue;
      seen.add(event.sequence);
      fresh.push(event);
    }
    return fresh;
  };

  // One round: 20 plugins register, then leave (sockets removed): some 60 events.
  const round = async (tag: string) => {
    const plugins: FakePlugin[] = [];
    for (let i = 0; i < 20; i++) plugins.push(await startFakePlugin({ socketPath: path.join(policy.registry, `p${i}.sock`), info: sensor(`acme.io/${tag}-${i}`) }));
    await Promise.all(plugins.map((plugin) => plugin.waitForNotify()));
    await Promise.all(plugins.map((plugin) => plugin.stop()));
  };
  await round("first");
  const before = await statusJson(policy.apiSocket);
  assert.notEqual(before.fleet.state, "connected");
  assert.ok(before.fleet.queuedEvents > 20 && before.fleet.queuedEvents < 1000, JSON.stringify(before.fleet));
  const last = await startFakePlugin({ socketPath: path.join(policy.registry, "last.sock"), info: sensor("acme.io/last") });
  t.after(() => last.stop());
  await last.waitForNotify();

  const sentBefore = eventsIn(watcher.messages, "edgeplug/v1/node-b/events").at(-1)?.sequence ?? 0;
  const restartedAt = watcher.messages.length;
  await broker.start();
  // The agent's next attempt comes within its backoff, at most 60 s.
  await watcher.waitFor("online again and the latest status", () => {
    const status = watcher.latest("edgeplug/v1/node-b/status") as { plugins?: { name: string }[] } | undefined;
    return watcher.latest("edgeplug/v1/node-b/online")?.online === true && status?.plugins?.length === 1 && status.plugins[0]!.name === "acme.io/last";
  }, 65_000);
  await watcher.waitFor("every queued event", () => eventsAfter(restartedAt).some((e) => e.plugin?.name === "acme.io/last" && e.plugin.state === "registered"), 30_000);
  const delivered = eventsAfter(restartedAt);
  assert.equal(delivered.some((e) => e.kind === "gap"), false, "within the bound nothing is dropped");
  const sequences = delivered.map((e) => e.sequence);
  assert.deepEqual(sequences, sequences.map((_, i) => sentBefore + 1 + i), "in order, none missing");
  assert.equal(agent.logs().filter((r) => r.msg === "fleet link lost, reconnecting").length, 1);

  // Beyond the bound: the broker away for over 1,000 events.
  await broker.stop();
  while ((await statusJson(policy.apiSocket)).fleet.drops === 0) await round(`flood${Date.now()}`);
  const flooded = await statusJson(policy.apiSocket);
  assert.equal(flooded.fleet.queuedEvents, 1000);
  const floodedAt = watcher.messages.length;
  await broker.start();
  await watcher.waitFor("a gap, then the newest events", () => eventsAfter(floodedAt).length >= 1001, 75_000);
  const [gap, ...kept] = eventsAfter(floodedAt);
  assert.equal(gap!.kind, "gap");
  assert.equal(gap!.sequence, sequences.at(-1)! + 1, "the gap comes first, where the events dropped begin");
  assert.ok(gap!.dropped > 0);
  assert.equal(kept[0]!.sequence, gap!.sequence + gap!.dropped, "the gap says where and how many");
  const after = await statusJson(policy.apiSocket);
  assert.equal(after.fleet.drops >= gap!.dropped, true);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("mosquitto: a wrong password and an ACL refusal leave the agent healthy, are named in status and logged once; TLS with a CA connects", async (t) => {
  const acl = ["user edge", "topic read edgeplug/#", "pattern write edgeplug/v1/%c/#", ""].join("\n");
  const broker = await startMosquitto(t, { users: { edge: "right-password" }, acl, tls: true });
  const dir = tempDir(t);
  const user = path.join(dir, "user");
  const password = path.join(dir, "password");
  fs.writeFileSync(user, "edge\n", { mode: 0o600 });
  fs.writeFileSync(password, "wrong-password\n", { mode: 0o600 });
  const credentials = `  usernameFile: ${user}\n  passwordFile: ${password}\n  keepalive: 2s`;

  const wrong = writeFleetPolicy(path.join(dir, "wrong"), "node-c", `  brokers: ["${broker.url}"]\n${credentials}`);
  const agent = await startAgent(t, wrong.path);
  const plugin = await startTestPlugin(t, { socketPath: path.join(wrong.registry, "thermo.sock"), info: sensor("acme.io/thermo") });
  await plugin.waitForNotify();
  // Several retries later (0.5 s doubling): the cause in status, one log line.
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const refused = await statusJson(wrong.apiSocket);
  assert.equal(refused.ok, true, "the node is fine");
  assert.equal(refused.fleet.state, "error");
  assert.match(refused.fleet.error, /Bad User Name or Password|Not authorized/i);
  assert.ok(refused.fleet.reconnects >= 2, JSON.stringify(refused.fleet));
  assert.equal(agent.logs().filter((r) => String(r.msg).startsWith("fleet link")).length, 1, JSON.stringify(agent.logs()));
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);

  // The right password, but the client id is not the node name: the ACL refuses its topics.
  fs.writeFileSync(password, "right-password\n");
  const denied = writeFleetPolicy(path.join(dir, "denied"), "node-d", `  brokers: ["${broker.url}"]\n  clientId: someone-else\n${credentials}`);
  const deniedAgent = await startAgent(t, denied.path);
  const deniedPlugin = await startTestPlugin(t, { socketPath: path.join(denied.registry, "thermo.sock"), info: sensor("acme.io/thermo") });
  await deniedPlugin.waitForNotify();
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const acl403 = await statusJson(denied.apiSocket);
  assert.equal(acl403.ok, true);
  assert.equal(acl403.fleet.state, "error");
  assert.match(acl403.fleet.error, /Not authorized/);
  assert.ok(deniedAgent.logs().filter((r) => r.msg === "fleet link error, retrying with backoff").length <= 1, JSON.stringify(deniedAgent.logs()));
  deniedAgent.child.kill("SIGTERM");
  assert.equal((await deniedAgent.exited).code, 0);

  // Group-readable password file: refused before any connection.
  fs.chmodSync(password, 0o640);
  const exposed = writeFleetPolicy(path.join(dir, "exposed"), "node-e", `  brokers: ["${broker.url}"]\n${credentials}`);
  const exposedAgent = await startAgent(t, exposed.path);
  await exposedAgent.waitForLog("fleet link error, retrying with backoff");
  assert.match((await statusJson(exposed.apiSocket)).fleet.error, /readable by group or others \(mode 0640\)/);
  exposedAgent.child.kill("SIGTERM");
  assert.equal((await exposedAgent.exited).code, 0);
  fs.chmodSync(password, 0o600);

  // TLS: the listener's certificate chains to the CA given.
  const tls = writeFleetPolicy(path.join(dir, "tls"), "node-f", `  brokers: ["${broker.tlsUrl}"]\n${credentials}\n  tls: { ca: ${broker.ca} }`);
  const tlsAgent = await startAgent(t, tls.path);
  await tlsAgent.waitForLog("fleet link connected");
  const reader = await runEdgeplug(["fleet", "status", "--broker", broker.tlsUrl!, "--ca", broker.ca!, "--username-file", user, "--password-file", password, "--output", "json"]);
  const fleet = JSON.parse(reader.stdout);
  assert.equal(fleet.rows.find((row: Record<string, unknown>) => row.node === "node-f")?.state, "online", reader.stdout + reader.stderr);
  tlsAgent.child.kill("SIGTERM");
  assert.equal((await tlsAgent.exited).code, 0);
});
