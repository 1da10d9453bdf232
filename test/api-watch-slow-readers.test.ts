/**
 * WatchEvents readers that stop reading, on dist/edgeplug, while a device
 * plugin's health flaps (a resource event every 50 ms): streams whose
 * clients go away mid-answer fail their writes, and each failure is one
 * JSON log line, a bounded number of them, never a stack trace among the
 * JSON lines.
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { watchAgent } from "./support/agent-events.ts";
import { deviceNode, startAgent, type DeviceNode } from "./support/device-node.ts";
import { registerDevicePlugin, startFakeDevicePlugin, type TestDevice } from "./support/fake-device-plugin.ts";

const RESOURCE = "example.com/flap";

/** `count` devices whose ids are long enough that each resource event is tens of KB. */
function devices(count: number, unhealthy: number): TestDevice[] {
  return Array.from({ length: count }, (_, i) => ({ ID: `device-${String(i).padStart(4, "0")}-${"x".repeat(40)}`, health: i === unhealthy ? "Unhealthy" : "Healthy" }));
}

/** A device plugin on kubelet.sock whose health changes every 5 ms until `stop()`. */
async function flappingPlugin(node: DeviceNode): Promise<{ stop(): void }> {
  const plugin = await startFakeDevicePlugin({ socketPath: path.join(node.pluginsDir, "flap.sock"), devices: devices(1000, -1) });
  node.after(() => plugin.stop());
  await registerDevicePlugin(path.join(node.pluginsDir, "kubelet.sock"), { endpoint: "flap.sock", resource_name: RESOURCE });
  let turn = 0;
  const timer = setInterval(() => plugin.setDevices(devices(1000, turn++ % 1000)), 5);
  node.after(() => clearInterval(timer));
  return { stop: () => clearInterval(timer) };
}

/** A WatchEvents call that never reads past its first 16 bytes (HTTP/2 flow control holds the agent's writes). */
async function slowReader(apiSocket: string): Promise<http2.ClientHttp2Session> {
  const session = http2.connect("http://edgeplug", { createConnection: () => net.connect(apiSocket), settings: { initialWindowSize: 16 } });
  session.on("error", () => {});
  const stream = session.request({ ":method": "POST", ":path": "/edgeplug.v1.Agent/WatchEvents", "content-type": "application/grpc", te: "trailers" });
  stream.on("error", () => {});
  stream.end(Buffer.from([0, 0, 0, 0, 0]));
  await new Promise((resolve, reject) => {
    stream.once("response", resolve);
    stream.once("close", () => reject(new Error("WatchEvents closed before it answered")));
  });
  return session;
}

test("dist/edgeplug: WatchEvents clients that go away mid-answer cost one JSON log line each, at most 10, never a stack trace", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const watch = await watchAgent(node, node.apiSocket);
  const flapping = await flappingPlugin(node);
  const readers = await Promise.all(Array.from({ length: 20 }, () => slowReader(node.apiSocket)));
  const resourceEvents = () => watch.view.events.filter((event) => event.kind.case === "resource").length;
  await watch.until("10 resource events", () => resourceEvents() >= 10, 20_000);
  for (const reader of readers) reader.socket.destroy();
  // Each stream's next write fails; the agent reports it one way or the other.
  const failureLogged = () => agent.stderr().includes("rpc handler failed") || agent.stderr().includes("handler for rpc");
  const seen = resourceEvents();
  await watch.until("a failed write reported", () => failureLogged() && resourceEvents() > seen + 5, 20_000);
  flapping.stop();
  assert.equal(await agent.terminate(), 0, agent.stderr());
  const lines = agent.stderr().split("\n").filter((line) => line !== "");
  const notJson = lines.filter((line) => {
    try {
      JSON.parse(line);
      return false;
    } catch {
      return true;
    }
  });
  assert.deepEqual(notJson.slice(0, 5), [], `${notJson.length} stderr lines are not JSON`);
  const failures = agent.logs().filter((record) => record.msg === "rpc handler failed");
  assert.ok(failures.length >= 1 && failures.length <= 10, `${failures.length} "rpc handler failed" lines`);
  assert.equal(failures[0]!.rpc, "edgeplug.v1.Agent/WatchEvents");
});
