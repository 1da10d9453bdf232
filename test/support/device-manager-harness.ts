/**
 * A DeviceManager of its own for each test, and @grpc/grpc-js device plugins
 * connected to it on real sockets: what the device allocation and upstream
 * parity tests share.
 */
import * as path from "node:path";
import type { TestContext } from "node:test";
import { DeviceManager } from "../../src/devicemanager/device-manager.ts";
import { createLogger } from "../../src/log/logger.ts";
import type { Clock } from "../../src/platform/clock.ts";
import { type FakeDevicePluginOptions, healthyDevices, startFakeDevicePlugin, waitForDeviceState } from "./fake-device-plugin.ts";
import { tempDir } from "./temp-dir.ts";

export const R1 = "domain1.com/resource1";
export const R2 = "domain2.com/resource2";

/** A quiet manager without a checkpoint (on the system clock unless given one), stopped after the test. */
export function newManager(t: TestContext, options: { clock?: Clock; topologyPolicy?: "none" | "single-numa-node" } = {}): DeviceManager {
  const devices = new DeviceManager({ log: createLogger({ level: "error", write: () => {} }), gracePeriodMs: 60_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store: null, ...options });
  t.after(() => devices.stop());
  return devices;
}

/** A plugin of `resource` (two healthy devices unless told), connected and its list taken in. */
export async function connected(
  t: TestContext,
  devices: DeviceManager,
  resource: string,
  options: Partial<FakeDevicePluginOptions> = {},
  socketPath = path.join(tempDir(t), `${resource.replace(/\W/g, "_")}.sock`),
) {
  const plugin = await startFakeDevicePlugin({ socketPath, devices: healthyDevices(2), ...options });
  t.after(() => plugin.stop());
  await devices.connect(resource, plugin.socketPath);
  const count = (options.devices ?? healthyDevices(2)).length;
  await waitForDeviceState(devices, `${resource} listed`, () => devices.resource(resource)?.connected === true && devices.resource(resource)?.capacity === count);
  return plugin;
}

/** An allocation request: `count` devices of each resource for one owner's container. */
export const ask = (owner: string, resources: Record<string, number>, container = "main") => ({
  owner,
  container,
  resources: Object.entries(resources).map(([resource, count]) => ({ resource, count })),
});

/** A gate for a fake plugin's call: `held` is what the plugin awaits, `release` opens it (for good). */
export function hold() {
  let release = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  return { held: () => held, release };
}
