import assert from "node:assert/strict";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { parsePolicy } from "../policy/load.ts";
import type { PluginManager } from "../pluginmanager/manager.ts";
import type { RegisteredPlugin } from "../pluginmanager/state-of-world.ts";
import { manualClock } from "../../test/support/manual-clock.ts";
import { tempDir } from "../../test/support/temp-dir.ts";
import { waitUntil } from "../../test/support/wait.ts";
import { LivenessDial } from "./dial.ts";

const policyWithLiveness = (interval: string) =>
  parsePolicy(`version: 1\nwatch:\n  - path: /tmp/ep-unused\nreconcile:\n  liveness: { interval: ${interval} }\n  timeouts: { dial: 2s }\n`, "policy.yaml");

test("a reload that changes the liveness interval while a pass is dialling leaves one chain of passes, and stop leaves no timer", async (t) => {
  const dir = tempDir(t);
  // A plugin that accepts the connection and never answers the HTTP/2 handshake: the pass stays in flight.
  const socketPath = path.join(dir, "silent.sock");
  const connections = new Set<net.Socket>();
  const silent = net.createServer((socket) => connections.add(socket.on("error", () => {})));
  await new Promise<void>((resolve) => silent.listen(socketPath, resolve));
  t.after(() => {
    for (const socket of connections) socket.destroy();
    silent.close();
  });
  const plugin = { socket: socketPath, handler: { watchesConnection: false } } as RegisteredPlugin;
  const manager = { idlePlugins: () => [plugin], socketRefused: () => {} } as unknown as PluginManager;
  const clock = manualClock(0);
  const dial = new LivenessDial(manager, policyWithLiveness("10s"), clock);
  dial.start();
  t.after(() => dial.stop());

  clock.advance(10_000);
  await waitUntil(() => connections.size === 1, "the first pass to dial the silent plugin");
  dial.setPolicy(policyWithLiveness("20s"));
  assert.equal(clock.pendingTimers(), 0, "no second pass is armed while one is dialling");

  // The dial times out after 2 s of real time; the pass then arms the next one at the new interval.
  await waitUntil(() => clock.pendingTimers() === 1, "the pass to end and arm the next", 10_000);
  clock.advance(19_999);
  assert.equal(connections.size, 1, "nothing due before the new interval");
  clock.advance(1);
  await waitUntil(() => connections.size === 2, "the second pass, 20 s later");
  dial.stop();
  assert.equal(clock.pendingTimers(), 0, "stop cancels the one timer there is");
});
