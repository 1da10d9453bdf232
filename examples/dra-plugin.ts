/**
 * A sample DRA driver instance, to try edgeplug's DRAPlugin handler by hand.
 * It serves the DRA kubelet plugin service (v1 and v1beta1) on its own
 * service socket and registers through a registration socket in the watched
 * directory, advertising the services it serves. Start two with different
 * --instance values to see a driver with several instances (a rolling
 * upgrade); stop one with Ctrl-C and `edgeplug status` shows the driver still
 * connected; stop the other and it shows DISCONNECTED. --kill-service drops
 * the service after N seconds while the registration socket stays, as a
 * plugin whose service crashed.
 *
 *   node examples/dra-plugin.ts [--dir DIR] [--service-dir DIR] [--name NAME] [--instance ID]
 *     [--services v1.DRAPlugin,v1beta1.DRAPlugin] [--kill-service SECONDS]
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { DRAPlugin as DRAPluginV1 } from "../src/gen/dra/v1/api_pb.ts";
import { DRAPlugin as DRAPluginV1beta1 } from "../src/gen/dra/v1beta1/api_pb.ts";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";

const { values } = parseArgs({
  options: {
    dir: { type: "string", default: "/tmp/edgeplug-dev/plugins_registry" },
    "service-dir": { type: "string", default: "/tmp/edgeplug-dev/plugins" },
    name: { type: "string", default: "gpu.example.io" },
    instance: { type: "string", default: "a" },
    services: { type: "string", default: "v1.DRAPlugin,v1beta1.DRAPlugin" },
    "kill-service": { type: "string" },
  },
});

// One socket pair per instance, as the kubelet's DRA helper does for seamless upgrades.
const serviceSocket = path.join(values["service-dir"], values.name, `dra-${values.instance}.sock`);
const registrationSocket = path.join(values.dir, `${values.name}-${values.instance}.sock`);
for (const socket of [serviceSocket, registrationSocket]) {
  fs.mkdirSync(path.dirname(socket), { recursive: true });
  fs.rmSync(socket, { force: true });
}

/** Prepares every claim with one made-up device; unprepares without error. Both API versions answer alike. */
const prepare = (request: { claims: Array<{ uid: string }> }) => {
  console.log(`NodePrepareResources: ${request.claims.map((claim) => claim.uid).join(", ")}`);
  const devices = [{ requestNames: [], poolName: values.name, deviceName: `dev-${values.instance}`, cdiDeviceIds: [] }];
  return { claims: Object.fromEntries(request.claims.map((claim) => [claim.uid, { devices, error: "" }])) };
};
const unprepare = (request: { claims: Array<{ uid: string }> }) => ({
  claims: Object.fromEntries(request.claims.map((claim) => [claim.uid, { error: "" }])),
});
const service = await serveUnix(serviceSocket, (router) => {
  router.service(DRAPluginV1, { nodePrepareResources: prepare, nodeUnprepareResources: unprepare });
  router.service(DRAPluginV1beta1, { nodePrepareResources: prepare, nodeUnprepareResources: unprepare });
});

const registrar = await serveUnix(registrationSocket, (router) =>
  router.service(Registration, {
    getInfo: () => ({ type: "DRAPlugin", name: values.name, endpoint: serviceSocket, supportedVersions: values.services.split(",") }),
    notifyRegistrationStatus(status) {
      console.log(status.pluginRegistered ? "registered" : `refused: ${status.error}`);
      return {};
    },
  }));
console.log(`DRA driver ${values.name} instance ${values.instance}: service ${serviceSocket}, registration ${registrationSocket}; Ctrl-C to stop`);

if (values["kill-service"] !== undefined) {
  setTimeout(() => {
    void service.close().then(() => console.log("service socket closed (--kill-service); registration socket kept"));
  }, Number(values["kill-service"]) * 1000);
}

const stop = async () => {
  await Promise.all([registrar.close(), service.close()]);
  for (const socket of [serviceSocket, registrationSocket]) fs.rmSync(socket, { force: true });
  console.log("stopped; sockets removed");
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
