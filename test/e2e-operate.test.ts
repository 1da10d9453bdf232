/**
 * End-to-end on the built executable, for the people who operate it:
 * SIGHUP reload, `status --watch`, and curl on the API socket.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug, startDaemon, startEdgeplug, writePolicy } from "./support/agent-process.ts";
import { tempDir } from "./support/temp-dir.ts";
import { watchAgent } from "./support/agent-events.ts";
import { startFakePlugin, startTestPlugin } from "./support/fake-plugin.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { curlAgentStatus } from "./support/curl.ts";

const sensor = { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] };
const gauge = { type: "acme.io/Gauge", name: "acme.io/pressure", versions: ["v1"] };

test("SIGHUP applies a new policy, and refuses an invalid one keeping the old", async (t) => {
  const { policy, agent } = await startDaemon(t);

  const waiting = await startTestPlugin(t, { socketPath: path.join(policy.registry, "gauge.sock"), info: gauge });
  assert.match((await waiting.waitForNotify()).error, /no handler registered for plugin type: acme\.io\/Gauge/);

  // An invalid policy: refused with its located errors, nothing changes.
  const original = fs.readFileSync(policy.path, "utf8");
  fs.writeFileSync(policy.path, original.replace("reconcile:\n", "reconcile:\n  resync: soon\n"));
  agent.child.kill("SIGHUP");
  const refused = await agent.waitForLog("policy reload refused; the running policy stays in force");
  assert.match(String(refused.errors), /policy\.yaml:\d+:\d+: reconcile\.resync: expected a duration like "30s", got "soon"/);

  // A valid one that declares the type: the waiting plugin registers at once.
  fs.writeFileSync(policy.path, original.replace("handlers:\n", "handlers:\n  acme.io/Gauge:\n    kind: generic\n"));
  agent.child.kill("SIGHUP");
  const accepted = await waiting.waitForNotify((n) => n.registered, 10_000);
  assert.equal(accepted.error, "");
  await agent.waitForLog("policy reloaded");

  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0, agent.stderr());
});

test("a SIGHUP sent while the agent starts is a reload once it runs, not the signal's default exit", async (t) => {
  const policy = writePolicy(tempDir(t));
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  // Logged during the start, before "edgeplug running": what a supervisor that reloads early sees.
  await agent.waitForLog("api socket serving");
  agent.child.kill("SIGHUP");
  await agent.waitForLog("policy reloaded");
  const order = agent.logs().map((record) => record.msg).filter((msg) => msg === "edgeplug running" || msg === "policy reloaded");
  assert.deepEqual(order, ["edgeplug running", "policy reloaded"]);
  agent.child.kill("SIGTERM");
  assert.deepEqual(await agent.exited, { code: 0, signal: null }, agent.stderr());
});

test("status --watch prints the snapshot, then each event as it comes", async (t) => {
  const { policy, agent } = await startDaemon(t);

  const watcher = startEdgeplug(["status", "--api", policy.apiSocket, "--watch", "--output", "json"]);
  killAfter(t, watcher.child);
  const lines = eventLines(watcher.child.stdout!);
  const snapshot = await lines.next();
  assert.equal(snapshot.kind, "snapshot");
  assert.deepEqual(snapshot.snapshot.plugins, []);

  const plugin = await startFakePlugin({ socketPath: path.join(policy.registry, "w.sock"), info: sensor });
  const pending = await lines.next();
  const registered = await lines.next();
  assert.deepEqual([pending.plugin.state, registered.plugin.state], ["pending", "registered"]);
  assert.equal(registered.plugin.name, sensor.name);
  await plugin.stop();
  const removed = await lines.next();
  assert.deepEqual([removed.kind, removed.removed, removed.plugin.socket], ["plugin", true, plugin.socketPath]);
  assert.deepEqual([pending.sequence, registered.sequence, removed.sequence], [1, 2, 3]);

  watcher.child.kill("SIGINT");
  assert.equal((await watcher.exited).code, 0);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("curl reads the agent's status as JSON from the API socket", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const agentView = await watchAgent(t, policy.apiSocket);
  const plugin = await startTestPlugin(t, { socketPath: path.join(policy.registry, "c.sock"), info: sensor });
  // The plugin hears Notify before the agent has taken its answer: wait for the agent's own word.
  await agentView.until("the plugin registered", (view) => view.plugins.get(plugin.socketPath)?.state === "registered");

  const status = await curlAgentStatus(policy.apiSocket);
  assert.equal(status.node, "e2e-node");
  assert.equal(status.ok, true);
  assert.deepEqual(
    status.plugins.map((p: Record<string, unknown>) => [p.socket, p.type, p.name, p.state]),
    [[plugin.socketPath, sensor.type, sensor.name, "registered"]],
  );
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

/** A line of `status --watch --output json` (docs/status-json.md), as far as these tests read it. */
interface EventLine {
  kind: string;
  sequence: number;
  removed?: boolean;
  snapshot: { plugins: unknown[] };
  plugin: { state: string; name: string; socket: string };
}

/** Reads JSON lines from a stream, one object per call. */
function eventLines(stream: NodeJS.ReadableStream) {
  const queued: EventLine[] = [];
  const waiting: Array<(line: EventLine) => void> = [];
  let buffered = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    const parts = (buffered + chunk).split("\n");
    buffered = parts.pop()!;
    for (const part of parts) {
      if (part.trim() === "") continue;
      const line = JSON.parse(part) as EventLine;
      const wake = waiting.shift();
      if (wake) wake(line);
      else queued.push(line);
    }
  });
  return {
    next: (): Promise<EventLine> => {
      const line = queued.shift();
      if (line) return Promise.resolve(line);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no event line within 10 s")), 10_000);
        waiting.push((value) => {
          clearTimeout(timer);
          resolve(value);
        });
      });
    },
  };
}

test("status, allocate and release reach the running agent when its policy file has since been broken, and say so on stderr", async (t) => {
  const { policy } = await startDaemon(t);
  const original = fs.readFileSync(policy.path, "utf8");
  const notice = new RegExp(`the policy ${policy.path} is invalid \\(edgeplug validate --config ${policy.path} says why\\); using the running agent's API socket ${policy.apiSocket}, which answers`);

  // A schema error, then a file that is no longer YAML (a tab): either way the file still names the socket.
  for (const broken of [original.replace("reconcile:\n", "reconcile:\n  resync: soon\n"), original.replace("  backoff:", "\tbackoff:")]) {
    fs.writeFileSync(policy.path, broken);
    const validate = await runEdgeplug(["validate", "--config", policy.path]);
    assert.equal(validate.code, 2, "the file is broken indeed");
    const status = await runEdgeplug(["status", "--config", policy.path, "--exit-zero"]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stderr, new RegExp(`^edgeplug status: ${notice.source}$`, "m"));
    assert.match(status.stdout, /^node e2e-node: /);
    const release = await runEdgeplug(["release", "--config", policy.path, "--owner", "nobody"]);
    assert.equal(release.code, 0, release.stderr);
    assert.match(release.stderr, new RegExp(`^edgeplug release: ${notice.source}$`, "m"));
    const allocate = await runEdgeplug(["allocate", "--config", policy.path, "--owner", "o", "acme.io/none=1"]);
    assert.equal(allocate.code, 1, "refused by the agent, not by the policy");
    assert.match(allocate.stderr, new RegExp(`^edgeplug allocate: ${notice.source}$`, "m"));
    assert.match(allocate.stderr, /^edgeplug allocate: refused: /m);
  }

  // No agent answering where the file or the default policy says: the policy's errors stand.
  fs.writeFileSync(policy.path, original.replace(policy.apiSocket, path.join(path.dirname(policy.path), "none.sock")).replace("reconcile:\n", "reconcile:\n  resync: soon\n"));
  const status = await runEdgeplug(["status", "--config", policy.path]);
  assert.equal(status.code, 2, status.stderr);
  assert.match(status.stderr, /reconcile\.resync: expected a duration/);
});
