/**
 * End to end on dist/edgeplug with the sample device plugin
 * (examples/device-plugin.ts, @grpc/grpc-js, its own process), unchanged,
 * on the kubelet.sock path: Register with a socket name relative to the
 * device-plugins directory, health changes seen by WatchEvents and status,
 * allocate and release through the CLI (GetPreferredAllocation used,
 * PreStartContainer called), the pod-resources API read by a grpc-js
 * client, the plugin restarting on a new socket, and a kill -9.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { startExample } from "./support/example-process.ts";
import { deviceRows, podResourcesClient, podRows } from "./support/pod-resources-client.ts";

const WIDGET = "example.io/widget";

test("kubelet.sock: the sample plugin registers with a relative endpoint; health, allocation, pod-resources, a restart on a new socket and a kill -9", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  const agent = await watchAgent(node, node.apiSocket);
  const unhealthyFile = path.join(node.dir, "unhealthy");
  const pluginArgs = ["--dir", node.pluginsDir, "--devices", "4", "--numa-nodes", "2", "--unhealthy-file", unhealthyFile];
  let plugin = startExample(node, "device-plugin.ts", pluginArgs);
  const serving = (await plugin.waitForLine(/^serving /)).slice("serving ".length);
  assert.equal(path.dirname(serving), node.pluginsDir);
  await plugin.waitForLine(/^registered$/);
  await agent.until("4 healthy widgets", (view) => view.resources.get(WIDGET)?.healthy.length === 4);
  assert.deepEqual(agent.view.resources.get(WIDGET)?.sockets, [serving], "the agent dialled the relative endpoint inside its directory");

  // Health: a device listed in the control file, then every device (SIGUSR1), and back (SIGUSR2).
  const widget = () => agent.view.resources.get(WIDGET);
  fs.writeFileSync(unhealthyFile, "widget1\n");
  await agent.until("widget1 unhealthy", () => widget()?.unhealthy.join() === "widget1");
  const status = await statusJson(node.apiSocket);
  assert.deepEqual(status.resources.map((r) => [r.name, r.capacity, r.allocatable, r.unhealthy, r.connected]), [[WIDGET, 4, 3, ["widget1"], true]]);
  plugin.child.kill("SIGUSR1");
  await agent.until("every widget unhealthy", () => widget()?.healthy.length === 0 && widget()?.connected === true);
  plugin.child.kill("SIGUSR2");
  await agent.until("back to widget1 alone unhealthy", () => widget()?.healthy.length === 3);
  fs.writeFileSync(unhealthyFile, "");
  await agent.until("all healthy", () => widget()?.healthy.length === 4);
  const healthEvents = agent.view.events.filter((e) => e.kind.case === "resource").map((e) => (e.kind.value as { resource?: { unhealthy: string[] } }).resource?.unhealthy.join());
  for (const seen of ["widget1", "widget0,widget1,widget2,widget3", ""]) assert.ok(healthEvents.includes(seen), `a resource event with unhealthy [${seen}] in ${JSON.stringify(healthEvents)}`);

  // Allocation through the CLI: the plugin's preferred allocation (widgets of one NUMA node) and PreStartContainer.
  const mark = plugin.lines().length;
  const allocated = await runEdgeplug(["allocate", "--owner", "job-1", `${WIDGET}=2`, "--config", node.policy]);
  assert.equal(allocated.code, 0, allocated.stderr);
  assert.match(allocated.stdout, /^allocated to job-1 \(container main\)\nexample\.io\/widget: widget0, widget2\n {2}env {9}EXAMPLE_WIDGETS=widget0,widget2\n/);
  assert.match(allocated.stdout, /^ {2}cdi {9}example\.io\/widget=widget2$/m);
  await plugin.waitForLine(/^GetPreferredAllocation: widget0,widget2$/, { from: mark });
  await plugin.waitForLine(/^PreStartContainer: widget0,widget2$/, { from: mark });

  // The pod-resources API, as a kubelet monitoring agent reads it.
  const lister = podResourcesClient(node, node.apiSocket);
  assert.deepEqual(podRows((await lister.list()).pod_resources), [["job-1", "edgeplug", [["main", [[WIDGET, ["widget0"], ["0"]], [WIDGET, ["widget2"], ["0"]]]]]]]);
  assert.deepEqual(deviceRows((await lister.allocatable()).devices).map(([, ids, nodes]) => `${ids[0]}@${nodes}`), ["widget0@0", "widget1@1", "widget2@0", "widget3@1"]);

  // The plugin restarts: it stops (its socket removed), comes back on a new socket and registers again.
  assert.equal(await plugin.stop("SIGTERM"), 0);
  await agent.until("disconnected after the plugin stopped", () => widget()?.connected === false);
  plugin = startExample(node, "device-plugin.ts", pluginArgs);
  const second = (await plugin.waitForLine(/^serving /)).slice("serving ".length);
  assert.notEqual(second, serving);
  await plugin.waitForLine(/^registered$/);
  await agent.until("connected on the new socket", () => widget()?.connected === true && widget()?.sockets.join() === second && widget()?.healthy.length === 4);
  assert.deepEqual(agent.view.allocations.get("job-1")?.map((a) => a.devices), [["widget0", "widget2"]], "the allocation outlives the plugin's restart");

  // kill -9: the stream breaks, every device is unhealthy at once, and the agent says so in an event.
  const before = agent.view.events.length;
  plugin.child.kill("SIGKILL");
  await agent.until("disconnected after kill -9", () => widget()?.connected === false);
  const lost = agent.view.events.slice(before).find((e) => e.kind.case === "resource");
  assert.deepEqual((lost?.kind.value as { resource?: { unhealthy: string[]; allocatable: number } }).resource?.unhealthy, ["widget0", "widget1", "widget2", "widget3"]);
  const refused = await runEdgeplug(["allocate", "--owner", "job-2", `${WIDGET}=1`, "--api", node.apiSocket]);
  assert.deepEqual([refused.code, refused.stderr], [1, `edgeplug allocate: refused: no healthy devices present; cannot allocate unhealthy devices ${WIDGET}\n`]);

  const released = await runEdgeplug(["release", "--owner", "job-1", "--api", node.apiSocket]);
  assert.deepEqual([released.code, released.stdout], [0, `released job-1 container main: ${WIDGET} widget0, widget2\n`]);
  await agent.until("no allocations", (view) => view.allocations.size === 0);
  assert.deepEqual(podRows((await lister.list()).pod_resources), []);
});
