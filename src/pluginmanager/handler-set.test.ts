import assert from "node:assert/strict";
import { test } from "node:test";
import { testPolicy } from "../../test/support/policy.ts";
import { HandlerSet } from "./handler-set.ts";
import type { HandlerContext, PluginHandler } from "./types.ts";

const idle: PluginHandler = { validatePlugin: async () => {}, registerPlugin: async () => {}, deregisterPlugin: () => {} };

test("each factory gets its handler policy and the manager's context; a type without a factory is unavailable", () => {
  const context: HandlerContext = { connectionLost() {} };
  const seen: Array<[string, HandlerContext]> = [];
  const policy = testPolicy({ watch: ["/r"], handlers: { "acme.io/Sensor": {}, DevicePlugin: {} } });
  const set = new HandlerSet(policy, { generic: (handlerPolicy, given) => (seen.push([handlerPolicy.type, given]), idle) }, context);
  assert.deepEqual(seen, [["acme.io/Sensor", context]]);
  assert.equal(set.get("acme.io/Sensor")?.handler, idle);
  assert.equal(set.get("DevicePlugin")?.unavailable, "handler DevicePlugin is not available in this build");
  const reloaded = new HandlerSet(policy, { generic: () => assert.fail("an unchanged handler policy keeps its handler") }, context, set);
  assert.equal(reloaded.get("acme.io/Sensor")?.handler, idle);
});
