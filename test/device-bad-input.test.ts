/**
 * Device plugins are untrusted (docs/devices.md): the
 * endpoints a plugin may name on each registration path (endpoint-rules.ts,
 * src/endpoints/endpoint-check.ts), and a ListAndWatch message over the size
 * cap, which is refused without losing the plugin's last good list.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import type { ListenerLimits } from "../src/server/limits.ts";
import { DeviceManager } from "../src/devicemanager/device-manager.ts";
import { MAX_LIST_MESSAGE_BYTES } from "../src/devicemanager/names.ts";
import { serveRegistration } from "../src/devicemanager/registration-server.ts";
import { createLogger } from "../src/log/logger.ts";
import { pinSocket } from "../src/platform/pinned-socket.ts";
import type { Policy } from "../src/policy/types.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { socketsHeldUnder } from "./support/grpc-peers.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const quiet = createLogger({ level: "error", write: () => {} });
const R = "acme.io/gpu";

async function registrationServer(t: TestContext, limits?: ListenerLimits) {
  const dir = tempDir(t);
  const pluginsDir = path.join(dir, "device-plugins");
  const devices = new DeviceManager({ log: quiet, gracePeriodMs: 60_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store: null });
  const socketPath = path.join(pluginsDir, "kubelet.sock");
  const server = await serveRegistration({ socketPath, manager: devices, log: quiet, limits });
  t.after(async () => {
    await server.close();
    await devices.stop();
  });
  return { dir, pluginsDir, socketPath, devices };
}

async function devicePlugin(t: TestContext, socketPath: string, count = 1) {
  const plugin = await startFakeDevicePlugin({ socketPath, devices: healthyDevices(count) });
  t.after(() => plugin.stop());
  return plugin;
}

test("Register: endpoints that leave the directory, are not sockets or belong to another resource are refused with the reason", async (t) => {
  const { dir, pluginsDir, socketPath, devices } = await registrationServer(t);
  await devicePlugin(t, path.join(pluginsDir, "gpu.sock"));
  await registerDevicePlugin(socketPath, { endpoint: "gpu.sock", resource_name: R });
  const outside = await devicePlugin(t, path.join(dir, "outside.sock"));
  fs.symlinkSync(path.join(pluginsDir, "gpu.sock"), path.join(pluginsDir, "link.sock"));
  fs.writeFileSync(path.join(pluginsDir, "file.sock"), "");
  // A plugin that may write in the directory links a subdirectory to one where another plugin's socket is.
  fs.symlinkSync(dir, path.join(pluginsDir, "elsewhere"));
  fs.symlinkSync(".", path.join(pluginsDir, "here"));
  const cases: [string, string, RegExp][] = [
    ["../outside.sock", "acme.io/a", /endpoint "\.\.\/outside\.sock" escapes the device-plugin directory/],
    [outside.socketPath, "acme.io/b", /escapes the device-plugin directory/],
    ["link.sock", "acme.io/c", /is a symbolic link; name the socket itself/],
    ["file.sock", "acme.io/d", /is not a unix socket/],
    ["missing.sock", "acme.io/e", /no socket at .*missing\.sock/],
    ["kubelet.sock", "acme.io/f", /is the registration socket itself/],
    ["here/kubelet.sock", "acme.io/k", /endpoint "here\/kubelet\.sock" is the registration socket itself/],
    ["elsewhere/outside.sock", "acme.io/j", /endpoint "elsewhere\/outside\.sock" leads out of the device-plugin directory .* through a symbolic link/],
    ["gpu.sock", "acme.io/g", /is the socket of device plugin acme\.io\/gpu; each resource registers its own socket/],
    ["bad\nname.sock", "acme.io/h", /contains a control character/],
    ["", "acme.io/i", /endpoint is empty/],
  ];
  for (const [endpoint, resource, reason] of cases) {
    await assert.rejects(registerDevicePlugin(socketPath, { endpoint, resource_name: resource }), (error: Error) => reason.test(error.message), `${JSON.stringify(endpoint)}`);
    assert.equal(devices.resource(resource), undefined, `${resource} is not recorded`);
  }
  assert.deepEqual(devices.resources().map((r) => [r.name, r.allocatable, r.connected]), [[R, 1, true]], "the registered plugin is untouched");
  // Each refused endpoint's descriptor was closed: only the registered plugin's socket is held.
  assert.deepEqual(socketsHeldUnder(dir), [path.join(pluginsDir, "gpu.sock")]);
});

test("the socket that passed the checks is the socket dialled: swapped for another plugin's afterwards, the plugin's own still answers", async (t) => {
  const dir = tempDir(t);
  const devices = new DeviceManager({ log: quiet, gracePeriodMs: 60_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store: null });
  t.after(() => devices.stop());
  const own = await startFakeDevicePlugin({ socketPath: path.join(dir, "own.sock"), devices: healthyDevices(1, "own") });
  const other = await startFakeDevicePlugin({ socketPath: path.join(dir, "other.sock"), devices: healthyDevices(3, "other") });
  t.after(() => Promise.all([own.stop(), other.stop()]).then(() => {}));
  const pinned = pinSocket(own.socketPath);
  assert.ok(!("refused" in pinned) && pinned.pinned, "pinned on Linux");
  // Between the checks and the dial, the path comes to hold the other plugin's socket.
  fs.renameSync(other.socketPath, own.socketPath);
  await devices.connect(R, pinned.realPath, { pinned });
  await waitForDeviceState(devices, "a device list", () => (devices.resource(R)?.capacity ?? 0) > 0);
  assert.deepEqual(devices.resource(R)?.healthy, ["own0"]);
  assert.equal(other.streams(), 0, "the other plugin was never dialled");
  devices.disconnect(R, pinned.realPath);
  assert.deepEqual(socketsHeldUnder(dir), [], "the descriptor is closed with the endpoint");
});

test("Register's socket holds clients to limits: connections over the cap and idle ones are closed, an oversized request is refused", async (t) => {
  const { socketPath } = await registrationServer(t, { maxConnections: 3, idleTimeoutMs: 300, requestBodyTimeoutMs: 1000, maxRequestBodyBytes: 1024 });
  const open = async () => {
    const socket = net.createConnection(socketPath);
    t.after(() => socket.destroy());
    socket.on("error", () => {});
    await once(socket, "connect");
    return { socket, closed: once(socket, "close") };
  };
  const held = [await open(), await open(), await open()];
  const extra = await open();
  await extra.closed; // over the cap: closed at once, while the three stay
  assert.equal(held.some(({ socket }) => socket.destroyed), false);
  // None of the three sends anything: each is closed once idle, which frees the cap.
  await Promise.all(held.map(({ closed }) => closed));
  await assert.rejects(registerDevicePlugin(socketPath, { endpoint: "x".repeat(2000), resource_name: R }), (error: Error & { code?: number }) => {
    assert.equal(error.code, 8, error.message); // RESOURCE_EXHAUSTED: the message is not read
    return true;
  });
  await assert.rejects(registerDevicePlugin(socketPath, { endpoint: "missing.sock", resource_name: R }), /no socket at/, "a request within the bounds is served");
});

function watchedPolicy(dir: string): Policy {
  const base = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} }, socketOwners: [0, process.getuid!()] });
  return { ...base, api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: null } };
}

test("watched directory: an endpoint elsewhere is dialled as the kubelet does; another plugin's socket, a link, a stranger's socket or edgeplug's own are refused, also when named through a linked directory", async (t) => {
  const dir = tempDir(t);
  const policy = watchedPolicy(dir);
  const registry = policy.watch[0]!.path;
  fs.mkdirSync(registry, { recursive: true });
  const agent = new EdgeplugAgent({ policy, log: quiet });
  t.after(() => agent.stop());
  await agent.start();
  const errorOf = (socket: string) => agent.pluginStatus.plugins().find((p) => p.socket === socket)?.error ?? "";
  const stateOf = (socket: string) => agent.pluginStatus.plugins().find((p) => p.socket === socket)?.state;
  const settled = (socket: string) => waitForDeviceState({ subscribe: (l) => agent.pluginStatus.subscribe(l) }, `${socket} settled`, () => ["registered", "failed"].includes(stateOf(socket) ?? ""));

  // A plugin whose DevicePlugin socket lives in its own directory, outside the watched one.
  fs.mkdirSync(path.join(dir, "vendor"));
  const served = await devicePlugin(t, path.join(dir, "vendor", "gpu.sock"), 2);
  const watched = async (name: string, resource: string, endpoint: string) => {
    const plugin = await startFakeDevicePlugin({ socketPath: path.join(registry, name), devices: [], watchedAs: { name: resource, endpoint } });
    t.after(() => plugin.stop());
    await settled(plugin.socketPath);
    return plugin.socketPath;
  };
  const good = await watched("good.sock", R, served.socketPath);
  assert.equal(stateOf(good), "registered", errorOf(good));
  assert.equal(agent.devices.resource(R)?.sockets[0], served.socketPath);

  const other = await watched("other.sock", "acme.io/other", "good.sock");
  assert.match(errorOf(other), /endpoint ".*\/registry\/good\.sock" is in a watched directory but is not this plugin's registration socket/);
  const twice = await watched("twice.sock", "acme.io/twice", served.socketPath);
  assert.match(errorOf(twice), /is the socket of device plugin acme\.io\/gpu; each resource registers its own socket/);
  fs.symlinkSync(served.socketPath, path.join(dir, "vendor", "link.sock"));
  const linked = await watched("linked.sock", "acme.io/linked", path.join(dir, "vendor", "link.sock"));
  assert.match(errorOf(linked), /is a symbolic link/);
  const api = await watched("api.sock", "acme.io/api", policy.api.socket!);
  assert.match(errorOf(api), /is one of edgeplug's own sockets/);
  const stranger = await devicePlugin(t, path.join(dir, "vendor", "stranger.sock"));
  fs.chownSync(stranger.socketPath, 4242, 4242);
  const strangers = await watched("strangers.sock", "acme.io/stranger", stranger.socketPath);
  assert.match(errorOf(strangers), /is owned by uid 4242, not in security\.socketOwners/);
  // The same sockets named through symbolic links to their directories (anyone can make one in /tmp).
  fs.symlinkSync(registry, path.join(dir, "registry-link"));
  const viaLink = await watched("via-link.sock", "acme.io/via-link", path.join(dir, "registry-link", "good.sock"));
  assert.match(errorOf(viaLink), /endpoint ".*\/registry\/good\.sock" is in a watched directory but is not this plugin's registration socket/);
  fs.symlinkSync(path.join(dir, "vendor"), path.join(dir, "vendor-link"));
  const twiceViaLink = await watched("twice-link.sock", "acme.io/twice-link", path.join(dir, "vendor-link", "gpu.sock"));
  assert.match(errorOf(twiceViaLink), /is the socket of device plugin acme\.io\/gpu; each resource registers its own socket/);
  const apiViaLink = path.join(dir, "api-link");
  fs.symlinkSync(dir, apiViaLink);
  const ownViaLink = await watched("api-link.sock", "acme.io/api-link", path.join(apiViaLink, "api.sock"));
  assert.match(errorOf(ownViaLink), /is one of edgeplug's own sockets/);
  assert.deepEqual(agent.devices.resources().map((r) => r.name), [R], "only the good plugin has a resource");
});

test("a ListAndWatch message over the size cap is refused, the last good list stays, and the stream is opened again", async (t) => {
  const dir = tempDir(t);
  const devices = new DeviceManager({ log: quiet, gracePeriodMs: 60_000, maxDevicesPerResource: 1000, dialTimeoutMs: 2000, store: null });
  t.after(() => devices.stop());
  const plugin = await devicePlugin(t, path.join(dir, "gpu.sock"), 3);
  await devices.connect(R, plugin.socketPath);
  await waitForDeviceState(devices, "3 devices", () => devices.resource(R)?.allocatable === 3);
  plugin.sendRaw({ devices: [{ ID: "huge", health: "x".repeat(MAX_LIST_MESSAGE_BYTES) }] });
  await waitForDeviceState(devices, "the refusal", () => /over 16777216 bytes/.test(devices.resource(R)?.error ?? ""));
  assert.deepEqual([devices.resource(R)?.allocatable, devices.resource(R)?.connected], [3, true], "the last good list stays");
  // The stream opened again brings the plugin's current list, which clears the error.
  await waitForDeviceState(devices, "the stream back", () => devices.resource(R)?.error === undefined, 10_000);
  assert.equal(plugin.streams(), 1);
  plugin.setDevices(healthyDevices(4));
  await waitForDeviceState(devices, "updates flow again", () => devices.resource(R)?.allocatable === 4);
});
