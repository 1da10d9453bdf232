import { test } from "node:test";
import assert from "node:assert/strict";
import type { PluginRecord } from "./plugin-status.ts";
import { buildReport, type Expectations, reportToText } from "./report.ts";
import { buildStatus } from "./status.ts";

const startedAt = new Date("2026-11-30T12:00:00.000Z");
const finishedAt = new Date("2026-11-30T12:00:00.250Z");

function plugin(socket: string, name: string | null, state: PluginRecord["state"], failure?: Pick<PluginRecord, "reason" | "error">): PluginRecord {
  return {
    socket,
    type: name === null ? null : "acme.io/Sensor",
    name,
    endpoint: name === null ? null : socket,
    versions: [],
    state,
    attempts: 1,
    registeredAt: null,
    error: failure?.error ?? null,
    reason: failure?.reason ?? null,
    discoveredAt: startedAt,
    lastAttemptAt: startedAt,
  };
}

const good = plugin("/r/good.sock", "acme.io/good", "registered");
const refused = plugin("/r/stray.sock", "acme.io/stray", "failed", { reason: "policy", error: "plugin name acme.io/stray is not allowed" });
const none: Expectations = { expect: null, require: [], resources: {}, strict: false };

function report(plugins: PluginRecord[], expectations: Expectations) {
  return buildReport(buildStatus({ node: "n", plugins }), expectations, startedAt, finishedAt);
}

test("without expectations every socket counts; the report adds schema, times and what failed with its reason", () => {
  const result = report([good, refused], none);
  assert.deepEqual([result.schema, result.ok, result.verdictBy, result.startedAt, result.durationMs], [1, false, "every socket", "2026-11-30T12:00:00.000Z", 250]);
  assert.deepEqual(result.failed, [
    { socket: "/r/stray.sock", type: "acme.io/Sensor", name: "acme.io/stray", state: "failed", error: "plugin name acme.io/stray is not allowed", reason: "policy" },
  ]);
  assert.equal(report([good], none).ok, true);
});

test("with expectations the verdict follows them, failed sockets are still listed; --strict counts every socket", () => {
  const met = report([good, refused], { expect: 1, require: ["acme.io/good"], resources: {}, strict: false });
  assert.deepEqual([met.ok, met.verdictBy, met.expectations.unmet, met.failed.length], [true, "expectations", [], 1]);
  const strict = report([good, refused], { expect: 1, require: [], resources: {}, strict: true });
  assert.deepEqual([strict.ok, strict.verdictBy], [false, "every socket"]);
  const short = report([good], { expect: 2, require: [], resources: {}, strict: false });
  assert.deepEqual([short.ok, short.expectations.unmet], [false, ["expected at least 2 registered plugins, found 1"]]);
});

test("an unmet --require quotes the refusal of the socket that advertises the name, or says none does", () => {
  const result = report([good, refused], { expect: null, require: ["acme.io/stray", "acme.io/absent"], resources: {}, strict: false });
  assert.deepEqual(result.expectations.unmet, [
    "required plugin acme.io/stray is not registered (/r/stray.sock failed: plugin name acme.io/stray is not allowed)",
    "required plugin acme.io/absent is not registered (no socket advertises it)",
  ]);
});

test("a socket still pending has no reason and reads as still pending", () => {
  assert.deepEqual(report([plugin("/r/slow.sock", null, "pending")], none).failed, [
    { socket: "/r/slow.sock", type: null, name: null, state: "pending", error: "still pending", reason: null },
  ]);
});

test("the text report ends with one verdict line, and says when the expectations let failed sockets pass", () => {
  const status = buildStatus({ node: "n", plugins: [good, refused] });
  const text = reportToText(buildReport(status, { expect: 1, require: [], resources: {}, strict: false }, startedAt, finishedAt), status);
  const lines = text.trimEnd().split("\n");
  assert.ok(lines.includes("failed: /r/stray.sock (acme.io/stray): plugin name acme.io/stray is not allowed"));
  assert.equal(lines.at(-1), "reconcile-once ok (failed sockets ignored: the expectations decide; --strict counts them) in 250 ms");
  assert.match(lines[0]!, /^node n: ok$/, "the table's verdict is the report's");
  const failing = reportToText(buildReport(status, none, startedAt, finishedAt), status).trimEnd().split("\n");
  assert.equal(failing.at(-1), "reconcile-once FAILED in 250 ms");
});

test("a run that left kubelet.sock to a daemon says that the daemon's device plugins are out of its sight", () => {
  const status = buildStatus({ node: "n", plugins: [good] });
  const expectations: Expectations = { expect: null, require: [], resources: { "example.com/dev": 2 }, strict: false };
  const seen = { registered: [], silent: [], seen: new Set<string>(), registrationSocket: null, timeoutMs: 1000 };
  const held = buildReport(status, expectations, startedAt, finishedAt, { ...seen, registrationSocketHeldBy: "the edgeplug daemon serving /run/edgeplug/api.sock" });
  assert.equal(held.registrationSocketHeldBy, "the edgeplug daemon serving /run/edgeplug/api.sock");
  const lines = reportToText(held, status).trimEnd().split("\n");
  const unmet = lines.findIndex((line) => line.startsWith("unmet: expected resource example.com/dev"));
  assert.ok(unmet > 0, lines.join("\n"));
  assert.match(
    lines[unmet + 1]!,
    /^note: kubelet\.sock is served by the edgeplug daemon serving \/run\/edgeplug\/api\.sock, not by this run: device plugins registered there are not seen or counted here/,
  );
  assert.equal(buildReport(status, expectations, startedAt, finishedAt, seen).registrationSocketHeldBy, null);
});
