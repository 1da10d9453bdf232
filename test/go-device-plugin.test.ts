/**
 * End to end on dist/edgeplug with peers written in Go with grpc-go 1.33
 * (test/go, built from Debian's packages by test/support/go-peers.ts),
 * dialling as every device plugin in the ecosystem does: the socket's bare
 * path as target and a context dialer, so the path itself is sent as
 * :authority. The device plugin registers on kubelet.sock, is allocated
 * through the API with its preferred devices, registers again when its
 * socket is removed and when the agent restarts (the allocation restored
 * from the checkpoint), and the pod-resources client lists, gets and counts
 * what it holds on the kubelet's pod-resources socket (podResources.socket).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { test } from "node:test";
import { runEdgeplug } from "./support/agent-process.ts";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, restoredPlain, startAgent, statusJson } from "./support/device-node.ts";
import { GO_PEER_TEST_TIMEOUT_MS, type GoPeers, goPeersOrSkip, goPodResources, startGoDevicePlugin } from "./support/go-peers.ts";

const DEV = "example.com/dev";

interface GoContainer {
  name: string;
  devices: { resource_name: string; device_ids: string[] }[];
}
interface GoPod {
  name: string;
  namespace: string;
  containers: GoContainer[];
}

/** A pod as [name, namespace, [container, sorted device IDs per resource]]. */
const podRow = (pod: GoPod) => [pod.name, pod.namespace, pod.containers.map((c) => [c.name, devicesByResource(c.devices)])];
function devicesByResource(devices: GoContainer["devices"]): Record<string, string[]> {
  const byResource: Record<string, string[]> = {};
  for (const entry of devices) (byResource[entry.resource_name] ??= []).push(...entry.device_ids);
  for (const ids of Object.values(byResource)) ids.sort();
  return byResource;
}

async function listedPods(peers: GoPeers, socket: string) {
  return ((await goPodResources(peers, socket, "list")) as { pod_resources: GoPod[] }).pod_resources.map(podRow);
}

test(
  "a grpc-go device plugin registers on kubelet.sock by its bare path, is allocated through the API, comes back after its socket is removed and after an agent restart; the grpc-go pod-resources client reads its allocations",
  { timeout: GO_PEER_TEST_TIMEOUT_MS },
  async (t) => {
    const peers = await goPeersOrSkip(t);
    if (!peers) return;
    const node = deviceNode(t);
    let agentProcess = await startAgent(node);
    let agent = await watchAgent(node, node.apiSocket);
    // No topology: whichever topology rule the agent applies, every free device is offered.
    const plugin = startGoDevicePlugin(node, peers, ["-plugins-dir", node.pluginsDir, "-resource", DEV, "-devices", "4", "-numa-nodes", "0"]);
    const socket = (await plugin.waitForLine(/^SERVING /)).slice("SERVING ".length);
    await plugin.waitForLine(/^REGISTERED$/);
    await agent.until("4 healthy devices from the Go plugin's socket", (view) => view.resources.get(DEV)?.healthy.length === 4 && view.resources.get(DEV)?.sockets.join() === socket);
    plugin.send("unhealthy dev0");
    await agent.until("dev0 unhealthy", (view) => view.resources.get(DEV)?.unhealthy.join() === "dev0");

    let mark = plugin.lines().length;
    const allocated = await runEdgeplug(["allocate", "--owner", "job-1", `${DEV}=2`, "--config", node.policy]);
    assert.equal(allocated.code, 0, allocated.stderr);
    assert.match(allocated.stdout, /^allocated to job-1 \(container main\)\nexample\.com\/dev: dev(3, dev2|2, dev3)\n {2}env {9}GO_PLUGIN_DEVICES=dev(3,dev2|2,dev3)\n/);
    assert.match(await plugin.waitForLine(/^PREFERRED /, { from: mark }), /^PREFERRED dev3,dev2$/);
    await plugin.waitForLine(/^PRESTART dev(3,dev2|2,dev3)$/, { from: mark });

    // The kubelet's pod-resources client, dialling the same way, on the kubelet's own pod-resources path.
    const job1 = ["job-1", "edgeplug", [["main", { [DEV]: ["dev2", "dev3"] }]]];
    assert.deepEqual(await listedPods(peers, node.podResourcesSocket), [job1]);
    const got = (await goPodResources(peers, node.podResourcesSocket, "get", "job-1", "edgeplug")) as { pod_resources: GoPod };
    assert.deepEqual(podRow(got.pod_resources), job1);
    const allocatable = (await goPodResources(peers, node.podResourcesSocket, "allocatable")) as { devices: GoContainer["devices"] };
    assert.deepEqual(devicesByResource(allocatable.devices), { [DEV]: ["dev1", "dev2", "dev3"] }, "the unhealthy dev0 is not allocatable");

    // Its socket removed: it serves it afresh and registers again, as the kubelet's restart contract asks of plugins.
    mark = plugin.lines().length;
    fs.rmSync(socket);
    await plugin.waitForLine(/^RESTART own socket removed$/, { from: mark });
    await plugin.waitForLine(/^REGISTERED$/, { from: mark });
    await agent.until("connected again after the socket was removed", (view) => view.resources.get(DEV)?.connected === true && view.resources.get(DEV)?.healthy.length === 3);

    // The agent restarts: kubelet.sock is new, the plugin registers again, the allocation is restored.
    const before = (await statusJson(node.apiSocket)).allocations;
    agentProcess.child.kill("SIGTERM");
    assert.equal((await agentProcess.exited).code, 0, agentProcess.stderr());
    mark = plugin.lines().length;
    agentProcess = await startAgent(node);
    agent = await watchAgent(node, node.apiSocket);
    await plugin.waitForLine(/^RESTART (kubelet\.sock re-created|own socket removed)$/, { from: mark });
    await plugin.waitForLine(/^REGISTERED$/, { from: mark });
    await agent.until(
      "connected after the agent restarted, dev0 still unhealthy",
      (view) => view.resources.get(DEV)?.connected === true && view.resources.get(DEV)?.unhealthy.join() === "dev0" && view.resources.get(DEV)?.healthy.length === 3,
    );
    assert.deepEqual((await statusJson(node.apiSocket)).allocations, restoredPlain(before));
    assert.deepEqual(await listedPods(peers, node.podResourcesSocket), [job1]);

    mark = plugin.lines().length;
    const more = await runEdgeplug(["allocate", "--owner", "job-2", `${DEV}=1`, "--api", node.apiSocket, "--output", "json"]);
    assert.equal(more.code, 0, more.stderr);
    assert.deepEqual((JSON.parse(more.stdout) as { allocations: { devices: string[] }[] }).allocations[0]?.devices, ["dev1"], "the devices held before the restart stay held");
    await plugin.waitForLine(/^ALLOCATE dev1$/, { from: mark });
    assert.deepEqual(await listedPods(peers, node.podResourcesSocket), [job1, ["job-2", "edgeplug", [["main", { [DEV]: ["dev1"] }]]]]);
    assert.equal(await plugin.stop("SIGTERM"), 0);
  },
);
