/**
 * The errors a plugin reads are the kubelet's: kubelet.sock refuses with the
 * kubelet's plain errors (gRPC code Unknown, which a grpc-go plugin prints as
 * `rpc error: code = Unknown desc = ...`), and a CSI registrar whose driver's
 * NodeGetInfo fails is told the call's own error as grpc-go prints it,
 * inside the kubelet's RegistrationStatus text.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { createLogger } from "../src/log/logger.ts";
import { startCsiDriver } from "./support/csi-dra-peers.ts";
import { scopedTempDir } from "./support/device-node.ts";
import { registerDevicePlugin } from "./support/fake-device-plugin.ts";
import { startFakePlugin } from "./support/fake-plugin.ts";
import { testPolicy } from "./support/policy.ts";

const quiet = createLogger({ level: "error", write: () => {} });

test("kubelet.sock refuses a plugin with the kubelet's text and gRPC code Unknown, as the kubelet's plain errors arrive", async (t) => {
  const scope = scopedTempDir(t);
  const policy = testPolicy({ watch: [path.join(scope.dir, "registry")], handlers: { DevicePlugin: {} } });
  const registrationSocket = path.join(scope.dir, "dp", "kubelet.sock");
  const agent = new EdgeplugAgent({ policy: { ...policy, devicePlugins: { ...policy.devicePlugins, registrationSocket } }, log: quiet });
  scope.after(() => agent.stop());
  await agent.start();
  await assert.rejects(registerDevicePlugin(registrationSocket, { version: "v1alpha", endpoint: "gpu.sock", resource_name: "acme.io/gpu" }), (error: grpc.ServiceError) => {
    assert.equal(error.code, grpc.status.UNKNOWN);
    assert.equal(error.details, 'requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]');
    return true;
  });
  await assert.rejects(registerDevicePlugin(registrationSocket, { endpoint: "gpu.sock", resource_name: "gpu" }), (error: grpc.ServiceError) => {
    assert.deepEqual([error.code, error.details], [grpc.status.UNKNOWN, 'the ResourceName "gpu" is invalid']);
    return true;
  });
});

test("a CSI registrar whose driver's NodeGetInfo fails is told RegisterPlugin error -- plugin registration failed with err: rpc error: code = Unavailable desc = ...", async (t) => {
  const scope = scopedTempDir(t);
  const registry = path.join(scope.dir, "registry");
  const driver = await startCsiDriver(path.join(scope.dir, "csi.sock"), { name: "hostpath.csi.k8s.io", failNodeGetInfoTimes: 1000 });
  scope.after(() => driver.close());
  const agent = new EdgeplugAgent({ policy: testPolicy({ watch: [registry], handlers: { CSIPlugin: {} } }), log: quiet });
  scope.after(() => agent.stop());
  await agent.start();
  const registrar = await startFakePlugin({
    socketPath: path.join(registry, "hostpath.csi.k8s.io-reg.sock"),
    info: { type: "CSIPlugin", name: "hostpath.csi.k8s.io", endpoint: driver.socketPath, versions: ["1.0.0"] },
  });
  scope.after(() => registrar.stop());
  const refusal = await registrar.waitForNotify((notification) => !notification.registered);
  assert.equal(refusal.error, "RegisterPlugin error -- plugin registration failed with err: rpc error: code = Unavailable desc = node not ready: volume backend starting");
});
