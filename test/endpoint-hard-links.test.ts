/**
 * Hard links on dist/edgeplug: a hard link is a second name for one socket,
 * so the endpoint rules compare inodes as well as paths. A device plugin
 * registering on kubelet.sock with a hard link to another live plugin's
 * socket (the same devices under two resources), to kubelet.sock itself or
 * to the API socket is refused; so is a DRA driver whose endpoint is a hard
 * link to a live device plugin's socket, to the API socket or to
 * kubelet.sock; none of them is dialled as a plugin.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";
import { startFakePlugin } from "./support/fake-plugin.ts";
import { rejection } from "./support/rejection.ts";

test("dist/edgeplug: endpoints that are hard links to a live plugin's socket or to edgeplug's own sockets are refused", async (t) => {
  const node = deviceNode(t);
  fs.writeFileSync(node.policy, fs.readFileSync(node.policy, "utf8").replace("  DevicePlugin: {}\n", "  DevicePlugin: {}\n  DRAPlugin: {}\n"));
  await startAgent(node);
  const kubeletSock = path.join(node.pluginsDir, "kubelet.sock");
  const good = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "a.sock"), devices: healthyDevices(2) });
  node.after(() => good.stop());
  await registerDevicePlugin(kubeletSock, { endpoint: "a.sock", resource_name: "example.com/a" });

  const hardLink = (target: string, file: string): string => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.linkSync(target, file);
    return file;
  };
  const register = (name: string, target: string, resource: string) => {
    hardLink(target, path.join(node.pluginsDir, name));
    return rejection(registerDevicePlugin(kubeletSock, { endpoint: name, resource_name: resource }));
  };
  assert.match(await register("b.sock", good.socketPath, "example.com/b"), /endpoint ".*\/b\.sock" is the socket of device plugin example\.com\/a; each resource registers its own socket/);
  assert.match(await register("k.sock", kubeletSock, "example.com/k"), /endpoint "k\.sock" is the registration socket itself/);
  assert.match(await register("api.sock", node.apiSocket, "example.com/api"), /endpoint ".*\/dp\/api\.sock" is a hard link to edgeplug's own socket ".*\/api\.sock"/);
  assert.deepEqual((await statusJson(node.apiSocket)).resources.map((r) => r.name), ["example.com/a"]);
  assert.equal(good.streams(), 1, "the plugin was dialled once, for its own resource");

  // DRA drivers in the watched directory whose endpoints are hard links elsewhere.
  fs.mkdirSync(node.registry, { recursive: true });
  const draCases: Array<[string, RegExp]> = [
    [good.socketPath, /is the live endpoint of device plugin example\.com\/a; a DRA driver must serve a socket of its own/],
    [node.apiSocket, /is a hard link to edgeplug's own socket ".*\/api\.sock"/],
    [kubeletSock, /is a hard link to edgeplug's own socket ".*\/kubelet\.sock"/],
  ];
  for (const [index, [target, expected]] of draCases.entries()) {
    const endpoint = hardLink(target, path.join(node.dir, "plugins", `dra-${index}`, "svc.sock"));
    const driver = await startFakePlugin({
      socketPath: path.join(node.registry, `dra-${index}.sock`),
      info: { type: "DRAPlugin", name: `dra-${index}.example.com`, endpoint, versions: ["v1.DRAPlugin"] },
    });
    node.after(() => driver.stop());
    const notification = await driver.waitForNotify(undefined, 10_000);
    assert.equal(notification.registered, false, `DRA driver ${index} was registered with ${endpoint}`);
    assert.match(notification.error, expected);
  }
  assert.equal(good.streams(), 1, "no DRA driver dialled the device plugin");
});

test("dist/edgeplug: a watched-directory device plugin whose endpoint is a hard link to another plugin's registration socket is refused", async (t) => {
  const node = deviceNode(t);
  await startAgent(node);
  fs.mkdirSync(node.registry, { recursive: true });
  // Plugin a registers in the watched directory; its service socket is elsewhere, so its registration socket is no live device-plugin endpoint.
  const service = await startFakeDevicePlugin({ socketPath: path.join(node.dir, "a-service.sock"), devices: healthyDevices(2) });
  node.after(() => service.stop());
  const first = await startFakePlugin({
    socketPath: path.join(node.registry, "a.sock"),
    info: { type: "DevicePlugin", name: "example.com/a", endpoint: service.socketPath, versions: ["v1beta1"] },
  });
  node.after(() => first.stop());
  assert.equal((await first.waitForNotify(undefined, 10_000)).registered, true);

  // Plugin b names, outside the watched directory, a second name of a's registration socket.
  const linked = path.join(node.dir, "elsewhere", "b-endpoint.sock");
  fs.mkdirSync(path.dirname(linked));
  fs.linkSync(first.socketPath, linked);
  const second = await startFakePlugin({
    socketPath: path.join(node.registry, "b.sock"),
    info: { type: "DevicePlugin", name: "example.com/b", endpoint: linked, versions: ["v1beta1"] },
  });
  node.after(() => second.stop());
  const notification = await second.waitForNotify(undefined, 10_000);
  assert.equal(notification.registered, false, "b was registered with a hard link to a's registration socket");
  assert.match(
    notification.error,
    /endpoint ".*\/b-endpoint\.sock" is a hard link to ".*\/registry\/a\.sock", a socket in a watched directory that is not this plugin's registration socket .*: it belongs to another plugin/,
  );
  assert.equal(first.getInfoCalls(), 1, "a's registration socket was never dialled for b");
});
