/**
 * The plugin manager's policy checks, end to end on real sockets: socket
 * owner, a directory's `types`, allow/deny, maxPlugins, undeclared and
 * unavailable handler types (docs/policy.md, docs/status-json.md).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { createLogger } from "../src/log/logger.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import type { FakePlugin } from "./support/fake-plugin.ts";
import { record, startManager, until } from "./support/manager-harness.ts";
import { tempDir } from "./support/temp-dir.ts";

test("a socket owned by a uid outside security.socketOwners is failed naming the uid and never dialled", async (t) => {
  const dir = tempDir(t);
  const socket = path.join(dir, "foreign.sock");
  const fake = await startTestPlugin(t, { socketPath: socket, info: sensor("acme.io/foreign") });
  fs.chownSync(socket, 4242, 4242);
  // Retries repeat the same failure, which changes no state: count them in the log.
  let retried = () => {};
  const threeAttempts = new Promise<void>((resolve) => (retried = resolve));
  const log = createLogger({
    level: "debug",
    format: "json",
    write: (line) => JSON.parse(line).attempts >= 3 && retried(),
  });
  const { status } = await startManager(t, { watch: [dir], socketOwners: [0], backoff: { initialMs: 5, maxMs: 10 } }, { log });
  await threeAttempts;
  const failed = record(status, socket)!;
  assert.equal(failed.state, "failed");
  assert.equal(failed.error, "socket owned by uid 4242, not in security.socketOwners [0]");
  assert.equal(fake.getInfoCalls(), 0, "the plugin was never asked anything");
  assert.deepEqual(fake.notifications(), []);
});

test("a directory's types: a type it does not list is refused there and accepted from another directory", async (t) => {
  const dir = tempDir(t);
  const devicesOnly = path.join(dir, "devices");
  const any = path.join(dir, "any");
  const { status } = await startManager(t, {
    watch: [{ path: devicesOnly, types: ["DevicePlugin"] }, { path: any }],
    handlers: { "acme.io/Sensor": {}, DevicePlugin: {} },
  });
  const refused = await startTestPlugin(t, { socketPath: path.join(devicesOnly, "s.sock"), info: sensor("acme.io/s") });
  const accepted = await startTestPlugin(t, { socketPath: path.join(any, "s.sock"), info: sensor("acme.io/s") });
  const expected = `plugin type acme.io/Sensor is not accepted from watch directory ${devicesOnly} (types ["DevicePlugin"])`;
  const refusal = await refused.waitForNotify();
  assert.deepEqual([refusal.registered, refusal.error], [false, expected]);
  assert.equal((await accepted.waitForNotify()).registered, true);
  await until(status, (plugins) => plugins.every((p) => p.state !== "pending"), "both attempted");
  assert.equal(record(status, refused.socketPath)!.error, expected);
  assert.equal(record(status, accepted.socketPath)!.state, "registered");
});

test("allow and deny: names outside allow or matching deny are refused and told why; deny wins", async (t) => {
  const dir = tempDir(t);
  const { status } = await startManager(t, { watch: [dir], handlers: { "acme.io/Sensor": { allow: ["acme.io/*"], deny: ["*-beta"] } } });
  const ok = await startTestPlugin(t, { socketPath: path.join(dir, "ok.sock"), info: sensor("acme.io/ok") });
  const beta = await startTestPlugin(t, { socketPath: path.join(dir, "beta.sock"), info: sensor("acme.io/x-beta") });
  const other = await startTestPlugin(t, { socketPath: path.join(dir, "other.sock"), info: sensor("other.io/y") });
  assert.equal((await ok.waitForNotify()).registered, true);
  assert.equal((await beta.waitForNotify()).error, `plugin name acme.io/x-beta is denied by handler acme.io/Sensor (deny "*-beta")`);
  assert.equal((await other.waitForNotify()).error, `plugin name other.io/y is not allowed by handler acme.io/Sensor (allow ["acme.io/*"])`);
  await until(status, (plugins) => plugins.every((p) => p.state !== "pending"), "all attempted");
  assert.deepEqual(status.plugins().map((p) => [path.basename(p.socket), p.state]), [["beta.sock", "failed"], ["ok.sock", "registered"], ["other.sock", "failed"]]);
});

test("maxPlugins: of five sockets arriving at once with a limit of two, exactly two register; a freed slot is taken by a retry", async (t) => {
  const dir = tempDir(t);
  const { status } = await startManager(t, { watch: [dir], maxPlugins: 2, backoff: { initialMs: 10, maxMs: 40 } });
  const fakes: FakePlugin[] = [];
  for (let i = 0; i < 5; i++) fakes.push(await startTestPlugin(t, { socketPath: path.join(dir, `.p${i}.sock`), info: sensor(`acme.io/p${i}`) }));
  // All five appear in the same tick.
  for (let i = 0; i < 5; i++) fs.renameSync(path.join(dir, `.p${i}.sock`), path.join(dir, `p${i}.sock`));
  await until(status, (plugins) => plugins.length === 5 && plugins.every((p) => p.state !== "pending"), "five attempted");
  const registered = status.plugins().filter((p) => p.state === "registered");
  const failed = status.plugins().filter((p) => p.state === "failed");
  assert.equal(registered.length, 2);
  assert.equal(failed.length, 3);
  for (const p of failed) assert.equal(p.error, "maxPlugins limit of 2 reached");

  const leaving = fakes.findIndex((f) => f.notifications().some((n) => n.registered));
  await fakes[leaving]!.stop();
  fs.unlinkSync(path.join(dir, `p${leaving}.sock`));
  await until(status, (plugins) => plugins.length === 4 && plugins.filter((p) => p.state === "registered").length === 2, "a retry took the freed slot");
  assert.equal(status.plugins().filter((p) => p.state === "failed").length, 2);
});

test("an undeclared type and a built-in type not in this build are failed; the unavailable handler is logged once", async (t) => {
  const dir = tempDir(t);
  const lines: string[] = [];
  const log = createLogger({ level: "info", format: "json", write: (line) => lines.push(line) });
  const { status } = await startManager(t, { watch: [dir], handlers: { "acme.io/Sensor": {}, DRAPlugin: {} } }, { log, without: ["DRAPlugin"] });
  const gpus = [];
  for (let i = 0; i < 3; i++) gpus.push(await startTestPlugin(t, { socketPath: path.join(dir, `gpu${i}.sock`), info: { type: "DRAPlugin", name: "acme.io/gpu", versions: ["v1.DRAPlugin"] } }));
  const unknown = await startTestPlugin(t, { socketPath: path.join(dir, "unknown.sock"), info: { type: "acme.io/Unknown", name: "acme.io/u" } });
  for (const gpu of gpus) assert.equal((await gpu.waitForNotify()).error, "handler DRAPlugin is not available in this build");
  assert.equal((await unknown.waitForNotify()).error, `RegisterPlugin error -- no handler registered for plugin type: acme.io/Unknown at socket ${unknown.socketPath}`);
  await until(status, (plugins) => plugins.every((p) => p.state === "failed"), "all failed");
  const unavailable = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "handler not available in this build");
  assert.deepEqual(unavailable.map((entry) => [entry.level, entry.type]), [["warn", "DRAPlugin"]]);
  const failures = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "plugin registration failed" && entry.socket === unknown.socketPath);
  assert.equal(failures.length, 1, "one warning per outcome, with the reason");
  assert.equal(failures[0].reason, "no_handler");
  assert.match(failures[0].error, /no handler registered/);
});
