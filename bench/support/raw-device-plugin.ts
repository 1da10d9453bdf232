/**
 * A device plugin for the devices benchmark: a @grpc/grpc-js server of
 * v1beta1.DevicePlugin whose ListAndWatch messages are encoded before they
 * are sent (grpc-js is given the bytes), so a measured list update starts
 * when the bytes are written, not when a JavaScript plugin has finished
 * encoding 100,000 devices. It registers on the agent's kubelet.sock.
 */
import * as net from "node:net";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AllocateRequestSchema, AllocateResponseSchema, DevicePluginOptionsSchema, ListAndWatchResponseSchema, PreStartContainerResponseSchema } from "../../src/gen/deviceplugin/v1beta1/api_pb.ts";
import { registerDevicePlugin } from "../../test/support/fake-device-plugin.ts";
import { handOverHttp2 } from "../../src/rpc/authority-rewrite.ts";

const same = (bytes: Buffer) => bytes;
const method = (name: string, responseStream = false): grpc.MethodDefinition<Buffer, Buffer> => ({
  path: `/v1beta1.DevicePlugin/${name}`,
  requestStream: false,
  responseStream,
  requestSerialize: same,
  requestDeserialize: same,
  responseSerialize: same,
  responseDeserialize: same,
});
const SERVICE: grpc.ServiceDefinition = {
  GetDevicePluginOptions: method("GetDevicePluginOptions"),
  ListAndWatch: method("ListAndWatch", true),
  Allocate: method("Allocate"),
  PreStartContainer: method("PreStartContainer"),
};

/** The encoded ListAndWatchResponse of `count` healthy devices `<prefix><i>`, spread over two NUMA nodes. */
export function encodedList(count: number, prefix: string, health = "Healthy"): Buffer {
  const devices = Array.from({ length: count }, (_, i) => ({ ID: `${prefix}${i}`, health, topology: { nodes: [{ ID: BigInt(i % 2) }] } }));
  return Buffer.from(toBinary(ListAndWatchResponseSchema, create(ListAndWatchResponseSchema, { devices })));
}

export interface RawDevicePlugin {
  readonly socketPath: string;
  /** Sends `list` on every open ListAndWatch stream; resolves once grpc-js has taken it (after 'drain' when its buffer is full). */
  send(list: Buffer): Promise<void>;
  allocateCalls(): number;
  stop(): Promise<void>;
}

/** Serves on `socketPath` with `initial` as the list each new stream gets, and registers `resource` on `registrationSocket`. */
export async function startRawDevicePlugin(options: {
  socketPath: string;
  registrationSocket: string;
  resource: string;
  initial: Buffer;
  /** false: the caller registers (and times) it itself. */
  register?: boolean;
  /**
   * Accept grpc-go < 1.50 clients (the kubelet v1.19's), whose bare-path
   * `:authority` node:http2 resets: connections are taken by a net.Server and
   * handed to grpc-js through edgeplug's own authority rewriter when they need it.
   */
  acceptAnyAuthority?: boolean;
}): Promise<RawDevicePlugin> {
  let current = options.initial;
  let allocations = 0;
  const streams = new Set<grpc.ServerWritableStream<Buffer, Buffer>>();
  const server = new grpc.Server();
  const optionsAnswer = Buffer.from(toBinary(DevicePluginOptionsSchema, create(DevicePluginOptionsSchema, {})));
  const noAnswer = Buffer.from(toBinary(PreStartContainerResponseSchema, create(PreStartContainerResponseSchema, {})));
  server.addService(SERVICE, {
    GetDevicePluginOptions: (_call: unknown, callback: grpc.sendUnaryData<Buffer>) => callback(null, optionsAnswer),
    ListAndWatch(call: grpc.ServerWritableStream<Buffer, Buffer>) {
      streams.add(call);
      call.write(current);
      const forget = () => streams.delete(call);
      call.on("cancelled", forget);
      call.on("close", forget);
    },
    Allocate(call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) {
      allocations++;
      const request = fromBinary(AllocateRequestSchema, call.request);
      const containerResponses = request.containerRequests.map((container) => ({ envs: { VISIBLE_DEVICES: container.devicesIds.join(",") } }));
      callback(null, Buffer.from(toBinary(AllocateResponseSchema, create(AllocateResponseSchema, { containerResponses }))));
    },
    PreStartContainer: (_call: unknown, callback: grpc.sendUnaryData<Buffer>) => callback(null, noAnswer),
  });
  let front: net.Server | undefined;
  const accepted = new Set<net.Socket>();
  if (options.acceptAnyAuthority) {
    const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
    front = net.createServer((socket) => {
      accepted.add(socket);
      socket.once("close", () => accepted.delete(socket));
      socket.once("data", (head: Buffer) => {
        socket.pause();
        handOverHttp2(socket, head, (connection) => injector.injectConnection(connection));
      });
    });
    await new Promise<void>((resolve, reject) => {
      front!.once("error", reject);
      front!.listen(options.socketPath, () => resolve());
    });
  } else {
    await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${options.socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => (error ? reject(error) : resolve())));
  }
  if (options.register !== false) await registerDevicePlugin(options.registrationSocket, { endpoint: options.socketPath.split("/").pop()!, resource_name: options.resource });
  return {
    socketPath: options.socketPath,
    async send(list) {
      current = list;
      // A stream that ends while full never drains: its end settles the wait too.
      const flushed = (stream: grpc.ServerWritableStream<Buffer, Buffer>) =>
        new Promise<void>((resolve) => {
          const done = () => {
            for (const event of ["drain", "close", "cancelled", "error"]) stream.off(event, done);
            resolve();
          };
          for (const event of ["drain", "close", "cancelled", "error"]) stream.once(event, done);
        });
      await Promise.all([...streams].map((stream) => (stream.write(list) ? undefined : flushed(stream))));
    },
    allocateCalls: () => allocations,
    // Forced: a graceful shutdown waits for the agent's connection, which may still be opening ListAndWatch.
    async stop() {
      for (const stream of streams) stream.end();
      server.forceShutdown();
      front?.close();
      for (const socket of accepted) socket.destroy();
    },
  };
}
