import { test } from "node:test";
import assert from "node:assert/strict";
import type { Expectations } from "../api/report.ts";
import type { PluginRecord } from "../api/plugin-status.ts";
import type { FailureReason } from "../pluginmanager/types.ts";
import { isPermanentRefusal, outcomeIsKnown } from "./reconcile-once.ts";

function plugin(name: string | null, state: PluginRecord["state"], reason: FailureReason | null = null): PluginRecord {
  return {
    socket: `/r/${name ?? "unnamed"}.sock`, type: null, name, endpoint: null, versions: [], state, attempts: 1, registeredAt: null,
    error: reason === null ? null : `refused: ${reason}`, reason, discoveredAt: new Date(0), lastAttemptAt: null,
  };
}

const every: Expectations = { expect: null, require: [], strict: false };

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
  const expectTwo: Expectations = { expect: 2, require: [], strict: false };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "registered"), plugin("c", "failed", "no_handler")], expectTwo), true);
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("c", "failed", "no_handler")], expectTwo), false, "sockets may still appear");
  const requireB: Expectations = { expect: null, require: ["b"], strict: false };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("b", "failed", "policy")], requireB), true);
  assert.equal(outcomeIsKnown([plugin("b", "failed", "policy"), plugin(null, "stale", "stale")], requireB), false, "an unnamed socket may turn out to be b");
  assert.equal(outcomeIsKnown([plugin("b", "failed", "get_info")], requireB), false, "b may still register");
  const strict: Expectations = { expect: 1, require: [], strict: true };
  assert.equal(outcomeIsKnown([plugin("a", "registered"), plugin("c", "failed", "get_info")], strict), false, "--strict waits for every socket");
});
