/**
 * Device plugins through the watched directory (the kubelet's plugin-watcher
 * "probe mode"), as upstream's TestDevicePluginReRegistrationProbeMode and
 * TestNewManagerImplStartProbeMode do it: each new socket is a registration,
 * devices follow the newest list, and stopping is idempotent.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { createLogger } from "../src/log/logger.ts";
import { healthyDevices, startFakeDevicePlugin, type TestDevice, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const R = "acme.io/gpu";

test("probe mode: a second socket with the same devices keeps them, a third with one other device replaces them; stop twice is fine", async (t) => {
  const dir = tempDir(t);
  const policy = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} } });
  fs.mkdirSync(policy.watch[0]!.path, { recursive: true });
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "error", write: () => {} }) });
  t.after(() => agent.stop());
  await agent.start();
  const counts = () => [agent.devices.resource(R)?.capacity, agent.devices.resource(R)?.allocatable];
  const plugin = async (name: string, devices: TestDevice[]) => {
    const started = await startFakeDevicePlugin({ socketPath: path.join(policy.watch[0]!.path, name), devices, watchedAs: { name: R } });
    t.after(() => started.stop());
    await started.waitForStreams();
    return started;
  };

  await plugin("p1.sock", healthyDevices(2));
  await waitForDeviceState(agent.devices, "2/2", () => agent.devices.resource(R)?.allocatable === 2);
  const second = await plugin("p2.sock", healthyDevices(2));
  await waitForDeviceState(agent.devices, "two instances", () => agent.devices.resource(R)?.sockets.length === 2);
  assert.deepEqual(counts(), [2, 2], "no orphaned devices");
  await plugin("p3.sock", [{ ID: "other", health: "Healthy" }]);
  await waitForDeviceState(agent.devices, "1/1", () => agent.devices.resource(R)?.capacity === 1);
  assert.deepEqual(counts(), [1, 1]);
  assert.deepEqual(agent.devices.resource(R)?.healthy, ["other"]);
  // The third list can arrive before its registration is recorded (NotifyRegistrationStatus comes after ListAndWatch opens).
  const settled = await agent.pluginStatus.whenSettled({ signal: AbortSignal.timeout(5000), predicate: (plugins) => plugins.filter((p) => p.state === "registered").length === 3 });
  assert.ok(settled, `three registered plugins: ${JSON.stringify(agent.pluginStatus.plugins().map((p) => p.state))}`);
  assert.equal(second.streams(), 1, "the earlier instances stay connected");

  await Promise.all([agent.stop(), agent.stop()]);
  await agent.stop();
  await assert.rejects(agent.devices.connect(R, second.socketPath), /the device manager is stopping/);
});
