/**
 * SIGHUP and the fleet link (docs/policy.md, "Reload"): a changed `fleet:`
 * closes the old link (its node goes `online: false`) and opens one with the
 * new settings; a removed one turns the link off.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { runEdgeplug, startEdgeplug } from "./support/agent-process.ts";
import { startMosquitto, subscribe, writeFleetPolicy } from "./support/brokers.ts";
import { killAfter } from "./support/child-cleanup.ts";
import { tempDir } from "./support/temp-dir.ts";

test("SIGHUP: a new prefix moves the node's topics (the old ones say offline), removing fleet: turns the link off", async (t) => {
  const broker = await startMosquitto(t);
  const dir = tempDir(t);
  const policy = writeFleetPolicy(dir, "node-r", `  brokers: ["${broker.url}"]\n  prefix: site-a`);
  const watcher = await subscribe(t, broker.url, "+/v1/node-r/online");
  const agent = startEdgeplug(["run", "--config", policy.path]);
  killAfter(t, agent.child);
  await watcher.waitFor("online under site-a", () => watcher.latest("site-a/v1/node-r/online")?.online === true);

  writeFleetPolicy(dir, "node-r", `  brokers: ["${broker.url}"]\n  prefix: site-b`);
  agent.child.kill("SIGHUP");
  await watcher.waitFor("offline under site-a, online under site-b", () => watcher.latest("site-a/v1/node-r/online")?.online === false && watcher.latest("site-b/v1/node-r/online")?.online === true);

  writeFleetPolicy(dir, "node-r", null);
  agent.child.kill("SIGHUP");
  await watcher.waitFor("offline under site-b", () => watcher.latest("site-b/v1/node-r/online")?.online === false);
  const status = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json"]);
  assert.equal(JSON.parse(status.stdout).fleet, null);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});
