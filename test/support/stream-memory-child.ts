/**
 * Child process of test/stream-memory.test.ts (run with --expose-gc): a
 * device plugin sends a new list each time the agent's endpoint has read the
 * last one, for as long as the endpoint keeps reading; prints the heap in use
 * (after a full GC) once WARM_UP lists are read and again after TOTAL, the
 * endpoint still watching.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { DevicePluginEndpoint, type EndpointListener } from "../../src/devicemanager/endpoint.ts";
import { healthyDevices, startFakeDevicePlugin } from "./fake-device-plugin.ts";

const WARM_UP = 2_000;
const TOTAL = 14_000;

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with --expose-gc");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "stream-memory-"));
const plugin = await startFakeDevicePlugin({ socketPath: path.join(dir, "p.sock"), devices: healthyDevices(8) });
const endpoint = new DevicePluginEndpoint({ resource: "example.com/flapping", socket: plugin.socketPath, dialTimeoutMs: 10_000, maxDevices: 100 });
await endpoint.connect();
const heap = () => {
  gc();
  return process.memoryUsage().heapUsed;
};
let read = 0;
let warm = 0;
let settle!: { resolve: (grown: number) => void; reject: (error: Error) => void };
const done = new Promise<number>((resolve, reject) => (settle = { resolve, reject }));
const next = () => {
  read++;
  if (read === WARM_UP) warm = heap();
  if (read === TOTAL) return settle.resolve(heap() - warm);
  // The next list differs from the last (one device's health flips), as a flapping plugin's do.
  const devices = healthyDevices(8);
  if (read % 2 === 1) devices[7]!.health = "Unhealthy";
  plugin.setDevices(devices);
};
const listener: EndpointListener = {
  devices: next,
  unchanged: next,
  refused: (_endpoint, reason) => settle.reject(new Error(`refused: ${reason}`)),
  ended: (_endpoint, reason) => settle.reject(new Error(`ended: ${reason}`)),
};
endpoint.watch(listener);
const grownBytes = await done;
endpoint.close();
await plugin.stop();
fs.rmSync(dir, { recursive: true, force: true });
process.stdout.write(JSON.stringify({ lists: read, measuredOver: TOTAL - WARM_UP, grownBytes }) + "\n");
