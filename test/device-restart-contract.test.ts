/**
 * The kubelet's restart contract for device plugins: at start the agent
 * removes the sockets in kubelet.sock's directory, live ones included, so a
 * plugin that watches only its own socket (as Intel's do) serves again and
 * registers again after an agent restart, and its allocations come back from
 * the checkpoint. Nothing else there goes: not the checkpoint, other files,
 * directories, symbolic links or edgeplug's own sockets.
 * `devicePlugins.removeSocketsAtStart: false` keeps live sockets, and so
 * does a directory the plugin watcher watches.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { scopedTempDir } from "./support/device-node.ts";
import { waitForEvent } from "./support/fake-plugin.ts";
import { type FakeDevicePlugin, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import type { CleansUpAfter } from "./support/temp-dir.ts";
import { testPolicy } from "./support/policy.ts";
import { waitUntil } from "./support/wait.ts";

const GPU = "acme.io/gpu";
const DEVICES = [
  { ID: "gpu0", health: "Healthy" },
  { ID: "gpu1", health: "Healthy" },
];

/**
 * A device plugin that, like many real ones, learns of a kubelet restart only
 * from its own socket being deleted: it then serves a new one at the same path
 * and registers again. It never looks at kubelet.sock.
 */
async function socketWatchingPlugin(scope: CleansUpAfter, socketPath: string, registrationSocket: string) {
  let plugin: FakeDevicePlugin = await startFakeDevicePlugin({ socketPath, devices: DEVICES });
  let registrations = 0;
  const answered = new EventEmitter();
  let serving: Promise<void> = Promise.resolve();
  let stopped = false;
  const register = async () => {
    // kubelet.sock is bound right after the agent's cleanup: retried until it answers, as plugins do.
    await waitUntil(() => fs.existsSync(registrationSocket), `${registrationSocket} to appear`, 10_000);
    for (let attempt = 0;; attempt++) {
      try {
        await registerDevicePlugin(registrationSocket, { endpoint: path.basename(socketPath), resource_name: GPU });
        registrations++;
        answered.emit("change");
        return;
      } catch (error) {
        if (attempt === 50 || stopped) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const watcher = fs.watch(path.dirname(socketPath), () => {
    if (stopped || fs.existsSync(socketPath)) return;
    serving = serving.then(async () => {
      if (stopped || fs.existsSync(socketPath)) return;
      await plugin.stop();
      plugin = await startFakeDevicePlugin({ socketPath, devices: DEVICES });
      await register();
    });
  });
  scope.after(async () => {
    stopped = true;
    watcher.close();
    await serving.catch(() => {});
    await plugin.stop();
  });
  await register();
  return {
    registrations: () => registrations,
    /** Resolves once `count` Register calls have been answered (edgeplug answers once the plugin is connected, not before its devices show). */
    answered: (count: number) => waitForEvent(answered, `${count} Register calls answered`, () => registrations >= count, 10_000),
    settled: () => serving,
  };
}

function agentPolicy(dir: string, options: { removeSocketsAtStart: boolean; watchPluginsDir?: boolean }): Policy {
  const pluginsDir = path.join(dir, "dp");
  const base = { watch: [options.watchPluginsDir ? pluginsDir : path.join(dir, "registry")], handlers: { DevicePlugin: {} }, checkpointPath: path.join(pluginsDir, "kubelet_internal_checkpoint") };
  return {
    ...testPolicy(base),
    devicePlugins: { registrationSocket: path.join(pluginsDir, "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: options.removeSocketsAtStart, topologyPolicy: "none" },
    // edgeplug's own sockets in the same directory are never removed.
    api: { socket: path.join(pluginsDir, "api.sock"), socketGroup: null, metrics: null },
  };
}

/** Beside the plugin: a stale socket, a regular file, a directory with a live socket in it, and a symbolic link to a socket. */
async function neighbours(scope: CleansUpAfter, pluginsDir: string) {
  const stale = path.join(pluginsDir, "dead.sock");
  // A socket nobody listens on: bound, linked under a second name, then closed (which removes only the first).
  const bound = net.createServer();
  const boundPath = path.join(pluginsDir, "bound.sock");
  await new Promise<void>((resolve) => bound.listen(boundPath, resolve));
  fs.linkSync(boundPath, stale);
  await new Promise<void>((resolve) => bound.close(() => resolve()));
  fs.writeFileSync(path.join(pluginsDir, "DEPRECATION"), "");
  fs.mkdirSync(path.join(pluginsDir, "sub"));
  const inner = net.createServer();
  await new Promise<void>((resolve) => inner.listen(path.join(pluginsDir, "sub", "inner.sock"), resolve));
  scope.after(() => new Promise<void>((resolve) => inner.close(() => resolve())));
  fs.symlinkSync(path.join(pluginsDir, "sub", "inner.sock"), path.join(pluginsDir, "link.sock"));
  return { stale, kept: ["DEPRECATION", "sub/inner.sock", "link.sock", "kubelet_internal_checkpoint", "api.sock"].map((name) => path.join(pluginsDir, name)) };
}

function identity(file: string): string {
  const stat = fs.lstatSync(file, { bigint: true });
  return `${stat.ino}:${stat.birthtimeNs}`;
}

async function startAgent(scope: CleansUpAfter, policy: Policy, logs: string[] = []) {
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "info", format: "json", write: (line) => void logs.push(line) }) });
  scope.after(() => agent.stop());
  await agent.start();
  const channel = dialUnix(policy.api.socket!);
  scope.after(() => channel.close());
  return { agent, api: createClient(Agent, channel.transport), logs };
}

async function firstRun(t: TestContext, options: { removeSocketsAtStart: boolean; watchPluginsDir?: boolean }) {
  const scope = scopedTempDir(t);
  const policy = agentPolicy(scope.dir, options);
  const pluginsDir = path.dirname(policy.devicePlugins.registrationSocket!);
  const first = await startAgent(scope, policy);
  const pluginSocket = path.join(pluginsDir, "gpu.sock");
  const plugin = await socketWatchingPlugin(scope, pluginSocket, policy.devicePlugins.registrationSocket!);
  await waitForDeviceState(first.agent.devices, "two gpus", () => first.agent.devices.resource(GPU)?.allocatable === 2);
  const granted = await first.api.allocate({ owner: "job-1", resources: [{ resource: GPU, count: 1 }] });
  const held = granted.allocations[0]!.devices;
  await first.agent.stop();
  const files = await neighbours(scope, pluginsDir);
  return { scope, policy, plugin, pluginSocket, held, files };
}

test("at start the agent removes the plugin sockets beside kubelet.sock, as the kubelet does: a plugin watching its own socket registers again and the allocation held before is restored", async (t) => {
  const { scope, policy, plugin, pluginSocket, held, files } = await firstRun(t, { removeSocketsAtStart: true });
  const before = identity(pluginSocket);
  const logs: string[] = [];
  const second = await startAgent(scope, policy, logs);
  await waitForDeviceState(
    second.agent.devices,
    "the plugin back with two gpus",
    () => second.agent.devices.resource(GPU)?.connected === true && second.agent.devices.resource(GPU)?.allocatable === 2,
    10_000,
  );
  await plugin.answered(2);
  assert.equal(plugin.registrations(), 2, "the plugin registered again, once");
  assert.notEqual(identity(pluginSocket), before, "the plugin serves a new socket");
  assert.deepEqual(second.agent.devices.allocations().map((entry) => [entry.owner, entry.devices]), [["job-1", held]]);
  const next = await second.api.allocate({ owner: "job-2", resources: [{ resource: GPU, count: 1 }] });
  assert.notDeepEqual(next.allocations[0]!.devices, held, "the device held before the restart stays held");

  assert.equal(fs.existsSync(files.stale), false, "a stale socket goes too");
  for (const file of files.kept) assert.ok(fs.lstatSync(file), `${file} stays`);
  const removal = logs.map((line) => JSON.parse(line)).find((record) => record.msg === "removed device plugin sockets at start, as the kubelet does");
  assert.deepEqual([removal?.count, removal?.sockets], [2, ["dead.sock", "gpu.sock"]]);
});

test("removeSocketsAtStart: false keeps live plugin sockets (only stale ones go), so a plugin watching only its own socket stays away", async (t) => {
  const { scope, policy, plugin, pluginSocket, files } = await firstRun(t, { removeSocketsAtStart: false });
  const before = identity(pluginSocket);
  const second = await startAgent(scope, policy);
  assert.equal(identity(pluginSocket), before);
  assert.equal(fs.existsSync(files.stale), false);
  for (const file of files.kept) assert.ok(fs.lstatSync(file), `${file} stays`);
  assert.equal(plugin.registrations(), 1);
  assert.equal(second.agent.devices.resource(GPU)?.connected, false);
});

test("when kubelet.sock's directory is watched, its live sockets are the plugin watcher's and stay", async (t) => {
  const { scope, policy, pluginSocket } = await firstRun(t, { removeSocketsAtStart: true, watchPluginsDir: true });
  const before = identity(pluginSocket);
  const logs: string[] = [];
  await startAgent(scope, policy, logs);
  assert.equal(identity(pluginSocket), before);
  assert.ok(logs.some((line) => JSON.parse(line).msg === "device plugin sockets are left at start: their directory is watched"), logs.join("\n"));
});
