/**
 * The fleet link of dist/edgeplug on a clustered broker: three NATS servers
 * (MQTT, JetStream) routed together on loopback. The agent, given all three
 * URLs, is on server 1; server 1 killed, it notices from the closed
 * connection (not from its keepalive) and moves to another, and `fleet
 * status` through server 3 shows the node online with
 * its plugins (the retained topics are the cluster's, not one server's).
 */
import assert from "node:assert/strict";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";
import { runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { startNatsCluster, writeFleetPolicy } from "./support/brokers.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const KEEPALIVE_MS = 10_000;

/** Polls `probe` (a command's answer: nothing to wait on but its output) until `ok`, failing past `timeoutMs` with the last answer. */
async function eventually<T>(what: string, timeoutMs: number, probe: () => Promise<T>, ok: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline) assert.fail(`${what} within ${timeoutMs} ms; last: ${JSON.stringify(value)}`);
    await sleep(200);
  }
}

/** The fleet link in status JSON (docs/status-json.md), as far as these tests read it. */
interface FleetLinkView {
  state: string;
  broker: string;
}

async function fleetLink(apiSocket: string): Promise<FleetLinkView> {
  const answer = await runEdgeplug(["status", "--api", apiSocket, "--output", "json", "--exit-zero"]);
  assert.equal(answer.code, 0, answer.stderr);
  return JSON.parse(answer.stdout).fleet;
}

test("nats cluster: the agent moves from a killed server to another as the connection closes, and fleet status through server 3 shows it online with its plugins", async (t) => {
  const servers = await startNatsCluster(t);
  const dir = tempDir(t);
  const brokers = servers.map((server) => `"${server.url}"`).join(", ");
  const policy = writeFleetPolicy(dir, "node-n", `  brokers: [${brokers}]\n  keepalive: ${KEEPALIVE_MS / 1000}s\n  minInterval: 0s`);
  const plugin = await startTestPlugin(t, { socketPath: path.join(policy.registry, "thermo.sock"), info: { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] } });
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await plugin.waitForNotify();
  await agent.waitForLog("fleet link connected", 30_000);
  assert.equal((await fleetLink(policy.apiSocket)).broker, servers[0]!.url, "on server 1, the first of the list");

  servers[0]!.child.kill("SIGKILL");
  // The bound only ends a wait for a move that never comes; that the link noticed the closed connection, rather than
  // its online refresh going unanswered (2 x keepalive), is what the logged loss says.
  await eventually("the agent connected to another server", 3 * KEEPALIVE_MS, () => fleetLink(policy.apiSocket), (link) => link.state === "connected" && link.broker !== servers[0]!.url);
  const lost = agent.logs().find((r) => r.msg === "fleet link lost, reconnecting");
  assert.ok(lost, agent.stderr());
  assert.doesNotMatch(String(lost.error), /online refresh/, "noticed from the closed connection, not from the keepalive");

  const read = () => runEdgeplug(["fleet", "status", "--broker", servers[2]!.url, "--output", "json"]);
  const fleet = await eventually("node-n online with its plugin, read through server 3", 20_000, read, (answer) => {
    const row = answer.code === 0 ? JSON.parse(answer.stdout).rows.find((r: Record<string, unknown>) => r.node === "node-n") : undefined;
    return row?.state === "online" && row.plugins.registered === 1;
  });
  assert.equal(fleet.code, 0, fleet.stderr);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});
