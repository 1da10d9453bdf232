/**
 * Makes one of the V8 code caches that the executable's loader
 * (src/sea-loader.ts) hands V8 with the bundle: NAME's (CODE_CACHE_COMMANDS
 * in src/platform/sea-bundle.ts). It compiles the wrapped bundle as the
 * loader does, runs it (`version`), has it run that group's commands through
 * the bundle's `main` (`validate` and `policy show`; `status`; `probe`), and
 * writes `createCachedData()`, which then holds the code those commands
 * compiled as well as the top level (`fleet status` reads from a listener
 * here that answers as a broker would). One process a cache: V8 would reuse a
 * script compiled earlier in the same process, with all it compiled. Every command runs
 * on a policy of its own in a fresh directory and dials only sockets that do
 * not exist there: none starts an agent, changes anything or reaches
 * anything outside that directory. Each must end as expected (a command that
 * fails early would leave its code out of the cache), else no cache is made.
 *
 * Run by scripts/build.ts with the target's node and exactly SEA_V8_FLAGS,
 * since V8 rejects a cache made under other flags:
 *   node [SEA_V8_FLAGS] scripts/code-cache.ts WRAPPED_BUNDLE NAME OUTPUT
 * It imports only Node's modules and src/platform/sea-bundle.ts, so that the
 * target's node can run it under qemu as it is.
 */
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import process from "node:process";
import { Script } from "node:vm";
import { builtinRequire, bundleAsset, CODE_CACHE_NAMES, codeCacheFor, type CodeCacheName, decodeBundle, type WrappedBundle } from "../src/platform/sea-bundle.ts";

type Main = (argv: string[], env: { stdout: (text: string) => void; stderr: (text: string) => void }) => Promise<number>;

function policyText(dir: string): string {
  return [
    "version: 1",
    "watch:",
    `  - path: ${path.join(dir, "registry")}`,
    "handlers:",
    "  DevicePlugin: {}",
    "  CSIPlugin: {}",
    "  DRAPlugin: {}",
    "  example.io/Greeter: { kind: generic, versions: [v1] }",
    "devicePlugins: { registrationSocket: null }",
    `checkpoint: { path: ${path.join(dir, "state", "checkpoint")} }`,
    `api: { socket: ${path.join(dir, "api.sock")}, metrics: null }`,
    "log: { level: error, format: json }",
    "",
  ].join("\n");
}

async function makeCodeCache(wrappedBundle: string, name: CodeCacheName, output: string): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "edgeplug-code-cache-"));
  try {
    const policy = path.join(dir, "policy.yaml");
    fs.writeFileSync(policy, policyText(dir));
    const script = new Script(decodeBundle(fs.readFileSync(wrappedBundle)), { filename: bundleAsset(name) });
    const module: { exports: { main?: Main } } = { exports: {} };
    // The bundle's own entry runs the command in process.argv, as in the executable.
    process.argv = [process.execPath, bundleAsset(name), "version"];
    (script.runInThisContext() as WrappedBundle)(builtinRequire, module, module.exports, process.execPath, path.dirname(process.execPath), "absent");
    const main = module.exports.main;
    if (typeof main !== "function") throw new Error("the bundle exports no main (src/sea-main.ts)");
    const missing = path.join(dir, "missing.sock");
    const runs: Record<CodeCacheName, [argv: string[], expectedExit: number][]> = {
      base: [],
      policy: [
        [["validate", "--config", policy], 0],
        [["policy", "show", "--config", policy], 0],
      ],
      status: [
        [["status", "--api", missing], 1],
        [["status", "--config", policy], 1],
      ],
      probe: [[["probe", missing, "--config", policy], 1]],
      fleet: [],
    };
    let broker: { url: string; close: () => void } | null = null;
    if (name === "fleet") {
      broker = await answeringBroker();
      // One node offline: the read, the view and the table all run; exit 1 as a node is not online.
      runs.fleet = [[["fleet", "status", "--broker", broker.url], 1]];
    }
    for (const [argv, expectedExit] of runs[name]) {
      if (codeCacheFor(argv) !== name) throw new Error(`edgeplug ${argv[0]} does not use the ${name} code cache (src/platform/sea-bundle.ts)`);
      let said = "";
      const exit = await main(argv, { stdout: () => {}, stderr: (text) => void (said += text) });
      if (exit !== expectedExit) throw new Error(`edgeplug ${argv.join(" ")} exited ${exit}, not ${expectedExit}: ${said}`);
    }
    broker?.close();
    fs.writeFileSync(output, script.createCachedData());
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * For `fleet status`'s cache: a listener on loopback that answers one
 * MQTT 3.1.1 reader as a broker with one node's retained topics would, in a
 * few fixed packets (CONNACK; SUBACK; two retained PUBLISHes; PINGRESP).
 * Only the reader started here ever connects to it.
 */
async function answeringBroker(): Promise<{ url: string; close: () => void }> {
  const encodeLength = (length: number): number[] => {
    const bytes: number[] = [];
    do {
      let byte = length % 128;
      length = Math.floor(length / 128);
      if (length > 0) byte |= 0x80;
      bytes.push(byte);
    } while (length > 0);
    return bytes;
  };
  const retained = (topic: string, payload: string): Buffer => {
    const body = Buffer.concat([Buffer.from([topic.length >> 8, topic.length & 0xff]), Buffer.from(topic), Buffer.from(payload)]);
    return Buffer.concat([Buffer.from([0x31, ...encodeLength(body.length)]), body]);
  };
  const now = new Date().toISOString();
  const status = JSON.stringify({ ok: false, plugins: [{ name: "example.io/a", state: "registered" }], resources: [], allocations: [] });
  const server = net.createServer((socket) => {
    let pending = Buffer.alloc(0);
    socket.on("error", () => {});
    socket.on("data", (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        let length = 0;
        let at = 1;
        for (let shift = 0; at < pending.length; shift += 7) {
          const byte = pending[at++]!;
          length += (byte & 0x7f) * 2 ** shift;
          if ((byte & 0x80) === 0) break;
        }
        if (pending.length < 2 || at + length > pending.length) return;
        const type = pending[0]! >> 4;
        const id = pending.subarray(at, at + 2);
        pending = pending.subarray(at + length);
        if (type === 1) socket.write(Buffer.from([0x20, 0x02, 0x00, 0x00]));
        else if (type === 8) {
          socket.write(Buffer.from([0x90, 0x04, id[0]!, id[1]!, 0x00, 0x00]));
          socket.write(retained("edgeplug/v1/node-1/online", JSON.stringify({ online: false, since: now })));
          socket.write(retained("edgeplug/v1/node-1/status", status));
        } else if (type === 12) socket.write(Buffer.from([0xd0, 0x00]));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return { url: `mqtt://127.0.0.1:${port}`, close: () => server.close() };
}

const [wrappedBundle, name, output] = process.argv.slice(2);
if (wrappedBundle === undefined || output === undefined || !(CODE_CACHE_NAMES as string[]).includes(name ?? "")) {
  process.stderr.write(`usage: node [SEA_V8_FLAGS] scripts/code-cache.ts WRAPPED_BUNDLE ${CODE_CACHE_NAMES.join("|")} OUTPUT\n`);
  process.exit(2);
}
makeCodeCache(wrappedBundle, name as CodeCacheName, output).catch((error: unknown) => {
  process.stderr.write(`code cache: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
