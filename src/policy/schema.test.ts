import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { Ajv } from "ajv";
import { defaultPolicyFile, defaultPolicySource, validatorFile, validatorSource } from "../../scripts/policy-artifacts.ts";
import { DURATION_PATTERN } from "./duration.ts";
import { GENERIC_HANDLER_SCHEMA, POLICY_AJV_OPTIONS, POLICY_DURATION_PATTERN, POLICY_SCHEMA } from "./schema.ts";
import { validatePolicyData } from "./validator.ts";

type Schema = Record<string, unknown>;

/** Every object-typed schema node with its path, the root included. */
function objectNodes(schema: Schema, at = "(root)"): [string, Schema][] {
  const found: [string, Schema][] = [];
  const types = ([] as unknown[]).concat(schema.type);
  if (types.includes("object")) found.push([at, schema]);
  for (const [key, child] of Object.entries((schema.properties as Record<string, Schema>) ?? {})) {
    found.push(...objectNodes(child, `${at}.${key}`));
  }
  if (typeof schema.items === "object") found.push(...objectNodes(schema.items as Schema, `${at}[]`));
  if (typeof schema.additionalProperties === "object") {
    found.push(...objectNodes(schema.additionalProperties as Schema, `${at}.*`));
  }
  return found;
}

test("the schema is a valid draft-07 schema and compiles with ajv in strict mode", () => {
  const ajv = new Ajv({ ...POLICY_AJV_OPTIONS, validateSchema: true, logger: false });
  assert.equal(ajv.validateSchema(POLICY_SCHEMA), true, ajv.errorsText());
  assert.equal(typeof ajv.compile(POLICY_SCHEMA), "function");
});

test("the precompiled validator and config/default.yaml are what scripts/generate-policy.ts makes of the schema", async () => {
  assert.equal(fs.readFileSync(validatorFile, "utf8"), validatorSource(), "run: node scripts/generate-policy.ts");
  assert.equal(fs.readFileSync(defaultPolicyFile, "utf8"), await defaultPolicySource(), "run: node scripts/generate-policy.ts");
});

test("the validator fills every default into a minimal policy, sections left out included", () => {
  // The validator fills defaults in place: these are the fields read back below.
  const data: { version: number; watch: { path: string; recursive?: boolean }[]; reconcile: object; handlers?: Record<string, unknown>; api?: unknown } = {
    version: 1,
    watch: [{ path: "/x" }],
    reconcile: { backoff: { max: "1m" } },
  };
  assert.deepEqual(validatePolicyData(data), []);
  assert.equal(data.watch[0]!.recursive, true);
  assert.deepEqual(data.reconcile, {
    resync: "10s",
    backoff: { initial: "500ms", max: "1m" },
    timeouts: { dial: "10s", getInfo: "1s", notify: "5s" },
    liveness: { interval: "0s" },
  });
  assert.deepEqual(data.handlers?.CSIPlugin, { allow: ["*"], deny: [] });
  assert.deepEqual(data.api, { socket: "/run/edgeplug/api.sock", socketGroup: null, metrics: null });
});

test("every property of the schema has a description", () => {
  assert.ok(typeof POLICY_SCHEMA.description === "string");
  for (const [at, node] of objectNodes(POLICY_SCHEMA)) {
    for (const [key, child] of Object.entries((node.properties as Record<string, Schema>) ?? {})) {
      assert.ok(typeof child.description === "string" && child.description.length > 10, `${at}.${key} has no description`);
    }
  }
});

test("unknown keys are refused everywhere; only handlers takes open keys, each a generic handler", () => {
  const nodes = objectNodes(POLICY_SCHEMA);
  assert.ok(nodes.length >= 12, `only ${nodes.length} object nodes found`);
  for (const [at, node] of nodes) {
    if (at === "(root).handlers") {
      assert.equal(node.additionalProperties, GENERIC_HANDLER_SCHEMA);
    } else {
      assert.equal(node.additionalProperties, false, `${at} accepts unknown keys`);
    }
  }
});

test('durations are checked with duration.ts\'s pattern, and "0" is a duration', () => {
  assert.ok(POLICY_DURATION_PATTERN.includes(DURATION_PATTERN));
  const policy = (gracePeriod: unknown) => ({ version: 1, watch: [{ path: "/x" }], devicePlugins: { gracePeriod } });
  for (const good of ["0", "0s", "5m", "1h2m3.5s", "250µs"]) assert.deepEqual(validatePolicyData(policy(good)), [], good);
  for (const bad of ["00", "5", "5 m", "forever", 300, null]) assert.notDeepEqual(validatePolicyData(policy(bad)), [], String(bad));
});
