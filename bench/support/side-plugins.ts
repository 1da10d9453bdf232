/**
 * A child process for the side-by-side devices benchmark: it hosts the device
 * plugins (support/raw-device-plugin.ts) that register on one agent's
 * kubelet.sock, edgeplug's or the kubelet device manager's, so that the same
 * plugins, in a process of their own, face both agents. It stamps each
 * Register call and each list it writes with the machine's monotonic clock
 * in milliseconds (sharedClockMs, comparable across processes)
 * and the parent measures from that stamp to the moment it sees the change.
 *
 *   fork("side-plugins.ts"), then send requests {id, op, ...}; each is answered {id, ok, at?, error?}:
 *     {op: "start", name, socketPath, registrationSocket, resource, count, prefix}  serves, then registers
 *     {op: "send", name, count, prefix, unhealthy?}  writes a list, device index `unhealthy` Unhealthy
 *     {op: "stop", name}
 */
import process from "node:process";
import { create, toBinary } from "@bufbuild/protobuf";
import { ListAndWatchResponseSchema } from "../../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { registerDevicePlugin } from "../../test/support/fake-device-plugin.ts";
import { encodedList, type RawDevicePlugin, startRawDevicePlugin } from "./raw-device-plugin.ts";

export type SidePluginRequest =
  | { id: number; op: "start"; name: string; socketPath: string; registrationSocket: string; resource: string; count: number; prefix: string }
  | { id: number; op: "send"; name: string; count: number; prefix: string; unhealthy?: number }
  | { id: number; op: "stop"; name: string };

export interface SidePluginAnswer {
  id: number;
  ok: boolean;
  /** The shared clock (ms, sharedClockMs) just before the Register call or the list's write. */
  at?: number;
  error?: string;
}

const MAX_PLUGINS = 64;

/**
 * The machine's monotonic clock in ms (CLOCK_MONOTONIC, the same in every
 * process). Not `performance.timeOrigin + performance.now()`: each process
 * takes its origin from the wall clock when it starts, and a wall clock
 * adjusted between two processes' starts put one round's plugin stamps
 * 12 ms after the bench's sightings (a health change "seen" 10 ms before
 * it was sent).
 */
export const sharedClockMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** A list with every device healthy but `unhealthy` (an index), encoded. */
function listWith(count: number, prefix: string, unhealthy: number | undefined): Buffer {
  if (unhealthy === undefined) return encodedList(count, prefix);
  const devices = Array.from({ length: count }, (_, i) => ({ ID: `${prefix}${i}`, health: i === unhealthy ? "Unhealthy" : "Healthy", topology: { nodes: [{ ID: BigInt(i % 2) }] } }));
  return Buffer.from(toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices })));
}

if (process.send && process.argv[1]?.endsWith("side-plugins.ts")) {
  const plugins = new Map<string, RawDevicePlugin>();
  const handle = async (request: SidePluginRequest): Promise<number | undefined> => {
    if (request.op === "start") {
      if (plugins.size >= MAX_PLUGINS) throw new Error(`more than ${MAX_PLUGINS} plugins`);
      if (plugins.has(request.name)) throw new Error(`plugin ${request.name} already runs`);
      const plugin = await startRawDevicePlugin({ ...request, initial: encodedList(request.count, request.prefix), register: false, acceptAnyAuthority: true });
      plugins.set(request.name, plugin);
      const at = sharedClockMs();
      await registerDevicePlugin(request.registrationSocket, { endpoint: request.socketPath.split("/").pop()!, resource_name: request.resource });
      return at;
    }
    const plugin = plugins.get(request.name);
    if (!plugin) throw new Error(`no plugin ${request.name}`);
    if (request.op === "send") {
      const list = listWith(request.count, request.prefix, request.unhealthy);
      const at = sharedClockMs();
      await plugin.send(list);
      return at;
    }
    plugins.delete(request.name);
    await plugin.stop();
    return undefined;
  };
  process.on("message", (request: SidePluginRequest) => {
    handle(request).then(
      (at) => process.send!({ id: request.id, ok: true, at } satisfies SidePluginAnswer),
      (error: unknown) => process.send!({ id: request.id, ok: false, error: String(error) } satisfies SidePluginAnswer),
    );
  });
  process.on("disconnect", () => {
    for (const plugin of plugins.values()) void plugin.stop();
    process.exit(0);
  });
}
