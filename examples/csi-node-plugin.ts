/**
 * A sample CSI node driver with its registrar, to try edgeplug's CSIPlugin
 * handler by hand. Like a real driver deployed with node-driver-registrar,
 * two sockets: the driver's CSI socket (csi.v1 Identity and Node) outside the
 * watched directory, and a registration socket in it whose GetInfo names the
 * CSI socket as its endpoint. edgeplug then calls NodeGetInfo,
 * NodeGetCapabilities and GetPluginInfo on the CSI socket; `edgeplug status`
 * shows what the driver answered. Ctrl-C removes both sockets.
 *
 *   node examples/csi-node-plugin.ts [--dir DIR] [--csi-dir DIR] [--name NAME]
 *     [--versions 1.0.0,1.9.0] [--node-id ID] [--max-volumes N] [--zone ZONE] [--fail-node-get-info N]
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { Identity, Node, NodeServiceCapability_RPC_Type } from "../src/gen/csi/v1/csi_pb.ts";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";

const { values } = parseArgs({
  options: {
    dir: { type: "string", default: "/tmp/edgeplug-dev/plugins_registry" },
    "csi-dir": { type: "string", default: "/tmp/edgeplug-dev/plugins" },
    name: { type: "string", default: "hostpath.csi.example.io" },
    versions: { type: "string", default: "1.0.0" },
    "node-id": { type: "string", default: os.hostname() },
    "max-volumes": { type: "string", default: "16" },
    zone: { type: "string", default: "zone-a" },
    "fail-node-get-info": { type: "string", default: "0" },
  },
});

const csiSocket = path.join(values["csi-dir"], values.name, "csi.sock");
// node-driver-registrar names the registration socket <driver>-reg.sock.
const registrationSocket = path.join(values.dir, `${values.name}-reg.sock`);
for (const socket of [csiSocket, registrationSocket]) {
  fs.mkdirSync(path.dirname(socket), { recursive: true });
  fs.rmSync(socket, { force: true }); // left by an earlier run that was killed
}

let failuresLeft = Number(values["fail-node-get-info"]);
const csi = await serveUnix(csiSocket, (router) => {
  router.service(Identity, {
    getPluginInfo: () => ({ name: values.name, vendorVersion: "0.1.0" }),
    getPluginCapabilities: () => ({ capabilities: [] }),
    probe: () => ({}),
  });
  router.service(Node, {
    nodeGetInfo() {
      if (failuresLeft > 0) {
        failuresLeft--;
        console.log("NodeGetInfo: failing (--fail-node-get-info)");
        throw new ConnectError("node not ready: storage backend starting", Code.Unavailable);
      }
      console.log(`NodeGetInfo: node ${values["node-id"]}`);
      return {
        nodeId: values["node-id"],
        maxVolumesPerNode: BigInt(values["max-volumes"]),
        accessibleTopology: { segments: { "topology.kubernetes.io/zone": values.zone } },
      };
    },
    nodeGetCapabilities: () => ({
      capabilities: [{ type: { case: "rpc", value: { type: NodeServiceCapability_RPC_Type.STAGE_UNSTAGE_VOLUME } } }],
    }),
  });
});

const registrar = await serveUnix(registrationSocket, (router) =>
  router.service(Registration, {
    getInfo: () => ({ type: "CSIPlugin", name: values.name, endpoint: csiSocket, supportedVersions: values.versions.split(",") }),
    notifyRegistrationStatus(status) {
      console.log(status.pluginRegistered ? "registered" : `refused: ${status.error}`);
      return {};
    },
  }));
console.log(`CSI driver ${values.name} on ${csiSocket}, registration socket ${registrationSocket}; Ctrl-C to stop`);

const stop = async () => {
  await Promise.all([registrar.close(), csi.close()]);
  for (const socket of [csiSocket, registrationSocket]) fs.rmSync(socket, { force: true });
  console.log("stopped; sockets removed");
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
