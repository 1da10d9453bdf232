/**
 * End to end on dist/edgeplug: the agent restarts under two running sample
 * device plugins (examples/device-plugin.ts, one per registration path).
 * The allocations come back from the checkpoint, the plugins register again
 * (the kubelet.sock one on a new socket, having seen its socket removed
 * at start as the kubelet removes it), and devices held before the restart
 * stay held. And
 * kubelet.sock removed under a running agent comes back, which the
 * kubelet.sock plugin takes for a kubelet restart.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, restoredPlain, startAgent, statusJson } from "./support/device-node.ts";
import { startExample } from "./support/example-process.ts";
import { podResourcesClient, podRows } from "./support/pod-resources-client.ts";

const WIDGET = "example.io/widget";
const GADGET = "example.io/gadget";

test("after the agent restarts, allocations are still there and both plugins are back", async (t) => {
  const node = deviceNode(t);
  let agentProcess = await startAgent(node);
  let agent = await watchAgent(node, node.apiSocket);
  const widgets = startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--devices", "4", "--numa-nodes", "2"]);
  const gadgets = startExample(node, "device-plugin.ts", ["--watched-dir", node.registry, "--resource", GADGET, "--devices", "2", "--numa-nodes", "0"]);
  const firstSocket = (await widgets.waitForLine(/^serving /)).slice("serving ".length);
  await agent.until("both resources healthy", (view) => view.resources.get(WIDGET)?.healthy.length === 4 && view.resources.get(GADGET)?.healthy.length === 2);
  for (const [owner, container, request] of [["job-1", "main", `${WIDGET}=2`], ["job-2", "side", `${GADGET}=1`]] as const) {
    const result = await runEdgeplug(["allocate", "--owner", owner, "--container", container, request, "--api", node.apiSocket]);
    assert.equal(result.code, 0, result.stderr);
  }
  const before = (await statusJson(node.apiSocket)).allocations;
  assert.deepEqual(before.map((a) => [a.owner, a.container, a.resource, a.devices]), [
    ["job-1", "main", WIDGET, ["widget0", "widget2"]],
    ["job-2", "side", GADGET, ["gadget0"]],
  ]);

  agentProcess.child.kill("SIGTERM");
  assert.equal((await agentProcess.exited).code, 0, agentProcess.stderr());
  const verified = await runEdgeplug(["checkpoint", "verify", path.join(node.pluginsDir, "kubelet_internal_checkpoint"), "--output", "json"]);
  assert.equal(verified.code, 0, verified.stderr);
  assert.match(verified.stdout, /"job-1"[\s\S]*"job-2"/);

  const mark = widgets.lines().length;
  agentProcess = await startAgent(node);
  agent = await watchAgent(node, node.apiSocket);
  assert.deepEqual([...agent.view.allocations.keys()].sort(), ["job-1", "job-2"], "the snapshot after the restart already has the allocations");
  // As after a kubelet restart, the agent removed the plugin's socket at start: the plugin serves a new one and registers again.
  await widgets.waitForLine(/ was deleted: serving a new socket$/, { from: mark });
  // It may serve again once more when it then sees kubelet.sock appear: the resource must end on the socket it serves last.
  const lastServed = () => widgets.lines().slice(mark).findLast((line) => line.startsWith("serving "))?.slice("serving ".length);
  await agent.until(
    "both resources connected again, the widgets on the plugin's newest socket",
    (view) => view.resources.get(WIDGET)?.sockets.join() === lastServed() && view.resources.get(WIDGET)?.healthy.length === 4 && view.resources.get(GADGET)?.connected === true,
  );
  assert.notEqual(lastServed(), firstSocket);
  const after = await statusJson(node.apiSocket);
  // The same allocations; plain owners restored from the checkpoint have no age (its format keeps no time).
  assert.deepEqual(after.allocations, restoredPlain(before));
  assert.ok(before.every((a) => a.allocatedAt !== null) && after.allocations.every((a) => a.allocatedAt === null && a.kind === "plain"));
  // Restored allocations on the API socket and on the kubelet's pod-resources path alike.
  for (const socket of [node.apiSocket, node.podResourcesSocket]) {
    const lister = podResourcesClient(node, socket);
    assert.deepEqual(podRows((await lister.list()).pod_resources).map(([name, , containers]) => [name, containers.map(([c]) => c)]), [["job-1", ["main"]], ["job-2", ["side"]]], socket);
  }

  // Devices held before the restart stay held: a new request gets the others.
  const more = await runEdgeplug(["allocate", "--owner", "job-3", `${WIDGET}=2`, "--api", node.apiSocket, "--output", "json"]);
  assert.equal(more.code, 0, more.stderr);
  assert.deepEqual((JSON.parse(more.stdout) as { allocations: { devices: string[] }[] }).allocations[0]?.devices.sort(), ["widget1", "widget3"]);
  const released = await runEdgeplug(["release", "--owner", "job-1", "--api", node.apiSocket]);
  assert.deepEqual([released.code, released.stdout], [0, `released job-1 container main: ${WIDGET} widget0, widget2\n`]);
  assert.equal(await gadgets.stop("SIGTERM"), 0);
  assert.equal(await widgets.stop("SIGTERM"), 0);
});

test("kubelet.sock removed while the agent runs: it is served again, and the sample plugin registers again unchanged", async (t) => {
  const node = deviceNode(t);
  const agentProcess = await startAgent(node);
  const agent = await watchAgent(node, node.apiSocket);
  const widgets = startExample(node, "device-plugin.ts", ["--dir", node.pluginsDir, "--devices", "2", "--numa-nodes", "0"]);
  await widgets.waitForLine(/^registered$/);
  await agent.until("two healthy widgets", (view) => view.resources.get(WIDGET)?.healthy.length === 2);
  const registeredOnce = widgets.lines().length;

  const kubeletSocket = path.join(node.pluginsDir, "kubelet.sock");
  fs.rmSync(kubeletSocket);
  await agentProcess.waitForLog("device plugin registration socket serving again");
  // The plugin sees kubelet.sock created, as after a kubelet restart, and registers again.
  await widgets.waitForLine(/^registered$/, { from: registeredOnce });
  await agent.until("still two healthy widgets", (view) => view.resources.get(WIDGET)?.connected === true && view.resources.get(WIDGET)?.healthy.length === 2);
  assert.ok(fs.lstatSync(kubeletSocket).isSocket());
});
