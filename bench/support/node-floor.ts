/**
 * The memory floor under the agent: the Node binary the executable embeds,
 * under the executable's V8 flags, doing only what any Node daemon in the
 * agent's place must do (serve HTTP/2 on a unix socket, dial one, watch a
 * directory) and nothing of edgeplug's. What the agent holds beyond it is
 * edgeplug's own cost; the floor itself no agent code can lower.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { SEA_V8_FLAGS } from "../../scripts/sea-config.ts";
import { type ExecutablePageBlocks, executablePageBlocks, type ResidentMemory, residentMemory } from "./proc.ts";

const EMBEDDED_NODE = fileURLToPath(new URL("../../node_modules/node/bin/node", import.meta.url));
/** As the agent's idle window: start-up garbage collected before the reading. */
const SETTLE_MS = 3000;
const READY_TIMEOUT_MS = 10_000;

/** Runs in the floor process (plain JavaScript, so it needs no type stripping). */
const FLOOR_SCRIPT = `
const http2 = require("node:http2");
const fs = require("node:fs");
const [socket, watched] = process.argv.slice(1);
fs.mkdirSync(watched, { recursive: true });
fs.watch(watched, () => {});
const server = http2.createServer((request, response) => response.end("ok"));
server.listen(socket, () => {
  const client = http2.connect("http://localhost", { createConnection: () => require("node:net").connect(socket) });
  client.request({ ":path": "/" }).on("response", () => process.stdout.write("ready\\n")).end();
});
`;

export interface NodeFloor {
  what: string;
  nodeFlags: readonly string[];
  resident: ResidentMemory;
  executablePages: ExecutablePageBlocks | null;
}

/** Starts the floor process in `dir`, reads its memory once it has settled, and stops it. */
export async function measureNodeFloor(dir: string): Promise<NodeFloor> {
  const child = spawn(EMBEDDED_NODE, [...SEA_V8_FLAGS, "-e", FLOOR_SCRIPT, path.join(dir, "floor.sock"), path.join(dir, "watched")], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {},
  });
  const exited = once(child, "exit");
  try {
    const ready = once(child.stdout!, "data", { signal: AbortSignal.timeout(READY_TIMEOUT_MS) }).then(() => "ready" as const);
    const outcome = await Promise.race([ready, exited.then(() => "exited" as const)]);
    if (outcome === "exited") {
      ready.catch(() => {});
      throw new Error(`the Node floor process exited (${child.exitCode ?? child.signalCode}) before it was ready`);
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    return {
      what: "the embedded Node binary serving HTTP/2 on a unix socket, one HTTP/2 client session to it, one directory watcher",
      nodeFlags: SEA_V8_FLAGS,
      resident: residentMemory(child.pid!),
      executablePages: executablePageBlocks(child.pid!, EMBEDDED_NODE),
    };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  }
}
