/**
 * A fake plugin run as its own process by grpc-peers.ts:
 * `node plugin-process.ts SOCKET INFO_JSON [DEVICES_JSON]`. It serves
 * pluginregistration.Registration with grpc-js and, given a device list,
 * v1beta1.DevicePlugin too (ListAndWatch sends the list once and stays open).
 * It prints "ready" once it listens and exits cleanly (removing its socket)
 * on SIGTERM. Being a separate process lets tests kill it with SIGKILL,
 * leaving a stale socket and cutting its streams as a crash does.
 */
import * as grpc from "@grpc/grpc-js";
import { devicePluginV1beta1, pluginRegistration, serviceOf } from "./kubelet-protos.ts";

const [socketPath, infoJson, devicesJson] = process.argv.slice(2);
if (socketPath === undefined || infoJson === undefined) {
  process.stderr.write("usage: plugin-process.ts SOCKET INFO_JSON [DEVICES_JSON]\n");
  process.exit(2);
}
const info: unknown = JSON.parse(infoJson);

const server = new grpc.Server();
server.addService(pluginRegistration().service, {
  GetInfo: (_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => callback(null, info),
  NotifyRegistrationStatus: (_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => callback(null, {}),
});
if (devicesJson !== undefined) {
  const devices: unknown = JSON.parse(devicesJson);
  server.addService(serviceOf(devicePluginV1beta1(), "DevicePlugin").service, {
    GetDevicePluginOptions: (_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) => callback(null, {}),
    ListAndWatch: (call: grpc.ServerWritableStream<unknown, unknown>) => call.write({ devices }),
  });
}
server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (error) => {
  if (error) {
    process.stderr.write(`plugin-process: cannot listen on ${socketPath}: ${error.message}\n`);
    process.exit(1);
  }
  process.stdout.write("ready\n");
});
process.once("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
