/**
 * End to end on dist/edgeplug with the sample device plugin
 * (examples/device-plugin.ts) unchanged, on the watched-directory path:
 * it registers through the plugin manager (GetInfo type DevicePlugin),
 * serves a new socket when its socket is deleted, and a kill -9 leaves its
 * registration record `stale` and its devices unhealthy at once, each with
 * an event.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { startExample } from "./support/example-process.ts";

const GADGET = "example.io/gadget";

test("watched directory: the sample plugin registers, moves to a new socket when its socket is deleted, and a kill -9 shows at once", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  const agent = await watchAgent(node, node.apiSocket);
  const plugin = startExample(node, "device-plugin.ts", ["--watched-dir", node.registry, "--resource", GADGET, "--devices", "2", "--numa-nodes", "0"]);
  const first = (await plugin.waitForLine(/^serving /)).slice("serving ".length);
  assert.equal(path.dirname(first), node.registry);
  await plugin.waitForLine(/^registered$/);
  const gadget = () => agent.view.resources.get(GADGET);
  await agent.until("2 healthy gadgets", () => gadget()?.healthy.length === 2 && gadget()?.connected === true);
  await agent.until("the record registered", (view) => view.plugins.get(first)?.state === "registered");
  const record = agent.view.plugins.get(first);
  assert.deepEqual([record?.state, record?.type, record?.name, record?.endpoint], ["registered", "DevicePlugin", GADGET, first]);

  const allocated = await runEdgeplug(["allocate", "--owner", "job-1", "--container", "worker", `${GADGET}=1`, "--api", node.apiSocket, "--output", "json"]);
  assert.equal(allocated.code, 0, allocated.stderr);
  const answer = JSON.parse(allocated.stdout) as { allocations: { container: string; devices: string[]; response: { devices: { containerPath: string }[] } }[] };
  assert.deepEqual(answer.allocations.map((a) => [a.container, a.devices, a.response.devices.map((d) => d.containerPath)]), [["worker", ["gadget0"], ["/dev/gadget0"]]]);
  await plugin.waitForLine(/^PreStartContainer: gadget0$/);

  // Its socket deleted (as the kubelet's cleanup at start does): the agent deregisters it, the plugin serves a new socket.
  let mark = plugin.lines().length;
  fs.rmSync(first);
  const second = (await plugin.waitForLine(/^serving /, { from: mark })).slice("serving ".length);
  await plugin.waitForLine(/^registered$/, { from: mark });
  await agent.until("only the new socket, registered", (view) => !view.plugins.has(first) && view.plugins.get(second)?.state === "registered");
  await agent.until("connected on the new socket", () => gadget()?.connected === true && gadget()?.sockets.join() === second);

  // kill -9: the socket stays behind; the record turns stale and the devices unhealthy, each with an event.
  const before = agent.view.events.length;
  mark = plugin.lines().length;
  plugin.child.kill("SIGKILL");
  await agent.until("the record stale", (view) => view.plugins.get(second)?.state === "stale");
  await agent.until("the resource disconnected", () => gadget()?.connected === false);
  const after = agent.view.events.slice(before);
  assert.ok(after.some((e) => e.kind.case === "plugin" && e.kind.value.plugin?.state === "stale"), "a plugin event says stale");
  assert.ok(after.some((e) => e.kind.case === "resource" && e.kind.value.resource?.unhealthy.join() === "gadget0,gadget1"), "a resource event has every device unhealthy");
  assert.ok(fs.existsSync(second), "the agent never removes a plugin's socket");
  const status = await statusJson(node.apiSocket);
  assert.equal(status.ok, false);
  assert.deepEqual(status.allocations.map((a) => [a.owner, a.container, a.devices]), [["job-1", "worker", ["gadget0"]]]);
});
