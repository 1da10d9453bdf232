import { test } from "node:test";
import assert from "node:assert/strict";
import { buildCommit, EDGEPLUG_VERSION } from "../platform/build-info.ts";
import { create, toJson } from "@bufbuild/protobuf";
import { ResourceStatusSchema, StatusResponseSchema } from "../gen/edgeplug/v1/agent_pb.ts";
import { pendingRecord, type PluginRecord } from "./plugin-status.ts";
import { age, buildStatus, statusToJson, statusToText } from "./status.ts";

const discoveredAt = new Date("2026-11-30T12:00:00.000Z");

function record(overrides: Partial<PluginRecord>): PluginRecord {
  return { ...pendingRecord("/r/p.sock", discoveredAt), ...overrides };
}

const registered = record({
  socket: "/r/gpu.sock",
  type: "DevicePlugin",
  name: "acme.io/gpu",
  endpoint: "/r/gpu.sock",
  versions: ["v1beta1"],
  state: "registered",
  attempts: 1,
  registeredAt: new Date("2026-11-30T12:00:01.000Z"),
  lastAttemptAt: discoveredAt,
});
const refused = record({
  socket: "/r/x.sock",
  type: "other.io/Thing",
  name: "other.io/x",
  endpoint: "/r/x.sock",
  state: "failed",
  attempts: 2,
  error: "RegisterPlugin error -- no handler registered for plugin type: other.io/Thing at socket /r/x.sock",
  reason: "no_handler",
});

test("ok is derived: every plugin registered and every resource connected", () => {
  assert.equal(buildStatus({ node: "n", plugins: [] }).ok, true, "nothing known is ok");
  assert.equal(buildStatus({ node: "n", plugins: [registered] }).ok, true);
  assert.equal(buildStatus({ node: "n", plugins: [registered, refused] }).ok, false);
  const disconnected = create(ResourceStatusSchema, { name: "acme.io/gpu", connected: false });
  assert.equal(buildStatus({ node: "n", plugins: [registered], resources: [disconnected] }).ok, false);
});

test("the CLI's JSON is docs/status-json.md's shape: timestamps as RFC 3339, absent values as null, the reason beside the error", () => {
  const json = statusToJson(buildStatus({ node: "edge-01", plugins: [registered, record({})] }));
  assert.deepEqual(
    Object.entries(json.plugins[0]!),
    Object.entries({
      socket: "/r/gpu.sock",
      type: "DevicePlugin",
      name: "acme.io/gpu",
      endpoint: "/r/gpu.sock",
      versions: ["v1beta1"],
      state: "registered",
      attempts: 1,
      registeredAt: "2026-11-30T12:00:01Z",
      error: null,
      discoveredAt: "2026-11-30T12:00:00Z",
      lastAttemptAt: "2026-11-30T12:00:00Z",
      reason: null,
      csi: null,
      dra: null,
    }),
  );
  const pending = json.plugins[1]!;
  assert.deepEqual([pending.type, pending.name, pending.endpoint, pending.versions, pending.registeredAt], [null, null, null, [], null]);
  const failed = statusToJson(buildStatus({ node: "n", plugins: [refused] })).plugins[0]!;
  assert.deepEqual([failed.state, failed.reason], ["failed", "no_handler"]);
  assert.deepEqual([json.resources, json.allocations, json.ok, json.node], [[], [], false, "edge-01"]);
});

test("without its nulls the CLI's JSON is the API's canonical proto3 JSON, member for member", () => {
  const status = buildStatus({ node: "n", plugins: [registered, refused, record({ socket: "/r/new.sock" })] });
  const withoutNulls = JSON.parse(JSON.stringify(statusToJson(status), (_key, value) => (value === null ? undefined : value)));
  assert.equal(JSON.stringify(withoutNulls), JSON.stringify(toJson(StatusResponseSchema, status, { alwaysEmitImplicit: true })));
});

test("the text table has one row per socket, '-' for what GetInfo has not said, and the error last", () => {
  const now = new Date(discoveredAt.getTime() + 75_000);
  const text = statusToText(buildStatus({ node: "edge-01", plugins: [registered, refused, record({ socket: "/r/new.sock" })] }), now);
  const lines = text.split("\n");
  assert.equal(lines[0], "node edge-01: NOT OK");
  assert.equal(lines[1], `agent edgeplug ${EDGEPLUG_VERSION} (${buildCommit()})`);
  assert.match(lines[3]!, /^STATE\s+TYPE\s+NAME\s+AGE\s+ATTEMPTS\s+SOCKET\s+ERROR$/);
  assert.match(lines[4]!, /^registered\s+DevicePlugin\s+acme\.io\/gpu\s+1m15s\s+1\s+\/r\/gpu\.sock$/);
  assert.match(lines[5]!, /^failed\s+other\.io\/Thing\s+other\.io\/x\s+1m15s\s+2\s+\/r\/x\.sock\s+RegisterPlugin error -- no handler/);
  assert.match(lines[6]!, /^pending\s+-\s+-\s+1m15s\s+0\s+\/r\/new\.sock$/);
  assert.equal(statusToText(buildStatus({ node: "n", plugins: [] })), `node n: ok\nagent edgeplug ${EDGEPLUG_VERSION} (${buildCommit()})\n\nno plugin sockets found\n`);
});

test("names and errors from plugins cannot forge rows or move the cursor in the text table", () => {
  const forged = record({ name: "evil\nregistered  x  y", error: "\u001b[2J\rbell\u0007", state: "failed", reason: "policy" });
  const text = statusToText(buildStatus({ node: "n\u001b[31m", plugins: [forged] }));
  assert.equal(text.split("\n").length, 6, "node line, version line, blank, header, one row, final newline");
  // deno-lint-ignore no-control-regex
  assert.doesNotMatch(text, /[\u0000-\u0008\u000b-\u001f\u007f]/, "no raw control character but the newlines");
});

test("ages read like kubectl's", () => {
  const at = (seconds: number) => age(discoveredAt, new Date(discoveredAt.getTime() + seconds * 1000));
  assert.deepEqual([at(-5), at(45), at(192), at(5 * 3600 + 180), at(2 * 86400 + 4 * 3600)], ["0s", "45s", "3m12s", "5h3m", "2d4h"]);
});
