/**
 * A process registering and dropping fresh resource names, on
 * dist/edgeplug: each plugin lists 10,000 devices on kubelet.sock, is seen
 * by the agent, and goes. Departed resources wait out their grace period
 * (5 min here), but together they keep at most 100,000 devices: past that
 * the oldest keep only what allocations hold. Before, each kept its whole
 * list, and the agent's memory grew with every plugin that came and went.
 * The lists' garbage is collected once they stop coming (src/platform/heap-return.ts).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { registerDevicePlugin, startFakeDevicePlugin, type TestDevice } from "./support/fake-device-plugin.ts";

const PLUGINS = 24;
const DEVICES = 10_000;

function rssMb(pid: number): number {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!;
  return Number(line.split(/\s+/)[1]) / 1024;
}

test("dist/edgeplug: plugins registering fresh resource names and going leave a bounded number of devices behind; the agent's memory stays bounded", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const pid = agent.child.pid!;
  const watch = await watchAgent(node, node.apiSocket);
  const kubeletSock = path.join(node.pluginsDir, "kubelet.sock");
  const devices: TestDevice[] = Array.from({ length: DEVICES }, (_, i) => ({ ID: `churn-device-${String(i).padStart(6, "0")}-${"z".repeat(24)}`, health: "Healthy" }));
  const before = rssMb(pid);
  let peak = before;
  for (let i = 0; i < PLUGINS; i++) {
    const resource = `example.com/churn-${i}`;
    const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, `churn-${i}.sock`), devices });
    await registerDevicePlugin(kubeletSock, { endpoint: `churn-${i}.sock`, resource_name: resource });
    await watch.until(`${resource} listed`, (view) => view.resources.get(resource)?.capacity === DEVICES, 20_000);
    await plugin.stop();
    await watch.until(`${resource} departed`, (view) => view.resources.get(resource)?.connected === false, 20_000);
    peak = Math.max(peak, rssMb(pid));
  }
  // The garbage of those lists is collected a second after the last, not when V8's reducer gets to it.
  const returned = await agent.waitForLog("memory of a large device list returned", 10_000);
  assert.equal(typeof returned.durationMs, "number");
  const after = rssMb(pid);
  t.diagnostic(`agent RSS: ${before.toFixed(1)} MB before, ${peak.toFixed(1)} MB at most, ${after.toFixed(1)} MB after ${PLUGINS} plugins of ${DEVICES} devices came and went`);
  const resources = (await statusJson(node.apiSocket)).resources;
  assert.equal(resources.length, PLUGINS, "every departed resource waits out its grace period");
  assert.ok(resources.every((r) => !r.connected && r.allocatable === 0));
  const kept = resources.reduce((sum, r) => sum + r.capacity, 0);
  assert.ok(kept <= 100_000, `departed resources keep ${kept} devices`);
  t.diagnostic(`${kept} devices kept by departed resources`);
  assert.ok(peak - before < 150, `RSS grew by ${(peak - before).toFixed(1)} MB`);
});
