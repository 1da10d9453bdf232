/**
 * What a plugin says of itself is bounded (docs/api.md, "What plugins send";
 * PLUGIN_INFO_LIMITS): a name, type, endpoint or versions out of bounds is
 * refused as `invalid_info`, the plugin is told why, nothing of it is kept,
 * and the agent goes on serving. A GetInfo answer over 64 KiB is not read.
 */
import assert from "node:assert/strict";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";
import { buildStatus, statusToJson, statusToText } from "../src/api/status.ts";
import { PLUGIN_INFO_LIMITS } from "../src/pluginmanager/registration-client.ts";
import { REGISTRATION_ATTEMPTS_AT_ONCE } from "../src/pluginmanager/registration.ts";
import { runEdgeplug, startDaemon } from "./support/agent-process.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { record, startManager, until } from "./support/manager-harness.ts";
import { tempDir } from "./support/temp-dir.ts";

const MiB = 1024 * 1024;

test("each bound: one byte past it is refused naming the field, exactly at it is registered", async (t) => {
  const dir = tempDir(t);
  const { status } = await startManager(t, { watch: [dir], handlers: { "acme.io/Sensor": {}, [`acme.io/${"T".repeat(PLUGIN_INFO_LIMITS.typeBytes - 8)}`]: {} } });
  const limits = PLUGIN_INFO_LIMITS;
  const longType = `acme.io/${"T".repeat(limits.typeBytes - 8)}`;
  const cases = {
    name: { type: "acme.io/Sensor", name: "n".repeat(limits.nameBytes + 1) },
    type: { type: longType + "T", name: "acme.io/t" },
    endpoint: { type: "acme.io/Sensor", name: "acme.io/e", endpoint: "/" + "e".repeat(limits.endpointBytes) },
    count: { type: "acme.io/Sensor", name: "acme.io/c", versions: Array.from({ length: limits.versions + 1 }, (_, i) => `v${i}`) },
    version: { type: "acme.io/Sensor", name: "acme.io/v", versions: ["v1", "v".repeat(limits.versionBytes + 1)] },
    "at every bound": {
      type: longType,
      name: "n".repeat(limits.nameBytes),
      endpoint: "/" + "e".repeat(limits.endpointBytes - 1),
      versions: Array.from({ length: limits.versions }, (_, i) => `${i}`.padEnd(limits.versionBytes, "v")),
    },
  };
  const fakes = new Map<string, Awaited<ReturnType<typeof startTestPlugin>>>();
  for (const [label, info] of Object.entries(cases)) {
    fakes.set(label, await startTestPlugin(t, { socketPath: path.join(dir, `${label.replaceAll(" ", "-")}.sock`), info }));
  }
  await until(status, (plugins) => plugins.length === 6 && plugins.every((p) => p.state !== "pending"), "every attempt ended");
  const expected: Record<string, RegExp> = {
    name: /PluginInfo\.name is 318 bytes, more than 317/,
    type: /PluginInfo\.type is 318 bytes, more than 317/,
    endpoint: /PluginInfo\.endpoint is 108 bytes, more than 107/,
    count: /PluginInfo\.supported_versions has 65 entries, more than 64/,
    version: /PluginInfo\.supported_versions\[1\] is 129 bytes, more than 128/,
  };
  for (const [label, pattern] of Object.entries(expected)) {
    const fake = fakes.get(label)!;
    const refused = record(status, fake.socketPath)!;
    assert.deepEqual([refused.state, refused.reason, refused.name, refused.versions], ["failed", "invalid_info", null, []], label);
    assert.match(refused.error!, pattern, label);
    const told = await fake.waitForNotify();
    assert.deepEqual([told.registered, told.error], [false, refused.error], `${label}: the plugin is told why`);
  }
  const atBounds = record(status, fakes.get("at every bound")!.socketPath)!;
  assert.deepEqual([atBounds.state, atBounds.name?.length, atBounds.versions.length], ["registered", limits.nameBytes, limits.versions]);
});

test("a 15 MiB name and 100k versions are not read: refused at once, told why, and the agent keeps registering and reporting", async (t) => {
  const dir = tempDir(t);
  // grpc-js takes a while to encode 15 MiB on a loaded machine: the deadline must not be what ends the attempt.
  const { status } = await startManager(t, { watch: [dir], timeouts: { getInfoMs: 30_000 } });
  const huge = await startTestPlugin(t, { socketPath: path.join(dir, "huge-name.sock"), info: { type: "acme.io/Sensor", name: "x".repeat(15 * MiB) } });
  const many = await startTestPlugin(t, {
    socketPath: path.join(dir, "many-versions.sock"),
    info: { type: "acme.io/Sensor", name: "acme.io/many", versions: Array.from({ length: 100_000 }, (_, i) => `v${i}`) },
  });
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "good.sock"), info: sensor("acme.io/good") });
  await until(status, (plugins) => plugins.length === 3 && plugins.every((p) => p.state !== "pending"), "every attempt ended");
  for (const fake of [huge, many]) {
    const refused = record(status, fake.socketPath)!;
    assert.deepEqual([refused.state, refused.reason, refused.name], ["failed", "invalid_info", null]);
    assert.match(refused.error!, /invalid plugin info: the GetInfo answer at socket .* is larger than 64 KiB/);
    assert.equal((await fake.waitForNotify()).error, refused.error, "told on the same connection");
  }
  assert.equal(record(status, good.socketPath)!.state, "registered");
  const shown = buildStatus({ node: "n", plugins: status.plugins() });
  assert.ok(statusToText(shown).length < 4096, "the text status stays small");
  assert.ok(JSON.stringify(statusToJson(shown)).length < 4096);
});

test("dist/edgeplug: with a 15 MiB name and 100k versions around, `status` answers at once and names the refusal", async (t) => {
  const { policy, agent } = await startDaemon(t, { reconcile: "  backoff: { initial: 50ms, max: 500ms }\n  timeouts: { getInfo: 30s }" });
  const huge = await startTestPlugin(t, { socketPath: path.join(policy.registry, "huge.sock"), info: { type: "acme.io/Sensor", name: "x".repeat(15 * MiB) } });
  const many = await startTestPlugin(t, {
    socketPath: path.join(policy.registry, "many.sock"),
    info: { type: "acme.io/Sensor", name: "acme.io/many", versions: Array.from({ length: 100_000 }, (_, i) => `v${i}`) },
  });
  await huge.waitForNotify();
  await many.waitForNotify();
  const good = await startTestPlugin(t, { socketPath: path.join(policy.registry, "good.sock"), info: sensor("acme.io/good") });
  assert.equal((await good.waitForNotify()).registered, true, "the agent still registers plugins");
  const status = await runEdgeplug(["status", "--api", policy.apiSocket]);
  assert.equal(status.code, 1, status.stderr);
  assert.equal(status.stdout.match(/^failed .*invalid plugin info: the GetInfo answer at socket .* is larger than 64 KiB$/gm)?.length, 2, status.stdout);
  assert.ok(status.stdout.length < 4096);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0);
});

test("a plugin's error text is kept to its first 1,024 characters in status, events and what the plugin is told", async (t) => {
  const dir = tempDir(t);
  const { status } = await startManager(t, { watch: [dir] });
  const chatty = await startTestPlugin(t, { socketPath: path.join(dir, "chatty.sock"), info: sensor("acme.io/chatty"), getInfoError: `boom ${"y".repeat(20_000)}` });
  await until(status, (plugins) => plugins.length === 1 && plugins[0]!.state === "failed", "the attempt failed");
  const refused = record(status, chatty.socketPath)!;
  assert.equal(refused.reason, "get_info");
  assert.match(refused.error!, /^RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket .*, err: .*boom y+\.\.\. \(\d+ more characters\)$/);
  assert.ok(refused.error!.length < 1300, `${refused.error!.length} characters`);
  assert.equal((await chatty.waitForNotify()).error, refused.error);
});

test("sockets that accept and never answer hold at most REGISTRATION_ATTEMPTS_AT_ONCE attempts; a plugin that answers still registers", async (t) => {
  const dir = tempDir(t);
  const silentCount = REGISTRATION_ATTEMPTS_AT_ONCE + 12;
  let opened = 0;
  // Taken when the first attempt timed out, before any attempt could take its slot.
  let openedInFirstWave: number | undefined;
  const held = new Set<net.Socket>();
  const servers: net.Server[] = [];
  t.after(() => {
    for (const connection of held) connection.destroy();
    for (const server of servers) server.close();
  });
  for (let i = 0; i < silentCount; i++) {
    // Accepts and never sends the HTTP/2 settings: each attempt waits out its dial timeout.
    const server = net.createServer((connection) => {
      // Read, so that the agent's close is seen as it happens.
      connection.resume();
      held.add(connection);
      opened++;
      connection.on("close", () => held.delete(connection));
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(path.join(dir, `silent-${i}.sock`), resolve));
  }
  const { status } = await startManager(t, { watch: [dir], timeouts: { dialMs: 1500, getInfoMs: 5000 } });
  status.subscribe(() => {
    if (openedInFirstWave === undefined && status.plugins().some((plugin) => plugin.state === "failed")) openedInFirstWave = opened;
  });
  await until(status, (plugins) => plugins.length === silentCount, "every silent socket discovered");
  const good = await startTestPlugin(t, { socketPath: path.join(dir, "good.sock"), info: sensor("acme.io/good") });
  await until(status, () => record(status, good.socketPath)?.state === "registered", "the answering plugin registered");
  assert.equal(openedInFirstWave, REGISTRATION_ATTEMPTS_AT_ONCE, "attempts beyond the limit waited for a slot instead of dialling");
  const timedOut = record(status, path.join(dir, "silent-0.sock"))!;
  assert.match(timedOut.error!, /no HTTP\/2 handshake from .*silent-0\.sock within 1500 ms \(connect timeout\)$/, "the error names the dial timeout, not GetInfo's");
});
