/**
 * What the plugin manager logs: each registration outcome and state change
 * once, with socket, type, name and reason; nothing on resyncs that change
 * nothing (an unattended node's log must not grow by itself).
 */
import { handlerFactories } from "../src/agent/agent.ts";
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { createLogger } from "../src/log/logger.ts";
import { PluginStatusCache } from "../src/api/plugin-status.ts";
import { PluginManager } from "../src/pluginmanager/manager.ts";
import { startTestPlugin } from "./support/fake-plugin.ts";
import { testPolicy } from "./support/policy.ts";
import { tempDir } from "./support/temp-dir.ts";

test("outcomes are logged once each, and resyncs that change nothing log nothing", async (t) => {
  const dir = tempDir(t);
  const logs: Array<Record<string, unknown>> = [];
  const log = createLogger({ level: "debug", format: "json", write: (line) => void logs.push(JSON.parse(line)) });
  let passes = 0;
  let onPass = () => {};
  const status = new PluginStatusCache({ log });
  const manager = new PluginManager({
    policy: testPolicy({ watch: [dir], resyncMs: 10, handlers: ["acme.io/Sensor"] }),
    log,
    handlers: handlerFactories(),
    observers: [{ heartbeat: () => (passes++, onPass()) }, status],
  });
  t.after(() => manager.stop());
  await manager.start();
  const good = await startTestPlugin(t, {
    socketPath: path.join(dir, "good.sock"),
    info: { type: "acme.io/Sensor", name: "acme.io/thermo", versions: ["v1"] },
  });
  const refused = await startTestPlugin(t, {
    socketPath: path.join(dir, "refused.sock"),
    info: { type: "other.io/Thing", name: "other.io/thing" },
  });
  await good.waitForNotify();
  await refused.waitForNotify();
  await status.whenSettled({ predicate: (plugins) => plugins.every((p) => p.state !== "pending") });

  const registered = logs.filter((record) => record.msg === "plugin registered");
  assert.deepEqual(
    registered.map(({ socket, type, name }) => ({ socket, type, name })),
    [{ socket: good.socketPath, type: "acme.io/Sensor", name: "acme.io/thermo" }],
  );
  const failed = logs.filter((record) => record.level === "warn" && record.socket === refused.socketPath);
  assert.equal(failed.length, 1, "the refusal is logged once, not on every retry");
  assert.equal(failed[0]!.reason, "no_handler");
  assert.match(String(failed[0]!.error), /no handler registered for plugin type: other\.io\/Thing/);

  // Twenty resync passes go by first (the refused plugin's retries settle into their backoff),
  // then everything twenty more log is counted.
  await new Promise<void>((resolve) => {
    const target = passes + 20;
    onPass = () => passes >= target && resolve();
  });
  const linesBefore = logs.length;
  await new Promise<void>((resolve) => {
    const target = passes + 20;
    onPass = () => passes >= target && resolve();
  });
  const noise = logs.slice(linesBefore).filter((record) => record.level !== "debug");
  assert.deepEqual(noise, [], "resyncs that change nothing log nothing at info or above");
});
