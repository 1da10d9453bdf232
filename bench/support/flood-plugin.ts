/**
 * A child process for the devices benchmark: a device plugin that, once
 * registered, sends ListAndWatch lists as fast as HTTP/2 flow control lets it
 * (two encoded lists of `count` devices, alternating, so each one changes the
 * health of every device), until the parent says stop. It runs apart from the
 * bench process so that its CPU is not the measuring side's.
 *
 *   fork("flood-plugin.ts") then send {socketPath, registrationSocket, resource, count};
 *   it answers {op: "flooding"}, and to "stop" with {op: "stopped", sent}.
 */
import process from "node:process";
import { encodedList, startRawDevicePlugin } from "./raw-device-plugin.ts";

interface FloodRequest {
  socketPath: string;
  registrationSocket: string;
  resource: string;
  count: number;
}

if (!process.send) {
  process.stderr.write("flood-plugin.ts runs under child_process.fork (it needs an IPC channel)\n");
  process.exit(2);
}

let stopping = false;
process.once("message", async (request: FloodRequest) => {
  const lists = [encodedList(request.count, "f", "Healthy"), encodedList(request.count, "f", "Unhealthy")];
  const plugin = await startRawDevicePlugin({ ...request, initial: lists[0]! });
  process.on("message", (message: string) => {
    if (message === "stop") stopping = true;
  });
  process.send!({ op: "flooding" });
  let sent = 0;
  while (!stopping) {
    await plugin.send(lists[sent % 2]!);
    sent++;
    // Let the parent's "stop" arrive even when the socket never pushes back.
    if (sent % 64 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  await plugin.stop();
  process.send!({ op: "stopped", sent });
  process.disconnect();
});
