/**
 * The endpoint rule between kinds of plugin (src/endpoints/endpoint-rules.ts),
 * through the whole agent (in-process), against @grpc/grpc-js plugins on real
 * sockets: a CSI or DRA driver whose endpoint is a live device plugin's
 * socket is refused at ValidatePlugin naming the device plugin's resource,
 * and a device plugin whose endpoint is a registered DRA driver's socket is
 * refused on kubelet.sock and through the watched directory, naming the
 * driver. The sockets stay the plugins' own: a driver of its own registers.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import type * as grpc from "@grpc/grpc-js";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { startDraService } from "./support/csi-dra-peers.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const RESOURCE = "acme.io/gpu";
const CSI_DRIVER = "hostpath.csi.k8s.io";
const DRA_DRIVER = "gpu.example.com";

/** An agent that takes device plugins (on kubelet.sock and in the watched directory), CSI and DRA drivers. */
async function startAgent(t: TestContext) {
  const dir = tempDir(t);
  const registry = path.join(dir, "plugins_registry");
  const devicePlugins = path.join(dir, "device-plugins");
  const plugins = path.join(dir, "plugins");
  fs.mkdirSync(plugins);
  const base = testPolicy({ watch: [registry], handlers: { DevicePlugin: {}, CSIPlugin: {}, DRAPlugin: {} } });
  const policy: Policy = { ...base, devicePlugins: { registrationSocket: path.join(devicePlugins, "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" } };
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "error", write: () => {} }) });
  t.after(() => agent.stop());
  await agent.start();
  return { agent, registry, devicePlugins, plugins, kubeletSock: policy.devicePlugins.registrationSocket! };
}

/** The plugin manager's record of the registration socket `socket` once its attempt has ended. */
async function recorded(agent: EdgeplugAgent, socket: string) {
  const ended = (plugin: { socket: string; state: string }) => plugin.socket === socket && plugin.state !== "pending";
  assert.ok(await agent.pluginStatus.whenSettled({ predicate: (plugins) => plugins.some(ended), signal: AbortSignal.timeout(5000) }));
  const record = agent.pluginStatus.plugins().find(ended);
  return { state: record?.state, reason: record?.reason };
}

test("a CSI or DRA driver naming a live device plugin's socket as its endpoint is refused at ValidatePlugin, naming the resource", async (t) => {
  const { agent, registry, devicePlugins, plugins, kubeletSock } = await startAgent(t);
  const devicePlugin = await startFakeDevicePlugin({ socketPath: path.join(devicePlugins, "gpu.sock"), devices: healthyDevices(2) });
  t.after(() => devicePlugin.stop());
  await registerDevicePlugin(kubeletSock, { endpoint: "gpu.sock", resource_name: RESOURCE });
  await waitForDeviceState(agent.devices, `${RESOURCE} connected`, () => agent.devices.resource(RESOURCE)?.connected === true);
  const taken = `endpoint ${JSON.stringify(devicePlugin.socketPath)} is the live endpoint of device plugin ${RESOURCE}`;

  const csi = await startTestPlugin(t, {
    socketPath: path.join(registry, `${CSI_DRIVER}-reg.sock`),
    info: { type: "CSIPlugin", name: CSI_DRIVER, endpoint: `unix://${devicePlugin.socketPath}`, versions: ["1.0.0"] },
  });
  const csiRefusal = await csi.waitForNotify();
  assert.equal(csiRefusal.registered, false);
  const atValidation = "RegisterPlugin error -- plugin validation failed with err: ";
  assert.equal(csiRefusal.error, `${atValidation}kubernetes.io/csi: ValidatePlugin for CSI driver "${CSI_DRIVER}" failed. ${taken}; a CSI driver must serve a socket of its own`);
  assert.deepEqual(await recorded(agent, csi.socketPath), { state: "failed", reason: "validation" });

  const dra = await startTestPlugin(t, {
    socketPath: path.join(registry, `${DRA_DRIVER}-reg.sock`),
    info: { type: "DRAPlugin", name: DRA_DRIVER, endpoint: devicePlugin.socketPath, versions: ["v1.DRAPlugin"] },
  });
  const draRefusal = await dra.waitForNotify();
  assert.equal(draRefusal.registered, false);
  assert.equal(draRefusal.error, `${atValidation}${taken}; a DRA driver must serve a socket of its own`);
  assert.deepEqual(await recorded(agent, dra.socketPath), { state: "failed", reason: "validation" });
  assert.equal(agent.devices.resource(RESOURCE)?.connected, true, "the device plugin keeps its socket");

  // A socket of the driver's own still registers beside the device plugin.
  fs.mkdirSync(path.join(plugins, DRA_DRIVER));
  const service = await startDraService(path.join(plugins, DRA_DRIVER, "dra.sock"));
  t.after(() => service.close());
  const own = await startTestPlugin(t, {
    socketPath: path.join(registry, `${DRA_DRIVER}-own-reg.sock`),
    info: { type: "DRAPlugin", name: DRA_DRIVER, endpoint: service.socketPath, versions: ["v1.DRAPlugin"] },
  });
  assert.equal((await own.waitForNotify()).registered, true);
});

test("a device plugin naming a registered DRA driver's socket as its endpoint is refused on kubelet.sock and in the watched directory, naming the driver", async (t) => {
  const { agent, registry, devicePlugins, kubeletSock } = await startAgent(t);
  // In the device-plugin directory, the only place a Register endpoint can name.
  const service = await startDraService(path.join(devicePlugins, "dra.sock"));
  t.after(() => service.close());
  const driver = await startTestPlugin(t, {
    socketPath: path.join(registry, `${DRA_DRIVER}-reg.sock`),
    info: { type: "DRAPlugin", name: DRA_DRIVER, endpoint: service.socketPath, versions: ["v1.DRAPlugin"] },
  });
  assert.equal((await driver.waitForNotify()).registered, true);
  const taken = `endpoint ${JSON.stringify(service.socketPath)} is the live endpoint of DRA driver ${DRA_DRIVER}; a device plugin must serve a socket of its own`;

  const onKubeletSock = await registerDevicePlugin(kubeletSock, { endpoint: "dra.sock", resource_name: RESOURCE }).then(
    () => assert.fail("Register was accepted"),
    (error: grpc.ServiceError) => error.details,
  );
  assert.equal(onKubeletSock, taken);

  const watched = await startTestPlugin(t, {
    socketPath: path.join(registry, "gpu-reg.sock"),
    info: { type: "DevicePlugin", name: RESOURCE, endpoint: service.socketPath, versions: ["v1beta1"] },
  });
  const refusal = await watched.waitForNotify();
  assert.equal(refusal.registered, false);
  // Device plugins' endpoints are judged at RegisterPlugin, on the socket then opened and dialled (every rule of theirs is).
  assert.equal(refusal.error, `RegisterPlugin error -- plugin registration failed with err: ${taken}`);
  assert.equal(agent.devices.resource(RESOURCE), undefined, "no resource was created for it");
});
