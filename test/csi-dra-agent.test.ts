/**
 * CSI and DRA plugins through the whole agent (in-process): a CSI node
 * driver registering the way node-driver-registrar does (a registration
 * socket in the watched directory whose endpoint is the driver's CSI socket
 * elsewhere), a failed NodeGetInfo retried by the plugin manager, and two DRA
 * instances of one driver whose service connections drop one after the
 * other, as `status` and WatchEvents show it; endpoints judged by the
 * policy's rules (src/endpoints/endpoint-rules.ts), a reload included.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { statusToJson, statusToText } from "../src/api/status.ts";
import { Agent, type Event, type PluginStatus } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { startCsiDriver, startDraService } from "./support/csi-dra-peers.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

const CSI_DRIVER = "hostpath.csi.k8s.io";
const DRA_DRIVER = "gpu.example.com";

async function startAgent(t: test.TestContext) {
  const dir = tempDir(t);
  const registry = path.join(dir, "plugins_registry");
  const plugins = path.join(dir, "plugins");
  fs.mkdirSync(plugins);
  const policy = {
    ...testPolicy({ watch: [registry], handlers: { CSIPlugin: {}, DRAPlugin: {} } }),
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: null },
  };
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "error", write: () => {} }) });
  t.after(() => agent.stop());
  await agent.start();
  return { agent, policy, registry, plugins, apiSocket: policy.api.socket };
}

/** Reads the agent's WatchEvents until a plugin event satisfies `predicate`. */
function pluginEvents(t: test.TestContext, apiSocket: string) {
  const channel = dialUnix(apiSocket);
  const abort = new AbortController();
  t.after(() => {
    abort.abort();
    channel.close();
  });
  const events = createClient(Agent, channel.transport).watchEvents({}, { signal: abort.signal })[Symbol.asyncIterator]();
  return async (predicate: (plugin: PluginStatus) => boolean): Promise<PluginStatus> => {
    for (;;) {
      const { value, done } = (await events.next()) as IteratorResult<Event>;
      assert.equal(done, false, "the event stream ended");
      if (value.kind.case === "plugin" && value.kind.value.plugin && predicate(value.kind.value.plugin)) return value.kind.value.plugin;
    }
  };
}

test("a CSI driver registers as with node-driver-registrar; a NodeGetInfo failure is retried; status shows what it answered", async (t) => {
  const { agent, registry, plugins, apiSocket } = await startAgent(t);
  const nextPlugin = pluginEvents(t, apiSocket);
  fs.mkdirSync(path.join(plugins, "csi-hostpath"));
  const csi = await startCsiDriver(path.join(plugins, "csi-hostpath", "csi.sock"), {
    name: CSI_DRIVER,
    nodeId: "edge-01",
    maxVolumesPerNode: 8,
    topology: { "topology.hostpath.csi/node": "edge-01" },
    vendorVersion: "v1.17.0",
    failNodeGetInfoTimes: 1,
  });
  t.after(() => csi.close());
  const registrar = await startTestPlugin(t, {
    socketPath: path.join(registry, `${CSI_DRIVER}-reg.sock`),
    info: { type: "CSIPlugin", name: CSI_DRIVER, endpoint: csi.socketPath, versions: ["1.0.0"] },
  });
  const refused = await registrar.waitForNotify();
  assert.equal(refused.registered, false);
  assert.equal(refused.error, "RegisterPlugin error -- plugin registration failed with err: rpc error: code = Unavailable desc = node not ready: volume backend starting");
  assert.equal((await registrar.waitForNotify((n) => n.registered)).registered, true);
  await nextPlugin((p) => p.socket === registrar.socketPath && p.state === "registered");
  assert.equal(csi.nodeGetInfoCalls(), 2);

  const status = statusToJson(agent.status());
  const plugin = status.plugins.find((p) => p.socket === registrar.socketPath);
  assert.equal(plugin?.state, "registered");
  assert.equal(plugin?.endpoint, csi.socketPath);
  assert.deepEqual(plugin?.csi, {
    version: "1.0.0",
    nodeId: "edge-01",
    maxVolumesPerNode: "8",
    topology: { "topology.hostpath.csi/node": "edge-01" },
    vendorVersion: "v1.17.0",
    nodeCapabilities: ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"],
  });
  assert.match(statusToText(agent.status()), /CSI DRIVER\s+VERSION.*\n.*hostpath\.csi\.k8s\.io\s+1\.0\.0\s+edge-01\s+8\s+topology\.hostpath\.csi\/node=edge-01\s+v1\.17\.0/);
});

test("two DRA instances of one driver: one dying leaves the driver connected; the last dying shows it disconnected in status and WatchEvents", async (t) => {
  const { agent, registry, plugins, apiSocket } = await startAgent(t);
  const nextPlugin = pluginEvents(t, apiSocket);
  const services = await Promise.all([startDraService(path.join(plugins, "dra-a.sock"), "v1beta1"), startDraService(path.join(plugins, "dra-b.sock"))]);
  t.after(() => Promise.all(services.map((service) => service.close())));
  const registrations = [];
  for (const [index, service] of services.entries()) {
    const registration = await startTestPlugin(t, {
      socketPath: path.join(registry, `dra-${index}.sock`),
      info: { type: "DRAPlugin", name: DRA_DRIVER, endpoint: service.socketPath, versions: index === 0 ? ["v1beta1.DRAPlugin"] : ["v1.DRAPlugin", "v1beta1.DRAPlugin"] },
    });
    assert.equal((await registration.waitForNotify()).registered, true);
    await nextPlugin((p) => p.socket === registration.socketPath && p.state === "registered");
    registrations.push(registration);
  }
  const [older, newer] = registrations as [(typeof registrations)[0], (typeof registrations)[0]];
  const draOf = (socket: string) => agent.status().plugins.find((p) => p.socket === socket)?.dra;
  assert.equal(draOf(newer.socketPath)?.preferred, true);
  assert.equal(draOf(newer.socketPath)?.service, "v1.DRAPlugin");
  assert.equal(draOf(older.socketPath)?.service, "v1beta1.DRAPlugin");

  await services[1]!.close(); // the newer instance's service dies; its registration socket still answers
  const lost = await nextPlugin((p) => p.socket === newer.socketPath && p.state === "stale");
  assert.equal(lost.dra?.connected, false);
  assert.equal(lost.dra?.driverConnected, true, "the older instance still serves the driver");
  assert.match(lost.error ?? "", /DRA service connection to .*dra-b\.sock lost/);
  assert.equal(draOf(older.socketPath)?.preferred, true);

  await services[0]!.close();
  const last = await nextPlugin((p) => p.socket === older.socketPath && p.state === "stale");
  assert.equal(last.dra?.driverConnected, false);
  const status = agent.status();
  assert.equal(status.ok, false);
  assert.match(statusToText(status), /gpu\.example\.com\s+DISCONNECTED/);
});

test("the policy's endpoint rules: the API socket, another plugin's registration socket and a socket of a uid outside socketOwners are refused at validation; a reload that allows the uid lets that one register", async (t) => {
  const { agent, policy, registry, plugins, apiSocket } = await startAgent(t);
  const refusal = "RegisterPlugin error -- plugin validation failed with err: ";
  const real = (socket: string) => JSON.stringify(fs.realpathSync(socket));
  const toApi = await startTestPlugin(t, {
    socketPath: path.join(registry, `${CSI_DRIVER}-reg.sock`),
    info: { type: "CSIPlugin", name: CSI_DRIVER, endpoint: `unix://${apiSocket}`, versions: ["1.0.0"] },
  });
  assert.equal(
    (await toApi.waitForNotify()).error,
    `${refusal}kubernetes.io/csi: ValidatePlugin for CSI driver "${CSI_DRIVER}" failed. endpoint ${real(apiSocket)} is one of edgeplug's own sockets`,
  );
  const toOther = await startTestPlugin(t, {
    socketPath: path.join(registry, "dra-other.sock"),
    info: { type: "DRAPlugin", name: DRA_DRIVER, endpoint: toApi.socketPath, versions: ["v1.DRAPlugin"] },
  });
  assert.equal(
    (await toOther.waitForNotify()).error,
    `${refusal}endpoint ${real(toApi.socketPath)} is in a watched directory but is not this plugin's registration socket ${toOther.socketPath}: it belongs to another plugin`,
  );

  const service = await startDraService(path.join(plugins, "dra-foreign.sock"));
  t.after(() => service.close());
  fs.chownSync(service.socketPath, 4242, 4242);
  const foreign = await startTestPlugin(t, {
    socketPath: path.join(registry, "dra-foreign.sock"),
    info: { type: "DRAPlugin", name: "foreign.example.com", endpoint: service.socketPath, versions: ["v1.DRAPlugin"] },
  });
  assert.equal(
    (await foreign.waitForNotify()).error,
    `${refusal}endpoint ${real(service.socketPath)} is owned by uid 4242, not in security.socketOwners [0]`,
  );
  agent.applyPolicy({ ...policy, security: { ...policy.security, socketOwners: [0, 4242] } });
  assert.equal((await foreign.waitForNotify((n) => n.registered)).registered, true);
  assert.equal(agent.status().plugins.find((p) => p.socket === foreign.socketPath)?.dra?.connected, true);
});
