/**
 * The allocation bounds as an API client meets them, on a real agent with
 * its API socket and a @grpc/grpc-js device plugin registered on its
 * kubelet.sock: Allocate and Release read at most 64 KiB, refused before
 * the rest of the body is read; a request refused because the allocation
 * queue is full counts in the metrics. The plugin's Allocate is held open
 * by a gate, so nothing here sleeps.
 */
import assert from "node:assert/strict";
import * as http from "node:http";
import * as path from "node:path";
import { test, type TestContext } from "node:test";
import { Code, createClient } from "@connectrpc/connect";
import { EdgeplugAgent } from "../src/agent/agent.ts";
import { ALLOCATION_REQUEST_MAX_BYTES, API_SOCKET_LIMITS } from "../src/server/limits.ts";
import { Agent } from "../src/gen/edgeplug/v1/agent_pb.ts";
import { MAX_CONTAINER_LENGTH, MAX_OWNER_LENGTH, MAX_RESOURCES_PER_REQUEST } from "../src/devicemanager/allocation.ts";
import { MAX_WAITING_ALLOCATIONS } from "../src/devicemanager/allocator.ts";
import { createLogger } from "../src/log/logger.ts";
import type { Policy } from "../src/policy/types.ts";
import { dialUnix } from "../src/rpc/unix-channel.ts";
import { hold } from "./support/device-manager-harness.ts";
import { type FakeDevicePluginOptions, healthyDevices, registerDevicePlugin, startFakeDevicePlugin, waitForDeviceState } from "./support/fake-device-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { connectRejection } from "./support/rejection.ts";
import { tempDir } from "./support/temp-dir.ts";

const R = "acme.io/gpu";

/** An agent with its API socket, metrics and kubelet.sock, and one plugin of R registered and listed. */
async function agentWithPlugin(t: TestContext, plugin: Partial<FakeDevicePluginOptions> = {}) {
  const dir = tempDir(t);
  const base = testPolicy({ watch: [path.join(dir, "registry")], handlers: { DevicePlugin: {} } });
  const policy: Policy = {
    ...base,
    devicePlugins: { registrationSocket: path.join(dir, "dp", "kubelet.sock"), gracePeriodMs: 60_000, removeSocketsAtStart: true, topologyPolicy: "none" },
    api: { socket: path.join(dir, "api.sock"), socketGroup: null, metrics: "127.0.0.1:0" },
  };
  const agent = new EdgeplugAgent({ policy, log: createLogger({ level: "error", write: () => {} }) });
  t.after(() => agent.stop());
  await agent.start();
  const devices = plugin.devices ?? healthyDevices(2);
  const fake = await startFakeDevicePlugin({ socketPath: path.join(dir, "dp", "gpu.sock"), ...plugin, devices });
  t.after(() => fake.stop());
  await registerDevicePlugin(policy.devicePlugins.registrationSocket!, { endpoint: "gpu.sock", resource_name: R });
  await waitForDeviceState(agent.devices, `${R} listed`, () => agent.devices.resource(R)?.allocatable === devices.length);
  const channel = dialUnix(policy.api.socket!);
  t.after(() => channel.close());
  return { agent, plugin: fake, apiSocket: policy.api.socket!, api: createClient(Agent, channel.transport) };
}

/** POSTs `body`, declared as `declaredBytes` long, over HTTP/1.1 and resolves with the answer. */
function post(socketPath: string, route: string, declaredBytes: number, options: { contentType?: string; body?: Uint8Array } = {}) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const headers = { "content-type": options.contentType ?? "application/json", "content-length": declaredBytes };
    const request = http.request({ socketPath, method: "POST", path: route, agent: false, headers });
    request.on("response", (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () => {
        request.destroy();
        resolve({ status: response.statusCode ?? 0, body });
      });
    });
    request.on("error", reject);
    if (options.body) request.write(options.body);
    request.flushHeaders();
  });
}

test("Allocate and Release over 64 KiB are refused with RESOURCE_EXHAUSTED naming the limit, before the body is read, and record nothing; requests within it are served", async (t) => {
  const { agent, plugin, apiSocket, api } = await agentWithPlugin(t);
  const limitNamed = new RegExp(`larger than configured readMaxBytes ${ALLOCATION_REQUEST_MAX_BYTES}$`);
  const oversized = "x".repeat(ALLOCATION_REQUEST_MAX_BYTES);

  const allocate = await connectRejection(api.allocate({ owner: oversized, resources: [{ resource: R, count: 1 }] }));
  assert.equal(allocate.code, Code.ResourceExhausted, allocate.message);
  assert.match(allocate.rawMessage, limitNamed);
  const release = await connectRejection(api.release({ owner: oversized }));
  assert.equal(release.code, Code.ResourceExhausted, release.message);
  assert.match(release.rawMessage, limitNamed);

  // A body under the socket's 4 MiB but over Allocate's limit: answered with none of it sent.
  const declared = 1024 * 1024;
  const json = await post(apiSocket, "/edgeplug.v1.Agent/Allocate", declared);
  assert.equal(json.status, 429);
  assert.deepEqual(JSON.parse(json.body), {
    code: "resource_exhausted",
    message: `message size ${declared} is larger than configured readMaxBytes ${ALLOCATION_REQUEST_MAX_BYTES}`,
  });
  assert.deepEqual(agent.devices.allocations(), [], "nothing recorded");
  assert.equal(plugin.allocateCalls.length, 0, "the plugin was not called");

  // The widest request the device manager takes passes the size limit and is judged by the device manager.
  const widest = await connectRejection(
    api.allocate({
      owner: "\u20ac".repeat(MAX_OWNER_LENGTH),
      container: "\u20ac".repeat(MAX_CONTAINER_LENGTH),
      resources: Array.from({ length: MAX_RESOURCES_PER_REQUEST }, (_, i) => ({ resource: `acme.io/${"r".repeat(300)}${String(i).padStart(8, "0")}`, count: 1 })),
    }),
  );
  assert.equal(widest.code, Code.FailedPrecondition, widest.message);
  assert.match(widest.rawMessage, /^cannot allocate unregistered device acme\.io\/r+00000000$/);

  const granted = await api.allocate({ owner: "job-1", resources: [{ resource: R, count: 1 }] });
  assert.deepEqual(granted.allocations.map((grant) => [grant.owner, grant.resource, grant.devices]), [["job-1", R, ["dev0"]]]);
  const released = await api.release({ owner: "job-1" });
  assert.deepEqual(released.released.map((entry) => entry.owner), ["job-1"]);
});

test("Allocate's own options keep the socket's protocols: gRPC-web is refused there as on Status", async (t) => {
  const { apiSocket } = await agentWithPlugin(t);
  // One gRPC-web message: flags 0, length 0, an empty request.
  const call = { contentType: "application/grpc-web+proto", body: new Uint8Array(5) };
  const status = await post(apiSocket, "/edgeplug.v1.Agent/Status", 5, call);
  const allocate = await post(apiSocket, "/edgeplug.v1.Agent/Allocate", 5, call);
  assert.equal(status.status, 415);
  assert.equal(allocate.status, status.status);
});

test("the allocation queue holds as many waiting requests as the API socket takes connections, so one connection per caller meets the connection cap first", () => {
  assert.equal(MAX_WAITING_ALLOCATIONS, API_SOCKET_LIMITS.maxConnections);
});

test("a request refused because the allocation queue is full counts in edgeplug_allocation_queue_full_total", async (t) => {
  const stuck = hold();
  t.after(stuck.release);
  const { agent, plugin, api } = await agentWithPlugin(t, { devices: healthyDevices(MAX_WAITING_ALLOCATIONS + 1), holdAllocate: stuck.held });
  const counted = async () => {
    const text = await (await fetch(`${agent.metricsUrl}/metrics`)).text();
    return text.match(/^edgeplug_allocation_queue_full_total (\d+)$/m)?.[1];
  };
  assert.equal(await counted(), "0", "served from the start");

  const ask = (owner: string) => ({ owner, container: "main", resources: [{ resource: R, count: 1 }] });
  const running = agent.devices.allocate(ask("running"));
  await plugin.waitForCalls("allocate", 1);
  const waiting = Array.from({ length: MAX_WAITING_ALLOCATIONS }, (_, i) => agent.devices.allocate(ask(`waiting-${i}`)));
  const full = await connectRejection(api.allocate(ask("over")));
  assert.equal(full.code, Code.ResourceExhausted);
  assert.equal(full.rawMessage, `allocation queue is full (${MAX_WAITING_ALLOCATIONS} requests waiting); retry later`);
  assert.equal(await counted(), "1");

  stuck.release();
  await running;
  await Promise.all(waiting);
  assert.equal(await counted(), "1", "served requests are not counted");
});
