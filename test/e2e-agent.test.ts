/**
 * End-to-end on the built executable: the daemon (register, deregister,
 * status, clean stop, socket already in use) and `--reconcile-once` (exit
 * codes, timeout, expectations, bad policy), with real plugins on real sockets.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { openDescriptors, policyWithRegistry, runEdgeplug, startDaemon, startEdgeplug, STOPPED_WELL_INSIDE_UNIT_TIMEOUT_MS, waitForPath, writePolicy } from "./support/agent-process.ts";
import { leaveStaleSocket, startFakePlugin, startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };
/** A plugin of a type no handler in writePolicy's default policy takes. */
const thing = { type: "other.io/Thing", name: "other.io/thing" };

test("daemon registers a plugin, shows it in status, deregisters it, and stops cleanly", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const pid = agent.child.pid!;

  const channel = dialUnix(policy.apiSocket);
  t.after(() => channel.close());
  const client = createClient(Agent, channel.transport);
  const watch = new AbortController();
  const events = client.watchEvents({}, { signal: watch.signal })[Symbol.asyncIterator]();
  const snapshot = await events.next();
  assert.equal(snapshot.value.kind.case, "snapshot");
  const descriptorsAtStart = openDescriptors(pid);

  // Five plugins come and go; each registers and leaves the list again.
  for (let round = 0; round < 5; round++) {
    const plugin = await startFakePlugin({ socketPath: path.join(policy.registry, `thermo-${round}.sock`), info: sensor });
    assert.deepEqual(await plugin.waitForNotify(), { ...plugin.notifications()[0], registered: true, error: "" });
    const status = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json"]);
    assert.equal(status.code, 0, status.stderr);
    const shown = JSON.parse(status.stdout);
    assert.equal(shown.ok, true);
    assert.deepEqual(
      shown.plugins.map((p: Record<string, unknown>) => [p.socket, p.type, p.name, p.state, p.error]),
      [[plugin.socketPath, sensor.type, sensor.name, "registered", null]],
    );
    await plugin.stop();
    for (;;) {
      const { value } = await events.next();
      if (value.kind.case === "plugin" && value.kind.value.removed) {
        assert.equal(value.kind.value.plugin?.socket, plugin.socketPath);
        break;
      }
    }
  }
  // Registration connections are closed after each attempt, and nothing else accumulates.
  assert.ok(
    openDescriptors(pid) <= descriptorsAtStart,
    `descriptors grew from ${descriptorsAtStart} to ${openDescriptors(pid)}`,
  );
  watch.abort();
  channel.close();

  const survivor = await startTestPlugin(t, { socketPath: path.join(policy.registry, "survivor.sock"), info: sensor });
  await survivor.waitForNotify();
  const stoppedAt = performance.now();
  agent.child.kill("SIGTERM");
  const { code } = await agent.exited;
  const stopMs = performance.now() - stoppedAt;
  assert.equal(code, 0, agent.stderr());
  assert.ok(stopMs < STOPPED_WELL_INSIDE_UNIT_TIMEOUT_MS, `exited ${Math.round(stopMs)} ms after SIGTERM: near the unit's stop timeout`);
  // Nothing left open held the process after the stop (entry.ts would say so, and exit a second later).
  assert.equal(agent.logs().some((r) => String(r.msg).startsWith("open handles kept the process alive")), false, agent.stderr());
  assert.equal(fs.existsSync(policy.apiSocket), false, "the API socket is removed");
  assert.equal(fs.lstatSync(survivor.socketPath).isSocket(), true, "plugin sockets are never touched");
});

test("a second daemon on the same API socket exits 1 naming the holder", async (t) => {
  const { policy, agent: first } = await startDaemon(t);

  const second = await runEdgeplug(["run", "--config", policy.path]);
  assert.equal(second.code, 1);
  assert.match(second.stderr, /api\.sock is in use by another edgeplug \(node e2e-node\)/);
  // JSON logs (the policy's): the reason is a log record too, not a plain line among them.
  assert.ok(second.stderr.trimEnd().split("\n").every((line) => line.startsWith("{") && JSON.parse(line).msg), second.stderr);

  first.child.kill("SIGTERM");
  assert.equal((await first.exited).code, 0);
});

test("status exits 1 when no agent is running", async (t) => {
  const dir = tempDir(t);
  const result = await runEdgeplug(["status", "--api", path.join(dir, "nothing.sock")]);
  assert.equal(result.code, 1);
  assert.match(result.stderr, /unreachable: no socket there/);
});

test("--reconcile-once exits 0 when every plugin registers, with the JSON report", async (t) => {
  const policy = policyWithRegistry(t);
  const plugins = await Promise.all(
    [0, 1].map((i) => startTestPlugin(t, { socketPath: path.join(policy.registry, `s${i}.sock`), info: sensor })),
  );

  const result = await runEdgeplug(["run", "--config", policy.path, "--reconcile-once", "--output", "json"]);
  assert.equal(result.code, 0, result.stderr);
  const report = JSON.parse(result.stdout);
  assert.equal(report.schema, 1);
  assert.equal(report.ok, true);
  assert.equal(report.node, "e2e-node");
  assert.ok(!Number.isNaN(Date.parse(report.startedAt)));
  assert.equal(typeof report.durationMs, "number");
  assert.deepEqual(
    report.plugins.map((p: Record<string, unknown>) => [p.name, p.state, p.attempts]),
    [
      [sensor.name, "registered", 1],
      [sensor.name, "registered", 1],
    ],
  );
  for (const plugin of plugins) assert.equal((await plugin.waitForNotify()).registered, true);
  assert.equal(fs.existsSync(policy.apiSocket), false, "--reconcile-once never binds the API socket");
});

test("--reconcile-once exits 1 with a plugin no handler takes, saying why", async (t) => {
  const policy = policyWithRegistry(t);
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const stranger = await startTestPlugin(t, { socketPath: path.join(policy.registry, "stranger.sock"), info: thing });

  const result = await runEdgeplug(["run", "--config", policy.path, "--reconcile-once", "--timeout", "1s", "--output", "json"]);
  assert.equal((await good.waitForNotify()).registered, true);
  assert.equal(result.code, 1, result.stderr);
  const report = JSON.parse(result.stdout);
  assert.equal(report.ok, false);
  const byName = Object.fromEntries(report.plugins.map((p: Record<string, unknown>) => [p.name, p]));
  assert.equal(byName[sensor.name].state, "registered");
  assert.equal(byName["other.io/thing"].state, "failed");
  assert.match(byName["other.io/thing"].error, /no handler registered for plugin type: other\.io\/Thing/);
  const refusal = await stranger.waitForNotify();
  assert.equal(refusal.registered, false);
});

test("--reconcile-once honours --timeout when a plugin hangs in GetInfo", async (t) => {
  const policy = policyWithRegistry(t, { reconcile: "  timeouts: { getInfo: 300ms }\n  backoff: { initial: 50ms, max: 100ms }" });
  await startTestPlugin(t, { socketPath: path.join(policy.registry, "hang.sock"), info: sensor, hangGetInfo: true });

  // A run that did not honour --timeout would never end (the plugin hangs every GetInfo and is retried): that it
  // ends, exit 1 with the report, is the check; the watchdog only turns such a run into a failure with a message.
  const run = startEdgeplug(["run", "--config", policy.path, "--reconcile-once", "--timeout", "1500ms", "--output", "json"]);
  killAfter(t, run.child);
  const watchdog = setTimeout(() => run.child.kill("SIGKILL"), 60_000);
  const { code, signal } = await run.exited;
  clearTimeout(watchdog);
  assert.equal(signal, null, `still running a minute after --timeout 1500ms: the timeout was not honoured\n${run.stderr()}`);
  assert.equal(code, 1, run.stderr());
  const report = JSON.parse(run.stdout());
  assert.equal(report.plugins[0].state, "failed");
  assert.match(report.plugins[0].error, /GetInfo/);
  assert.ok(report.durationMs >= 1500, `ran ${report.durationMs} ms, less than --timeout`);
});

test("--reconcile-once --expect waits for a socket that appears late", async (t) => {
  const policy = writePolicy(tempDir(t));
  const agent = startEdgeplug(["run", "--config", policy.path, "--reconcile-once", "--expect", "1", "--timeout", "60s", "--output", "json"]);
  killAfter(t, agent.child);
  // The agent creates the watch dir at start; the plugin arrives after that.
  await waitForPath(policy.registry);
  const late = await startTestPlugin(t, { socketPath: path.join(policy.registry, "late.sock"), info: sensor });
  const { code } = await agent.exited;
  assert.equal(code, 0, agent.stderr());
  const report = JSON.parse(agent.stdout());
  assert.deepEqual(report.expectations, { expect: 1, require: [], resources: {}, strict: false, unmet: [] });
  assert.equal(report.plugins[0].socket, late.socketPath);
  // Ended when the socket registered, not at --timeout: the bound (a third of it) only tells which of the two.
  assert.ok(report.durationMs < 20_000, `ran ${report.durationMs} ms of --timeout 60s`);
});

test("--reconcile-once --require fails naming the missing plugin", async (t) => {
  const policy = policyWithRegistry(t);
  await startTestPlugin(t, { socketPath: path.join(policy.registry, "p.sock"), info: sensor });
  const result = await runEdgeplug([
    "run",
    "--config",
    policy.path,
    "--reconcile-once",
    "--timeout",
    "500ms",
    "--require",
    sensor.name,
    "--require",
    "acme.io/missing",
  ]);
  assert.equal(result.code, 1, result.stderr);
  assert.match(result.stdout, /unmet: required plugin acme\.io\/missing is not registered/);
  assert.doesNotMatch(result.stdout, /required plugin acme\.io\/thermo/);
});

test("--reconcile-once exits 2 on a bad policy and changes nothing on disk", async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, "bad.yaml");
  fs.writeFileSync(file, `version: 1\nwatch:\n  - path: ${dir}/registry\nreconcile:\n  resync: fast\n`);
  const result = await runEdgeplug(["run", "--config", file, "--reconcile-once"]);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /bad\.yaml:5:11: reconcile\.resync: expected a duration like "30s", got "fast"/);
  assert.equal(fs.existsSync(path.join(dir, "registry")), false, "the watch dir was not created");
});

test("status shows null type, name and endpoint and [] versions until GetInfo answers, and a readable table", async (t) => {
  const policy = policyWithRegistry(t, { reconcile: "  timeouts: { getInfo: 30s }" });
  const silent = await startTestPlugin(t, { socketPath: path.join(policy.registry, "silent.sock"), info: sensor, hangGetInfo: true });
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await good.waitForNotify();
  await silent.waitForGetInfo();

  const json = await runEdgeplug(["status", "--config", policy.path, "--output", "json"]);
  assert.equal(json.code, 1, "the agent reports not ok");
  const shown = JSON.parse(json.stdout);
  assert.equal(shown.ok, false);
  const pending = shown.plugins.find((p: Record<string, unknown>) => p.socket === silent.socketPath);
  assert.deepEqual(
    [pending.type, pending.name, pending.endpoint, pending.versions, pending.state, pending.registeredAt, pending.error],
    [null, null, null, [], "pending", null, null],
  );

  const text = await runEdgeplug(["status", "--config", policy.path, "--exit-zero"]);
  assert.equal(text.code, 0, text.stderr);
  const lines = text.stdout.split("\n");
  assert.equal(lines[0], "node e2e-node: NOT OK");
  assert.match(lines[1]!, /^agent edgeplug \d+\.\d+\.\d+\S* \(\w+\)$/);
  assert.match(lines[3]!, /^STATE\s+TYPE\s+NAME\s+AGE\s+ATTEMPTS\s+SOCKET\s+ERROR$/);
  assert.match(text.stdout, new RegExp(`\\nregistered\\s+acme\\.io/Sensor\\s+acme\\.io/thermo\\s+\\d+s\\s+1\\s+${good.socketPath}\\n`));
  assert.match(text.stdout, new RegExp(`\\npending\\s+-\\s+-\\s+\\d+s\\s+1\\s+${silent.socketPath}\\n`));
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("probe names the plugin and its handler, says when none would take it, and fails on a stale socket", async (t) => {
  const policy = policyWithRegistry(t);
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor });
  const stranger = await startTestPlugin(t, { socketPath: path.join(policy.registry, "stranger.sock"), info: thing });
  const stale = path.join(policy.registry, "dead.sock");
  await leaveStaleSocket(stale);

  const accepted = await runEdgeplug(["probe", good.socketPath, "--config", policy.path, "--output", "json"]);
  assert.equal(accepted.code, 0, accepted.stderr);
  assert.deepEqual(JSON.parse(accepted.stdout), {
    socket: good.socketPath,
    answered: true,
    info: { type: sensor.type, name: sensor.name, endpoint: good.socketPath, versions: ["v1"] },
    failure: null,
    error: null,
    handler: "acme.io/Sensor",
    accepted: true,
    refusal: null,
    dialled: true,
    watchDir: policy.registry,
  });
  assert.deepEqual(good.notifications(), [], "probe sends no NotifyRegistrationStatus");

  const refused = await runEdgeplug(["probe", stranger.socketPath, "--config", policy.path]);
  assert.equal(refused.code, 0, "the plugin answered");
  assert.match(refused.stdout, /^handler:\s+none \(the policy declares no handler for type other\.io\/Thing\)$/m);
  assert.match(refused.stdout, /would be refused: RegisterPlugin error -- no handler registered for plugin type: other\.io\/Thing/);

  const dead = await runEdgeplug(["probe", stale, "--config", policy.path]);
  assert.equal(dead.code, 1);
  assert.match(dead.stdout, /answered:\s+no \(stale\)/);
  assert.match(dead.stdout, /connection refused/);
});
