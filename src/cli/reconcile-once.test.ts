import { test } from "node:test";
import assert from "node:assert/strict";
import type { Expectations } from "../api/report.ts";
import type { PluginRecord } from "../api/plugin-status.ts";
import type { FailureReason } from "../pluginmanager/types.ts";
import { isPermanentRefusal, outcomeIsKnown, silentSockets } from "./reconcile-once.ts";

function plugin(name: string | null, state: PluginRecord["state"], reason: FailureReason | null = null): PluginRecord {
  return {
    socket: `/r/${name ?? "unnamed"}.sock`,
    type: null,
    name,
    endpoint: null,
    versions: [],
    state,
    attempts: 1,
    registeredAt: null,
    error: reason === null ? null : `refused: ${reason}`,
    reason,
    discoveredAt: new Date(0),
    lastAttemptAt: null,
  };
}

const every: Expectations = { expect: null, require: [], resources: {}, strict: false };

test("refusals retrying cannot fix are permanent; the others may still register", () => {
  for (const reason of ["no_handler", "handler_unavailable", "policy", "socket_owner", "invalid_info"] as const) {
    assert.equal(isPermanentRefusal(plugin("p", "failed", reason)), true, reason);
  }
  for (const reason of ["stale", "get_info", "max_plugins", "validation", "register", "notify", "socket_missing"] as const) {
    assert.equal(isPermanentRefusal(plugin("p", "failed", reason)), false, reason);
  }
  assert.equal(isPermanentRefusal(plugin("p", "pending", "policy")), false, "a plugin back to pending after a reload is retried");
});

test("every socket counting: known once all registered or one refused for good, never while one is pending", () => {
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "registered")], every), true);
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "pending")], every), false);
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "failed", "get_info")], every), false, "it may still register");
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "failed", "no_handler")], every), true);
  assert.equal(outcomeIsKnown([plugin("a", "failed", "no_handler"), plugin("b", "pending")], every), false, "each socket has its first answer first");
});

test("with expectations: met ends the wait; a count never fails early; a required name refused for good does", () => {
  const expectTwo: Expectations = { expect: 2, require: [], resources: {}, strict: false };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "registered"), plugin("c", "failed", "no_handler")], expectTwo), true);
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("c", "failed", "no_handler")], expectTwo), false, "sockets may still appear");
  const requireB: Expectations = { expect: null, require: ["b"], resources: {}, strict: false };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "failed", "policy")], requireB), true);
  assert.equal(outcomeIsKnown([plugin("b", "failed", "policy"), plugin(null, "stale", "stale")], requireB), false, "an unnamed socket may turn out to be b");
  assert.equal(outcomeIsKnown([plugin("b", "failed", "get_info")], requireB), false, "b may still register");
  const strict: Expectations = { expect: 1, require: [], resources: {}, strict: true };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("c", "failed", "get_info")], strict), false, "--strict waits for every socket");
});

test("device plugins on kubelet.sock count for --expect and --require; --expect-resource wants the resource connected with enough healthy devices", () => {
  const resource = (name: string, healthy: number, connected = true) => ({ name, healthy: Array.from({ length: healthy }, (_, i) => `d${i}`), connected }) as never;
  const expectTwo: Expectations = { expect: 2, require: ["example.com/dev"], resources: {}, strict: false };
  assert.equal(outcomeIsKnown([plugin("a", "registered")], expectTwo), false);
  assert.equal(outcomeIsKnown([plugin("a", "registered")], expectTwo, { kubeletPlugins: ["example.com/dev"], resources: [] }), true);
  const devTwo: Expectations = { expect: null, require: [], resources: { "example.com/dev": 2 }, strict: false };
  assert.equal(outcomeIsKnown([], devTwo, { kubeletPlugins: [], resources: [resource("example.com/dev", 1)] }), false);
  assert.equal(outcomeIsKnown([], devTwo, { kubeletPlugins: [], resources: [resource("example.com/dev", 2, false)] }), false, "a disconnected resource has no healthy devices");
  assert.equal(outcomeIsKnown([], devTwo, { kubeletPlugins: [], resources: [resource("example.com/dev", 3)] }), true);
});

test("a socket found live at the start is silent until as many plugins have registered on kubelet.sock", () => {
  assert.deepEqual(silentSockets(["/dp/a.sock", "/dp/b.sock"], [{ socket: "/dp/a.sock" }]), ["/dp/b.sock"]);
  assert.deepEqual(silentSockets(["/dp/a.sock"], [{ socket: "/dp/a-2.sock" }]), [], "a plugin may come back on a socket of another name");
});
