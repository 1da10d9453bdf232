/**
 * A child process hosting fake registration plugins for the registration
 * benchmark, so that the plugins' CPU is not the bench process's: the parent
 * (plugin-host-client.ts) asks over the IPC channel for sockets to be served,
 * and every timestamp (listen, GetInfo, NotifyRegistrationStatus) is taken
 * here with this process's performance.now(), so durations never mix clocks.
 *
 * `node plugin-host.ts` only makes sense under child_process.fork; it exits
 * (stopping its plugins, removing their sockets) when the channel closes.
 */
import * as path from "node:path";
import process from "node:process";
import { type FakePlugin, startFakePlugin } from "../../test/support/fake-plugin.ts";

/** The plugin type served: declared `kind: generic` by writePolicy's default handlers. */
export const PLUGIN_TYPE = "acme.io/Sensor";

export type HostRequest =
  | { id: number; op: "start"; sockets: string[]; timeoutMs: number }
  | { id: number; op: "stop"; sockets: string[] };

/** One plugin's timeline, in this process's performance.now() milliseconds. */
export interface PluginTimeline {
  socket: string;
  /** bindAsync's callback: the socket is listening. */
  listenAt: number;
  /** The first GetInfo arrived. */
  getInfoAt: number;
  /** NotifyRegistrationStatus(true) arrived. */
  notifyAt: number;
  /** NotifyRegistrationStatus(false, reason) calls received before it. */
  refusals: string[];
}

/** A plugin that was not notified registered within the request's timeout. */
export interface PluginFailure {
  socket: string;
  error: string;
  getInfoCalls: number;
  notifications: string[];
}

export interface StartReply {
  id: number;
  op: "start";
  /** The plugins notified registered. */
  plugins: PluginTimeline[];
  /** The others; they keep serving until stopped. */
  failures: PluginFailure[];
  /** CPU this host spent between the request and the reply (user + system). */
  hostCpuMs: number;
}

export type HostReply =
  | StartReply
  | { id: number; op: "stop"; stopped: number }
  | { id: number; op: "error"; message: string }
  | { op: "ready" };

const plugins = new Map<string, FakePlugin>();

async function serve(socket: string, timeoutMs: number): Promise<PluginTimeline | PluginFailure> {
  const plugin = await startFakePlugin({
    socketPath: socket,
    info: { type: PLUGIN_TYPE, name: `acme.io/${path.basename(socket, ".sock")}`, versions: ["v1"] },
  });
  const listenAt = performance.now();
  plugins.set(socket, plugin);
  const getInfoAt = plugin.waitForGetInfo(1, timeoutMs).then(() => performance.now());
  getInfoAt.catch(() => {});
  try {
    const notification = await plugin.waitForNotify((notification) => notification.registered, timeoutMs);
    const refusals = plugin.notifications().filter((notification) => !notification.registered).map((n) => n.error);
    return { socket, listenAt, getInfoAt: await getInfoAt, notifyAt: notification.at, refusals };
  } catch (error) {
    return {
      socket,
      error: error instanceof Error ? error.message : String(error),
      getInfoCalls: plugin.getInfoCalls(),
      notifications: plugin.notifications().map((n) => (n.registered ? "registered" : n.error)),
    };
  }
}

async function handle(request: HostRequest): Promise<HostReply> {
  if (request.op === "start") {
    const cpuBefore = process.cpuUsage();
    // Every bindAsync is issued in this one tick: the sockets appear as fast as grpc-js can make them.
    const outcomes = await Promise.all(request.sockets.map((socket) => serve(socket, request.timeoutMs)));
    const cpu = process.cpuUsage(cpuBefore);
    return {
      id: request.id,
      op: "start",
      plugins: outcomes.filter((outcome): outcome is PluginTimeline => "notifyAt" in outcome),
      failures: outcomes.filter((outcome): outcome is PluginFailure => "error" in outcome),
      hostCpuMs: (cpu.user + cpu.system) / 1000,
    };
  }
  const stopping = request.sockets.map((socket) => {
    const plugin = plugins.get(socket);
    plugins.delete(socket);
    return plugin?.stop();
  });
  await Promise.all(stopping);
  return { id: request.id, op: "stop", stopped: stopping.filter(Boolean).length };
}

function reply(message: HostReply): void {
  process.send!(message);
}

if (!process.send) {
  process.stderr.write("plugin-host.ts runs under child_process.fork (it needs an IPC channel)\n");
  process.exit(2);
}

process.on("message", (request: HostRequest) => {
  handle(request).then(reply, (error: unknown) => reply({ id: request.id, op: "error", message: error instanceof Error ? error.message : String(error) }));
});

process.once("disconnect", () => {
  const stopping = [...plugins.values()].map((plugin) => plugin.stop().catch(() => {}));
  plugins.clear();
  void Promise.all(stopping).then(() => process.exit(0));
});

reply({ op: "ready" });
