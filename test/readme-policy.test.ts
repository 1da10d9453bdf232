/**
 * The README's policy reference and the policy's JSON Schema describe the
 * same keys: every property path of the schema has a row in the README, and
 * every row names a path the schema has.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { POLICY_SCHEMA } from "../src/policy/schema.ts";

const README = new URL("../README.md", import.meta.url);
const REFERENCE_HEADING = "## Policy reference";

type Schema = {
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
};

/**
 * Every key path a policy may hold: `a.b` for nested keys, `a[].b` for keys
 * of list items, `handlers.<type>` for the keys a map lets the user choose.
 */
function schemaPaths(schema: Schema, prefix = ""): string[] {
  const paths: string[] = [];
  const child = (key: string) => (prefix === "" ? key : `${prefix}.${key}`);
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    paths.push(child(key), ...schemaPaths(sub, child(key)));
  }
  if (typeof schema.additionalProperties === "object") {
    paths.push(child("<type>"), ...schemaPaths(schema.additionalProperties, child("<type>")));
  }
  if (schema.items?.properties) paths.push(...schemaPaths(schema.items, `${prefix}[]`));
  return paths;
}

/** The key column of every row of the README's policy reference table. */
function readmePaths(): string[] {
  const text = fs.readFileSync(README, "utf8");
  const start = text.indexOf(`\n${REFERENCE_HEADING}\n`);
  assert.ok(start >= 0, `README.md has no "${REFERENCE_HEADING}" section`);
  const rest = text.slice(start + REFERENCE_HEADING.length + 2);
  const end = rest.search(/\n## /);
  const section = end >= 0 ? rest.slice(0, end) : rest;
  return [...section.matchAll(/^\| `([^`]+)` \|/gm)].map((match) => match[1]!);
}

test("the schema walk finds nested, list-item and free-key paths", () => {
  const paths = schemaPaths(POLICY_SCHEMA as Schema);
  for (const path of ["version", "watch[].path", "reconcile.backoff.max", "handlers.DevicePlugin.allow", "handlers.<type>.kind"]) {
    assert.ok(paths.includes(path), `schema walk missed ${path}`);
  }
});

test("every policy key in the schema is documented in the README's policy reference", () => {
  const documented = new Set(readmePaths());
  const missing = schemaPaths(POLICY_SCHEMA as Schema).filter((path) => !documented.has(path));
  assert.deepEqual(missing, [], "add these keys to README.md's policy reference");
});

test("every key in the README's policy reference exists in the schema, once", () => {
  const known = new Set(schemaPaths(POLICY_SCHEMA as Schema));
  const rows = readmePaths();
  assert.deepEqual(rows.filter((path) => !known.has(path)), [], "README.md documents keys the schema does not have");
  assert.deepEqual(rows.filter((path, index) => rows.indexOf(path) !== index), [], "keys documented twice");
});
