import assert from "node:assert/strict";
import { test } from "node:test";
import { testPolicy } from "../../test/support/policy.ts";
import { nameRefusal, ownerRefusal, versionRefusal } from "./admission.ts";
import type { HandlerPolicy } from "./types.ts";

const sensor = (versions: string[] | null): HandlerPolicy => ({ type: "acme.io/Sensor", kind: "generic", versions, allow: ["*"], deny: [] });

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

test("owners: a socket owned by a listed uid is admitted; another is refused naming the list", () => {
  const policy = testPolicy({ watch: ["/r"], socketOwners: [0, 1000] });
  assert.equal(ownerRefusal(policy, 1000), null);
  assert.equal(ownerRefusal(policy, 1001), "socket owned by uid 1001, not in security.socketOwners [0,1000]");
});
