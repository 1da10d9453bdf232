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
import { test } from "node:test";
import { runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { startNatsCluster, subscribe, writeFleetPolicy } from "./support/brokers.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { tempDir } from "./support/temp-dir.ts";

const KEEPALIVE_MS = 10_000;

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
  // The link logs each connection once: wait for the one to another server. The bound only ends a wait for a move that
  // never comes; that the link noticed the closed connection, rather than its online refresh going unanswered
  // (2 x keepalive), is what the logged loss says.
  await agent.waitForLog("fleet link connected", 3 * KEEPALIVE_MS, (record) => record.broker !== servers[0]!.url);
  const lost = agent.logs().find((r) => r.msg === "fleet link lost, reconnecting");
  assert.ok(lost, agent.stderr());
  assert.doesNotMatch(String(lost.error), /online refresh/, "noticed from the closed connection, not from the keepalive");
  // Not necessarily still on the server the log named: while JetStream elects new leaders, NATS may drop that
  // connection, and the link moves on to the next server.
  const moved = await fleetLink(policy.apiSocket);
  assert.ok(moved.state === "connected" && moved.broker !== servers[0]!.url, JSON.stringify(moved));

  // Read through server 3 once its retained topics have the node online with its plugin (the cluster routes them there).
  // QoS 0, as `fleet status` reads: a QoS 1 subscription needs a JetStream consumer, which NATS refuses to make while
  // JetStream is without a leader after server 1's death (SUBACK 0x80 after 4 s).
  const watcher = await subscribe(t, servers[2]!.url, "edgeplug/v1/node-n/#", { qos: 0 });
  await watcher.waitFor("node-n online with its plugin on server 3", () => {
    const online = watcher.latest("edgeplug/v1/node-n/online");
    const status = watcher.latest("edgeplug/v1/node-n/status") as { plugins?: Array<{ state?: string }> } | undefined;
    return online?.online === true && status?.plugins?.filter((p) => p.state === "registered").length === 1;
  }, 20_000);
  const fleet = await runEdgeplug(["fleet", "status", "--broker", servers[2]!.url, "--output", "json"]);
  assert.equal(fleet.code, 0, fleet.stderr);
  const row = JSON.parse(fleet.stdout).rows.find((r: Record<string, unknown>) => r.node === "node-n");
  assert.deepEqual([row?.state, row?.plugins.registered], ["online", 1]);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});
