/**
 * The CSIPlugin handler against CSI node drivers that are real @grpc/grpc-js
 * servers on real unix sockets: versions checked as the kubelet checks them,
 * NodeGetInfo's answer recorded, a failed NodeGetInfo unregistering the
 * driver until a retry succeeds, and a same-name driver registering only
 * with a higher version.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import { CsiDrivers } from "../src/handlers/csi.ts";
import type { PluginRegistration } from "../src/pluginmanager/types.ts";
import { startCsiDriver } from "./support/csi-dra-peers.ts";
import { quietLog } from "./support/manager-harness.ts";
import { rejection } from "./support/rejection.ts";
import { tempDir } from "./support/temp-dir.ts";

const DRIVER = "hostpath.csi.k8s.io";

function csiPlugin(dir: string, socket: string, endpoint: string, versions: string[]): PluginRegistration {
  return { socket: path.join(dir, socket), type: "CSIPlugin", name: DRIVER, endpoint, versions };
}

const signal = () => AbortSignal.timeout(10_000);

test("versions are refused with the kubelet's words: empty list, 0.x only, nothing parsable", async () => {
  const handler = new CsiDrivers({ log: quietLog }).handler();
  const plugin = (versions: string[]) => csiPlugin("/run", "r.sock", "/run/csi.sock", versions);
  assert.equal(
    await rejection(handler.validatePlugin(plugin([]), signal())),
    `kubernetes.io/csi: ValidatePlugin for CSI driver "${DRIVER}" failed. Plugin returned an empty list for supported versions`,
  );
  assert.equal(
    await rejection(handler.validatePlugin(plugin(["0.3.0"]), signal())),
    `kubernetes.io/csi: ValidatePlugin for CSI driver "${DRIVER}" failed. None of the versions specified ["0.3.0"] are supported. err=highest supported version reported by plugin is 0.3.0, must be v1.x`,
  );
  assert.match(await rejection(handler.validatePlugin(plugin(["banana"]), signal())), /None of the versions specified \["banana"\] are supported/);
  await handler.validatePlugin(plugin(["0.3.0", "1.0.0"]), signal());
});

test("register calls NodeGetInfo, NodeGetCapabilities and GetPluginInfo on the endpoint and records the answers", async (t) => {
  const dir = tempDir(t);
  const driver = await startCsiDriver(path.join(dir, "csi.sock"), {
    name: DRIVER,
    nodeId: "edge-01",
    maxVolumesPerNode: 16,
    topology: { "topology.hostpath.csi/node": "edge-01" },
    vendorVersion: "v1.17.0",
  });
  t.after(() => driver.close());
  const drivers = new CsiDrivers({ log: quietLog });
  const plugin = csiPlugin(dir, "reg.sock", driver.socketPath, ["1.0.0", "1.9.0"]);
  await drivers.handler().registerPlugin(plugin, signal());
  const details = drivers.details(plugin.socket, DRIVER);
  assert.ok(details);
  assert.equal(details.version, "1.9.0");
  assert.equal(details.nodeId, "edge-01");
  assert.equal(details.maxVolumesPerNode, 16n);
  assert.deepEqual(details.topology, { "topology.hostpath.csi/node": "edge-01" });
  assert.equal(details.vendorVersion, "v1.17.0");
  assert.deepEqual(details.nodeCapabilities, ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"]);
  drivers.handler().deregisterPlugin(plugin);
  assert.equal(drivers.details(plugin.socket, DRIVER), undefined);
});

test("a driver whose NodeGetInfo fails is not registered, and registers when a retry succeeds", async (t) => {
  const dir = tempDir(t);
  const driver = await startCsiDriver(path.join(dir, "csi.sock"), { name: DRIVER, failNodeGetInfoTimes: 1 });
  t.after(() => driver.close());
  const drivers = new CsiDrivers({ log: quietLog });
  const plugin = csiPlugin(dir, "reg.sock", driver.socketPath, ["1.5.0"]);
  const failure = await rejection(drivers.handler().registerPlugin(plugin, signal()));
  // The call's own error as grpc-go prints it, which the kubelet hands on to the registrar.
  assert.equal(failure, "rpc error: code = Unavailable desc = node not ready: volume backend starting");
  assert.equal(drivers.details(plugin.socket, DRIVER), undefined, "unregistered after the failure");
  // The name is free again: the retry is not "another driver with the same name".
  await drivers.handler().validatePlugin(plugin, signal());
  await drivers.handler().registerPlugin(plugin, signal());
  assert.equal(drivers.details(plugin.socket, DRIVER)?.nodeId, "edge-01");
  assert.equal(driver.nodeGetInfoCalls(), 2);
});

test("an unreachable endpoint fails the registration naming the endpoint", async (t) => {
  const dir = tempDir(t);
  const drivers = new CsiDrivers({ log: quietLog, dialTimeoutMs: 1_000 });
  const failure = await rejection(drivers.handler().registerPlugin(csiPlugin(dir, "reg.sock", path.join(dir, "gone.sock"), ["1.0.0"]), signal()));
  assert.match(failure, /NodeGetInfo on .*gone\.sock: .*no socket at/);
  const relative = await rejection(drivers.handler().registerPlugin(csiPlugin(dir, "reg.sock", "csi.sock", ["1.0.0"]), signal()));
  assert.match(relative, /CSI endpoint "csi\.sock" is not an absolute unix socket path/);
});

test("a second driver of the same name registers only with a higher version; a downgrade is refused", async (t) => {
  const dir = tempDir(t);
  const old = await startCsiDriver(path.join(dir, "old.sock"), { name: DRIVER, nodeId: "old" });
  const next = await startCsiDriver(path.join(dir, "new.sock"), { name: DRIVER, nodeId: "new" });
  t.after(() => Promise.all([old.close(), next.close()]));
  const drivers = new CsiDrivers({ log: quietLog });
  const handler = drivers.handler();
  const first = csiPlugin(dir, "a.sock", old.socketPath, ["1.2.0"]);
  await handler.registerPlugin(first, signal());

  const same = csiPlugin(dir, "b.sock", next.socketPath, ["1.2.0"]);
  const downgrade = csiPlugin(dir, "c.sock", next.socketPath, ["1.1.0"]);
  const refusal = `kubernetes.io/csi: ValidatePlugin for CSI driver "${DRIVER}" failed. Another driver with the same name is already registered with a higher supported version: "1.2.0"`;
  assert.equal(await rejection(handler.validatePlugin(same, signal())), refusal);
  assert.equal(await rejection(handler.validatePlugin(downgrade, signal())), refusal);

  const upgrade = csiPlugin(dir, "d.sock", next.socketPath, ["1.3.0"]);
  await handler.validatePlugin(upgrade, signal());
  await handler.registerPlugin(upgrade, signal());
  assert.equal(drivers.details(upgrade.socket, DRIVER)?.nodeId, "new");
  assert.equal(drivers.details(first.socket, DRIVER), undefined, "the older driver no longer holds the name");
  // The older socket going away does not unregister its successor.
  handler.deregisterPlugin(first);
  assert.equal(drivers.details(upgrade.socket, DRIVER)?.version, "1.3.0");
});
