/**
 * The `fleet:` section: left out it is off; given with brokers only, every
 * other key takes the schema's default (the client id the node name); `policy
 * show` writes it back to a policy that loads the same.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { policyToData } from "./effective.ts";
import { parsePolicy } from "./load.ts";
import { minimal } from "../../test/support/policy-text.ts";

test("no fleet section: the fleet link is off", () => {
  assert.equal(parsePolicy(minimal, "p.yaml").fleet, null);
});

test("a fleet section with brokers only takes every default, the client id from the node name", () => {
  const policy = parsePolicy(`${minimal}nodeName: edge-7\nfleet:\n  brokers: ["mqtt://broker", "mqtts://[::1]:8883"]\n`, "p.yaml");
  assert.deepEqual(policy.fleet, {
    brokers: ["mqtt://broker", "mqtts://[::1]:8883"],
    clientId: "edge-7",
    prefix: "edgeplug",
    qos: 1,
    keepaliveMs: 30_000,
    usernameFile: null,
    passwordFile: null,
    tls: { ca: null, cert: null, key: null },
    minIntervalMs: 1000,
    events: true,
  });
  const again = parsePolicy(stringify(policyToData(policy)), "shown.yaml");
  assert.deepEqual(again.fleet, policy.fleet);
});

test("keepalive 0 is refused; minInterval 0s is allowed", () => {
  assert.throws(
    () => parsePolicy(`${minimal}fleet: { brokers: ["mqtt://b"], keepalive: 0s }\n`, "p.yaml"),
    /fleet\.keepalive: expected a duration above 0/,
  );
  assert.equal(parsePolicy(`${minimal}fleet: { brokers: ["mqtt://b"], minInterval: 0s }\n`, "p.yaml").fleet?.minIntervalMs, 0);
});
