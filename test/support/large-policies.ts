/**
 * Large and deep policies near the loader's bounds, for the fuzz test
 * (fuzz.test.ts) and the policy benchmark (bench/policy.ts): long lists,
 * many keys, many errors, deep nesting, alias fan-out, comments. Each input
 * is made by repeating a unit until the text reaches `bytes` (the size cap,
 * or less), or `count` times when a count is given.
 *
 * @example
 * ```ts
 * for (const input of largeInputs({ bytes: MAX_POLICY_BYTES - 64 })) parsePolicy(input.text, input.name);
 * ```
 */
import { MAX_NESTING_DEPTH, MAX_YAML_NODES } from "../../src/policy/yaml-scan.ts";

export interface LargeInput {
  name: string;
  text: string;
}

const HEAD = "version: 1\nwatch:\n  - path: /a\n";

/** `prefix`, then `unit(i)` for i = 0, 1, ... while the text stays within `bytes` (and `count` units), then `suffix`. */
function repeated(bytes: number, prefix: string, unit: (index: number) => string, suffix = "", count = Infinity): string {
  const parts: string[] = [];
  let size = prefix.length + suffix.length;
  for (let index = 0; index < count; index++) {
    const part = unit(index);
    if (size + part.length > bytes) break;
    parts.push(part);
    size += part.length;
  }
  return prefix + parts.join("") + suffix;
}

/** A `handlers:` body declaring `count` generic types. */
function handlers(count: number): string {
  return Array.from({ length: count }, (_, i) => `  h${i}.io/X: {kind: generic}\n`).join("");
}

/** Inputs as large as `bytes` allows: each goes past a bound of the scan, most by far. */
export function largeInputs(options: { bytes: number }): LargeInput[] {
  const { bytes } = options;
  const fill = (prefix: string, unit: (index: number) => string, suffix = "") => repeated(bytes, prefix, unit, suffix);
  const anchored = `x: &big {${Array.from({ length: 40 }, (_, i) => `k${i}: ${i}`).join(", ")}}\nfan:\n`;
  return [
    { name: "a long list of wrong watch entries (- 1)", text: fill("version: 1\nwatch:\n", () => "- 1\n") },
    { name: "a top-level list", text: fill("", () => "- 1\n") },
    { name: "many unknown keys", text: fill(HEAD, (i) => `k${i}: 1\n`) },
    { name: "many watch entries with a bad path", text: fill("version: 1\nwatch:\n", () => "- {path: x}\n") },
    { name: "a long flow list of bad entries", text: fill("version: 1\nwatch: [", () => "{p: 1},", "]\n") },
    { name: "many undeclared watch types", text: fill(`version: 1\nhandlers: {a.io/X: {kind: generic}}\n${HEAD}    types:\n`, () => "    - t\n") },
    { name: "many handlers and watch entries", text: fill(`version: 1\nhandlers:\n${handlers(1000)}watch:\n`, (i) => `- {path: /w${i}, types: [z]}\n`) },
    { name: "one key given again and again", text: fill(HEAD, () => "dup: 1\n") },
    { name: "block lists nested on one line", text: fill("version: 1\nwatch:\n", () => "- ", "x\n") },
    { name: "block mappings nested by indentation", text: fill("version: 1\nwatch:\n  - path: /a\nx:\n", (i) => `${" ".repeat(i + 1)}a:\n`) },
    { name: "flow lists nested 63 deep, many times", text: fill(`${HEAD}x: [`, () => `${"[".repeat(62)}${"]".repeat(62)},`, "]\n") },
    { name: "many anchors", text: fill(`${HEAD}x:\n`, (i) => `- &a${i} 1\n`) },
    { name: "alias fan-out of a large mapping", text: fill(HEAD + anchored, () => "- *big\n") },
    { name: "a key as long as the file", text: `${HEAD}${"k".repeat(Math.max(0, bytes - HEAD.length - 8))}: 1\n` },
    { name: "many socket owners", text: fill(`${HEAD}security:\n  socketOwners:\n`, (i) => `  - ${i}\n`) },
    { name: "many comment lines", text: fill(HEAD, () => "# a comment\n") },
    { name: "many blank lines", text: fill(HEAD, () => "\n") },
    { name: "many syntax errors", text: fill(HEAD, () => "]\n") },
    { name: "many tags", text: fill(`${HEAD}x:\n`, () => "- !t 1\n") },
  ];
}

/** Inputs just inside the node and nesting bounds: everything after the scan works at its largest on these. */
export function inputsAtTheBounds(): LargeInput[] {
  const items = Math.floor((MAX_YAML_NODES - 3) / 2);
  // Nodes before the repeated part: version, 1, watch, [, {, path, /a.
  const keys = Math.floor((MAX_YAML_NODES - 7) / 2);
  const entries = Math.floor((MAX_YAML_NODES - 3) / 4);
  const at = (prefix: string, unit: (index: number) => string, count: number, suffix = "") => repeated(Infinity, prefix, unit, suffix, count);
  const depth = MAX_NESTING_DEPTH - 1;
  return [
    { name: `${items} wrong watch entries`, text: at("version: 1\nwatch:\n", () => "- 1\n", items) },
    { name: `${keys} unknown keys`, text: at("version: 1\nwatch: [{path: /a}]\n", (i) => `k${i}: 1\n`, keys) },
    { name: `${entries} watch entries with a bad path`, text: at("version: 1\nwatch:\n", () => "- {path: x}\n", entries) },
    { name: `${entries} valid watch entries`, text: at("version: 1\nwatch:\n", (i) => `- {path: /w${i}}\n`, entries) },
    { name: `${keys} undeclared watch types`, text: at("version: 1\nhandlers: {a.io/X: {kind: generic}}\nwatch:\n  - path: /a\n    types:\n", (i) => `    - t${i}\n`, keys - 20) },
    { name: "600 handlers, 300 watch entries of undeclared types", text: at(`version: 1\nhandlers:\n${handlers(600)}watch:\n`, (i) => `- {path: /w${i}, types: [z]}\n`, 300) },
    { name: `block lists nested ${depth} deep`, text: `version: 1\nwatch:\n${"- ".repeat(depth - 1)}x\n` },
    { name: `flow lists nested ${depth} deep`, text: `${HEAD}x: ${"[".repeat(depth - 1)}${"]".repeat(depth - 1)}\n` },
  ];
}
