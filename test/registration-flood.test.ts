/**
 * A flood of Register calls on kubelet.sock, on dist/edgeplug: 1,100 calls
 * at once over 50 connections, every one naming a socket that accepts and
 * never answers. Before, each call dialled that socket and held a
 * `security.maxPlugins` slot and two descriptors while it waited, so a good
 * plugin was refused at once. Now a connection has at most 4 calls in
 * flight, the socket at most 32, an endpoint is dialled by one call at a
 * time, calls are rate-limited like the API's, and a call in flight holds no
 * slot: the good plugin registers while the silent socket's dial is still
 * pending, and the agent's descriptors stay bounded.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { RegisterRequestSchema } from "../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { deviceNode, startAgent, statusJson } from "./support/device-node.ts";
import { healthyDevices, registerDevicePlugin, startFakeDevicePlugin } from "./support/fake-device-plugin.ts";
import { startRawListener } from "./support/grpc-peers.ts";

const CALLS = 1100;
const CONNECTIONS = 50;

/** One Register call on `session`; resolves with its grpc-status (0 when it registered). */
function register(session: http2.ClientHttp2Session, endpoint: string, resource: string): Promise<number> {
  const message = toBinary(RegisterRequestSchema, create(RegisterRequestSchema, { version: "v1beta1", endpoint, resourceName: resource }));
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  const stream = session.request({ ":method": "POST", ":path": "/v1beta1.Registration/Register", "content-type": "application/grpc", te: "trailers" });
  stream.end(frame);
  return new Promise((resolve) => {
    let status = -1;
    const read = (headers: http2.IncomingHttpHeaders) => {
      if (headers["grpc-status"] !== undefined) status = Number(headers["grpc-status"]);
    };
    stream.on("response", read);
    stream.on("trailers", read);
    stream.on("error", () => {});
    stream.resume();
    stream.on("close", () => resolve(status));
  });
}

function descriptors(pid: number): number {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

test("dist/edgeplug: 1,100 Register calls naming a socket that never answers take no plugin slot and bounded descriptors; a good plugin registers meanwhile", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const pid = agent.child.pid!;
  const kubeletSock = path.join(node.pluginsDir, "kubelet.sock");
  const silent = await startRawListener(path.join(node.pluginsDir, "silent.sock"), () => {});
  node.after(() => silent.close());
  const idle = descriptors(pid);

  const sessions = Array.from({ length: CONNECTIONS }, () => {
    const session = http2.connect("http://kubelet", { createConnection: () => net.connect(kubeletSock) });
    session.on("error", () => {});
    return session;
  });
  node.after(() => sessions.forEach((session) => session.destroy()));
  let settled = 0;
  const statuses = new Map<number, number>();
  const target = CALLS - 32;
  let resolve = () => {};
  const mostSettled = new Promise<void>((done) => (resolve = done));
  for (let i = 0; i < CALLS; i++) {
    void register(sessions[i % CONNECTIONS]!, "silent.sock", `example.com/flood-${i}`).then((status) => {
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (++settled >= target) resolve();
    });
  }
  // Every call is answered at once but the one dialling the silent socket (and those queued behind it on its connection).
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`after 20 s only ${settled} of ${CALLS} flood calls were answered`)), 20_000);
  });
  await Promise.race([mostSettled, late]).finally(() => clearTimeout(timer));
  const peak = descriptors(pid);

  const good = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "good.sock"), devices: healthyDevices(2) });
  node.after(() => good.stop());
  // A plugin whose Register is refused retries it; the flood may have spent the socket's rate-limit burst.
  const deadline = performance.now() + 10_000;
  for (;;) {
    const refusal = await registerDevicePlugin(kubeletSock, { endpoint: "good.sock", resource_name: "example.com/good" }).then(
      () => null,
      (error: { code?: number; details?: string }) => error,
    );
    if (refusal === null) break;
    if (refusal.code !== 8 || performance.now() > deadline) throw new Error(`the good plugin's Register was refused: ${refusal.details}`);
  }
  const resources = (await statusJson(node.apiSocket)).resources.map((r) => [r.name, r.connected]);
  assert.deepEqual(resources, [["example.com/good", true]]);
  assert.ok(silent.accepted <= 1, `the silent socket was dialled ${silent.accepted} times at once`);
  assert.ok(peak - idle <= CONNECTIONS + 2 * 32, `descriptors went from ${idle} to ${peak} during the flood`);
  t.diagnostic(`descriptors: ${idle} idle, ${peak} during the flood; answers by grpc-status: ${JSON.stringify(Object.fromEntries(statuses))}`);
});
