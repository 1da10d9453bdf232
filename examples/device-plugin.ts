/**
 * A sample device plugin, written the way upstream's sample plugins are and
 * with @grpc/grpc-js, as real plugins use an independent gRPC stack. It
 * serves v1beta1.DevicePlugin for `--devices` widgets of `--resource`
 * spread over `--numa-nodes` NUMA nodes, requires PreStartContainer and
 * offers GetPreferredAllocation (each can be turned off).
 *
 * Registration, one of the kubelet's two paths:
 * - default: listen on a new socket in `--dir` (the device-plugins
 *   directory) and call Register on `--dir`/kubelet.sock with the socket's
 *   file name. It watches the directory: when kubelet.sock is re-created
 *   (the kubelet or edgeplug restarted) or its own socket is deleted, it
 *   listens on a new socket and registers again.
 * - `--watched-dir DIR`: serve pluginregistration.Registration next to the
 *   device plugin on a socket in DIR (plugins_registry); a new socket if
 *   that one is deleted.
 *
 * Health: widgets listed in `--unhealthy-file` (one ID per line; re-read
 * when it changes) are Unhealthy; SIGUSR1 makes every widget Unhealthy,
 * SIGUSR2 undoes that. SIGINT/SIGTERM stop it and remove its socket.
 *
 *   node examples/device-plugin.ts [--dir DIR | --watched-dir DIR] [--resource NAME]
 *     [--devices N] [--numa-nodes N] [--unhealthy-file PATH] [--no-pre-start] [--no-preferred]
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const { values: flags } = parseArgs({
  options: {
    dir: { type: "string", default: "/tmp/edgeplug-dev/device-plugins" },
    "watched-dir": { type: "string" },
    resource: { type: "string", default: "example.io/widget" },
    devices: { type: "string", default: "4" },
    "numa-nodes": { type: "string", default: "2" },
    "unhealthy-file": { type: "string" },
    "no-pre-start": { type: "boolean", default: false },
    "no-preferred": { type: "boolean", default: false },
  },
});
const resource = flags.resource;
const watchedDir = flags["watched-dir"];
const socketDir = watchedDir ?? flags.dir;
const kubeletSocket = path.join(flags.dir, "kubelet.sock");
const numaNodes = Number(flags["numa-nodes"]);
// Devices are named after the resource: example.io/widget has widget0, widget1, ...
const widgetIds = Array.from({ length: Number(flags.devices) }, (_, i) => `${resource.slice(resource.lastIndexOf("/") + 1)}${i}`);
const nodeOf = (id: string): number | null => (numaNodes > 0 ? widgetIds.indexOf(id) % numaNodes : null);
const options = { pre_start_required: !flags["no-pre-start"], get_preferred_allocation_available: !flags["no-preferred"] };

const protoRoot = fileURLToPath(new URL("../proto/", import.meta.url));
const load = (file: string) => grpc.loadPackageDefinition(protoLoader.loadSync(path.join(protoRoot, file), { keepCase: true, longs: String, defaults: true, includeDirs: [protoRoot] }));
const v1beta1 = load("deviceplugin/v1beta1/api.proto").v1beta1 as grpc.GrpcObject;
const registration = (load("pluginregistration/v1/api.proto").pluginregistration as grpc.GrpcObject).Registration as grpc.ServiceClientConstructor;
const DevicePlugin = v1beta1.DevicePlugin as grpc.ServiceClientConstructor;
const KubeletRegistration = v1beta1.Registration as grpc.ServiceClientConstructor;

const say = (line: string) => console.log(line);
type Unary<Req> = grpc.ServerUnaryCall<Req, unknown>;
type Reply = grpc.sendUnaryData<unknown>;

// ---- health -------------------------------------------------------------
const streams = new Set<grpc.ServerWritableStream<unknown, unknown>>();
let allUnhealthy = false;
let listedUnhealthy = new Set<string>();

function deviceList() {
  return {
    devices: widgetIds.map((ID) => {
      const node = nodeOf(ID);
      return {
        ID,
        health: allUnhealthy || listedUnhealthy.has(ID) ? "Unhealthy" : "Healthy",
        ...(node === null ? {} : { topology: { nodes: [{ ID: node }] } }),
      };
    }),
  };
}

function sendDevices(): void {
  const list = deviceList();
  say(`ListAndWatch: ${list.devices.map((d) => `${d.ID}=${d.health}`).join(" ")}`);
  for (const stream of streams) stream.write(list);
}

function readUnhealthyFile(): void {
  const file = flags["unhealthy-file"];
  if (!file) return;
  let text = "";
  try {
    text = fs.readFileSync(file, "utf8");
  } catch {
    // no file: every widget healthy
  }
  const next = new Set(text.split("\n").map((line) => line.trim()).filter((id) => widgetIds.includes(id)));
  if ([...next].sort().join() === [...listedUnhealthy].sort().join()) return;
  listedUnhealthy = next;
  sendDevices();
}

// ---- the DevicePlugin service ----------------------------------------------
/** GetPreferredAllocation: what must be included, then widgets of the NUMA node with most available ones. */
function preferred(available: string[], mustInclude: string[], size: number): string[] {
  const chosen = [...mustInclude];
  const free = available.filter((id) => !chosen.includes(id)).sort();
  const count = (node: number | null) => free.filter((id) => nodeOf(id) === node).length;
  const best = [...new Set(free.map(nodeOf))].sort((a, b) => count(b) - count(a))[0] ?? null;
  for (const id of [...free.filter((id) => nodeOf(id) === best), ...free.filter((id) => nodeOf(id) !== best)]) {
    if (chosen.length >= size) break;
    chosen.push(id);
  }
  return chosen;
}

const devicePlugin: grpc.UntypedServiceImplementation = {
  GetDevicePluginOptions: (_call: Unary<unknown>, reply: Reply) => reply(null, options),
  ListAndWatch(call: grpc.ServerWritableStream<unknown, unknown>) {
    streams.add(call);
    call.write(deviceList());
    call.on("cancelled", () => streams.delete(call));
    call.on("close", () => streams.delete(call));
  },
  GetPreferredAllocation(call: Unary<{ container_requests: { available_deviceIDs: string[]; must_include_deviceIDs: string[]; allocation_size: number }[] }>, reply: Reply) {
    const container_responses = call.request.container_requests.map((r) => ({ deviceIDs: preferred(r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size) }));
    say(`GetPreferredAllocation: ${container_responses.map((r) => r.deviceIDs.join(",")).join(" ")}`);
    reply(null, { container_responses });
  },
  Allocate(call: Unary<{ container_requests: { devices_ids: string[] }[] }>, reply: Reply) {
    const container_responses = call.request.container_requests.map(({ devices_ids: ids }) => {
      say(`Allocate: ${ids.join(",")}`);
      return {
        envs: { EXAMPLE_WIDGETS: ids.join(",") },
        mounts: [{ container_path: "/opt/widget", host_path: "/var/lib/example-widget", read_only: true }],
        devices: ids.map((id) => ({ container_path: `/dev/${id}`, host_path: "/dev/null", permissions: "rw" })),
        annotations: { "example.io/widgets": ids.join(",") },
        cdi_devices: ids.map((id) => ({ name: `${resource}=${id}` })),
      };
    });
    reply(null, { container_responses });
  },
  PreStartContainer(call: Unary<{ devices_ids: string[] }>, reply: Reply) {
    say(`PreStartContainer: ${call.request.devices_ids.join(",")}`);
    reply(null, {});
  },
};

// ---- serving and registering ----------------------------------------------
let server: grpc.Server | null = null;
let socketPath = "";
/** kubelet.sock's identity when Register was last tried. */
let triedWith: string | null = null;
/** kubelet.sock was seen missing since then: whatever is there now is a new one. */
let kubeletSeenMissing = false;
let generation = 0;
/** While a new socket is being set up, directory events are its own doing. */
let busy = false;
let stopping = false;
let retryTimer: NodeJS.Timeout | undefined;

/**
 * A file's identity: the inode number alone is not one, since ext4 hands a
 * socket re-created at once the number its predecessor just freed.
 */
const identityOf = (file: string): string | null => {
  try {
    const stats = fs.lstatSync(file);
    return `${stats.ino}:${stats.birthtimeMs}`;
  } catch {
    return null;
  }
};

/** Listens on a fresh socket (a new name each time, as upstream's sample does) and registers through the chosen path. */
async function serveAndRegister(): Promise<void> {
  const mine = ++generation;
  busy = true;
  clearTimeout(retryTimer);
  server?.forceShutdown();
  if (socketPath) fs.rmSync(socketPath, { force: true });
  streams.clear();
  socketPath = path.join(socketDir, `${resource.replaceAll("/", "_")}-${Date.now()}-${mine}.sock`);
  const bound = (server = new grpc.Server());
  bound.addService(DevicePlugin.service, devicePlugin);
  if (watchedDir) {
    bound.addService(registration.service, {
      GetInfo: (_call: Unary<unknown>, reply: Reply) => reply(null, { type: "DevicePlugin", name: resource, endpoint: socketPath, supported_versions: ["v1beta1"] }),
      NotifyRegistrationStatus(call: Unary<{ plugin_registered: boolean; error: string }>, reply: Reply) {
        say(call.request.plugin_registered ? "registered" : `refused: ${call.request.error}`);
        reply(null, {});
      },
    });
  }
  try {
    await new Promise<void>((resolve, reject) => bound.bindAsync(`unix:${socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())));
  } finally {
    busy = false;
  }
  say(`serving ${socketPath}`);
  if (!watchedDir) void register(mine);
  checkSockets(); // anything that happened while the socket was being set up
}

/** Register on kubelet.sock with the socket's file name; tried again when kubelet.sock changes, or after 5 s when refused. */
async function register(mine: number): Promise<void> {
  kubeletSeenMissing = false;
  const identity = (triedWith = identityOf(kubeletSocket));
  if (identity === null) return say(`waiting for ${kubeletSocket}`);
  const client = new KubeletRegistration(`unix:${kubeletSocket}`, grpc.credentials.createInsecure());
  const request = { version: "v1beta1", endpoint: path.basename(socketPath), resource_name: resource, options };
  const error = await new Promise<grpc.ServiceError | null>((resolve) => client.Register(request, { deadline: Date.now() + 15_000 }, resolve));
  client.close();
  if (mine !== generation || stopping) return;
  if (!error) return say("registered");
  say(`refused: ${error.details || error.message}`);
  retryTimer = setTimeout(() => void register(mine), 5_000);
}

/** What a restart of the kubelet (or edgeplug) looks like from here: our socket gone, or kubelet.sock replaced. */
function checkSockets(): void {
  if (stopping || busy || !server) return;
  const kubelet = identityOf(kubeletSocket);
  if (kubelet === null) kubeletSeenMissing = true;
  if (identityOf(socketPath) === null) {
    say(`${socketPath} was deleted: serving a new socket`);
  } else if (!watchedDir && kubelet !== null && (kubelet !== triedWith || kubeletSeenMissing)) {
    say(`${kubeletSocket} ${triedWith === null ? "appeared" : "was re-created"}: registering again with a new socket`);
  } else {
    return;
  }
  restart();
}

let restarting: Promise<void> = Promise.resolve();
function restart(): void {
  busy = true; // until serveAndRegister has its new socket
  restarting = restarting.then(serveAndRegister).catch((error: Error) => {
    say(`cannot serve on ${socketPath}: ${error.message}`);
    process.exitCode = 1;
    stop();
  });
}

fs.mkdirSync(socketDir, { recursive: true });
const watchers = [fs.watch(socketDir, () => checkSockets())];
const unhealthyFile = flags["unhealthy-file"];
if (unhealthyFile) {
  readUnhealthyFile();
  watchers.push(fs.watch(path.dirname(unhealthyFile), (_event, name) => name === path.basename(unhealthyFile) && readUnhealthyFile()));
}
restart();

process.on("SIGUSR1", () => {
  allUnhealthy = true;
  sendDevices();
});
process.on("SIGUSR2", () => {
  allUnhealthy = false;
  sendDevices();
});
const stop = () => {
  stopping = true;
  clearTimeout(retryTimer);
  for (const watcher of watchers) watcher.close();
  server?.forceShutdown();
  if (socketPath) fs.rmSync(socketPath, { force: true });
  say("stopped; socket removed");
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
