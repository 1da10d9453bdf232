/**
 * Device plugins for tests, written the way upstream's sample plugins are:
 * a @grpc/grpc-js server of v1beta1.DevicePlugin on a real unix socket
 * (optionally also serving pluginregistration.Registration, for the
 * watched-directory path), with ListAndWatch streams that send the complete
 * device list on open and on every change, and a client for the kubelet's
 * v1beta1.Registration (the direct path).
 */
import { EventEmitter } from "node:events";
import * as fs from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { devicePluginV1beta1, pluginRegistration, serviceOf } from "./kubelet-protos.ts";
import { waitForEvent } from "./fake-plugin.ts";
import { waitUntil } from "./wait.ts";

/** The tests' one manual clock, re-exported for the device tests that take it from here. */
export { manualClock } from "./manual-clock.ts";

export interface TestDevice {
  ID: string;
  health: string;
  topology?: { nodes: { ID: string }[] };
}

export interface FakeDevicePluginOptions {
  socketPath: string;
  devices: TestDevice[];
  preStartRequired?: boolean;
  getPreferredAllocationAvailable?: boolean;
  /** Also serve pluginregistration.Registration advertising this resource (watched-directory path). */
  watchedAs?: { name: string; endpoint?: string; versions?: string[] };
  /** What Allocate answers for each container request (default: one env per device). */
  allocateResponse?: (deviceIds: string[]) => object;
  /** Allocate fails with this message. */
  failAllocate?: string;
  /** GetPreferredAllocation answers these ids. */
  preferred?: (available: string[], mustInclude: string[], size: number) => string[];
  /** Awaited before Allocate answers (after the call is recorded), to hold a call in flight. */
  holdAllocate?: () => Promise<void>;
  /** Awaited before GetPreferredAllocation answers (after the call is recorded). */
  holdPreferred?: () => Promise<void>;
  /** PreStartContainer fails with this message. */
  failPreStart?: string;
  /** Awaited before GetDevicePluginOptions answers; its result, when a string, is the call's error instead. */
  holdOptions?: () => Promise<string | void>;
}

export interface FakeDevicePlugin {
  readonly socketPath: string;
  readonly allocateCalls: string[][];
  readonly preStartCalls: string[][];
  readonly preferredCalls: { available: string[]; mustInclude: string[]; size: number }[];
  /** Open ListAndWatch streams. */
  streams(): number;
  /** Sends a new complete list on every open stream (and to streams opened later). */
  setDevices(devices: TestDevice[]): void;
  /** Sends a raw message on every open stream without changing the list later streams get. */
  sendRaw(message: object): void;
  /** Resolves once the plugin has received `count` calls of `kind` in all. */
  waitForCalls(kind: "allocate" | "preferred", count?: number): Promise<void>;
  /** Resolves once exactly `count` streams are open (after one was closed, say). */
  waitForOpenStreams(count: number): Promise<void>;
  /** Resolves once at least `count` streams are open. */
  waitForStreams(count?: number): Promise<void>;
  /** Ends every open ListAndWatch stream (as a plugin that crashed its loop), the server keeps serving. */
  endStreams(): void;
  stop(): Promise<void>;
}

const v1beta1 = devicePluginV1beta1();
const devicePluginService = serviceOf(v1beta1, "DevicePlugin").service;
const registrationClient = serviceOf(v1beta1, "Registration");

type Callback = grpc.sendUnaryData<unknown>;
type Stream = grpc.ServerWritableStream<unknown, unknown>;

export async function startFakeDevicePlugin(options: FakeDevicePluginOptions): Promise<FakeDevicePlugin> {
  const events = new EventEmitter();
  let devices = options.devices;
  const open = new Set<Stream>();
  const allocateCalls: string[][] = [];
  const preStartCalls: string[][] = [];
  const preferredCalls: FakeDevicePlugin["preferredCalls"] = [];
  const server = new grpc.Server();
  server.addService(devicePluginService, {
    async GetDevicePluginOptions(_call: unknown, callback: Callback) {
      const failure = await options.holdOptions?.();
      if (typeof failure === "string") return callback({ code: grpc.status.INTERNAL, details: failure });
      callback(null, {
        pre_start_required: options.preStartRequired ?? false,
        get_preferred_allocation_available: options.getPreferredAllocationAvailable ?? false,
      });
    },
    ListAndWatch(call: Stream) {
      open.add(call);
      call.write({ devices });
      events.emit("change");
      const forget = () => {
        open.delete(call);
        events.emit("change");
      };
      call.on("cancelled", forget);
      call.on("close", forget);
    },
    async GetPreferredAllocation(
      call: grpc.ServerUnaryCall<{ container_requests?: { available_deviceIDs?: string[]; must_include_deviceIDs?: string[]; allocation_size?: number }[] }, unknown>,
      callback: Callback,
    ) {
      const responses = (call.request.container_requests ?? []).map((request) => {
        const entry = { available: request.available_deviceIDs ?? [], mustInclude: request.must_include_deviceIDs ?? [], size: request.allocation_size ?? 0 };
        preferredCalls.push(entry);
        const chosen = options.preferred?.(entry.available, entry.mustInclude, entry.size) ?? entry.available.slice(0, entry.size);
        return { deviceIDs: chosen };
      });
      events.emit("change");
      await options.holdPreferred?.();
      callback(null, { container_responses: responses });
    },
    async Allocate(call: grpc.ServerUnaryCall<{ container_requests?: { devices_ids?: string[] }[] }, unknown>, callback: Callback) {
      const requests = call.request.container_requests ?? [];
      for (const request of requests) allocateCalls.push(request.devices_ids ?? []);
      events.emit("change");
      await options.holdAllocate?.();
      if (options.failAllocate) return callback({ code: grpc.status.INTERNAL, details: options.failAllocate });
      const answer = options.allocateResponse ?? ((ids: string[]) => ({ envs: { VISIBLE_DEVICES: ids.join(",") } }));
      callback(null, { container_responses: requests.map((request) => answer(request.devices_ids ?? [])) });
    },
    PreStartContainer(call: grpc.ServerUnaryCall<{ devices_ids?: string[] }, unknown>, callback: Callback) {
      preStartCalls.push(call.request.devices_ids ?? []);
      if (options.failPreStart) return callback({ code: grpc.status.INTERNAL, details: options.failPreStart });
      callback(null, {});
    },
  });
  if (options.watchedAs) {
    const info = options.watchedAs;
    server.addService(pluginRegistration().service, {
      GetInfo(_call: unknown, callback: Callback) {
        callback(null, { type: "DevicePlugin", name: info.name, endpoint: info.endpoint ?? "", supported_versions: info.versions ?? ["v1beta1"] });
      },
      NotifyRegistrationStatus(_call: unknown, callback: Callback) {
        callback(null, {});
      },
    });
  }
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${options.socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())));
  return {
    socketPath: options.socketPath,
    allocateCalls,
    preStartCalls,
    preferredCalls,
    streams: () => open.size,
    setDevices(next) {
      devices = next;
      for (const stream of open) stream.write({ devices });
    },
    sendRaw(message) {
      for (const stream of open) stream.write(message);
    },
    waitForCalls: (kind, count = 1) => waitForEvent(events, `${count} ${kind} calls on ${options.socketPath}`, () => (kind === "allocate" ? allocateCalls : preferredCalls).length >= count, 5000),
    waitForOpenStreams: (count) => waitForEvent(events, `exactly ${count} ListAndWatch streams on ${options.socketPath}`, () => open.size === count, 5000),
    waitForStreams: (count = 1) => waitForEvent(events, `${count} ListAndWatch streams on ${options.socketPath}`, () => open.size >= count, 5000),
    endStreams() {
      for (const stream of open) stream.end();
      open.clear();
    },
    async stop() {
      server.forceShutdown();
      await waitUntil(() => !fs.existsSync(options.socketPath), `${options.socketPath} to be removed`);
    },
  };
}

/** Registers on the kubelet's (or edgeplug's) v1beta1.Registration socket, as a device plugin does at start. */
export function registerDevicePlugin(
  registrationSocket: string,
  request: { version?: string; endpoint: string; resource_name: string; options?: object },
): Promise<void> {
  const client = new registrationClient(`unix:${registrationSocket}`, grpc.credentials.createInsecure());
  return new Promise<void>((resolve, reject) => {
    client.Register({ version: "v1beta1", ...request }, { deadline: Date.now() + 10_000 }, (error: grpc.ServiceError | null) => {
      client.close();
      if (error) reject(error);
      else resolve();
    });
  });
}

/** `n` healthy devices named prefix0..prefix(n-1). */
export function healthyDevices(n: number, prefix = "dev"): TestDevice[] {
  return Array.from({ length: n }, (_, i) => ({ ID: `${prefix}${i}`, health: "Healthy" }));
}

/** What waitForDeviceState needs of a DeviceManager (kept structural so this file stays independent of src/). */
interface ObservableDevices {
  subscribe(listener: () => void): () => void;
}

/** Resolves when `check()` holds, re-checking on every resource or allocation change; rejects naming `what`. */
export function waitForDeviceState(devices: ObservableDevices, what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  const events = new EventEmitter();
  const unsubscribe = devices.subscribe(() => events.emit("change"));
  return waitForEvent(events, what, check, timeoutMs).finally(unsubscribe);
}
