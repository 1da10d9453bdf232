/** curl on edgeplug's API socket, as a person or a script reads it (Connect JSON over HTTP/1.1). */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

/** `Agent/Status` through `curl --unix-socket`: the answer's body, parsed; rejects on an HTTP error with the body. */
export async function curlAgentStatus(apiSocket: string): Promise<ReturnType<typeof JSON.parse>> {
  const { stdout } = await promisify(execFile)("curl", [
    "--silent",
    "--fail-with-body",
    "--unix-socket",
    apiSocket,
    "-H",
    "content-type: application/json",
    "-d",
    "{}",
    "http://localhost/edgeplug.v1.Agent/Status",
  ]);
  return JSON.parse(stdout);
}
