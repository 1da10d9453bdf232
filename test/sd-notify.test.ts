/**
 * Issue 12: the executable under a service manager (`Type=notify`). A real
 * NOTIFY_SOCKET (a unix datagram socket this test binds) receives READY=1
 * only once the agent is ready (its initial walk has created the watch
 * directories and its API socket serves), RELOADING=1 with MONOTONIC_USEC and
 * then READY=1 around a SIGHUP reload, and STOPPING=1 on SIGTERM; a
 * NOTIFY_SOCKET edgeplug cannot use is logged and changes nothing else.
 * The messages are sent by the system's systemd-notify (src/platform/sd-notify.ts).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import process from "node:process";
import { createHealth } from "../src/api/health.ts";
import { createLogger } from "../src/log/logger.ts";
import { serviceNotifier, SYSTEMD_NOTIFY_PATHS } from "../src/platform/sd-notify.ts";
import { startEdgeplug } from "./support/agent-process.ts";
import { sensor, startTestPlugin } from "./support/fake-plugin.ts";
import { startNotifyListener } from "./support/notify-listener.ts";
import { tempDir } from "./support/temp-dir.ts";
import { killAfter } from "./support/child-cleanup.ts";

if (!SYSTEMD_NOTIFY_PATHS.some((candidate) => fs.existsSync(candidate))) {
  throw new Error(`these tests need systemd-notify (${SYSTEMD_NOTIFY_PATHS.join(" or ")}): apt-get install systemd`);
}

/** A policy watching one directory that exists (with a plugin in it) and one the agent must create. */
function writePolicy(dir: string) {
  const existing = path.join(dir, "registry");
  const created = path.join(dir, "created", "registry");
  const apiSocket = path.join(dir, "api.sock");
  fs.mkdirSync(existing);
  const policy = path.join(dir, "policy.yaml");
  fs.writeFileSync(
    policy,
    [
      "version: 1",
      "watch:",
      `  - path: ${existing}`,
      `  - path: ${created}`,
      "handlers:",
      "  acme.io/Sensor: { kind: generic, versions: [v1] }",
      "devicePlugins: { registrationSocket: null }",
      "podResources: { socket: null }",
      `checkpoint: { path: ${path.join(dir, "state", "checkpoint")} }`,
      `api: { socket: ${apiSocket}, metrics: null }`,
      "log: { level: info, format: json }",
      "",
    ].join("\n"),
  );
  return { policy, existing, created, apiSocket };
}

function getReadyz(socketPath: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.get({ socketPath, path: "/readyz" }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.on("error", reject);
  });
}

async function startNotifiedAgent(t: TestContext) {
  const dir = tempDir(t);
  const files = writePolicy(dir);
  const plugin = await startTestPlugin(t, { socketPath: path.join(files.existing, "temp.sock"), info: sensor() });
  const listener = await startNotifyListener(path.join(dir, "notify.sock"), [files.created, files.apiSocket]);
  t.after(() => listener.close());
  const agent = startEdgeplug(["run", "--config", files.policy], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", NOTIFY_SOCKET: listener.address },
  });
  killAfter(t, agent.child);
  return { files, plugin, listener, agent };
}

test("READY=1 arrives once, after the initial walk created the watch dirs and the API serves", async (t) => {
  const { files, plugin, listener, agent } = await startNotifiedAgent(t);
  const ready = await listener.waitFor("READY");
  assert.equal(ready.fields.READY, "1");
  assert.deepEqual(ready.existed, { [files.created]: true, [files.apiSocket]: true }, "state when READY=1 arrived");
  assert.equal(await getReadyz(files.apiSocket), 200, "/readyz agrees");
  await plugin.waitForNotify((notification) => notification.registered);
  assert.deepEqual(
    listener.messages().map((message) => message.fields.READY),
    ["1"],
    "one READY=1 and nothing else before a reload or a stop",
  );
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0, agent.stderr());
});

test("SIGHUP sends RELOADING=1 with MONOTONIC_USEC, then READY=1; SIGTERM sends STOPPING=1 and exits 0", async (t) => {
  const { listener, agent } = await startNotifiedAgent(t);
  await listener.waitFor("READY");
  const seen = listener.messages().length;

  const beforeUsec = process.hrtime.bigint() / 1000n;
  agent.child.kill("SIGHUP");
  const reloading = await listener.waitFor("RELOADING", { after: seen });
  const readyAgain = await listener.waitFor("READY", { after: seen });
  const afterUsec = process.hrtime.bigint() / 1000n;
  await agent.waitForLog("policy reloaded");
  assert.equal(reloading.fields.RELOADING, "1");
  assert.match(reloading.fields.MONOTONIC_USEC ?? "", /^\d+$/);
  const stamp = BigInt(reloading.fields.MONOTONIC_USEC!);
  assert.ok(beforeUsec <= stamp && stamp <= afterUsec, `MONOTONIC_USEC ${stamp} is CLOCK_MONOTONIC between ${beforeUsec} and ${afterUsec}`);
  const order = listener.messages().slice(seen).map((message) => Object.keys(message.fields)[0]);
  assert.deepEqual(order, ["RELOADING", "READY"], `in order: ${JSON.stringify(listener.messages())}`);
  assert.equal(readyAgain.fields.READY, "1");

  const beforeStop = listener.messages().length;
  agent.child.kill("SIGTERM");
  const stopping = await listener.waitFor("STOPPING", { after: beforeStop });
  assert.equal(stopping.fields.STOPPING, "1");
  assert.equal((await agent.exited).code, 0, agent.stderr());
});

test("a NOTIFY_SOCKET edgeplug cannot use is logged once and the agent runs as without one", async (t) => {
  const dir = tempDir(t);
  const files = writePolicy(dir);
  const agent = startEdgeplug(["run", "--config", files.policy], { env: { PATH: "/usr/bin:/bin", NOTIFY_SOCKET: "relative/notify.sock" } });
  killAfter(t, agent.child);
  const warning = await agent.waitForLog("NOTIFY_SOCKET ignored: systemd will not hear that edgeplug is ready");
  assert.equal(warning.reason, "expected an absolute path or an @abstract name");
  await agent.waitForLog("edgeplug running");
  assert.equal(await getReadyz(files.apiSocket), 200);
  agent.child.kill("SIGTERM");
  assert.equal((await agent.exited).code, 0, agent.stderr());
  assert.equal(agent.logs().filter((record) => String(record.msg).includes("NOTIFY_SOCKET")).length, 1);
});

/** A logger whose records (level, msg and fields) are kept in `records`. */
function recordingLog() {
  const records: Array<Record<string, unknown> & { level: string; msg: string }> = [];
  const log = createLogger({ level: "debug", format: "json", write: (line) => void records.push(JSON.parse(line)) });
  return { log, records };
}

test("the notifier sends in call order, and READY=1 waits for the last readiness gate", async (t) => {
  const dir = tempDir(t);
  const listener = await startNotifyListener(path.join(dir, "notify.sock"));
  t.after(() => listener.close());
  const { log, records } = recordingLog();
  const notifier = serviceNotifier({ env: { NOTIFY_SOCKET: listener.address }, log, monotonicUsec: () => 123_456_789n });
  assert.ok(notifier);
  const health = createHealth({ resyncMs: 10_000, gates: ["initial-walk", "api-serving"] });
  void health.whenReady().then(() => notifier.ready());
  health.markDone("api-serving");
  // A message queued now is delivered before any READY=1 sent so far: none may have been.
  await notifier.reloading();
  const probe = await listener.waitFor("RELOADING");
  assert.deepEqual(listener.messages(), [probe], "nothing before the probe: READY=1 waits for initial-walk");
  assert.equal(probe.fields.MONOTONIC_USEC, "123456789");
  health.markDone("initial-walk");
  await listener.waitFor("READY");
  await notifier.stopping();
  await listener.waitFor("STOPPING");
  assert.deepEqual(
    listener.messages().map((message) => message.fields),
    [
      { RELOADING: "1", MONOTONIC_USEC: "123456789", STATUS: "reloading the policy" },
      { READY: "1", STATUS: "ready" },
      { STOPPING: "1", STATUS: "stopping" },
    ],
  );
  await notifier.close(1000);
  await notifier.ready();
  assert.equal(listener.messages().length, 3, "nothing is sent after close()");
  assert.deepEqual(records, [], "nothing logged");
});

test("no systemd-notify where NOTIFY_SOCKET asks for one: one error naming where it looked, and no notifier", () => {
  const { log, records } = recordingLog();
  assert.equal(serviceNotifier({ env: { NOTIFY_SOCKET: "/run/systemd/notify" }, log, helperPaths: ["/nonexistent/systemd-notify"] }), null);
  assert.equal(records.length, 1);
  assert.equal(records[0]!.level, "error");
  assert.match(records[0]!.msg, /systemd-notify is missing/);
  assert.deepEqual(records[0]!.looked, ["/nonexistent/systemd-notify"]);
  assert.equal(serviceNotifier({ env: {}, log }), null, "no NOTIFY_SOCKET: not under a service manager, nothing logged");
  assert.equal(records.length, 1);
});

test("a service manager that has gone away: the failure is logged, later messages still go out in order", async (t) => {
  const dir = tempDir(t);
  const address = path.join(dir, "notify.sock");
  const { log, records } = recordingLog();
  const notifier = serviceNotifier({ env: { NOTIFY_SOCKET: address }, log });
  assert.ok(notifier);
  await notifier.ready(); // nobody listens yet: systemd-notify fails
  assert.equal(records.length, 1, JSON.stringify(records));
  assert.equal(records[0]!.msg, "systemd notification failed");
  assert.equal(records[0]!.message, "READY=1 STATUS=ready");
  const listener = await startNotifyListener(address);
  t.after(() => listener.close());
  await notifier.stopping();
  await listener.waitFor("STOPPING");
  await notifier.close(1000);
});
