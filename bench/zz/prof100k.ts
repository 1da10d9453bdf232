import * as path from "node:path";
import { shortTempDir } from "../../test/support/agent-process.ts";
import { encodedList, startRawDevicePlugin } from "../support/raw-device-plugin.ts";
import { retried, startDevicesAgent } from "../support/devices-agent.ts";
const { dir, cleanup } = shortTempDir("epz-");
const agent = await startDevicesAgent(path.join(dir, "c"));
const plugin = await startRawDevicePlugin({ socketPath: path.join(path.dirname(agent.registrationSocket), "bench.sock"), registrationSocket: agent.registrationSocket, resource: "bench.io/dev", initial: encodedList(10, "start-") });
const watcher = agent.watch();
const mode = process.argv[2] ?? "events";
const out: number[] = [];
for (let trial = 0; trial < 7; trial++) {
  const prefix = `g${trial}-`;
  const list = encodedList(100_000, prefix);
  const startedAt = performance.now();
  if (mode === "events") {
    const event = watcher.next((e) => e.kind.case === "resource" && e.kind.value.resource?.capacity === 100_000 && e.kind.value.resource.healthy[0]?.startsWith(prefix) === true, 30_000);
    await plugin.send(list);
    out.push((await event) - startedAt);
  } else {
    await plugin.send(list);
    for (;;) {
      const { answer } = await retried(() => agent.api().status({}));
      const r = answer.resources.find((x) => x.name === "bench.io/dev");
      if (r?.capacity === 100_000 && r.healthy[0]?.startsWith(prefix)) break;
    }
    out.push(performance.now() - startedAt);
  }
  await new Promise((r) => setTimeout(r, 3000));
}
const sorted = out.slice(1).sort((a, b) => a - b);
console.log(mode, process.env.BENCH_DEVICES_NODE_OPTIONS ?? "", "p50", sorted[Math.floor(sorted.length / 2)]!.toFixed(0), out.map((x) => x.toFixed(0)).join(" "));
watcher.close();
await plugin.stop();
await agent.stop();
cleanup();
