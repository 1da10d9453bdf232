/**
 * `edgeplug fleet status` (docs/commands.md) of dist/edgeplug against a real
 * Mosquitto: 1,000 simulated nodes (retained topics published by the test)
 * answered in text and JSON with the right exit code, payloads it refuses and
 * names it escapes; then three real agents, and --watch seeing one of them go
 * offline. How long it takes over 1,000 nodes (target: 1 s of wall and of CPU
 * time) is bench/fleet-status.ts's to say.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { startMosquitto, writeFleetPolicy } from "./support/brokers.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { healthyNodes, publishRetained, simulatedNode } from "./support/simulated-nodes.ts";
import { tempDir } from "./support/temp-dir.ts";

const NODES = 1000;

test("fleet status over 1,000 simulated nodes, text and JSON: exit 1 while a node is offline, stale or not ok and 0 when all are fine", async (t) => {
  const broker = await startMosquitto(t);
  const healthy = healthyNodes("fine", NODES);
  const mixed: Array<[string, string]> = [];
  for (let i = 0; i < NODES; i++) {
    const name = `node-${String(i).padStart(4, "0")}`;
    if (i === 1) mixed.push(...simulatedNode("mixed", name, { online: false }));
    else if (i === 2) mixed.push(...simulatedNode("mixed", name, { updatedAt: new Date(Date.now() - 10 * 60_000) }));
    else if (i === 3) mixed.push(...simulatedNode("mixed", name, { ok: false }));
    else mixed.push(...simulatedNode("mixed", name));
  }
  // A node name with an escape sequence (percent-encoded in its topic) and a payload over 4 MiB.
  mixed.push([`mixed/v1/evil%1B[2J/online`, JSON.stringify({ online: true, updatedAt: new Date().toISOString() })]);
  await publishRetained(broker.url, [...healthy, ...mixed]);
  await publishRetained(broker.url, [[`mixed/v1/huge/status`, Buffer.alloc(4 * 1024 * 1024 + 1, 0x20)]]);

  const fine = await runEdgeplug(["fleet", "status", "--broker", broker.url, "--prefix", "fine"]);
  assert.equal(fine.code, 0, fine.stderr);
  assert.match(fine.stdout, /^1000 nodes: 1000 online, 0 offline, 0 stale, 0 not ok$/m);
  assert.equal(fine.stdout.trim().split("\n").length, 2 + NODES + 1);
  assert.match(fine.stdout, /^node-0007 +online +yes +\d+s ago +2\/0\/0 +3\/4 +1$/m);

  const json = await runEdgeplug(["fleet", "status", "--broker", broker.url, "--prefix", "mixed", "--output", "json"]);
  assert.equal(json.code, 1, json.stderr);
  const fleet = JSON.parse(json.stdout);
  // Offline: node-0001, and "huge", which has a status but no online message.
  assert.deepEqual([fleet.ok, fleet.nodes, fleet.offline, fleet.stale], [false, NODES + 2, 2, 1]);
  const row = (name: string) => fleet.rows.find((r: Record<string, unknown>) => r.node === name);
  assert.equal(row("node-0001").state, "offline");
  assert.equal(row("node-0002").state, "stale");
  assert.equal(row("node-0003").ok, false);
  assert.deepEqual(row("node-0003").plugins, { registered: 1, failed: 1, stale: 0, total: 2 });
  assert.match(row("huge").error, /status payload of 4194305 bytes refused \(at most 4194304\)/);
  assert.ok(row("evil\u001b[2J"), "the node name decoded from its topic level");

  const text = await runEdgeplug(["fleet", "status", "--broker", broker.url, "--prefix", "mixed"]);
  assert.equal(text.code, 1);
  assert.equal(text.stdout.includes("\u001b"), false, "control bytes escaped");
  assert.match(text.stdout, /^evil\\e\[2J +online/m);
  const zero = await runEdgeplug(["fleet", "status", "--broker", broker.url, "--prefix", "mixed", "--exit-zero", "--stale", "0"]);
  assert.equal(zero.code, 0, zero.stderr);

  const usage = await runEdgeplug(["fleet", "status", "--broker", "http://x"]);
  assert.equal(usage.code, 2);
  const unreachable = await runEdgeplug(["fleet", "status", "--broker", "mqtt://127.0.0.1:1"]);
  assert.equal(unreachable.code, 1);
  assert.match(unreachable.stderr, /^edgeplug fleet status: broker mqtt:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/m);
});

test("fleet status over three real agents: all online and ok exits 0; --watch prints the fleet again when one stops", async (t) => {
  const broker = await startMosquitto(t);
  const agents = [];
  for (const name of ["real-1", "real-2", "real-3"]) {
    const policy = writeFleetPolicy(tempDir(t), name, `  brokers: ["${broker.url}"]\n  keepalive: 5s`);
    const agent = startEdgeplug(["run", "--config", policy.path]);
    killAfter(t, agent.child);
    await agent.waitForLog("fleet link connected");
    agents.push(agent);
  }
  const all = await runEdgeplug(["fleet", "status", "--broker", broker.url, "--output", "json"]);
  assert.equal(all.code, 0, all.stdout + all.stderr);
  assert.deepEqual(JSON.parse(all.stdout).rows.map((r: Record<string, unknown>) => [r.node, r.state, r.ok]), [["real-1", "online", true], ["real-2", "online", true], ["real-3", "online", true]]);

  const watcher = startEdgeplug(["fleet", "status", "--broker", broker.url, "--output", "json", "--watch"]);
  killAfter(t, watcher.child);
  await new Promise<void>((resolve) => watcher.child.stdout!.once("data", () => resolve()));
  agents[1]!.child.kill("SIGTERM");
  assert.equal((await agents[1]!.exited).code, 0);
  const deadline = Date.now() + 5_000;
  const offline = () => watcher.stdout().trim().split("\n").slice(1).some((line) => JSON.parse(line).rows.some((r: Record<string, unknown>) => r.node === "real-2" && r.state === "offline"));
  while (!offline()) {
    assert.ok(Date.now() < deadline, `no line with real-2 offline within 5 s:\n${watcher.stdout()}`);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, deadline - Date.now());
      watcher.child.stdout!.once("data", () => (clearTimeout(timer), resolve()));
    });
  }
  watcher.child.kill("SIGINT");
  assert.equal((await watcher.exited).code, 0);
});
