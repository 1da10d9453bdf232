/**
 * WatchEvents readers that stop reading, on dist/edgeplug, while a device
 * plugin's health flaps (a resource event every 50 ms): streams whose
 * clients go away mid-answer fail their writes, and each failure is one
 * JSON log line, a bounded number of them, never a stack trace among the
 * JSON lines; streams whose clients stay but never read hold at most 4 MiB
 * of waiting events each (shared between them), are cut off 10 s after
 * they took their last event, and the agent's memory stays bounded (before,
 * it grew by about 7 MB/s with 20 such clients, and they were never cut off).
 */
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { watchAgent } from "./support/agent-events.ts";
import { type DeviceNode, deviceNode, startAgent } from "./support/device-node.ts";
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
  return (await slowStream(apiSocket)).session;
}

/** slowReader's session and the call's stream. */
async function slowStream(apiSocket: string): Promise<{ session: http2.ClientHttp2Session; stream: http2.ClientHttp2Stream }> {
  const session = http2.connect("http://edgeplug", { createConnection: () => net.connect(apiSocket), settings: { initialWindowSize: 16 } });
  session.on("error", () => {});
  const stream = session.request({ ":method": "POST", ":path": "/edgeplug.v1.Agent/WatchEvents", "content-type": "application/grpc", te: "trailers" });
  stream.on("error", () => {});
  stream.end(Buffer.from([0, 0, 0, 0, 0]));
  await new Promise((resolve, reject) => {
    stream.once("response", resolve);
    stream.once("close", () => reject(new Error("WatchEvents closed before it answered")));
  });
  return { session, stream };
}

/** The resident set of process `pid`, in MB. */
function rssMb(pid: number): number {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!;
  return Number(line.split(/\s+/)[1]) / 1024;
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

test("dist/edgeplug: WatchEvents clients that never read hold a bounded backlog, are cut off after the drain deadline, and their memory is bounded", async (t) => {
  const node = deviceNode(t);
  const agent = await startAgent(node);
  const pid = agent.child.pid!;
  const watch = await watchAgent(node, node.apiSocket);
  const flapping = await flappingPlugin(node);
  await watch.until("5 resource events", () => watch.view.events.filter((event) => event.kind.case === "resource").length >= 5, 20_000);
  const before = rssMb(pid);
  const readers = await Promise.all(Array.from({ length: 20 }, () => slowStream(node.apiSocket)));
  node.after(() => readers.forEach((reader) => reader.session.destroy()));
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 100);
  node.after(() => clearInterval(sampler));
  // The agent resets each stream (CANCEL) once it has not drained for 10 s; the clients never read a byte more.
  const cutOff = readers.map(
    ({ stream }) =>
      new Promise<number>((resolve) => {
        stream.once("close", () => resolve(stream.rstCode ?? -1));
      }),
  );
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the slow streams were not cut off within 25 s; RSS ${Math.round(before)} -> ${Math.round(rssMb(pid))} MB`)), 25_000);
  });
  const codes = await Promise.race([Promise.all(cutOff), late]).finally(() => clearTimeout(timer));
  clearInterval(sampler);
  assert.deepEqual(new Set(codes), new Set([http2.constants.NGHTTP2_CANCEL]));
  const cutOffs = agent.logs().filter((record) => record.msg === "WatchEvents stream cut off: its client did not read");
  assert.equal(cutOffs.length, 20);
  flapping.stop();
  await watch.until("the fast watcher still follows", () => !watch.view.ended, 1000);
  const after = rssMb(pid);
  t.diagnostic(`agent RSS: ${before.toFixed(1)} MB before the slow readers, ${peak.toFixed(1)} MB at most while they held on, ${after.toFixed(1)} MB once cut off`);
  // Events of at most 4 MiB encoded per stream (objects take more than their encoding), mostly the same events for all
  // of them, beside what the flapping plugin and the fast watcher cost; measured 60 MB idle, 90 MB on a loaded machine.
  assert.ok(peak - before < 200, `RSS grew by ${(peak - before).toFixed(1)} MB while 20 slow readers held on`);
});
