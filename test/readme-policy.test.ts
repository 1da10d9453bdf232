/**
 * The policy reference (docs/policy.md) and the policy's JSON Schema describe
 * the same keys with the same defaults: every property path of the schema has
 * a row, every row names a path the schema has, and a row's default is the
 * schema's `default` (the one place defaults are declared).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { POLICY_SCHEMA } from "../src/policy/schema.ts";

const REFERENCE = new URL("../docs/policy.md", import.meta.url);
const TABLE_HEADING = "## Keys";

type Schema = {
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  default?: unknown;
};

/**
 * Every key path a policy may hold, with its schema node: `a.b` for nested
 * keys, `a[].b` for keys of list items, `handlers.<type>` for the keys a map
 * lets the user choose.
 */
function schemaPaths(schema: Schema, prefix = ""): [string, Schema][] {
  const paths: [string, Schema][] = [];
  const child = (key: string) => (prefix === "" ? key : `${prefix}.${key}`);
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    paths.push([child(key), sub], ...schemaPaths(sub, child(key)));
  }
  if (typeof schema.additionalProperties === "object") {
    const sub = schema.additionalProperties;
    paths.push([child("<type>"), sub], ...schemaPaths(sub, child("<type>")));
  }
  if (schema.items?.properties) paths.push(...schemaPaths(schema.items, `${prefix}[]`));
  return paths;
}

/** Each row of the reference table: its key and its default cell. */
function documentedRows(): { key: string; defaultCell: string }[] {
  const text = fs.readFileSync(REFERENCE, "utf8");
  const start = text.indexOf(`\n${TABLE_HEADING}\n`);
  assert.ok(start >= 0, `docs/policy.md has no "${TABLE_HEADING}" section`);
  const rest = text.slice(start + TABLE_HEADING.length + 2);
  const end = rest.search(/\n## /);
  const section = end >= 0 ? rest.slice(0, end) : rest;
  // A cell is a run of anything but an unescaped `|` (the type of log.level is `debug` \| `info` ...).
  return [...section.matchAll(/^\| `([^`]+)` \|(?:[^|\\]|\\.)*\|((?:[^|\\]|\\.)*)\|/gm)].map((match) => ({
    key: match[1]!,
    defaultCell: match[2]!.trim(),
  }));
}

/** How the table writes a default value: `5m`, `1024`, `true`, `null`, `["*"]`. */
function rendered(value: unknown): string {
  return "`" + (typeof value === "string" ? value : JSON.stringify(value)) + "`";
}

const schemaEntries = schemaPaths(POLICY_SCHEMA as Schema);

test("the schema walk finds nested, list-item and free-key paths", () => {
  const paths = schemaEntries.map(([path]) => path);
  for (const path of ["version", "watch[].path", "reconcile.backoff.max", "handlers.DevicePlugin.allow", "handlers.<type>.kind"]) {
    assert.ok(paths.includes(path), `schema walk missed ${path}`);
  }
});

test("every policy key in the schema is documented in docs/policy.md", () => {
  const documented = new Set(documentedRows().map((row) => row.key));
  const missing = schemaEntries.map(([path]) => path).filter((path) => !documented.has(path));
  assert.deepEqual(missing, [], "add these keys to docs/policy.md's reference table");
});

test("every key in docs/policy.md exists in the schema, once", () => {
  const known = new Set(schemaEntries.map(([path]) => path));
  const rows = documentedRows().map((row) => row.key);
  assert.deepEqual(rows.filter((path) => !known.has(path)), [], "docs/policy.md documents keys the schema does not have");
  assert.deepEqual(rows.filter((path, index) => rows.indexOf(path) !== index), [], "keys documented twice");
});

test("every default in docs/policy.md is the schema's, and no key without one claims a value", () => {
  const cells = new Map(documentedRows().map((row) => [row.key, row.defaultCell]));
  let checked = 0;
  for (const [path, node] of schemaEntries) {
    const cell = cells.get(path) ?? "";
    const hasDefault = Object.hasOwn(node, "default");
    // A section's default is `{}` so that ajv fills in its keys; its row leaves the cell to them.
    if (hasDefault && typeof node.default === "object" && node.default !== null && !Array.isArray(node.default)) continue;
    if (hasDefault) {
      assert.ok(cell.startsWith(rendered(node.default)), `${path}: the table says "${cell}", the schema ${rendered(node.default)}`);
      checked++;
    } else {
      assert.ok(!cell.startsWith("`"), `${path}: the table gives the default "${cell}" that the schema does not declare`);
    }
  }
  assert.ok(checked >= 20, `only ${checked} defaults compared`);
});

test("the README points at docs/policy.md for the policy reference", () => {
  const readme = fs.readFileSync(new URL("../README.md", import.meta.url), "utf8");
  assert.match(readme, /\]\(docs\/policy\.md\)/);
});
