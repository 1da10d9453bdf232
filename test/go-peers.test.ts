/**
 * End to end on dist/edgeplug with a device plugin written in Go with
 * grpc-go (test/go/deviceplugin, built from Debian's packages by
 * test/support/go-peers.ts), registering through the plugin watcher: the
 * agent dials the plugin, so this runs grpc-go as the server of every call.
 * Health changes, allocation through the CLI (the plugin's preferred
 * allocation, Allocate's environment, PreStartContainer) and an agent
 * restart (the plugin registered again, the allocation restored from the
 * checkpoint).
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, restoredPlain, startAgent, statusJson } from "./support/device-node.ts";
import { GO_PEER_TEST_TIMEOUT_MS, goPeersOrSkip, startGoDevicePlugin } from "./support/go-peers.ts";

const DEV = "example.com/dev";

test("a grpc-go device plugin registered through the plugin watcher: health, allocation with its preferred devices, an agent restart", { timeout: GO_PEER_TEST_TIMEOUT_MS }, async (t) => {
  const peers = await goPeersOrSkip(t);
  if (!peers) return;
  const node = deviceNode(t);
  let agentProcess = await startAgent(node);
  let agent = await watchAgent(node, node.apiSocket);
  // No topology: whichever topology rule the agent applies, every free device is offered.
  const plugin = startGoDevicePlugin(node, peers, ["-registry", node.registry, "-resource", DEV, "-devices", "4", "-numa-nodes", "0"]);
  const socket = (await plugin.waitForLine(/^SERVING /)).slice("SERVING ".length);
  assert.equal(path.dirname(socket), node.registry);
  await plugin.waitForLine(/^REGISTERED$/);
  await agent.until("4 healthy devices", (view) => view.resources.get(DEV)?.healthy.length === 4);

  plugin.send("unhealthy dev1 dev2");
  await agent.until("dev1 and dev2 unhealthy", (view) => view.resources.get(DEV)?.unhealthy.join() === "dev1,dev2");
  plugin.send("healthy dev2");
  await agent.until("dev1 alone unhealthy", (view) => view.resources.get(DEV)?.unhealthy.join() === "dev1");

  // The plugin prefers the highest-numbered free devices, dev1 being unhealthy.
  const mark = plugin.lines().length;
  const allocated = await runEdgeplug(["allocate", "--owner", "job-1", `${DEV}=2`, "--api", node.apiSocket, "--output", "json"]);
  assert.equal(allocated.code, 0, allocated.stderr);
  const answer = JSON.parse(allocated.stdout) as { allocations: { devices: string[]; envs?: Record<string, string> }[] };
  assert.deepEqual(answer.allocations.map((a) => [...a.devices].sort()), [["dev2", "dev3"]], allocated.stdout);
  assert.match(allocated.stdout, /"GO_PLUGIN_DEVICES":\s*"dev(3,dev2|2,dev3)"/);
  assert.match(await plugin.waitForLine(/^PREFERRED /, { from: mark }), /^PREFERRED dev3,dev2$/);
  assert.match(await plugin.waitForLine(/^ALLOCATE /, { from: mark }), /^ALLOCATE dev(3,dev2|2,dev3)$/);
  assert.match(await plugin.waitForLine(/^PRESTART /, { from: mark }), /^PRESTART dev(3,dev2|2,dev3)$/);
  const before = (await statusJson(node.apiSocket)).allocations;

  // The agent restarts: the watcher finds the plugin's socket again, and the allocation comes back from the checkpoint.
  agentProcess.child.kill("SIGTERM");
  assert.equal((await agentProcess.exited).code, 0, agentProcess.stderr());
  const restarted = plugin.lines().length;
  agentProcess = await startAgent(node);
  agent = await watchAgent(node, node.apiSocket);
  assert.deepEqual([...agent.view.allocations.keys()], ["job-1"], "the snapshot after the restart has the allocation");
  await plugin.waitForLine(/^REGISTERED$/, { from: restarted });
  await agent.until("connected again, dev1 still unhealthy", (view) => view.resources.get(DEV)?.connected === true && view.resources.get(DEV)?.unhealthy.join() === "dev1");
  assert.deepEqual((await statusJson(node.apiSocket)).allocations, restoredPlain(before));
  const more = await runEdgeplug(["allocate", "--owner", "job-2", `${DEV}=1`, "--api", node.apiSocket, "--output", "json"]);
  assert.equal(more.code, 0, more.stderr);
  assert.deepEqual((JSON.parse(more.stdout) as { allocations: { devices: string[] }[] }).allocations[0]?.devices, ["dev0"], "the devices held before the restart stay held");
  assert.equal(await plugin.stop("SIGTERM"), 0);
});
