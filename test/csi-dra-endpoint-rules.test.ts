/**
 * The endpoint rules (src/endpoints/endpoint-rules.ts) on the CSIPlugin and
 * DRAPlugin handlers, each against real sockets: the kubelet's layout (the
 * registration socket in the watched directory, the service socket in
 * plugins/<driver>/) registers; edgeplug's own socket, another plugin's
 * registration socket, a socket of a uid outside security.socketOwners, a
 * symbolic link and a relative path are refused at ValidatePlugin, again at
 * RegisterPlugin, and never dialled (a raw listener counts connections).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { CsiDrivers } from "../src/handlers/csi.ts";
import { DraDrivers } from "../src/handlers/dra.ts";
import type { WatchedEndpointRules } from "../src/endpoints/endpoint-rules.ts";
import type { PluginHandler, PluginRegistration } from "../src/pluginmanager/types.ts";
import { startCsiDriver, startDraService } from "./support/csi-dra-peers.ts";
import { type RawListener, socketsHeldUnder, startRawListener } from "./support/grpc-peers.ts";
import { quietLog } from "./support/manager-harness.ts";
import { rejection } from "./support/rejection.ts";
import { tempDir } from "./support/temp-dir.ts";

interface Registry {
  handler: PluginHandler;
  registered(socket: string, name: string): boolean;
}

interface Kind {
  type: "CSIPlugin" | "DRAPlugin";
  versions: string[];
  /** The endpoint as a driver names it (CSI drivers often with "unix://"). */
  endpointOf(socketPath: string): string;
  registry(t: TestContext, rules: () => WatchedEndpointRules): Registry;
  serve(socketPath: string, name: string): Promise<{ close(): Promise<void> }>;
}

const KINDS: Kind[] = [
  {
    type: "CSIPlugin",
    versions: ["1.0.0"],
    endpointOf: (socketPath) => `unix://${socketPath}`,
    registry(_t, rules) {
      const drivers = new CsiDrivers({ log: quietLog, dialTimeoutMs: 2_000, endpointRules: rules });
      return { handler: drivers.handler(), registered: (socket, name) => drivers.details(socket, name) !== undefined };
    },
    serve: (socketPath, name) => startCsiDriver(socketPath, { name }),
  },
  {
    type: "DRAPlugin",
    versions: ["v1.DRAPlugin"],
    endpointOf: (socketPath) => socketPath,
    registry(t, rules) {
      const drivers = new DraDrivers({ log: quietLog, dialTimeoutMs: 2_000, endpointRules: rules });
      t.after(() => drivers.close());
      return { handler: drivers.handler(undefined, { connectionLost() {} }), registered: (socket, name) => drivers.details(socket, name)?.connected === true };
    },
    serve: (socketPath) => startDraService(socketPath),
  },
];

const signal = () => AbortSignal.timeout(10_000);

/** A node as the kubelet lays it out, under a temp dir: plugins_registry (watched), plugins/, and edgeplug's API socket. */
function node(t: TestContext, kind: Kind, socketOwners = [process.getuid!()]) {
  const dir = tempDir(t);
  const registryDir = path.join(dir, "plugins_registry");
  const plugins = path.join(dir, "plugins");
  fs.mkdirSync(registryDir);
  fs.mkdirSync(plugins);
  const apiSocket = path.join(dir, "api.sock");
  const rules: WatchedEndpointRules = { socketOwners, watchDirs: [registryDir], ownSockets: [apiSocket] };
  const { handler, registered } = kind.registry(t, () => rules);
  let count = 0;
  /** A registration socket with a driver name of its own (CSI keeps one driver per name) whose GetInfo named `endpoint`. */
  const registration = (endpoint: string, socket = path.join(registryDir, `driver-${count + 1}-reg.sock`)): PluginRegistration => {
    count++;
    return { socket, type: kind.type, name: `driver-${count}.example.com`, endpoint, versions: kind.versions };
  };
  const listener = async (socketPath: string): Promise<RawListener> => {
    fs.mkdirSync(path.dirname(socketPath), { recursive: true });
    const raw = await startRawListener(socketPath, (socket) => socket.destroy());
    t.after(() => raw.close());
    return raw;
  };
  return { dir, registryDir, plugins, apiSocket, handler, registered, registration, listener };
}

/** Both calls refuse `plugin` with a message matching (or containing) `expected`. */
async function assertRefused(handler: PluginHandler, plugin: PluginRegistration, expected: RegExp | string): Promise<void> {
  for (const call of [() => handler.validatePlugin(plugin, signal()), () => handler.registerPlugin(plugin, signal())]) {
    const message = await rejection(call());
    if (typeof expected === "string") assert.ok(message.includes(expected), message);
    else assert.match(message, expected);
  }
}

for (const kind of KINDS) {
  test(`${kind.type}: the kubelet's layout registers; edgeplug's own socket and another plugin's registration socket in a watched directory are refused and never dialled`, async (t) => {
    const { dir, registryDir, plugins, apiSocket, handler, registered, registration, listener } = node(t, kind);
    const service = path.join(plugins, "driver-1.example.com", "svc.sock");
    fs.mkdirSync(path.dirname(service));
    const served = await kind.serve(service, "driver-1.example.com");
    t.after(() => served.close());
    const good = registration(kind.endpointOf(service));
    await handler.validatePlugin(good, signal());
    await handler.registerPlugin(good, signal());
    assert.ok(registered(good.socket, good.name));
    // DRA keeps the connection, and with it the socket as opened; CSI lets both go once NodeGetInfo answered.
    assert.deepEqual(socketsHeldUnder(dir), kind.type === "DRAPlugin" ? [service] : []);
    // Its own registration socket as the endpoint (one server for both) is its own.
    const both = await listener(path.join(registryDir, "both.sock"));
    await handler.validatePlugin(registration(kind.endpointOf(both.socketPath), both.socketPath), signal());

    const api = await listener(apiSocket);
    await assertRefused(handler, registration(kind.endpointOf(apiSocket)), /endpoint ".*\/api\.sock" is one of edgeplug's own sockets/);
    const other = await listener(path.join(registryDir, "other-reg.sock"));
    const notItsOwn = /endpoint ".*\/plugins_registry\/other-reg\.sock" is in a watched directory but is not this plugin's registration socket/;
    await assertRefused(handler, registration(kind.endpointOf(other.socketPath)), notItsOwn);
    // The same sockets through a link to their directory (anyone may make one in /tmp) are judged by their real path.
    fs.symlinkSync(registryDir, path.join(dir, "registry-link"));
    await assertRefused(handler, registration(kind.endpointOf(path.join(dir, "registry-link", "other-reg.sock"))), notItsOwn);
    fs.symlinkSync(dir, path.join(dir, "node-link"));
    await assertRefused(handler, registration(kind.endpointOf(path.join(dir, "node-link", "api.sock"))), /is one of edgeplug's own sockets/);
    // A hard link is another name for the same socket: compared by inode, not by path.
    const hardLink = path.join(plugins, "driver-x", "svc.sock");
    fs.mkdirSync(path.dirname(hardLink));
    fs.linkSync(apiSocket, hardLink);
    await assertRefused(handler, registration(kind.endpointOf(hardLink)), /endpoint ".*\/driver-x\/svc\.sock" is a hard link to edgeplug's own socket ".*\/api\.sock"/);
    assert.deepEqual([api.accepted, other.accepted], [0, 0], "neither was dialled");
  });

  test(`${kind.type}: an endpoint owned by a uid outside security.socketOwners is refused and never dialled`, async (t) => {
    const { plugins, handler, registration, listener } = node(t, kind, [4242]);
    const foreign = await listener(path.join(plugins, "driver", "svc.sock"));
    const uid = process.getuid!();
    await assertRefused(handler, registration(kind.endpointOf(foreign.socketPath)), new RegExp(`endpoint ".*/driver/svc\\.sock" is owned by uid ${uid}, not in security\\.socketOwners \\[4242\\]`));
    assert.equal(foreign.accepted, 0);
  });

  test(`${kind.type}: a symbolic link is refused, also when the endpoint becomes one between ValidatePlugin and RegisterPlugin`, async (t) => {
    const { plugins, handler, registered, registration, listener } = node(t, kind);
    const target = await listener(path.join(plugins, "other", "svc.sock"));
    const link = path.join(plugins, "driver", "svc.sock");
    fs.mkdirSync(path.dirname(link));
    fs.symlinkSync(target.socketPath, link);
    await assertRefused(handler, registration(kind.endpointOf(link)), /endpoint ".*\/driver\/svc\.sock" is a symbolic link; name the socket itself/);

    const own = path.join(plugins, "driver", "own.sock");
    const served = await kind.serve(own, "driver-2.example.com");
    t.after(() => served.close());
    const swapped = registration(kind.endpointOf(own));
    await handler.validatePlugin(swapped, signal());
    fs.renameSync(own, path.join(plugins, "driver", "own-moved.sock"));
    fs.symlinkSync(target.socketPath, own);
    assert.match(await rejection(handler.registerPlugin(swapped, signal())), /is a symbolic link/);
    assert.equal(registered(swapped.socket, swapped.name), false);
    assert.equal(target.accepted, 0, "the socket the link leads to was never dialled");
  });

  test(`${kind.type}: a relative endpoint is refused, naming it`, async (t) => {
    const { handler, registration } = node(t, kind);
    const prefix = kind.type === "CSIPlugin" ? "CSI" : "DRA";
    for (const endpoint of ["svc.sock", "../plugins/driver/svc.sock", "./svc.sock"]) {
      const named = kind.endpointOf(endpoint);
      await assertRefused(handler, registration(named), `${prefix} endpoint ${JSON.stringify(named)} is not an absolute unix socket path`);
    }
  });
}

test("DRAPlugin: the registered instance holds its endpoint as opened until it deregisters", async (t) => {
  const kind = KINDS[1]!;
  const { dir, plugins, handler, registration } = node(t, kind);
  const service = await startDraService(path.join(plugins, "dra.sock"));
  t.after(() => service.close());
  const plugin = registration(service.socketPath);
  await handler.validatePlugin(plugin, signal());
  assert.deepEqual(socketsHeldUnder(dir), [], "validation holds nothing");
  await handler.registerPlugin(plugin, signal());
  assert.deepEqual(socketsHeldUnder(dir), [service.socketPath]);
  handler.deregisterPlugin(plugin);
  assert.deepEqual(socketsHeldUnder(dir), [], "released with the connection");
});
