/**
 * A handler reports a lost service connection through its HandlerContext,
 * and the plugin manager moves the plugin to `stale` at once, then registers
 * it again with backoff. The liveness dial for the other plugins is
 * test/liveness-dial.test.ts.
 */
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import type { HandlerContext, PluginHandler, PluginRegistration } from "../src/pluginmanager/types.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { startManager, until } from "./support/manager-harness.ts";
import { tempDir } from "./support/temp-dir.ts";

/** A handler that keeps its context and the plugins it holds, as a device plugin handler would. */
function connectionHandler() {
  const calls: string[] = [];
  const held = new Map<string, PluginRegistration>();
  let context: HandlerContext | undefined;
  const handler: PluginHandler = {
    async validatePlugin(plugin) {
      calls.push(`validate ${plugin.name}`);
    },
    async registerPlugin(plugin) {
      calls.push(`register ${plugin.name}`);
      held.set(plugin.socket, plugin);
    },
    deregisterPlugin(plugin) {
      calls.push(`deregister ${plugin.name}`);
      held.delete(plugin.socket);
    },
  };
  const factories = { generic: (_policy: unknown, given: HandlerContext) => ((context = given), handler) };
  return { calls, held, factories, lose: (socket: string, reason: string) => context!.connectionLost(held.get(socket)!, reason) };
}

test("connectionLost: the plugin is stale at once with the reason, deregistered, then registered again after backoff", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const { calls, factories, lose } = connectionHandler();
  const { status, changes } = await startManager(t, { watch: [dir], backoff: { initialMs: 20, maxMs: 20 } }, { handlers: factories });
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/p") });
  await fake.waitForNotify();
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered");

  const before = changes.length;
  lose(socket, "ListAndWatch stream ended");
  // At once, or as soon as the registration's operation has ended.
  await until(status, () => changes.length > before, "an event");
  const stale = changes[before]!.plugin;
  assert.equal(stale.state, "stale");
  assert.equal(stale.error, "ListAndWatch stream ended");
  assert.deepEqual(calls.slice(0, 3), ["validate acme.io/p", "register acme.io/p", "deregister acme.io/p"]);

  await until(status, (plugins) => plugins[0]?.state === "registered", "registered again");
  assert.deepEqual(calls.slice(3), ["validate acme.io/p", "register acme.io/p"]);
  assert.equal((await fake.waitForNotify()).registered, true);
});

test("connectionLost for a plugin the manager does not hold (never registered, or gone) changes nothing", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "p.sock");
  const { factories, lose, held } = connectionHandler();
  const { status } = await startManager(t, { watch: [dir] }, { handlers: factories });
  await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/p") });
  await until(status, (plugins) => plugins[0]?.state === "registered", "registered");
  const plugin = held.get(socket)!;
  held.set(socket, { ...plugin, endpoint: "/elsewhere.sock" });
  lose(socket, "another instance");
  held.set(path.join(dir, "unknown.sock"), { ...plugin, socket: path.join(dir, "unknown.sock") });
  lose(path.join(dir, "unknown.sock"), "unknown");
  assert.equal(status.plugins()[0]!.state, "registered");
});
