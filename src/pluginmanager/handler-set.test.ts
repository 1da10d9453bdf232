import assert from "node:assert/strict";
import { test } from "node:test";
import type { HandlerPolicy } from "../policy/types.ts";
import { testPolicy } from "../../test/support/policy.ts";
import { HandlerSet, nameRefusal, versionRefusal } from "./handler-set.ts";
import type { HandlerContext, PluginHandler } from "./types.ts";

const sensor = (versions: string[] | null): HandlerPolicy => ({ type: "acme.io/Sensor", kind: "generic", versions, allow: ["*"], deny: [] });
const idle: PluginHandler = { validatePlugin: async () => {}, registerPlugin: async () => {}, deregisterPlugin: () => {} };

test("versions: any advertised version in the policy's list is enough; none is refused naming both lists", () => {
  assert.equal(versionRefusal(sensor(["v1", "v2"]), ["v0", "v2"]), null);
  assert.equal(
    versionRefusal(sensor(["v1", "v2"]), ["v3"]),
    `none of the plugin's versions ["v3"] is accepted by handler acme.io/Sensor (versions ["v1","v2"])`,
  );
});

test("versions: null accepts any, even none", () => {
  assert.equal(versionRefusal(sensor(null), []), null);
  assert.equal(versionRefusal(sensor(null), ["anything"]), null);
});

test("names: deny wins over allow, and each refusal names its rule", () => {
  const policy = { ...sensor(null), allow: ["acme.io/*"], deny: ["*beta"] };
  assert.equal(nameRefusal(policy, "acme.io/alpha"), null);
  assert.equal(nameRefusal(policy, "acme.io/beta"), `plugin name acme.io/beta is denied by handler acme.io/Sensor (deny "*beta")`);
  assert.equal(nameRefusal(policy, "other.io/x"), `plugin name other.io/x is not allowed by handler acme.io/Sensor (allow ["acme.io/*"])`);
});

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
