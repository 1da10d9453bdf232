/**
 * The pod-resources API on the kubelet's own path (podResources.socket):
 * served in a directory the agent creates as the kubelet does, with the
 * kubelet's rate limit for the whole socket, served again when removed,
 * never taken from a live process, off with null, and not served by
 * `run --reconcile-once`.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { servePodResourcesSocket } from "../src/api/pod-resources-socket.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { runEdgeplug } from "./support/agent-process.ts";
import { deviceNode, scopedTempDir } from "./support/device-node.ts";
import { registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { podResourcesClient, podRows } from "./support/pod-resources-client.ts";
import { testPolicy } from "./support/policy.ts";
import { waitUntil } from "./support/wait.ts";

const quiet = createLogger({ level: "error", format: "text" });
const GPU = "acme.io/gpu";

async function startAgent(t: TestContext, podResourcesSocket: (dir: string) => string | null) {
  const scope = scopedTempDir(t);
  const pluginsDir = path.join(scope.dir, "dp");
  const policy: Policy = {
    ...testPolicy({ watch: [path.join(scope.dir, "registry")], handlers: { DevicePlugin: {} } }),
    devicePlugins: { registrationSocket: path.join(pluginsDir, "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    podResources: { socket: podResourcesSocket(scope.dir) },
    api: { socket: path.join(scope.dir, "api.sock"), socketGroup: null, metrics: null },
  };
  const agent = new EdgeplugAgent({ policy, log: quiet });
  scope.after(() => agent.stop());
  return { scope, policy, agent, pluginsDir };
}

test("the agent creates the missing pod-resources directory 0750, serves the socket 0660 there, and a grpc-js client lists the allocations on it", async (t) => {
  const { scope, policy, agent, pluginsDir } = await startAgent(t, (dir) => path.join(dir, "var-lib-kubelet", "pod-resources", "kubelet.sock"));
  const socket = policy.podResources.socket!;
  assert.equal(fs.existsSync(path.dirname(socket)), false);
  await agent.start();
  assert.equal(fs.statSync(path.dirname(socket)).mode & 0o777, 0o750);
  const stat = fs.statSync(socket);
  assert.ok(stat.isSocket());
  assert.equal(stat.mode & 0o777, 0o660);

  const gpu = await startFakeDevicePlugin({ socketPath: path.join(pluginsDir, "gpu.sock"), devices: [{ ID: "gpu0", health: "Healthy" }, { ID: "gpu1", health: "Healthy" }] });
  scope.after(() => gpu.stop());
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "gpu.sock", resource_name: GPU });
  await waitForDeviceState(agent.devices, "two gpus", () => agent.devices.resource(GPU)?.allocatable === 2);
  const channel = dialUnix(policy.api.socket!);
  scope.after(() => channel.close());
  await createClient(Agent, channel.transport).allocate({ owner: "job-a", resources: [{ resource: GPU, count: 1 }] });

  const lister = podResourcesClient(scope, socket);
  const pods = podRows((await lister.list()).pod_resources);
  assert.deepEqual(pods.map(([name, namespace, containers]) => [name, namespace, containers.map(([container, devices]) => [container, devices.map(([resource]) => resource)])]), [
    ["job-a", "edgeplug", [["main", [GPU]]]],
  ]);
  assert.equal((await lister.allocatable()).devices?.length, 2);

  await agent.stop();
  assert.equal(fs.existsSync(socket), false, "the agent removes its pod-resources socket when it stops");
});

test("the kubelet's rate limit holds for the whole socket: 10 calls at once, the 11th from another connection gets RESOURCE_EXHAUSTED 'rejected by rate limit'", async (t) => {
  const scope = scopedTempDir(t);
  const socketPath = path.join(scope.dir, "pod-resources", "kubelet.sock");
  const limited: string[] = [];
  const devices = { pods: { owners: () => [], ownerEntries: () => [] }, resourceStates: () => [] };
  // A frozen clock: no token comes back during the test, however slow the machine.
  const server = await servePodResourcesSocket({ socketPath, devices, log: quiet, now: () => 0, onLimit: (action) => limited.push(action) });
  scope.after(() => server.close());
  const first = podResourcesClient(scope, socketPath);
  const second = podResourcesClient(scope, socketPath);
  for (let call = 0; call < 10; call++) await (call % 2 === 0 ? first.list() : first.allocatable());
  await assert.rejects(second.list(), (error: grpc.ServiceError) => {
    assert.equal(error.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.equal(error.details, "rejected by rate limit");
    return true;
  });
  await assert.rejects(first.get("job-a", "edgeplug"), /rejected by rate limit/);
  assert.deepEqual(limited, ["rate_limited", "rate_limited"]);
});

test("a removed pod-resources socket is served again; a live process on the path stops the start with a hint; null serves nothing", async (t) => {
  const running = await startAgent(t, (dir) => path.join(dir, "pr", "kubelet.sock"));
  await running.agent.start();
  const socket = running.policy.podResources.socket!;
  fs.unlinkSync(socket);
  await waitUntil(() => fs.existsSync(socket), "the socket served again", 10_000);
  assert.deepEqual((await podResourcesClient(running.scope, socket).list()).pod_resources ?? [], []);

  const second = await startAgent(t, () => socket);
  await assert.rejects(
    second.agent.start(),
    /socket .*pr\/kubelet\.sock is in use by a kubelet or another edgeplug \(it serves v1\.PodResourcesLister\); stop it or set podResources\.socket to another path \(null disables it\)/,
  );
  assert.ok(fs.statSync(socket).isSocket(), "the live socket is left alone");

  const off = await startAgent(t, () => null);
  await off.agent.start();
  assert.deepEqual(fs.readdirSync(off.scope.dir).filter((name) => name.startsWith("pr")), []);
});

test("a file that is not a socket at the path stops the start and is left alone", async (t) => {
  const { agent, policy } = await startAgent(t, (dir) => path.join(dir, "pr", "kubelet.sock"));
  fs.mkdirSync(path.dirname(policy.podResources.socket!), { recursive: true });
  fs.writeFileSync(policy.podResources.socket!, "not a socket");
  await assert.rejects(agent.start(), /pr\/kubelet\.sock exists and is not a socket \(a regular file\); refusing to replace it/);
  assert.equal(fs.readFileSync(policy.podResources.socket!, "utf8"), "not a socket");
});

test("the pod-resources socket speaks gRPC only, as the kubelet's: an HTTP/1.1 request gets the connection closed", async (t) => {
  const scope = scopedTempDir(t);
  const socketPath = path.join(scope.dir, "kubelet.sock");
  const devices = { pods: { owners: () => [], ownerEntries: () => [] }, resourceStates: () => [] };
  const server = await servePodResourcesSocket({ socketPath, devices, log: quiet });
  scope.after(() => server.close());
  const answer = await new Promise<string>((resolve, reject) => {
    const client = net.connect(socketPath);
    let received = "";
    client.on("data", (chunk) => (received += chunk.toString()));
    client.on("close", () => resolve(received));
    client.on("error", reject);
    client.write("POST /v1.PodResourcesLister/List HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
  });
  assert.equal(answer, "");
});

test("run --reconcile-once does not serve the pod-resources socket (on dist/edgeplug)", async (t) => {
  const node = deviceNode(t);
  const result = await runEdgeplug(["run", "--config", node.policy, "--reconcile-once", "--timeout", "1s", "--output", "json"]);
  assert.ok(result.code === 0 || result.code === 1, result.stderr);
  assert.equal(fs.existsSync(path.dirname(node.podResourcesSocket)), false);
});

test("the kubelet's own pod-resources client's :authority (grpc-go's bare or percent-encoded socket path) is served, and counted", async (t) => {
  const scope = scopedTempDir(t);
  const socketPath = path.join(scope.dir, "kubelet.sock");
  const devices = { pods: { owners: () => [], ownerEntries: () => [] }, resourceStates: () => [] };
  const replaced: (string | undefined)[] = [];
  const server = await servePodResourcesSocket({ socketPath, devices, log: quiet, reports: { authorityReplaced: (authority) => replaced.push(authority), refusedByHttp2: () => {} } });
  scope.after(() => server.close());
  const bare = "/var/lib/kubelet/pod-resources/kubelet.sock";
  for (const authority of [bare, encodeURIComponent(bare), "localhost"]) {
    const session = http2.connect("http://localhost", { createConnection: () => net.connect(socketPath) });
    session.on("error", () => {});
    const request = session.request({ ":method": "POST", ":path": "/v1.PodResourcesLister/List", ":authority": authority, "content-type": "application/grpc", te: "trailers" });
    request.end(Buffer.alloc(5));
    const status = await new Promise<string | undefined>((resolve) => {
      let grpcStatus: string | undefined;
      const header = (headers: http2.IncomingHttpHeaders) => void (grpcStatus = (headers["grpc-status"] as string | undefined) ?? grpcStatus);
      request.on("response", header);
      request.on("trailers", header);
      request.on("error", () => {});
      request.resume();
      request.on("close", () => resolve(grpcStatus));
    });
    session.destroy();
    assert.equal(status, "0", `List with :authority ${JSON.stringify(authority)}`);
  }
  assert.deepEqual(replaced, [bare, encodeURIComponent(bare)]);
});
