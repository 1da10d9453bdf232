/**
 * A small registration plugin, to try edgeplug by hand. It serves the
 * kubelet's pluginregistration.Registration service on a socket in the
 * registration directory, answers GetInfo as a plugin of the generic type
 * `example.io/Greeter` (declared in config/dev.yaml), and prints what the
 * agent tells it. Ctrl-C removes its socket, which deregisters it.
 *
 *   node examples/greeter-plugin.ts [--dir DIR] [--name NAME] [--type TYPE] [--versions v1,v2]
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { Registration } from "../src/gen/pluginregistration/v1/api_pb.ts";
import { serveUnix } from "../src/rpc/unix-server.ts";

const { values } = parseArgs({
  options: {
    dir: { type: "string", default: "/tmp/edgeplug-dev/plugins_registry" },
    name: { type: "string", default: "example.io/greeter" },
    type: { type: "string", default: "example.io/Greeter" },
    versions: { type: "string", default: "v1" },
  },
});

// One socket per plugin name, as the kubelet's registration README recommends.
const socketPath = path.join(values.dir, `${values.name.replaceAll("/", "_")}.sock`);
fs.mkdirSync(values.dir, { recursive: true });
// A socket left by an earlier run that was killed would make listen() fail.
fs.rmSync(socketPath, { force: true });

const server = await serveUnix(socketPath, (router) =>
  router.service(Registration, {
    getInfo() {
      console.log(`GetInfo: answering ${values.type} ${values.name}`);
      return { type: values.type, name: values.name, endpoint: "", supportedVersions: values.versions.split(",") };
    },
    notifyRegistrationStatus(status) {
      console.log(status.pluginRegistered ? "registered" : `refused: ${status.error}`);
      return {};
    },
  }));
console.log(`listening on ${socketPath}; Ctrl-C to stop`);

const stop = async () => {
  await server.close();
  fs.rmSync(socketPath, { force: true });
  console.log("stopped; socket removed");
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
