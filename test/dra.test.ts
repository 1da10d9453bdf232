/**
 * The DRAPlugin handler against DRA plugin services that are real
 * @grpc/grpc-js servers on real unix sockets: service names chosen as the
 * kubelet chooses them, several instances per driver with the newest
 * connected one preferred, an endpoint registered once, and the service
 * connection watched: an instance whose plugin dies is reported lost at
 * once, and the driver shows disconnected when no instance is left connected.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { chooseService, DraDrivers } from "../src/handlers/dra.ts";
import type { PluginRegistration } from "../src/pluginmanager/types.ts";
import { startDraService } from "./support/csi-dra-peers.ts";
import { quietLog } from "./support/manager-harness.ts";
import { tempDir } from "./support/temp-dir.ts";

const DRIVER = "gpu.example.com";
const signal = () => AbortSignal.timeout(10_000);

function draPlugin(dir: string, socket: string, endpoint: string, versions = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]): PluginRegistration {
  return { socket: path.join(dir, socket), type: "DRAPlugin", name: DRIVER, endpoint, versions };
}

/** Records connectionLost calls and lets a test wait for the next one. */
function lossRecorder() {
  const losses: Array<{ socket: string; reason: string }> = [];
  let notify = () => {};
  return {
    losses,
    context: {
      connectionLost(plugin: PluginRegistration, reason: string) {
        losses.push({ socket: plugin.socket, reason });
        notify();
      },
    },
    next(count: number): Promise<void> {
      return new Promise((resolve) => {
        notify = () => losses.length >= count && resolve();
        notify();
      });
    },
  };
}

test("services: the first advertised one edgeplug serves wins; an empty or foreign list is refused in the kubelet's words", () => {
  assert.equal(chooseService(["v1beta1.DRAPlugin", "v1.DRAPlugin"]), "v1beta1.DRAPlugin");
  assert.equal(chooseService(["v1alpha4.NodeService", "v1.DRAPlugin"]), "v1.DRAPlugin");
  assert.throws(() => chooseService([]), { message: "empty list of supported gRPC services (aka supported versions)" });
  assert.throws(() => chooseService(["v1alpha4.NodeService"]), {
    message: 'none of services supported by the plugin (["v1alpha4.NodeService"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])',
  });
});

test("two instances of a driver: the newest connected is preferred; one dying leaves the other serving, both dying disconnect the driver", async (t) => {
  const dir = tempDir(t);
  const first = await startDraService(path.join(dir, "dra-1.sock"), "v1beta1");
  const second = await startDraService(path.join(dir, "dra-2.sock"), "v1");
  t.after(() => Promise.all([first.close(), second.close()]));
  const drivers = new DraDrivers({ log: quietLog });
  t.after(() => drivers.close());
  const recorder = lossRecorder();
  const handler = drivers.handler(undefined, recorder.context);
  const old = draPlugin(dir, "reg-1.sock", first.socketPath, ["v1beta1.DRAPlugin"]);
  const upgraded = draPlugin(dir, "reg-2.sock", second.socketPath);
  for (const plugin of [old, upgraded]) {
    await handler.validatePlugin(plugin, signal());
    await handler.registerPlugin(plugin, signal());
  }
  assert.equal(drivers.preferred(DRIVER)?.socket, upgraded.socket);
  assert.deepEqual(
    { ...drivers.details(upgraded.socket, DRIVER) },
    { ...drivers.details(upgraded.socket, DRIVER), service: "v1.DRAPlugin", connected: true, driverConnected: true, instances: 2, preferred: true },
  );
  assert.equal(drivers.details(old.socket, DRIVER)?.service, "v1beta1.DRAPlugin");

  await second.close(); // the newer instance's plugin dies
  await recorder.next(1);
  assert.deepEqual(recorder.losses, [{ socket: upgraded.socket, reason: `DRA service connection to ${second.socketPath} lost` }]);
  assert.equal(drivers.details(upgraded.socket, DRIVER)?.connected, false, "marked at once, before the plugin manager deregisters it");
  assert.equal(drivers.isConnected(DRIVER), true);
  assert.equal(drivers.preferred(DRIVER)?.socket, old.socket, "the connected instance is preferred over the newer lost one");
  handler.deregisterPlugin(upgraded); // what the plugin manager does on connectionLost

  await first.close();
  await recorder.next(2);
  assert.equal(drivers.isConnected(DRIVER), false);
  assert.deepEqual(
    { ...drivers.details(old.socket, DRIVER) },
    { ...drivers.details(old.socket, DRIVER), connected: false, driverConnected: false, instances: 1, preferred: true },
  );
  handler.deregisterPlugin(old);
  assert.equal(drivers.details(old.socket, DRIVER)?.instances, 0);
});

test("the same endpoint registered by a second socket is refused, also when named through a linked directory", async (t) => {
  const dir = tempDir(t);
  const service = await startDraService(path.join(dir, "dra.sock"));
  t.after(() => service.close());
  const drivers = new DraDrivers({ log: quietLog });
  t.after(() => drivers.close());
  const handler = drivers.handler(undefined, lossRecorder().context);
  await handler.registerPlugin(draPlugin(dir, "reg-1.sock", service.socketPath), signal());
  await assert.rejects(handler.validatePlugin(draPlugin(dir, "reg-2.sock", service.socketPath), signal()), {
    message: `endpoint ${service.socketPath} already registered for DRA driver plugin ${DRIVER}`,
  });
  // The same socket through a link to its directory is the same endpoint.
  fs.symlinkSync(dir, path.join(dir, "linked"));
  const linked = path.join(dir, "linked", path.basename(service.socketPath));
  await assert.rejects(handler.validatePlugin(draPlugin(dir, "reg-3.sock", linked), signal()), {
    message: `endpoint ${linked} already registered for DRA driver plugin ${DRIVER}`,
  });
});

test("an endpoint nothing serves fails the registration, naming the service and why", async (t) => {
  const dir = tempDir(t);
  const drivers = new DraDrivers({ log: quietLog, dialTimeoutMs: 1_000 });
  const handler = drivers.handler(undefined, lossRecorder().context);
  await assert.rejects(handler.registerPlugin(draPlugin(dir, "reg.sock", path.join(dir, "absent.sock")), signal()), (error: Error) => {
    assert.match(error.message, /cannot connect to the v1\.DRAPlugin service of DRA driver gpu\.example\.com at .*absent\.sock \(missing\)/);
    return true;
  });
  assert.equal(drivers.details(path.join(dir, "reg.sock"), DRIVER)?.instances, 0);
});

test("deregistration and close() end the service connections without reporting a loss", async (t) => {
  const dir = tempDir(t);
  const service = await startDraService(path.join(dir, "dra.sock"));
  t.after(() => service.close());
  const drivers = new DraDrivers({ log: quietLog });
  const recorder = lossRecorder();
  const handler = drivers.handler(undefined, recorder.context);
  const plugin = draPlugin(dir, "reg.sock", service.socketPath);
  await handler.registerPlugin(plugin, signal());
  handler.deregisterPlugin(plugin);
  await handler.registerPlugin(plugin, signal());
  await drivers.close(); // resolves once every connection closed, loss handlers run
  assert.deepEqual(recorder.losses, []);
});
