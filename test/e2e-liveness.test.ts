/**
 * Liveness of registration-only plugins on dist/edgeplug (docs/policy.md):
 * with `reconcile.liveness.interval` set, a plugin killed with kill -9 is
 * found by the next connect-only dial and becomes `stale`, with one event
 * and one log line, then is retried with backoff; the default leaves it
 * registered, as the kubelet does.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { watchAgent } from "./support/agent-events.ts";
import { runEdgeplug, startDaemon } from "./support/agent-process.ts";
import { spawnRegistrationPlugin } from "./support/grpc-peers.ts";

const info = { type: "acme.io/Sensor", name: "acme.io/mortal", supported_versions: ["v1"] };

test("dist/edgeplug with liveness on: a plugin killed with kill -9 turns stale with one event and one log line, and is retried", async (t) => {
  const reconcile = "  backoff: { initial: 50ms, max: 200ms }\n  liveness: { interval: 200ms }";
  const { policy, agent } = await startDaemon(t, { reconcile });
  const watch = await watchAgent(t, policy.apiSocket);
  const plugin = await spawnRegistrationPlugin(path.join(policy.registry, "mortal.sock"), info);
  t.after(() => plugin.kill());
  await watch.until("registered", (view) => view.plugins.get(plugin.socketPath)?.state === "registered");
  const eventsBefore = watch.view.events.length;

  await plugin.kill();
  await watch.until("stale", (view) => view.plugins.get(plugin.socketPath)?.state === "stale");
  const stale = watch.view.plugins.get(plugin.socketPath)!;
  assert.equal(stale.reason, "stale");
  assert.match(stale.error!, /connection refused \(stale socket: no plugin is listening\)/);

  // Retried with backoff (50 ms, then 200 ms apart), each attempt refused the same way.
  const attempts = async () => {
    const status = await runEdgeplug(["status", "--api", policy.apiSocket, "--output", "json", "--exit-zero"]);
    return JSON.parse(status.stdout).plugins.find((p: { socket: string }) => p.socket === plugin.socketPath);
  };
  let latest = await attempts();
  for (let asked = 1; asked < 50 && latest.attempts < 3; asked++) latest = await attempts();
  assert.deepEqual([latest.state, latest.reason, latest.attempts >= 3], ["stale", "stale", true]);
  const events = watch.view.events.slice(eventsBefore).filter((event) => event.kind.case === "plugin" && event.kind.value.plugin?.socket === plugin.socketPath);
  assert.deepEqual(events.map((event) => (event.kind.case === "plugin" ? event.kind.value.plugin?.state : "")), ["stale"], "one event");
  const warned = agent.logs().filter((line) => line.msg === "plugin socket is stale" && line.socket === plugin.socketPath);
  assert.equal(warned.length, 1, "one log line, retries log at debug");
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("dist/edgeplug by default: a plugin killed with kill -9 stays registered, as with the kubelet", async (t) => {
  const { policy, agent } = await startDaemon(t);
  const watch = await watchAgent(t, policy.apiSocket);
  const plugin = await spawnRegistrationPlugin(path.join(policy.registry, "mortal.sock"), info);
  t.after(() => plugin.kill());
  await watch.until("registered", (view) => view.plugins.get(plugin.socketPath)?.state === "registered");
  await plugin.kill();
  // A full resync (10 s by default) changes nothing either: a second plugin's registration marks time.
  const marker = await spawnRegistrationPlugin(path.join(policy.registry, "marker.sock"), { ...info, name: "acme.io/marker" });
  t.after(() => marker.kill());
  await watch.until("the marker registered", (view) => view.plugins.get(marker.socketPath)?.state === "registered");
  assert.equal(watch.view.plugins.get(plugin.socketPath)?.state, "registered");
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});
